"""A broken AUTHGATE_TEMPLATES_DIR stops `authgate serve` (and every command) with one line on
stderr and exit 1, before any worker starts: not a traceback in each worker."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.helpers import authgate, clean_env

pytestmark = pytest.mark.subprocess


@pytest.mark.parametrize("problem", ["missing", "syntax", "page syntax"])
def test_a_broken_templates_dir_is_one_line_and_exit_1(tmp_path: Path, problem: str) -> None:
    templates = tmp_path / "templates"
    if problem == "syntax":
        templates.mkdir()
        (templates / "reset.txt").write_text("{% if %}\n")
    if problem == "page syntax":
        (templates / "pages").mkdir(parents=True)
        (templates / "pages" / "login.html").write_text("{% block %}\n")
    env = clean_env(
        {"AUTHGATE_DATA_DIR": str(tmp_path / "data"), "AUTHGATE_TEMPLATES_DIR": str(templates)}
    )
    result = authgate("serve", "--port", "0", env=env)
    assert result.returncode == 1, result.stderr
    assert "Traceback" not in result.stderr
    assert "template" in result.stderr.lower()
