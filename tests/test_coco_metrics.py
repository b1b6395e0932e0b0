"""``coco_map`` reports exactly what pycocotools' own COCOeval reports on the same files."""

from __future__ import annotations

import contextlib
import io
import json
import math

import numpy as np
import pytest
import torch

from modforge.tasks.detection.coco_eval import SUMMARY_NAMES, DetectionRecords, coco_box_metrics
from modforge.tasks.detection.metrics import CocoMAP


def random_dataset(seed: int, images: int = 12, classes: int = 3):
    """A COCO ground truth (with crowd regions and all three sizes) and detections: jittered
    true boxes with random scores, plus false positives."""
    rng = np.random.default_rng(seed)
    gt = {"images": [], "annotations": [], "categories": [{"id": k + 1, "name": f"c{k}"} for k in range(classes)]}
    results = []
    for image_id in range(1, images + 1):
        h, w = int(rng.integers(200, 400)), int(rng.integers(200, 400))
        gt["images"].append({"id": image_id, "height": h, "width": w})
        for _ in range(int(rng.integers(0, 6))):
            bw, bh = float(rng.uniform(4, 150)), float(rng.uniform(4, 150))
            x, y = float(rng.uniform(0, w - bw)), float(rng.uniform(0, h - bh))
            cat = int(rng.integers(1, classes + 1))
            gt["annotations"].append({"id": len(gt["annotations"]) + 1, "image_id": image_id, "category_id": cat,
                                      "bbox": [x, y, bw, bh], "area": bw * bh, "iscrowd": int(rng.random() < 0.1)})  # fmt: skip
            if rng.random() < 0.8:
                jitter = rng.normal(0, 0.08, 4) * [bw, bh, bw, bh]
                results.append({"image_id": image_id, "category_id": cat, "score": float(rng.random()),
                                "bbox": [x + jitter[0], y + jitter[1], bw + jitter[2], bh + jitter[3]]})  # fmt: skip
        for _ in range(int(rng.integers(0, 3))):
            results.append({"image_id": image_id, "category_id": int(rng.integers(1, classes + 1)),
                            "score": float(rng.random()) * 0.5,
                            "bbox": [float(rng.uniform(0, w / 2)), float(rng.uniform(0, h / 2)), 30.0, 40.0]})  # fmt: skip
    return gt, results


def direct_cocoeval(tmp_path, gt, results) -> list[float]:
    """pycocotools as a paper's evaluation script calls it: files on disk, loadRes, summarize."""
    from pycocotools.coco import COCO
    from pycocotools.cocoeval import COCOeval

    (tmp_path / "gt.json").write_text(json.dumps(gt))
    (tmp_path / "dt.json").write_text(json.dumps(results))
    with contextlib.redirect_stdout(io.StringIO()):
        coco = COCO(str(tmp_path / "gt.json"))
        evaluator = COCOeval(coco, coco.loadRes(str(tmp_path / "dt.json")), "bbox")
        evaluator.evaluate()
        evaluator.accumulate()
        evaluator.summarize()
    return [float(v) for v in evaluator.stats]


def as_batches(gt, results, scale: float, batch_size: int = 4):
    """The dataset's batches (boxes of the resized input: original × scale) and the head's
    dt_bboxes for them (category id − 1 = label)."""
    ids = [im["id"] for im in gt["images"]]
    sizes = {im["id"]: (im["height"], im["width"]) for im in gt["images"]}
    for start in range(0, len(ids), batch_size):
        chunk = ids[start : start + batch_size]
        targets, rows = [], []
        for i, image_id in enumerate(chunk):
            anns = [a for a in gt["annotations"] if a["image_id"] == image_id]
            xyxy = torch.tensor([[x, y, x + w, y + h] for x, y, w, h in (a["bbox"] for a in anns)], dtype=torch.float64)
            targets.append({
                "boxes": xyxy.reshape(-1, 4) * scale,
                "labels": torch.tensor([a["category_id"] - 1 for a in anns], dtype=torch.long),
                "iscrowd": torch.tensor([a["iscrowd"] for a in anns]),
                "area": torch.tensor([a["area"] for a in anns], dtype=torch.float64),
            })  # fmt: skip
            for r in results:
                if r["image_id"] == image_id:
                    x, y, w, h = r["bbox"]
                    rows.append([i, x * scale, y * scale, (x + w) * scale, (y + h) * scale, r["score"], r["category_id"] - 1])
        yield {
            "targets": targets,
            "image_id": torch.tensor(chunk),
            "scale": torch.full((len(chunk),), scale),
            "orig_sizes": torch.tensor([sizes[i] for i in chunk]),
            "dt_bboxes": torch.tensor(rows, dtype=torch.float64).reshape(-1, 7),
        }


def same(a: float, b: float) -> bool:
    return (math.isnan(a) and b < 0) or abs(a - b) < 1e-12


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_coco_map_equals_pycocotools_on_the_same_files(tmp_path, seed):
    gt, results = random_dataset(seed)
    metric = CocoMAP(num_classes=3, class_names=["c0", "c1", "c2"])
    for batch in as_batches(gt, results, scale=0.5):  # a power of two: scaling back is exact
        metric.update(batch)
    ours = metric.compute()
    reference = direct_cocoeval(tmp_path, gt, results)
    assert all(same(ours[name], ref) for name, ref in zip(SUMMARY_NAMES, reference, strict=True)), (ours, reference)
    assert set(ours["per_class"]) == {"c0", "c1", "c2"} and 0 < ours["map"] < 1


def test_records_from_two_processes_give_the_single_process_figures():
    gt, results = random_dataset(3)
    batches = list(as_batches(gt, results, scale=1.0, batch_size=3))
    whole, shards = DetectionRecords(), [DetectionRecords(), DetectionRecords()]
    for k, batch in enumerate(batches):
        whole.add_batch(batch)
        shards[k % 2].add_batch(batch)
    shards[1].add_batch(batches[0])  # a padded shard repeats an image: it counts once
    merged = DetectionRecords()
    merged.merge(shards)
    assert coco_box_metrics(*merged.to_coco(3)) == coco_box_metrics(*whole.to_coco(3))


def test_no_detections_at_all_is_zero_ap_not_an_error():
    gt, _ = random_dataset(4)
    records = DetectionRecords()
    for batch in as_batches(gt, [], scale=1.0):
        records.add_batch(batch)
    metrics = coco_box_metrics(*records.to_coco(3))
    assert metrics["map"] == 0.0 and metrics["map_50"] == 0.0
