"""The layout's rules, checked on the source (CONTRIBUTING.md, "Where things live").

ruff enforces the module-level imports (TID251, TID253); this test also sees imports inside
functions, and the rules ruff has no words for: the SQL dialect is chosen only in store/, no
module grows past the size where it stops reading as one thing, and every `__all__` is sorted.
"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

import authgate

SRC = Path(authgate.__file__).parent
MODULES = sorted(p for p in SRC.rglob("*.py") if "versions" not in p.parts)
#: Which top-level packages of src/authgate may import which libraries.
ALLOWED = {
    "fastapi": ("web", "app.py", "cli"),
    "starlette": ("web", "app.py", "cli"),
    "uvicorn": ("web", "cli"),
    "sqlalchemy": ("store",),
    "alembic": ("store",),
    # The layers record through plain callables `metrics.py` hands them (Metrics.connect).
    "prometheus_client": ("metrics.py", "app.py", "cli"),
}
#: "~300 lines": a little slack for a docstring, none for a second topic.
MAX_LINES = 330


def _home(path: Path) -> str:
    """The first part of a module's path under src/authgate (its package, or its file)."""
    return path.relative_to(SRC).parts[0]


def _imported(tree: ast.AST) -> list[tuple[int, str]]:
    found: list[tuple[int, str]] = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            found += [(node.lineno, alias.name.split(".")[0]) for alias in node.names]
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            found.append((node.lineno, node.module.split(".")[0]))
    return found


@pytest.mark.parametrize("path", MODULES, ids=lambda p: str(p.relative_to(SRC)))
def test_module_follows_the_layout(path: Path) -> None:
    source = path.read_text()
    tree = ast.parse(source)
    home = _home(path)
    wrong = [
        f"line {line}: {library} (allowed in {', '.join(ALLOWED[library])})"
        for line, library in _imported(tree)
        if library in ALLOWED and home not in ALLOWED[library]
    ]
    assert not wrong, f"{path.relative_to(SRC)} imports outside its layer: {wrong}"
    if home != "store":
        assert "is_sqlite" not in source, "only store/ chooses the SQL dialect"
    lines = source.count("\n")
    assert lines <= MAX_LINES, f"{lines} lines: split it along a seam"
    for node in tree.body:
        if isinstance(node, ast.Assign) and any(
            isinstance(t, ast.Name) and t.id == "__all__" for t in node.targets
        ):
            names = ast.literal_eval(node.value)
            assert list(names) == sorted(names, key=_ruff_order), "__all__ is kept sorted"


def _ruff_order(name: str) -> tuple[int, str]:
    """The order ruff keeps `__all__` in (RUF022): CONSTANTS, then Classes, then the rest."""
    return (0 if len(name) > 1 and name.isupper() else 1 if name[:1].isupper() else 2), name


def test_public_names_are_sorted_and_importable() -> None:
    assert authgate.__all__ == sorted(authgate.__all__)
    for name in authgate.__all__:
        assert getattr(authgate, name) is not None
