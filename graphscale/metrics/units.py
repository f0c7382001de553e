"""Byte sizes as people write them: ``1.5 KiB`` out (:func:`format_bytes`), ``256MiB`` in (:func:`parse_bytes`)."""

from __future__ import annotations


def format_bytes(n: float) -> str:
    """``1536`` -> ``"1.5 KiB"`` (binary units up to GiB)."""
    for unit in ("B", "KiB", "MiB", "GiB"):
        if abs(n) < 1024 or unit == "GiB":
            return f"{n:.1f} {unit}" if unit != "B" else f"{int(n)} B"
        n /= 1024
    return str(n)


_UNITS = {"": 1, "b": 1, "k": 1000, "kb": 1000, "m": 1000**2, "mb": 1000**2, "g": 1000**3, "gb": 1000**3,
          "kib": 1024, "mib": 1024**2, "gib": 1024**3, "tib": 1024**4, "tb": 1000**4}


def parse_bytes(text: str | int, option: str = "--memory-budget") -> int:
    """``"64MiB"``, ``"1.5GB"``, ``"4096"`` -> bytes.

    Raises:
        ValueError: not a positive size (the message names ``option``).
    """
    if isinstance(text, int):
        value = text
    else:
        raw = str(text).strip().lower().replace(" ", "")
        number = raw.rstrip("abcdefghijklmnopqrstuvwxyz")
        unit = raw[len(number):]
        if unit not in _UNITS or not number:
            raise ValueError(f"{option}: cannot parse {text!r}; use a size like 512MiB, 2GB or 1048576")
        try:
            value = int(float(number) * _UNITS[unit])
        except ValueError:
            raise ValueError(f"{option}: cannot parse {text!r}; use a size like 512MiB, 2GB or 1048576") \
                from None
    if value <= 0:
        raise ValueError(f"{option} must be positive, got {text!r}")
    return value
