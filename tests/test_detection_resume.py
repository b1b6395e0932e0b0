"""The run guarantees hold for the detector too (issue 18, part 8), on the tiny shapes set with the shipped
FCOS config and its augmentations on (flip, scale jitter, photometric):

* a run resumed from any checkpoint — mid-epoch, after the epoch's last batch, at the epoch's end — or
  SIGKILLed several times mid-training and ``--resume``d ends bitwise identical to the straight run (weights,
  ``metrics.csv``, test figures), and the resumed run reads exactly the samples, augmented exactly alike, that
  the straight run read from that point on (the transforms are seeded by seed, epoch and index, and the trainer
  sets the epoch);
* two processes (``--nproc 2``, gloo on the CPU) give the test COCO figures ``modforge test`` gives for the
  same best checkpoint;
* ``kfold`` on a detection config is refused with the reason; a malformed annotation stops ``modforge train``
  with one line naming the file and the annotation id, before a run folder exists.
"""

from __future__ import annotations

import hashlib
import json
from pathlib import Path

import pytest
import torch
import yaml

from distributed_helpers import modforge
from modforge.data.detection.coco import CocoDetection
from modforge.data.detection.shapes import make_shapes
from modforge.train.checkpoint import load_checkpoint
from train_processes import kill_at_steps

CONFIG = Path(__file__).resolve().parents[1] / "configs" / "detection" / "shapes_fcos.yaml"
SMALL = [
    "data.args.min_size=64", "data.args.max_size=64", "data.batch_size=8", "train.max_epochs=2",
    "model.backbone.args.width=0.25", "model.neck.args.out_channels=32", "train.progress=never", "train.num_threads=1",
    "train.scheduler.args.warmup=2",  # steps: the shipped config's 300 would outlast these few-step runs
    "data.args.scale_jitter=[0.9,1.1]",  # every augmentation on (the shipped config has no scale jitter)
]  # fmt: skip
EVERY_STEP = ["train.checkpoint.every_n_steps=1", "train.checkpoint.keep_last=100"]
AUGMENTED = {"hflip": 0.5, "scale_jitter": [0.9, 1.1], "photometric": 0.2}  # every augmentation on, jitter too


@pytest.fixture(scope="module")
def shapes(tmp_path_factory) -> Path:
    """40 images of 64 px: 30 train (4 batches of 8), 5 val, 5 test."""
    root = tmp_path_factory.mktemp("shapes") / "set"
    make_shapes(root, images=40, size=64, seed=0, max_object=32)
    return root


def _final(run: Path) -> tuple[dict[str, torch.Tensor], str, dict]:
    """The last checkpoint's weights, ``metrics.csv`` and the test figures of a finished run."""
    model = load_checkpoint(run / "checkpoints" / "last.pt")["model"]
    return model, (run / "metrics.csv").read_text(), json.loads((run / "summary.json").read_text())["test"]


def _assert_same_run(run: Path, reference: Path) -> None:
    model, metrics, test = _final(run)
    ref_model, ref_metrics, ref_test = _final(reference)
    assert metrics == ref_metrics
    assert set(model) == set(ref_model)
    differ = [k for k in ref_model if not torch.equal(model[k], ref_model[k])]
    assert not differ, f"{len(differ)} tensors differ, e.g. {differ[:3]}"
    assert json.dumps(test, sort_keys=True) == json.dumps(ref_test, sort_keys=True)  # nan-safe equality


@pytest.fixture
def sample_log(monkeypatch) -> list[tuple[int, int, tuple[int, ...], str]]:
    """Every training sample the coco dataset hands out, in order: (epoch the dataset was set to, index,
    input shape, digest of the input and its boxes)."""
    log: list[tuple[int, int, tuple[int, ...], str]] = []
    original = CocoDetection.__getitem__

    def logged(self: CocoDetection, index: int) -> dict:
        sample = original(self, index)
        if self.train:
            digest = hashlib.sha256(sample["input"].numpy().tobytes() + sample["target"]["boxes"].numpy().tobytes())
            log.append((self.epoch, int(index), tuple(sample["input"].shape), digest.hexdigest()))
        return sample

    monkeypatch.setattr(CocoDetection, "__getitem__", logged)
    return log


