"""The script of docs/pyg.md ("A script, start to finish") runs as written, as a script: ``python train_gcn.py``
without ``if __name__ == "__main__":``, training a PyG module object under graph-parallel on 2 workers and predicting
with the model it gets back. The workers never run the script (its top level prints once); the run ends (a hang
would reach the timeout)."""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
PAGE = REPO / "docs" / "pyg.md"


def script_block() -> str:
    section = PAGE.read_text().split("## A script, start to finish", 1)[1]
    return re.search(r"^```python\n(.*?)^```", section, flags=re.DOTALL | re.MULTILINE).group(1)


@pytest.mark.slow
def test_pyg_page_script_runs_unguarded_on_two_workers(tmp_path):
    pytest.importorskip("torch_geometric")
    code = script_block()
    assert "__main__" not in code.replace('no `if __name__ == "__main__":` needed', "")
    (tmp_path / "train_gcn.py").write_text(code)
    raw = tmp_path / "data" / "Cora" / "raw"  # Planetoid reads the bundled Planetoid files offline
    shutil.copytree(REPO / "graphscale" / "data" / "cora" / "raw", raw)
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    out = subprocess.run([sys.executable, "train_gcn.py"], check=False, cwd=tmp_path, capture_output=True, text=True, env=env,
                         timeout=900)
    assert out.returncode == 0, out.stderr[-3000:]
    lines = out.stdout.splitlines()
    assert sum("graph-parallel x2 on" in line for line in lines) == 1, out.stdout
    (accuracy,) = [float(line.split()[-1]) for line in lines if line.startswith("test accuracy")]
    assert accuracy > 0.5
