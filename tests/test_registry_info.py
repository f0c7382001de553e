"""The registries answer names without importing the built-in modules; `graphscale info` stays light."""

import subprocess
import sys

from graphscale import registry


def test_builtin_name_manifest_matches_the_modules():
    for kind, modules in registry._BUILTIN_NAMES.items():
        table = {"strategy": registry.STRATEGIES, "model": registry.MODELS,
                 "partitioner": registry.PARTITIONERS}[kind]
        registry.load_builtins(kind)
        assert sorted(n for names in modules.values() for n in names) == sorted(table._items), kind
        assert table.names() == sorted(table._items)


def test_info_does_not_import_numba_scipy_or_pyg():
    code = ("import sys; from graphscale.cli import main; main(['info']); "
            "print(sorted(m for m in ('numba', 'scipy', 'torch_geometric') if m in sys.modules))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert "strategies" in out and "graph-parallel" in out and "models" in out
    assert out.strip().splitlines()[-1] == "[]"


def test_names_then_get_imports_only_that_module():
    code = ("import sys; from graphscale.registry import STRATEGIES; STRATEGIES.names(); "
            "STRATEGIES.get('single'); print('graphscale.strategies.offload' in sys.modules)")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert out.strip() == "False"
