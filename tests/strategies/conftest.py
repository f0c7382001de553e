"""Both kernel paths for every strategy's exactness tests.

A test here whose name says what it equals or matches (one of :data:`EXACT_WORDS`; keep new exactness tests named
that way) runs twice: with the default kernels (``auto``: numba on CPU tensors) and with ``GRAPHSCALE_KERNELS=torch``
(the whole-tensor path CUDA takes, on CPU tensors), so both kernel paths are held to the single-process reference in
one session, sharing its worker pool. Names that match but run no GNN kernel (plans, cost models, fixtures, option
errors: :data:`NO_KERNEL_WORDS`) and the ``accuracy`` and ``perf`` tests run once.
"""

from __future__ import annotations

import pytest

from graphscale.nn.backend import KERNELS_ENV

#: words of an exactness test's name
EXACT_WORDS = ("equal", "matches", "exact", "reference", "oracle", "trajectory", "reproduce", "identical",
               "independent", "one_chunk", "one_partition", "single_worker")
#: names with those words whose tests run no GNN kernel: the same on both backends
NO_KERNEL_WORDS = ("keep_rate", "cost_model", "toy_graph_fixture", "spec_formulas", "bad_averaging_options")
#: the kernel settings an exactness test runs under
KERNEL_PATHS = ("auto", "torch")


def runs_on_both_kernel_paths(name: str, markers: set[str]) -> bool:
    """Whether the test function ``name`` (with these marker names) is an exactness test that runs a GNN kernel."""
    return (any(word in name for word in EXACT_WORDS) and not any(word in name for word in NO_KERNEL_WORDS)
            and not markers & {"accuracy", "perf"})


def pytest_generate_tests(metafunc):
    markers = {m.name for m in metafunc.definition.iter_markers()}
    if runs_on_both_kernel_paths(metafunc.function.__name__, markers):
        metafunc.parametrize("kernel_path", KERNEL_PATHS, indirect=True, ids=[f"kernels-{k}" for k in KERNEL_PATHS])


@pytest.fixture(autouse=True)
def kernel_path(request, monkeypatch):
    """``GRAPHSCALE_KERNELS`` for this test (and the workers and commands it starts, which inherit it)."""
    path = getattr(request, "param", None)
    if path is None:
        yield None
        return
    if path == "auto":
        monkeypatch.delenv(KERNELS_ENV, raising=False)
    else:
        monkeypatch.setenv(KERNELS_ENV, path)
    yield path
