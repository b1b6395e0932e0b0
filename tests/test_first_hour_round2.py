"""The small untruths a new user met in their first hour (issue 41, point 8), each as they met it."""

from __future__ import annotations

from pathlib import Path

import pytest

from run_configs import SGD, flat_seq_digits, mlp, run_config

ROOT = Path(__file__).resolve().parents[1]
DIGITS = str(ROOT / "configs" / "digits.yaml")
TINY = ["--backbone.channels", "4,8", "data.batch_size=128", "train.progress=never"]


def test_modforge_help_describes_every_data_tool(cli) -> None:
    from modforge.cli.commands.data_tools import _parser

    (tools,) = [a for a in _parser()._actions if a.dest == "tool"]  # noqa: SLF001 - argparse's sub-commands
    res = cli("--help")
    line = " ".join(res.out[res.out.index("    data ") :].split("\n    sweep ")[0].split())
    for tool in tools.choices:
        assert tool in line, (tool, line)


def test_early_stopping_is_said_once_after_the_epoch_that_caused_it(cli) -> None:
    stop = "train.callbacks=[{type: early_stopping, args: {patience: 1, min_delta: 1.0}}]"  # stops after epoch 2
    res = cli("train", DIGITS, *TINY, "train.max_epochs=30", stop, "--run-dir", "es")
    assert res.code == 0, res.err
    said = (res.out + res.err).count("early stopping: val_accuracy did not improve")
    assert said == 1, res.out + res.err
    lines = res.err.splitlines()
    (stopped,) = [i for i, line in enumerate(lines) if line.startswith("early stopping:")]
    assert lines[stopped - 1].startswith("epoch 2/30 · "), lines


def test_describe_prints_the_docstring_once(cli) -> None:
    res = cli("describe", "backbone", "cnn")
    assert res.code == 0, res.err
    assert res.out.count("blocks; outputs a feature map") == 1  # the summary line
    assert "Args:" not in res.out and res.out.count("output channels of each block, in order") == 1


def test_a_switched_dataset_does_not_claim_to_keep_what_the_command_line_replaces(cli, caplog) -> None:
    config = str(ROOT / "configs" / "spoofing" / "base.yaml")
    res = cli("config", config, "data.type=asvspoof2021")
    assert "kept root='corpora/spoof'" in res.err  # the file's root does ride along, and is said to
    res = cli("config", config, "data.type=asvspoof2021", "data.args.root=NEW")
    assert res.code == 0, res.err
    assert "root=" not in res.err and "kept audio=" in res.err
    assert "root: NEW" in res.out


@pytest.mark.filterwarnings("ignore:torchscript. stage 'backbone':UserWarning")
def test_a_continual_run_names_the_task_and_its_epoch(cli, write) -> None:
    text = run_config(flat_seq_digits(batch_size=64), mlp(16), train=dict(optimizer=SGD, progress="never"),
                      after="continual: {algorithm: sgd, epochs_per_task: 1}\n")
    config = write("seq.yaml", text)
    res = cli("train", str(config), "--run-dir", "run")
    assert res.code == 0, res.err
    epochs = [line.split(" · ")[:2] for line in res.err.splitlines() if " · epoch " in line]
    assert epochs == [[f"task {t}/5", "epoch 1/1"] for t in range(1, 6)], res.err
    assert "epoch 5/5" not in res.err
