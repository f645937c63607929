"""The tests are laid out like the code (docs/architecture.md, "Where a module's tests are"): every module of ``app/``
and ``engine/`` with more than 60 lines of logic has its unit tests at its mirrored path, or a row in that table naming
the existing test files that cover it; no test file sits loose at the top of ``tests/``."""

from __future__ import annotations

import ast
import io
import re
import tokenize
from pathlib import Path

from tests.support.paths import ROOT

LOGIC_LINES = 60  # the size from which a module's behaviour needs a test a newcomer can find
DOCS = ROOT / "docs" / "architecture.md"
ROW = re.compile(r"^\| `((?:app|engine)/[\w/]+\.py)` \| (.+) \|$")


def logic_lines(source: str) -> int:
    """Lines holding code: not blank, not comments, not docstrings (of the module, a class or a function), not the
    module's imports and ``__all__``."""
    tree = ast.parse(source)
    docstrings: set[int] = set()
    for top in tree.body:
        names = isinstance(top, ast.Assign) and any(isinstance(t, ast.Name) and t.id == "__all__" for t in top.targets)
        if isinstance(top, ast.Import | ast.ImportFrom) or names:
            docstrings.update(range(top.lineno, (top.end_lineno or top.lineno) + 1))
    for node in ast.walk(tree):
        if isinstance(node, ast.Module | ast.ClassDef | ast.FunctionDef | ast.AsyncFunctionDef) and node.body:
            first = node.body[0]
            value = first.value if isinstance(first, ast.Expr) else None
            if isinstance(value, ast.Constant) and isinstance(value.value, str):
                docstrings.update(range(first.lineno, (first.end_lineno or first.lineno) + 1))
    skipped = {tokenize.COMMENT, tokenize.NL, tokenize.NEWLINE, tokenize.INDENT, tokenize.DEDENT, tokenize.ENDMARKER}
    lines: set[int] = set()
    for token in tokenize.generate_tokens(io.StringIO(source).readline):
        if token.type not in skipped:
            lines.update(n for n in range(token.start[0], token.end[0] + 1) if n not in docstrings)
    return len(lines)


def mirrored(module: Path) -> Path:
    """Where the unit tests of ``module`` (relative to the checkout) are: ``tests/<its folder>/test_<its name>.py``,
    an ``__init__.py``'s as ``test_<package>.py`` beside its folder."""
    if module.name == "__init__.py":
        return ROOT / "tests" / module.parent.parent / f"test_{module.parent.name}.py"
    return ROOT / "tests" / module.parent / f"test_{module.stem}.py"


def covered_elsewhere() -> dict[str, list[str]]:
    """The docs' table: module -> the test files it names."""
    rows = (ROW.match(line) for line in DOCS.read_text(encoding="utf-8").splitlines())
    return {m.group(1): re.findall(r"`(tests/[\w/]+\.py)`", m.group(2)) for m in rows if m}


def test_logic_lines_leave_out_docstrings_comments_and_blank_lines() -> None:
    source = (
        '"""Module.\n\nMore."""\n\nfrom os import (\n    path,\n)\n\n# why\nx = 1\n__all__ = [\n    "x",\n]\n\n\n'
        'def f(a: int) -> int:\n    """Doc."""\n    return (a +\n            1)\n'
    )
    assert logic_lines(source) == 4  # x = 1, def, and the two lines of the return


def test_every_module_of_size_has_tests_where_a_newcomer_looks() -> None:
    elsewhere = covered_elsewhere()
    modules = sorted(p.relative_to(ROOT) for folder in ("app", "engine") for p in (ROOT / folder).rglob("*.py"))
    unfound = [
        str(m)
        for m in modules
        if logic_lines((ROOT / m).read_text(encoding="utf-8")) > LOGIC_LINES
        and not mirrored(m).exists()
        and str(m) not in elsewhere
    ]
    assert not unfound, f"no tests/<path>/test_<module>.py and no row in docs/architecture.md for: {unfound}"


def test_the_docs_table_names_modules_and_tests_that_exist() -> None:
    elsewhere = covered_elsewhere()
    assert len(elsewhere) > 20, "the table was found"
    stale = {
        m: tests
        for m, tests in elsewhere.items()
        if not (ROOT / m).exists() or not tests or not all((ROOT / t).exists() for t in tests)
    }
    assert not stale, f"rows naming a module or a test file that does not exist: {stale}"
    mirrored_too = [m for m in elsewhere if mirrored(Path(m)).exists()]
    assert not mirrored_too, f"rows for modules that have a mirrored test file (drop the row): {mirrored_too}"


def test_no_test_file_sits_at_the_top_of_tests() -> None:
    loose = sorted(p.name for p in (ROOT / "tests").glob("*.py") if p.name != "conftest.py")
    assert not loose, f"files at the top of tests/ (each goes in a folder of docs/architecture.md's table): {loose}"
