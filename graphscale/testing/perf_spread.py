"""The measured spread behind the perf tier's bounds: run ``pytest -m perf`` several times, tabulate what each test
measured.

The perf tier's tests (marker ``perf``) bound quantities the OS measures (resident memory, page faults, wall
time), which vary from run to run. Each test records the quantity its bound applies to with pytest's
``record_property(name, value)``; this command runs the tier ``--runs`` times in fresh interpreters (one after
the other, so the runs do not share the machine), reads the values back from each run's JUnit XML and prints,
per test and quantity, the minimum, maximum and mean. The spread goes into the test's docstring, and the bound
sits a margin above it::

    python -m graphscale.testing.perf_spread --runs 10 [-- pytest selection, e.g. -- tests/distributed -k refault]
"""

from __future__ import annotations

import argparse
import subprocess
import sys
import tempfile
import xml.etree.ElementTree as ET
from pathlib import Path


def read_properties(junit_xml: Path) -> dict[str, dict[str, float]]:
    """``{test id: {property: value}}`` of one run's JUnit XML: numeric properties, of passed and failed tests alike
    (a value beyond its bound is part of the spread); a failed test's id ends in `` FAILED``."""
    out: dict[str, dict[str, float]] = {}
    for case in ET.parse(junit_xml).getroot().iter("testcase"):
        failed = case.find("failure") is not None or case.find("error") is not None
        props = {}
        for prop in case.iter("property"):
            try:
                props[prop.get("name")] = float(prop.get("value"))
            except (TypeError, ValueError):
                continue
        if props:
            out[f"{case.get('classname')}::{case.get('name')}{' FAILED' if failed else ''}"] = props
    return out


def spread(runs: list[dict[str, dict[str, float]]]) -> dict[tuple[str, str], list[float]]:
    """Every run's value of each ``(test, property)``, in run order."""
    values: dict[tuple[str, str], list[float]] = {}
    for run in runs:
        for test, props in run.items():
            for name, value in props.items():
                values.setdefault((test, name), []).append(value)
    return values


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=10, help="how many times to run the perf tier (default 10)")
    parser.add_argument("--keep", type=Path, default=None, help="a directory to keep each run's JUnit XML in")
    parser.add_argument("pytest_args", nargs="*", help="passed to pytest after -m perf (a file, -k ...)")
    args = parser.parse_args(argv)
    if args.runs < 1:
        parser.error(f"--runs must be at least 1, got {args.runs}")
    runs = []
    with tempfile.TemporaryDirectory() as tmp:
        folder = Path(tmp) if args.keep is None else args.keep
        folder.mkdir(parents=True, exist_ok=True)
        for i in range(args.runs):
            xml = folder / f"run{i}.xml"
            cmd = [sys.executable, "-m", "pytest", "-o", "addopts=", "-q", "-p", "no:cacheprovider", "-m", "perf",
                   f"--junitxml={xml}", "-o", "junit_family=xunit1", *args.pytest_args]
            rc = subprocess.run(cmd, check=False).returncode
            print(f"run {i + 1}/{args.runs}: pytest exit code {rc}", flush=True)
            if xml.exists():
                runs.append(read_properties(xml))
    for (test, name), values in sorted(spread(runs).items()):
        print(f"{test} {name}: n={len(values)} min={min(values):.6g} max={max(values):.6g} "
              f"mean={sum(values) / len(values):.6g}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
