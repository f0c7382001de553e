"""docs/python-api.md's examples run as written (its ```python blocks, in order, in one namespace)."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

PAGE = Path(__file__).resolve().parents[1] / "docs" / "python-api.md"


def code_blocks(text: str) -> list[str]:
    return re.findall(r"^```python\n(.*?)^```", text, flags=re.DOTALL | re.MULTILINE)


def test_page_examples_run(tmp_path, monkeypatch):
    pytest.importorskip("torch_geometric")
    blocks = code_blocks(PAGE.read_text())
    assert len(blocks) >= 5
    monkeypatch.chdir(tmp_path)  # the examples write run.json and curves.png into the working directory
    namespace: dict = {}
    for i, block in enumerate(blocks):
        exec(compile(block, f"{PAGE.name} block {i + 1}", "exec"), namespace)  # noqa: S102 - the page's own code
    assert (tmp_path / "run.json").is_file() and (tmp_path / "curves.png").is_file()
