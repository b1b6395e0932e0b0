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
