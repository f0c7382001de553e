"""graphscale plot and --tensorboard: curves from run reports."""

import importlib.util
import json

import pytest

from graphscale.cli import main
from graphscale.config import build_config
from graphscale.plot import check_tensorboard, epoch_series, load_reports, plot_reports, tensorboard_scalars
from graphscale.run import run

PNG_MAGIC = b"\x89PNG\r\n\x1a\n"


@pytest.fixture(scope="module")
def reports(tmp_path_factory):
    """Two short Cora runs written as reports (GCN and SAGE, 3 epochs)."""
    folder = tmp_path_factory.mktemp("reports")
    paths = []
    for model in ("gcn", "sage"):
        config = build_config({"model": {"name": model}, "optim": {"epochs": 3}, "progress": False,
                               "json": str(folder / f"{model}.json")})
        run(config)
        paths.append(folder / f"{model}.json")
    return paths


def test_report_has_the_per_epoch_fields(reports):
    report = load_reports(reports[0])[0]
    series = epoch_series(report)
    assert series["epoch"] == [0, 1, 2] and len(series["loss"]) == 3 and all(s >= 0 for s in series["seconds"])
    assert report["metric"] == "accuracy"
    assert set(tensorboard_scalars(report)) == {"loss/train_epoch", "loss/val", "accuracy/train", "accuracy/val",
                                               "accuracy/test", "time/epoch_seconds", "bytes/moved_per_epoch"}


def test_cli_plot_overlays_reports(reports, tmp_path, capsys):
    out = tmp_path / "curves.png"
    assert main(["plot", *map(str, reports), "--out", str(out)]) == 0
    assert out.read_bytes()[:8] == PNG_MAGIC and f"wrote {out}" in capsys.readouterr().out
    assert [p.name for p in tmp_path.iterdir()] == ["curves.png"]  # nothing else left behind
    default = plot_reports([reports[0]])  # next to the report
    assert default == reports[0].with_suffix(".png") and default.read_bytes()[:8] == PNG_MAGIC


def test_plot_reads_a_repeat_report(reports, tmp_path):
    combined = tmp_path / "repeat.json"
    combined.write_text(json.dumps({"runs": [load_reports(p)[0] for p in reports], "metric": "accuracy"}))
    assert len(load_reports(combined)) == 2
    assert plot_reports([combined], tmp_path / "r.png").is_file()


@pytest.mark.parametrize("content, message", [
    ("not json", "is not a graphscale run report (not JSON"),
    (json.dumps({"format": "graphscale-partitions"}), "no 'epochs' list"),
    (json.dumps({"config": {}, "epochs": [{"epoch": 0}]}), "an epoch record without"),
])
def test_plot_refuses_files_that_are_not_reports(tmp_path, capsys, content, message):
    bad = tmp_path / "meta.json"
    bad.write_text(content)
    assert main(["plot", str(bad), "--out", str(tmp_path / "x.png")]) == 2
    err = capsys.readouterr().err
    assert message in err and "graphscale train --json" in err and err.count("\n") == 1
    assert not (tmp_path / "x.png").exists()


def test_plot_output_directory_must_exist(reports, tmp_path, capsys):
    assert main(["plot", str(reports[0]), "--out", str(tmp_path / "nodir" / "x.png")]) == 2
    assert "does not exist" in capsys.readouterr().err


def test_tensorboard_missing_package_is_a_clear_error(monkeypatch, tmp_path, capsys):
    monkeypatch.setitem(__import__("sys").modules, "tensorboard", None)  # as if not installed
    with pytest.raises(ValueError, match=r"--tensorboard needs the 'tensorboard' package.*pip install tensorboard"):
        check_tensorboard(tmp_path / "tb")
    assert main(["train", "--epochs", "1", "--no-progress", "--tensorboard", str(tmp_path / "tb")]) == 2
    assert "pip install tensorboard" in capsys.readouterr().err


@pytest.mark.skipif(importlib.util.find_spec("tensorboard") is None, reason="tensorboard is not installed")
def test_tensorboard_logs_the_report_scalars(tmp_path):
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    report = run(build_config({"optim": {"epochs": 3}, "progress": False, "tensorboard": str(tmp_path / "tb")}))
    runs = list((tmp_path / "tb").iterdir())
    assert [r.name for r in runs] == ["single-gcn-seed0"]
    events = EventAccumulator(str(runs[0]))
    events.Reload()
    assert [s.value for s in events.Scalars("loss/train_epoch")] == pytest.approx([e["loss"] for e in report["epochs"]])
    assert len(events.Scalars("accuracy/val")) == 3


def test_run_label_names_strategy_workers_model_and_form():
    from graphscale.plot import run_label

    config = {"strategy": {"name": "task-parallel", "workers": 4}, "model": {"name": "gcn"}}
    assert run_label({"config": config, "model_form": "decoupled"}) == "task-parallel x4 / gcn (decoupled)"
    assert run_label({"config": {**config, "strategy": {"name": "single", "workers": 1}},
                      "model_form": "standard"}) == "single / gcn"


def test_plot_never_draws_over_a_report(reports, capsys):
    before = reports[1].read_text()
    assert main(["plot", str(reports[0]), str(reports[1]), "--out", str(reports[1])]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and f"--out {reports[1]} is the report {reports[1]} it reads" in err
    assert reports[1].read_text() == before
