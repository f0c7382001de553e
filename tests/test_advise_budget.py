"""`graphscale advise` with a budget below every configuration's need: refused before the host is measured or
calibrated, in one complete line."""

from __future__ import annotations

import re

import pytest

import graphscale.advise.command
from graphscale.cli import main


@pytest.mark.slow
def test_an_impossible_budget_is_refused_before_measuring_or_calibrating(monkeypatch, capsys):
    def never(*args, **kwargs):
        raise AssertionError("the host was measured or calibrated for an impossible budget")

    monkeypatch.setattr(graphscale.advise.command, "machine_profile", never)
    assert main(["advise", "--device-memory", "1KB", "--workers", "2"]) == 2
    err = capsys.readouterr().err
    assert re.fullmatch(r"graphscale: error: --device-memory 1000 B: no configuration fits; the smallest requirement "
                        r"is (\S+ \S+) per worker \(\S+ on \d worker\(s\)\); give a --device-memory of at least \1, "
                        r"more --workers, or a smaller model or dataset\n", err), err
