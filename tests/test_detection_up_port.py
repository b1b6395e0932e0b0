"""The United Perception user's door to detection (issue 18, part 9): a UP-style detection head — dict in, dict
out, reading the FPN maps from the batch, writing UP's ``dt_bboxes`` in evaluation and its own ``*_loss`` keys in
training — is one class in a plug-in file, wired into UP's ``net:`` list (``model.stages`` with ``prev``) after
modforge's resnet18 and fpn, and trains, validates by COCO AP and tests through ``modforge train``.

``CENTER_HEAD`` and ``CONFIG`` are the porting guide's worked example (docs/porting/united-perception.md), read from it."""

from __future__ import annotations

import csv
import json

import pytest
import torch

from modforge.data.detection.shapes import make_shapes
from test_porting_guide import FILES  # the guide's blocks, as its own test reads them

CENTER_HEAD = FILES["up"]["center_head.py"]
CONFIG = FILES["up"]["center_head.yaml"] + "  num_threads: 1\n  progress: never\n"


@pytest.fixture
def port(tmp_path):
    """The guide's plug-in and config, and a tiny shapes set, in the test's folder."""
    (tmp_path / "center_head.py").write_text(CENTER_HEAD)
    (tmp_path / "center_head.yaml").write_text(CONFIG)
    # what `modforge data make-shapes shapes --images 80 --size 64` writes
    make_shapes(tmp_path / "shapes", images=80, size=64, seed=0, max_object=32)
    return tmp_path


@pytest.mark.slow
def test_a_up_style_head_trains_tests_and_writes_its_own_loss_keys(cli, port):
    res = cli("train", "center_head.yaml", "--run-dir", "run")
    assert res.code == 0, res.err
    run = port / "run"
    summary = json.loads((run / "summary.json").read_text())
    assert summary["monitor"] == "val_map" and summary["epochs"] == 2
    assert {"map", "map_50", "map_75", "mar_100", "loss"} <= set(summary["test"])
    assert set(summary["test"]["per_class"]) == {"circle", "square", "triangle", "star", "cross"}
    rows = list(csv.DictReader((run / "metrics.csv").open()))
    assert [int(r["epoch"]) for r in rows] == [1, 2] and "val_map" in rows[0]
    assert float(rows[1]["train_loss"]) < float(rows[0]["train_loss"])  # it learns
    records = json.loads((run / "detections.json").read_text())
    assert records and all(len(r["bbox"]) == 4 and 0.05 < r["score"] <= 1 for r in records)

    # the trained model, as the run stored it: the head's own loss keys are what modforge back-propagates
    from modforge.experiment.runner import load_trained

    exp, _ = load_trained(run)
    data = exp.splits.test
    batch = data.collate_fn([data[i] for i in range(4)])
    exp.model.train()
    out = exp.model(dict(batch))
    assert {"cls_loss", "loc_loss"} <= set(out) and "dt_bboxes" not in out
    assert torch.equal(out["loss"], out["cls_loss"] + out["loc_loss"])
    exp.model.eval()
    with torch.no_grad():
        found = exp.model(dict(batch))["dt_bboxes"]
    assert found.shape[1] == 7 and set(found[:, 0].long().tolist()) <= {0, 1, 2, 3}


def test_the_head_passes_modforge_check(cli, port):
    check = cli("check", "head", "center_head.py:CenterHead")
    assert check.code == 0, check.out + check.err


def test_get_outplanes_is_read_as_out_dim_and_checked(cli, port):
    (port / "center_head.py").write_text(CENTER_HEAD.replace("return self.num_classes + 4", "return self.num_classes"))
    wrong = cli("train", "center_head.yaml", "--run-dir", "run")
    assert wrong.code == 2 and "declares out_dim 5" in wrong.err and "model.stages.2" in wrong.err, wrong
    assert not (port / "run").exists()
