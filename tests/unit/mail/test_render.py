"""The mail copy: Jinja2 templates, autoescaped HTML, and no hole left by a missing name."""

from __future__ import annotations

import jinja2
import pytest

from authgate.mail.render import _environment, render


@pytest.mark.parametrize("purpose", ["reset", "verify"])
def test_each_purpose_has_a_subject_a_text_and_an_html_part(purpose: str) -> None:
    mail = render(purpose, link="https://example.com/p?token=abc")  # type: ignore[arg-type]
    assert mail.subject
    assert "\n\nhttps://example.com/p?token=abc\n\n" in mail.text
    assert mail.text.endswith(".\n")
    assert 'href="https://example.com/p?token=abc"' in mail.html


def test_the_link_is_escaped_in_html_only() -> None:
    mail = render("reset", link='https://example.com/?a=1&b="<x>')
    assert 'https://example.com/?a=1&b="<x>' in mail.text
    assert "https://example.com/?a=1&amp;b=&#34;&lt;x&gt;" in mail.html
    assert "<x>" not in mail.html


def test_a_missing_name_fails_the_render() -> None:
    with pytest.raises(jinja2.UndefinedError):
        _environment().get_template("reset.html").render()
