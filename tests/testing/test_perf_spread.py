"""The perf tier's spread tool reads what each test recorded from JUnit XML, passed and failed runs alike."""

from __future__ import annotations

import pytest

from graphscale.testing.perf_spread import main, read_properties, spread

XML = """<?xml version="1.0" encoding="utf-8"?>
<testsuites><testsuite name="pytest">
<testcase classname="tests.a" name="test_ok"><properties>
  <property name="ratio" value="{ok}"/><property name="label" value="not a number"/></properties></testcase>
<testcase classname="tests.a" name="test_bad"><properties><property name="ratio" value="{bad}"/></properties>
  <failure message="assert">bound exceeded</failure></testcase>
<testcase classname="tests.a" name="test_plain"/>
</testsuite></testsuites>
"""


def test_reads_numeric_properties_of_passed_and_failed_tests(tmp_path):
    runs = []
    for i, (ok, bad) in enumerate([(0.5, 2.0), (0.7, 3.0)]):
        path = tmp_path / f"run{i}.xml"
        path.write_text(XML.format(ok=ok, bad=bad))
        runs.append(read_properties(path))
    assert runs[0] == {"tests.a::test_ok": {"ratio": 0.5}, "tests.a::test_bad FAILED": {"ratio": 2.0}}
    assert spread(runs) == {("tests.a::test_ok", "ratio"): [0.5, 0.7],
                            ("tests.a::test_bad FAILED", "ratio"): [2.0, 3.0]}


def test_rejects_fewer_than_one_run():
    with pytest.raises(SystemExit):
        main(["--runs", "0"])
