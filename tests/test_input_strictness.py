"""Values read as the user meant or refused in one line: TOML booleans where a number is expected, --dropout
outside [0, 1), integer options typed as 1e3, and a diverging loss reported with --lr named."""

from __future__ import annotations

import pytest

from graphscale.cli import build_parser, main
from graphscale.config import build_config
from graphscale.run import report_warnings


@pytest.mark.parametrize("section, line", [("optim", "epochs = true"), ("optim", "lr = true"),
                                           ("model", "dropout = false"), ("model", "hidden = true")])
def test_a_toml_boolean_where_a_number_is_expected_names_the_key(section, line, tmp_path):
    path = tmp_path / "run.toml"
    path.write_text(f"[{section}]\n{line}\n")
    key = line.split()[0]
    with pytest.raises(ValueError, match=rf"^{path} \[{section}\]: option '{key}' expects (int|float), got the "
                                         r"boolean (true|false)$"):
        build_config({}, path)


def test_a_toml_boolean_stays_a_boolean_where_one_is_expected(tmp_path):
    path = tmp_path / "run.toml"
    path.write_text("resume = false\n[strategy]\nminibatch = true\n")
    config = build_config({}, path)
    assert config.resume is False and config.strategy.minibatch is True


@pytest.mark.parametrize("value", ["1.0", "1.5", "-0.1"])
def test_dropout_outside_zero_one_is_refused(value, capsys):
    assert main(["train", "--dropout", value, "--epochs", "1"]) == 2
    assert capsys.readouterr().err == (f"graphscale: error: --dropout must be in [0, 1) (the fraction of hidden units "
                                       f"dropped), got {float(value)}\n")


def test_integer_options_take_a_float_form_of_an_integer_or_one_line(capsys):
    args = build_parser(["train"]).parse_args(["train", "--epochs", "1e3", "--hidden", "64.0", "--repeat", "2e0",
                                               "--fanouts", "1e1,5", "--strategy", "single"])
    assert (args.epochs, args.hidden, args.repeat, args.fanouts) == (1000, 64, 2, [10, 5])
    with pytest.raises(SystemExit) as exit_:
        build_parser(["train"]).parse_args(["train", "--epochs", "1.5"])
    assert exit_.value.code == 2
    err = capsys.readouterr().err
    assert err == ("graphscale train: error: argument --epochs: expected an integer, got '1.5' (not a whole number) "
                   "(`graphscale train --help` lists the options)\n")


def _epochs(losses):
    return [{"epoch": i, "loss": loss, "val_acc": 0.5 + 0.01 * i, "test_acc": 0.5} for i, loss in enumerate(losses)]


def test_a_loss_growing_past_a_thousand_times_the_first_is_a_warning_naming_lr():
    best = {"epoch": 3, "val_acc": 0.53}
    warnings = report_warnings(_epochs([2.0, 50.0, 3e12, 1.0, 0.9]), best, "accuracy")
    assert [w for w in warnings if "diverged" in w] == [
        "the training loss diverged: 3e+12 at its peak, over 1000 times the first epoch's 2; the learning rate is "
        "likely too large: lower --lr"]
    assert not [w for w in report_warnings(_epochs([2.0, 1500.0, 1.0]), best, "accuracy") if "diverged" in w]
