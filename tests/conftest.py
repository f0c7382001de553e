"""Test-suite wide settings."""

from __future__ import annotations

import pytest


@pytest.fixture(autouse=True, scope="session")
def _private_cache_dir(tmp_path_factory):
    """Runs write their partition stores and graph directories into a cache directory: keep the suite's apart
    from the user's (``~/.cache/graphscale``)."""
    mp = pytest.MonkeyPatch()
    mp.setenv("GRAPHSCALE_CACHE_DIR", str(tmp_path_factory.mktemp("graphscale-cache")))
    yield
    mp.undo()


def pytest_collection_modifyitems(config, items):
    """Tests marked ``gpu`` are skipped, with the reason, where torch sees no CUDA device."""
    import torch

    if torch.cuda.is_available():
        return
    skip = pytest.mark.skip(reason="gpu: torch sees no CUDA device")
    for item in items:
        if item.get_closest_marker("gpu") is not None:
            item.add_marker(skip)