@pytest.mark.slow
def test_resuming_a_detector_from_its_checkpoints_is_bitwise_identical(cli, shapes, tmp_path, sample_log):
    """Deterministic companion of the SIGKILL test: checkpoints mid-epoch 0, after epoch 0's last batch (before
    its validation), at epoch 0's end and mid-epoch 1, each resumed in a run of its own, end like the straight
    run, having read the straight run's remaining samples with the same augmentation."""
    args = [str(CONFIG), f"data.args.root={shapes}", *SMALL, *EVERY_STEP]
    assert cli("train", *args, "--run-dir", "full").code == 0
    stream = list(sample_log)
    config = yaml.safe_load((tmp_path / "full" / "config.yaml").read_text())
    assert {k: config["data"]["args"][k] for k in AUGMENTED} == AUGMENTED
    # the trainer sets the dataset's epoch, and the epoch changes every sample's augmentation
    assert [e for e, *_ in stream] == [0] * 30 + [1] * 30
    first, second = ({i: d for e, i, _, d in stream if e == epoch} for epoch in (0, 1))
    assert set(first) == set(second) == set(range(30)) and all(first[i] != second[i] for i in first)
    assert len({shape for _, _, shape, _ in stream}) > 1  # scale jitter changes the input size
    for name in ("epoch0000-step0000002", "epoch0000-step0000004", "epoch0001-step0000004", "epoch0001-step0000006"):
        sample_log.clear()
        checkpoint = tmp_path / "full" / "checkpoints" / f"{name}.pt"
        res = cli("train", "--resume", str(checkpoint), "--run-dir", f"from-{name}")
        assert res.code == 0, res.err
        _assert_same_run(tmp_path / f"from-{name}", tmp_path / "full")
        assert 0 < len(sample_log) < len(stream), name
        assert sample_log == stream[-len(sample_log) :], name  # the rest of the straight run's data, unchanged


@pytest.mark.slow
def test_a_detector_sigkilled_mid_training_and_resumed_is_bitwise_identical(cli, shapes, tmp_path):
    args = [str(CONFIG), f"data.args.root={shapes}", *SMALL, *EVERY_STEP, "train.max_epochs=3"]  # 12 steps
    reference = cli("train", *args, "--run-dir", "reference")  # in this process: no 4 s of imports
    assert reference.code == 0, reference.err
    run = tmp_path / "killed"
    kills = kill_at_steps(args, run, ((1, 0.0), (3, 0.05), (4, 0.2), (6, 0.01), (9, 0.1)), tmp_path)
    assert kills >= 3
    assert not [p.name for p in (run / "checkpoints").iterdir() if p.name.startswith(".")]  # killed saves cleaned up
    _assert_same_run(run, tmp_path / "reference")


@pytest.mark.slow
def test_two_processes_give_the_test_figures_of_modforge_test_on_the_same_checkpoint(cli, shapes, tmp_path):
    """The coco_map metric gathers every process's detections before COCOeval: the 2-process run's test
    figures are those of one process on the whole split."""
    # two epochs (SMALL's): the test split's map_50 is 0.019 then (8 steps of 4 per process), enough for the
    # "something was detected" check below; the processes' imports, not these steps, are most of the test's time
    res = modforge("train", str(CONFIG), f"data.args.root={shapes}", *SMALL, "data.batch_size=4",
                   "train.distributed.timeout=60", "--run-dir", "run", "--nproc", "2", cwd=tmp_path)  # fmt: skip
    assert res.returncode == 0, res.stderr
    run = tmp_path / "run"
    summary = json.loads((run / "summary.json").read_text())
    assert summary["processes"] == 2
    test = summary["test"]
    assert test["map_50"] > 0  # something was detected: the comparison below is not between two zeros
    single = cli("test", "run")  # one process on the whole split: this one (a child would import for seconds first)
    assert single.code == 0, single.err
    record = json.loads((run / "evaluations" / "best-test.json").read_text())
    figures = [k for k, v in test.items() if isinstance(v, float) and not k.endswith("loss")]
    assert {"map", "map_50", "map_75", "mar_100"} <= set(figures)
    for key in figures:
        assert record[key] == pytest.approx(test[key], abs=1e-12, nan_ok=True), key
    assert record["per_class"] == pytest.approx(test["per_class"], abs=1e-12, nan_ok=True)
    # the losses are not COCO figures: FCOS divides each batch's loss by that batch's positives, so they depend
    # on how the 5 test images are batched (one batch of 4 and one of 1, or shards of 3 and 2) — close, not equal
    for key in ("loss", "cls_loss", "box_loss", "quality_loss"):
        assert record[key] == pytest.approx(test[key], rel=0.1), key


def test_kfold_on_a_detection_config_is_refused_with_the_reason(cli, shapes, tmp_path):
    res = cli("kfold", str(CONFIG), f"data.args.root={shapes}", *SMALL, "--folds", "2", "--run-dir", "cv")
    assert res.code == 2, res
    assert "k-fold cannot split a detection run: a detection image holds boxes of several classes" in res.err
    assert "Traceback" not in res.err
    assert len(res.err.strip().splitlines()) == 1
    assert not (tmp_path / "cv").exists()


def test_a_malformed_annotation_stops_training_with_one_line_naming_file_and_id(cli, tmp_path):
    root = tmp_path / "set"
    make_shapes(root, images=12, size=64, seed=0, max_object=32)
    path = root / "annotations" / "instances_val.json"
    doc = json.loads(path.read_text())
    bad = doc["annotations"][1]
    bad["bbox"] = [10, 10, -3, 5]
    path.write_text(json.dumps(doc))
    res = cli("train", str(CONFIG), f"data.args.root={root}", *SMALL, "--run-dir", "run")
    assert res.code == 2, res
    lines = res.err.strip().splitlines()
    assert len(lines) == 1 and "Traceback" not in res.err, res.err
    assert str(path) in lines[0] and f"annotation {bad['id']} " in lines[0] and "negative size" in lines[0]
    assert not (tmp_path / "run").exists()
