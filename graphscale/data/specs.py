"""Dataset specs as text: one spelling per dataset (the key of the caches, the identity a checkpoint records)."""

from __future__ import annotations

from pathlib import Path


def canonical_spec(spec: str) -> str:
    """``spec`` with paths made absolute (so ``npz:g.npz`` and ``npz:/abs/g.npz`` name one dataset) and a
    reader's ``key=value,...`` options in sorted order (so ``mat:g.mat:labels=y,adj=A`` and
    ``mat:g.mat:adj=A,labels=y`` do too)."""
    spec = spec.strip()
    kind, sep, arg = spec.partition(":")
    if not sep or "=" in arg.split(":")[0]:
        return spec
    parts = arg.split(":")
    parts = [str(Path(p).resolve()) if p and Path(p).exists() else
             ",".join(sorted(item.strip() for item in p.split(","))) if i and "=" in p else p
             for i, p in enumerate(parts)]
    return f"{kind}:{':'.join(parts)}"
