"""Spawned workers never run the launcher's script unless the run refers to something defined there; a script that
would have them run it again (no ``if __name__ == "__main__":`` around the call) is refused in one line before any
worker starts (:mod:`graphscale.distributed.main_module`)."""

from __future__ import annotations

import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]


def _run_script(path: Path, timeout: float) -> subprocess.CompletedProcess:
    env = {"PYTHONPATH": str(REPO), "PATH": "/usr/bin:/bin"}
    import os

    env.update({k: v for k, v in os.environ.items() if k.startswith(("GRAPHSCALE_", "HOME", "TMPDIR"))})
    return subprocess.run([sys.executable, str(path)], check=False, capture_output=True, text=True, timeout=timeout, env=env,
                          cwd=path.parent)


def test_guard_check_refuses_an_unguarded_call_that_sends_script_definitions(tmp_path):
    script = tmp_path / "script.py"
    script.write_text(textwrap.dedent('''
        from graphscale.distributed.main_module import check_guard, main_references


        class Net:
            pass


        def make():
            return Net()


        print("REFS", main_references([Net(), make, len]))
        try:
            check_guard(Net(), 2)
        except ValueError as err:
            print("REFUSED", err)
        check_guard(Net(), 1)  # one worker runs in this process
        check_guard([1, len], 2)  # nothing of the script: workers never import it
        if __name__ == "__main__":
            check_guard(make, 2)
            print("GUARDED OK")
    '''))
    out = _run_script(script, 60)
    assert out.returncode == 0, out.stderr
    lines = out.stdout.splitlines()
    assert lines[0] == "REFS ['Net', 'make']"
    assert lines[1] == (f"REFUSED {script}:15 starts 2 worker processes from the script's top level, and each worker "
                        "must import the script because Net is defined in it, which would start workers again: put "
                        "the call under `if __name__ == \"__main__\":`, or define the model in a module the script "
                        "imports")
    assert lines[2:] == ["GUARDED OK"]


def test_a_worker_importing_the_script_never_trains(monkeypatch):
    """The net under the guard check: a worker that reaches ``train`` while it imports the script fails at once
    with the guard's one line (reported by the launcher as the worker's error)."""
    import graphscale as gs
    from graphscale.distributed import main_module

    monkeypatch.setattr(main_module, "_IMPORTING_MAIN", True)
    with pytest.raises(RuntimeError, match=r"starts worker processes from its top level.*if __name__ == "):
        gs.train("gcn", "cora", strategy="graph-parallel", workers=2)


@pytest.mark.slow
def test_a_guarded_script_sends_its_own_model_class_to_two_workers(tmp_path):
    """A model class defined in the script: each worker imports the script (as ``__mp_main__``: its guarded call
    does not run there) and trains it; graph-parallel x2 equals single."""
    pytest.importorskip("torch_geometric")
    script = tmp_path / "guarded.py"
    script.write_text(textwrap.dedent('''
        import torch
        from torch_geometric.nn import GCNConv

        import graphscale as gs
        from graphscale.testing import random_graph

        print("TOP LEVEL", __name__, flush=True)


        class Net(torch.nn.Module):
            def __init__(self):
                super().__init__()
                self.conv1, self.conv2 = GCNConv(6, 8), GCNConv(8, 3)

            def forward(self, x, edge_index):
                return self.conv2(torch.relu(self.conv1(x, edge_index)), edge_index)


        if __name__ == "__main__":
            g = random_graph(40, num_features=6, num_classes=3, seed=2, dtype=torch.float64)
            opts = dict(epochs=2, dtype="float64", progress=False)
            torch.manual_seed(0)
            model = Net()
            single = gs.train(model, g, **opts)
            parallel = gs.train(model, g, strategy="graph-parallel", workers=2, **opts)
            print("LOSSES", [e.loss for e in single.epochs], [e.loss for e in parallel.epochs])
    '''))
    out = _run_script(script, 600)
    assert out.returncode == 0, out.stderr[-3000:]
    tops = [line for line in out.stdout.splitlines() if line.startswith("TOP LEVEL")]
    assert tops == ["TOP LEVEL __main__", "TOP LEVEL __mp_main__", "TOP LEVEL __mp_main__"]
    (line,) = [line for line in out.stdout.splitlines() if line.startswith("LOSSES")]
    single, parallel = eval(line[len("LOSSES "):].replace("] [", "], ["))
    assert len(single) == 2 and all(abs(a - b) <= 1e-10 * max(1.0, abs(a)) for a, b in zip(single, parallel))
