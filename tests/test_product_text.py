"""The product speaks to its users: no text in ``graphscale/`` (help, docstrings, comments) or ``docs/`` refers to
the project's issue tracker (``issue 25's grid``, ``the issue's graph``). A user has no issue 25; the text names
what the thing is (the SDT-GNN paper's grid, the comparison graph of docs/benchmarks.md)."""

from __future__ import annotations

import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
#: ``issue 12``, ``Issue #9``, ``the issue's``, ``issue's`` (the verb, ``issues 94 ops``, is not a reference)
ISSUE_REFERENCE = re.compile(r"\bissue\s*#?\d+|\bissue's\b", re.IGNORECASE)


def issue_references(paths: list[Path]) -> list[tuple[Path, int, str]]:
    """``(file, line number, line)`` of every line under ``paths`` (Python and Markdown files) naming an issue."""
    out = []
    for root in paths:
        files = [root] if root.is_file() else sorted([*root.rglob("*.py"), *root.rglob("*.md")])
        for path in files:
            for number, line in enumerate(path.read_text().splitlines(), 1):
                if ISSUE_REFERENCE.search(line):
                    out.append((path, number, line.strip()))
    return out


def test_no_issue_references_in_the_product_or_the_docs():
    found = issue_references([ROOT / "graphscale", ROOT / "docs", ROOT / "README.md", ROOT / "mkdocs.yml"])
    assert not found, "text that refers to an issue instead of naming the thing:\n" + "\n".join(
        f"{path.relative_to(ROOT)}:{number}: {line}" for path, number, line in found)


def test_the_check_finds_issue_references_and_passes_the_verb(tmp_path):
    page = tmp_path / "page.md"
    page.write_text("issue 25's grid\nthe Issue's graph\nsee issue #9\nan epoch issues 94 ops\nissued so far\n")
    assert [line for _path, _number, line in issue_references([page])] == [
        "issue 25's grid", "the Issue's graph", "see issue #9"]
