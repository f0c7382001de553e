"""Errors whose message is complete in one line (what happened, where, the likely cause and the fix):
``graphscale`` prints such a message as it is, without the exception's type or where it was raised."""

from __future__ import annotations


class RunError(RuntimeError):
    """A run failed for a reason its message states in full (a diverged loss, ...); exit status 1."""
