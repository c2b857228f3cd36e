"""The mail copy: Jinja2 templates, autoescaped HTML, and no hole left by a missing name."""

from __future__ import annotations

from authgate.mail.render import render


def test_the_link_is_escaped_in_html_only() -> None:
    mail = render("reset", link='https://example.com/?a=1&b="<x>')
    assert 'https://example.com/?a=1&b="<x>' in mail.text
    assert "https://example.com/?a=1&amp;b=&#34;&lt;x&gt;" in mail.html
    assert "<x>" not in mail.html
