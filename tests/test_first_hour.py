"""What stopped a new user in their first hour (issue 27), each tried as they tried it."""

from __future__ import annotations

from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
DIGITS = str(ROOT / "configs" / "digits.yaml")


def test_an_mlp_behind_the_image_neck_says_which_neck_fits(cli):
    res = cli("train", DIGITS, "--backbone", "mlp", "--hidden-dims", "256,256", "data.args.as_image=false")
    line = res.err.strip().splitlines()[-1]
    assert res.code == 2 and "necks that take vector [B, D]: identity" in line and "--neck identity" in line
    assert "model.neck=null" in line
    res = cli("train", DIGITS, "--backbone", "mlp", "--hidden-dims", "16", "--neck", "identity",
              "data.args.as_image=false", "train.max_epochs=1", "--run-dir", "mlp")  # fmt: skip
    assert res.code == 0, res.err  # the fix the message names works


def test_predict_on_a_run_or_a_checkpoint_says_to_export_then_finds_the_export(cli, tmp_path):
    assert cli("train", DIGITS, "train.max_epochs=1", "--run-dir", "run").code == 0
    np.save(tmp_path / "x.npy", np.zeros((1, 1, 8, 8), dtype=np.float32))
    res = cli("predict", "run", "x.npy")
    assert res.code == 2 and "modforge export run --engine onnx" in res.err and "run folder" in res.err
    res = cli("predict", "run/checkpoints/best.pt", "x.npy")
    assert res.code == 2 and "training checkpoint, not an artifact" in res.err and "modforge export run" in res.err
    assert cli("export", "run", "--engine", "onnx").code == 0
    res = cli("predict", "run", "x.npy")  # the run's one export
    assert res.code == 0, res.err
    assert cli("export", "run", "--engine", "torchscript").code == 0
    res = cli("predict", "run", "x.npy")
    assert res.code == 2 and "holds 2 exports" in res.err and "best-onnx.onnx" in res.err


def test_a_missing_shapes_set_names_the_command_that_makes_it(cli):
    res = cli("train", str(ROOT / "configs" / "detection" / "shapes_fcos.yaml"), "data.args.root=nowhere/shapes")
    assert res.code == 2 and "modforge data make-shapes nowhere/shapes" in res.err


def test_modforge_help_lists_both_data_makers(cli):
    res = cli("--help")
    assert "make-spoof-corpus" in res.out and "make-shapes" in res.out


def test_a_finished_run_resumed_unchanged_says_so_and_trains_nothing(cli, tmp_path):
    assert cli("train", DIGITS, "train.max_epochs=2", "--run-dir", "done").code == 0
    before = (tmp_path / "done" / "metrics.csv").read_bytes()
    res = cli("train", "--resume", "done")
    assert res.code == 0 and "done is finished: it trained its 2 epoch(s); nothing was trained" in res.out
    assert "train.max_epochs=12" in res.out and (tmp_path / "done" / "metrics.csv").read_bytes() == before


def test_extending_an_early_stopped_run_starts_its_patience_again(cli, tmp_path):
    import csv

    stop = "train.callbacks=[{type: early_stopping, args: {patience: 2, min_delta: 1.0}}]"  # stops after epoch 3
    assert cli("train", DIGITS, "train.max_epochs=30", stop, "--run-dir", "es").code == 0
    assert len(list(csv.DictReader((tmp_path / "es" / "metrics.csv").open()))) == 3
    res = cli("train", "--resume", "es")
    assert res.code == 0 and "early stopping ended it at epoch 3; nothing was trained" in res.out
    res = cli("train", "--resume", "es", "train.max_epochs=40")
    assert res.code == 0 and "its patience starts again" in res.err
    # two more epochs without an improvement of 1.0 (the whole patience again), not one (what was left of it)
    assert len(list(csv.DictReader((tmp_path / "es" / "metrics.csv").open()))) == 5


def test_without_a_terminal_a_long_epoch_prints_a_line_every_30_seconds(caplog):
    """A fake clock: 200 steps of 1 s each give a line at 30, 60, ... s with the batch count and
    the rate; a fast epoch gives none (only its end-of-epoch line)."""
    import logging
    import types

    from modforge.train.callbacks.progress import Progress

    now = [0.0]
    progress = Progress(bar="never")
    progress.clock = lambda: now[0]
    trainer = types.SimpleNamespace(epoch=0, max_epochs=3, batch_in_epoch=0, steps_per_epoch=200, last_logged_loss=0.5)
    with caplog.at_level(logging.INFO, logger="modforge.progress"):
        progress.on_epoch_start(trainer)
        for step in range(1, 201):
            now[0], trainer.batch_in_epoch = float(step), step
            progress.on_step_end(trainer)
    lines = [r.getMessage() for r in caplog.records]
    assert len(lines) == 6 and lines[0] == "epoch 1/3 · batch 30/200 · 1.00 batches/s · loss 0.5", lines
    caplog.clear()
    with caplog.at_level(logging.INFO, logger="modforge.progress"):
        progress.on_epoch_start(trainer)
        for _ in range(200):
            now[0] += 0.01
            progress.on_step_end(trainer)
    assert caplog.records == []


def test_a_heartbeat_speaks_every_30_seconds_of_counted_work(caplog):
    import logging

    from modforge.core.heartbeat import Heartbeat

    now = [0.0]
    beat = Heartbeat(logging.getLogger("modforge.test"), "rendering corpus", 1000, clock=lambda: now[0])
    with caplog.at_level(logging.INFO, logger="modforge.test"):
        for done in range(1, 1001):
            now[0] = done * 0.1  # 10 items a second: 100 s in all
            beat.tick(done)
    assert [r.getMessage() for r in caplog.records] == [
        "rendering corpus: 300/1000 (10.0/s)", "rendering corpus: 600/1000 (10.0/s)", "rendering corpus: 900/1000 (10.0/s)"]


def test_kfold_says_which_fold_it_is_on(cli):
    res = cli("kfold", DIGITS, "--folds", "2", "train.max_epochs=1", "train.progress=never", "--run-dir", "cv")
    assert res.code == 0, res.err
    assert "fold 1/2: training on" in res.err and "fold 2/2: training on" in res.err


def test_a_long_path_in_a_table_title_is_never_folded(capsys):
    from modforge.cli.output import print_table

    path = "/runs/" + "/".join(["a-rather-long-folder-name"] * 12) + "/checkpoints/best.pt"
    print_table(("metric", "value"), [("accuracy", "0.99")], title=f"test of {path}")
    assert f"test of {path}\n" in capsys.readouterr().out


def test_a_run_killed_after_its_last_epoch_but_before_its_test_is_tested_on_resume(cli, tmp_path):
    """Not 'finished': its summary.json was never written (a sweep's retried trial is this case)."""
    assert cli("train", DIGITS, "train.max_epochs=1", "--run-dir", "cut").code == 0
    (tmp_path / "cut" / "summary.json").unlink()
    res = cli("train", "--resume", "cut")
    assert res.code == 0 and "is finished" not in res.out and (tmp_path / "cut" / "summary.json").is_file()
