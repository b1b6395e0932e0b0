"""The detection world end to end on a tiny shapes set: ``modforge train`` with the shipped
config reads the COCO files back through the ``coco`` dataset, validates by COCO AP every
epoch, writes the test report's files; ``modforge test`` of the run gives the same figures;
tasks are a registry kind."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

import modforge as mf
from modforge.data.detection.shapes import make_shapes

CONFIG = Path(__file__).resolve().parents[1] / "configs" / "detection" / "shapes_fcos.yaml"
SMALL = [
    "data.args.min_size=64", "data.args.max_size=64", "data.batch_size=8", "train.max_epochs=2",
    "model.backbone.args.width=0.25", "model.neck.args.out_channels=32", "train.progress=never", "train.num_threads=1",
    "train.scheduler.args.warmup=2",  # steps: the shipped config's 300 would outlast these few-step runs
]  # fmt: skip


@pytest.fixture(scope="module")
def shapes(tmp_path_factory) -> Path:
    root = tmp_path_factory.mktemp("shapes") / "set"
    make_shapes(root, images=40, size=64, seed=0, max_object=32)
    return root


@pytest.mark.slow
def test_the_shipped_config_trains_validates_by_coco_ap_and_reports(cli, shapes, tmp_path):
    res = cli("train", str(CONFIG), f"data.args.root={shapes}", *SMALL, "--run-dir", "run")
    assert res.code == 0, res.err
    run = tmp_path / "run"
    summary = json.loads((run / "summary.json").read_text())
    test = summary["test"]
    assert {"map", "map_50", "map_75", "map_small", "mar_100", "loss"} <= set(test)
    assert set(test["per_class"]) == {"circle", "square", "triangle", "star", "cross"}
    assert summary["monitor"] == "val_map"
    header, *rows = (run / "metrics.csv").read_text().splitlines()
    header = header.split(",")
    assert {"val_map", "val_map_50", "val_loss"} <= set(header)
    terms = ("cls_loss", "box_loss", "quality_loss")  # UP-style loss keys, each its own column
    assert {f"{split}_{term}" for split in ("train", "val") for term in terms} <= set(header)
    last = dict(zip(header, rows[-1].split(","), strict=True))
    for split in ("train", "val"):  # the model's loss is the sum of its terms (weights 1), so are their means
        assert float(last[f"{split}_loss"]) == pytest.approx(sum(float(last[f"{split}_{t}"]) for t in terms), rel=1e-5)
    for name in ("detections.json", "detections.png", "pr.png"):
        assert (run / name).stat().st_size > 0, name
    records = json.loads((run / "detections.json").read_text())
    categories = {c["id"] for c in json.loads((shapes / "annotations" / "instances_test.json").read_text())["categories"]}
    assert all(r["category_id"] in categories and len(r["bbox"]) == 4 for r in records)
    again = cli("test", "run")
    assert again.code == 0, again.err
    evaluation = json.loads((run / "evaluations" / "best-test.json").read_text())
    assert evaluation["map"] == pytest.approx(test["map"], abs=1e-12)


def test_tasks_are_a_registry_kind():
    assert {"classification", "spoofing", "detection"} <= set(mf.TASKS.list())
    assert mf.TASKS.get("detection").default_metrics == ("coco_map", "loss")


def test_make_shapes_on_the_command_line_writes_coco_files_or_says_what_is_wrong(cli, tmp_path):
    res = cli("data", "make-shapes", "set", "--images", "12", "--size", "48", "--classes", "circle,star")
    assert res.code == 0, res.err
    for split in ("train", "val", "test"):
        assert (tmp_path / "set" / "annotations" / f"instances_{split}.json").exists()
    assert "circle" in res.out and "star" in res.out
    again = cli("data", "make-shapes", "set", "--images", "12")
    assert again.code == 2 and "--overwrite" in again.err
    bad = cli("data", "make-shapes", "other", "--classes", "blob")
    assert bad.code == 2 and "blob" in bad.err and not (tmp_path / "other").exists()
