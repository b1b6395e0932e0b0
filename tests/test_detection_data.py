"""Box data: the synthetic shapes set (COCO files on disk), the ``coco`` dataset (label remap, crowd regions,
images without boxes, one located error per malformed entry, ``skip_bad``), box-aware transforms, seeded
training samples and padded batches."""

from __future__ import annotations

import dataclasses
import json
import logging
import re
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import torch
from PIL import Image

from modforge.core.errors import ConfigValueError, UsageError
from modforge.core.registries import DATASETS
from modforge.data.detection.batching import collate_detection, padded_size
from modforge.data.detection.coco import AnnotationError, SkipReport, coco_dataset, read_instances
from modforge.data.detection.shapes import SPLITS, ShapeSettings, make_shapes, render_image
from modforge.data.detection.transforms import BoxTransforms, hflip, resize_scale
from modforge.data.loader import LoaderSettings, make_loader

TINY = {"images": 12, "seed": 5, "size": 64, "min_object": 6.0, "max_object": 32.0, "max_objects": 4}


@pytest.fixture(scope="module")
def shapes(tmp_path_factory) -> tuple[Path, dict]:
    out = tmp_path_factory.mktemp("shapes") / "set"
    return out, make_shapes(out, **TINY)


def instances(root: Path, split: str) -> dict[str, Any]:
    return json.loads((root / "annotations" / f"instances_{split}.json").read_text())


def xyxy(bbox: list[float]) -> list[float]:
    x, y, w, h = bbox
    return [x, y, x + w, y + h]


# ----------------------------------------------------------------------------- a hand-made COCO folder


def make_coco(
    root: Path, images: list[dict], annotations: list[dict], categories: list[dict], *, split: str = "train"
) -> Path:
    """Write ``annotations/instances_<split>.json`` and a grey PNG of its listed size per listed image under
    ``images/<split>/``; returns the annotation file."""
    folder = root / "images" / split
    folder.mkdir(parents=True, exist_ok=True)
    for im in images:
        Image.fromarray(np.full((im["height"], im["width"], 3), 100, dtype=np.uint8)).save(folder / im["file_name"])
    (root / "annotations").mkdir(exist_ok=True)
    path = root / "annotations" / f"instances_{split}.json"
    path.write_text(json.dumps({"images": images, "annotations": annotations, "categories": categories}))
    return path


CATS = [{"id": 7, "name": "dog"}, {"id": 3, "name": "cat"}, {"id": 11, "name": "bird"}]


def small_set(root: Path) -> Path:
    images = [
        {"id": 10, "file_name": "a.png", "width": 40, "height": 30},
        {"id": 20, "file_name": "b.png", "width": 20, "height": 50},
        {"id": 30, "file_name": "empty.png", "width": 32, "height": 32},
    ]
    annotations = [
        {"id": 1, "image_id": 10, "category_id": 7, "bbox": [2, 3, 10, 5], "area": 50.0, "iscrowd": 0},
        {"id": 2, "image_id": 10, "category_id": 11, "bbox": [20, 10, 20, 20], "area": 400.0, "iscrowd": 1},
        {"id": 3, "image_id": 20, "category_id": 3, "bbox": [0, 0, 20, 50], "iscrowd": 0},
    ]
    return make_coco(root, images, annotations, CATS)


def load(root: Path, **args: Any):
    args = {"val_annotations": None, "test_annotations": None, "min_size": None, "max_size": None, **args}
    return coco_dataset(str(root), **args)


# ----------------------------------------------------------------------------- the shapes generator


def test_shapes_layout_and_pycocotools_reads_every_split(shapes):
    from pycocotools.coco import COCO

    root, summary = shapes
    assert sorted(p.name for p in root.iterdir()) == ["annotations", "images", "meta.json"]
    assert not [p for p in root.parent.iterdir() if p.name.startswith(".")], "temporary folders left behind"
    meta = json.loads((root / "meta.json").read_text())
    assert {k: summary[k] for k in meta} == meta
    seen_images, seen_anns = set(), set()
    for split in SPLITS:
        coco = COCO(str(root / "annotations" / f"instances_{split}.json"))
        doc = instances(root, split)
        assert sorted(coco.getImgIds()) == sorted(im["id"] for im in doc["images"])
        assert [c["name"] for c in coco.loadCats(coco.getCatIds())] == meta["classes"]
        assert meta["counts"][split]["images"] == len(doc["images"])
        assert meta["counts"][split]["objects"] == len(doc["annotations"]) == len(coco.getAnnIds())
        for im in doc["images"]:
            with Image.open(root / "images" / split / im["file_name"]) as picture:
                assert picture.size == (TINY["size"], TINY["size"]) and picture.mode == "RGB"
        for ann in doc["annotations"]:
            x1, y1, x2, y2 = xyxy(ann["bbox"])
            assert 0 <= x1 < x2 <= TINY["size"] and 0 <= y1 < y2 <= TINY["size"]
            assert (
                ann["visible"] >= 0.3 - 1e-3
                and ann["iscrowd"] == 0
                and 0 < ann["area"] <= ann["bbox"][2] * ann["bbox"][3]
            )
            # size is the circumscribed circle's diameter: a triangle's box spans 3/4 of it, a circle's all of it
            assert 0.75 * TINY["min_object"] - 0.02 <= max(ann["bbox"][2:]) <= TINY["max_object"] + 0.02
        seen_images |= {im["id"] for im in doc["images"]}
        seen_anns |= {a["id"] for a in doc["annotations"]}
    assert len(seen_images) == TINY["images"] and sum(meta["counts"][s]["objects"] for s in SPLITS) == len(seen_anns)
    assert [meta["counts"][s]["images"] for s in SPLITS] == [9, 2, 1]


def test_shapes_boxes_bound_the_drawn_shapes_and_occlusion_is_limited():
    settings = ShapeSettings(size=96, max_objects=8, min_object=8.0, max_object=48.0, noise=0.0)
    drawn = 0
    for index in range(6):
        _, objects = render_image(3, index, settings)
        for obj in objects:
            ys, xs = np.nonzero(obj.coverage > 0.5)
            x1, y1, x2, y2 = obj.box
            assert abs(xs.min() - x1) <= 1 and abs(xs.max() + 1 - x2) <= 1, (obj.box, xs.min(), xs.max())
            assert abs(ys.min() - y1) <= 1 and abs(ys.max() + 1 - y2) <= 1
            assert obj.visible_share >= 0.3 - 1e-6
            drawn += 1
    assert drawn >= 6


def test_shapes_are_deterministic_for_any_worker_count(tmp_path):
    args = {"images": 6, "seed": 11, "size": 48, "min_object": 6.0, "max_object": 24.0}
    a = make_shapes(tmp_path / "a", **args)
    make_shapes(tmp_path / "b", **args, workers=2)
    make_shapes(tmp_path / "c", **{**args, "seed": 12})

    def files(root: Path) -> dict[str, bytes]:
        return {str(p.relative_to(root)): p.read_bytes() for p in sorted(root.rglob("*")) if p.is_file()}

    assert files(tmp_path / "a") == files(tmp_path / "b")
    other = files(tmp_path / "c")
    assert other.keys() == files(tmp_path / "a").keys()
    assert other["images/train/000001.png"] != files(tmp_path / "a")["images/train/000001.png"]
    assert a["seed"] == 11 and a["seconds"] > 0


def test_shapes_refuse_bad_settings_and_a_foreign_folder(tmp_path, shapes):
    with pytest.raises(ValueError, match="classes must be distinct names among circle"):
        make_shapes(tmp_path / "x", images=6, classes=("circle", "blob"))
    with pytest.raises(ValueError, match="min_object <= max_object"):
        make_shapes(tmp_path / "x", images=6, min_object=40, max_object=20)
    with pytest.raises(ValueError, match="leaves a split empty"):
        make_shapes(tmp_path / "x", images=3, split=(0.9, 0.05, 0.05))
    with pytest.raises(ValueError, match="max_occlusion"):
        make_shapes(tmp_path / "x", images=6, max_occlusion=1.0)
    assert not (tmp_path / "x").exists()
    root, _ = shapes
    with pytest.raises(ValueError, match="is not empty"):
        make_shapes(root, images=6)
    (tmp_path / "mine").mkdir()
    (tmp_path / "mine" / "notes.txt").write_text("keep me")
    with pytest.raises(ValueError, match="not part of a shapes set"):
        make_shapes(tmp_path / "mine", images=6, overwrite=True)
    assert (tmp_path / "mine" / "notes.txt").read_text() == "keep me"


def test_shapes_overwrite_replaces_an_earlier_set(tmp_path):
    out = tmp_path / "set"
    make_shapes(out, images=6, seed=1, size=48, min_object=6.0, max_object=24.0)
    make_shapes(out, images=9, seed=2, size=48, min_object=6.0, max_object=24.0, overwrite=True)
    assert json.loads((out / "meta.json").read_text())["images"] == 9
    assert len(list((out / "images").rglob("*.png"))) == 9


def test_images_without_objects_are_written(tmp_path):
    out = tmp_path / "set"
    meta = make_shapes(out, images=8, seed=0, size=48, min_objects=0, max_objects=0, min_object=6.0, max_object=24.0)
    assert all(meta["counts"][s]["images_without_objects"] == meta["counts"][s]["images"] for s in SPLITS)
    data = load(out, val_annotations="annotations/instances_val.json")
    sample = data.val[0]
    assert sample["target"]["boxes"].shape == (0, 4) and sample["target"]["labels"].shape == (0,)


# ----------------------------------------------------------------------------- reading it back


def test_round_trip_boxes_are_the_generators_times_the_resize_scale(shapes):
    root, _ = shapes
    data = coco_dataset(str(root), min_size=96, max_size=200, seed=0)
    assert data.task == "detection" and data.in_dim == 3 and data.num_classes == 5
    assert data.class_names == ["circle", "square", "triangle", "star", "cross"]
    assert data.input_shape == (3, 96, 96)
    for split, dataset in (("val", data.val), ("test", data.test)):
        doc = instances(root, split)
        assert dataset.annotation_file == root / "annotations" / f"instances_{split}.json"
        assert dataset.label_to_category == [1, 2, 3, 4, 5]
        for i, im in enumerate(doc["images"]):
            sample = dataset[i]
            anns = [a for a in doc["annotations"] if a["image_id"] == im["id"]]
            expected = torch.tensor([xyxy(a["bbox"]) for a in anns], dtype=torch.float64).reshape(-1, 4)
            assert sample["image_id"] == im["id"] and sample["scale"] == pytest.approx(96 / 64)
            assert sample["input"].shape == (3, 96, 96)
            torch.testing.assert_close(sample["target"]["boxes"].double(), expected * 1.5, rtol=0, atol=1e-4)
            torch.testing.assert_close(sample["target"]["orig_boxes"], expected, rtol=0, atol=1e-9)
            assert sample["target"]["labels"].tolist() == [a["category_id"] - 1 for a in anns]
    truth = data.test.coco_ground_truth()
    doc = instances(root, "test")
    np.testing.assert_allclose(
        [a["bbox"] for a in truth["annotations"]], [a["bbox"] for a in doc["annotations"]], atol=1e-9
    )
    assert [a["category_id"] for a in truth["annotations"]] == [a["category_id"] for a in doc["annotations"]]


def test_category_remap_names_and_crowd_regions(tmp_path):
    small_set(tmp_path)
    data = load(tmp_path, hflip=0.0)
    train = data.train
    assert data.class_names == ["cat", "dog", "bird"]  # increasing category id: 3, 7, 11
    assert train.label_to_category == [3, 7, 11] and data.normalisation["label_to_category"] == [3, 7, 11]
    first = train[0]
    assert first["target"]["labels"].tolist() == [1, 2]
    assert first["target"]["iscrowd"].tolist() == [False, True]
    assert first["target"]["area"].tolist() == [50.0, 400.0]
    assert first["target"]["boxes"].tolist() == [[2, 3, 12, 8], [20, 10, 40, 30]]
    second = train[1]
    assert second["target"]["labels"].tolist() == [0] and second["target"]["area"].tolist() == [1000.0]  # w × h
    truth = train.coco_ground_truth()
    assert [(a["id"], a["category_id"], a["iscrowd"]) for a in truth["annotations"]] == [
        (1, 7, 0),
        (2, 11, 1),
        (3, 3, 0),
    ]
    assert truth["categories"] == [{"id": 3, "name": "cat"}, {"id": 7, "name": "dog"}, {"id": 11, "name": "bird"}]


def test_images_without_boxes_are_kept_and_batched(tmp_path):
    small_set(tmp_path)
    train = load(tmp_path, hflip=1.0, scale_jitter=(0.5, 2.0), photometric=0.3).train
    assert len(train) == 3
    empty = train[2]
    assert empty["image_id"] == 30 and empty["target"]["boxes"].shape == (0, 4)
    assert empty["target"]["labels"].dtype == torch.long and empty["target"]["orig_boxes"].shape == (0, 4)
    batch = train.__getitems__([0, 1, 2])
    assert [len(t["boxes"]) for t in batch["targets"]] == [2, 1, 0]


def test_splits_share_the_training_categories(tmp_path):
    small_set(tmp_path)
    val = [{"id": 99, "file_name": "v.png", "width": 16, "height": 16}]
    make_coco(tmp_path, val, [{"id": 5, "image_id": 99, "category_id": 3, "bbox": [1, 1, 4, 4]}],
              [{"id": 3, "name": "cat"}], split="val")  # fmt: skip
    data = load(tmp_path, val_annotations="annotations/instances_val.json")
    assert data.val[0]["target"]["labels"].tolist() == [0]
    only_val = load(tmp_path, train_annotations=None, val_annotations="annotations/instances_val.json")
    assert len(only_val.train) == 0 and len(only_val.val) == 1 and only_val.class_names == ["cat"]
    make_coco(tmp_path, val, [], [{"id": 3, "name": "kitten"}], split="val")
    with pytest.raises(AnnotationError, match=r"instances_val.json: category 3 is called 'kitten' here but 'cat'"):
        load(tmp_path, val_annotations="annotations/instances_val.json")


# ----------------------------------------------------------------------------- malformed entries

IMAGE = {"id": 1, "file_name": "one.png", "width": 40, "height": 30}
GOOD = {"id": 41, "image_id": 1, "category_id": 3, "bbox": [1, 1, 5, 5]}

MALFORMED = {
    "outside": (
        {"bbox": [30, 2, 20, 5]},
        r"annotation 42 \(image 1\): box \[x, y, w, h\] = \[30, 2, 20, 5\] reaches "
        r"outside the 40×30 image \(expected 0 <= x, 0 <= y, x \+ w <= 40, y \+ h <= 30\)",
    ),
    "outside at the top": (
        {"bbox": [2, -3, 5, 5]},
        r"annotation 42 \(image 1\): box \[x, y, w, h\] = \[2, -3, 5, 5\] reaches outside the 40×30 image",
    ),
    "negative size": (
        {"bbox": [5, 5, -3, 4]},
        r"annotation 42 \(image 1\): box .* has negative size \(expected width "
        r"and height > 0\)",
    ),
    "zero size": ({"bbox": [5, 5, 0, 4]}, r"annotation 42 \(image 1\): box .* has zero size"),
    "unknown category": (
        {"category_id": 8},
        r"annotation 42 \(image 1\): unknown category_id 8 \(expected one of the "
        r"categories: 3, 7, 11\)",
    ),
    "missing image": ({"image_id": 9}, r"annotation 42 \(image 9\): image_id 9 is not among the file's images"),
    "image id not an id": ({"image_id": [1]}, r"annotation 42 \(image \[1\]\): image_id \[1\] is not among"),
    "bbox not four numbers": ({"bbox": [1, 2, 3]}, r"annotation 42 \(image 1\): expected 'bbox' to be \[x, y, w, h\]"),
    "bbox not finite": ({"bbox": [1, 2, float("nan"), 3]}, r"annotation 42 \(image 1\): expected 'bbox'"),
    "iscrowd": ({"iscrowd": 2}, r"annotation 42 \(image 1\): expected 'iscrowd' 0 or 1, got 2"),
    "area": ({"area": -1}, r"annotation 42 \(image 1\): expected 'area' to be a number >= 0"),
    "duplicate id": ({"id": 41}, r"annotation 41 \(image 1\): annotation id listed twice"),
}


@pytest.mark.parametrize("case", sorted(MALFORMED))
def test_a_malformed_annotation_is_one_error_naming_file_and_id(tmp_path, case):
    change, message = MALFORMED[case]
    bad = {**GOOD, "id": 42, **change}
    path = make_coco(tmp_path, [IMAGE], [GOOD, bad], CATS)
    with pytest.raises(AnnotationError) as info:
        load(tmp_path)
    text = str(info.value)
    assert isinstance(info.value, UsageError) and "\n" not in text
    assert text.startswith(f"{path}: "), text
    assert re.search(message, text), text


def test_a_box_within_the_tolerance_is_clipped(tmp_path):
    make_coco(tmp_path, [IMAGE], [{**GOOD, "bbox": [-0.5, 0.0, 40.9, 30.4]}], CATS)
    assert load(tmp_path).train[0]["target"]["boxes"].tolist() == [[0.0, 0.0, 40.0, 30.0]]


@pytest.mark.parametrize(
    ("image", "message"),
    [
        ({**IMAGE, "file_name": "gone.png"}, r"image 1: image file not found: .*images/train/gone.png"),
        ({**IMAGE, "width": 41}, r"image 1: image file .*one.png is 40×30 px, the file lists 41×30"),
        ({**IMAGE, "width": 0}, r"image 1: expected positive integer 'width' and 'height', got 0, 30"),
        ({**IMAGE, "file_name": None}, r"image 1: expected a 'file_name', got None"),
    ],
)
def test_a_bad_image_entry_is_one_error_naming_file_and_image(tmp_path, image, message):
    path = make_coco(tmp_path, [IMAGE], [GOOD], CATS)  # writes one.png, 40×30
    path.write_text(json.dumps({"images": [image], "annotations": [GOOD], "categories": CATS}))
    with pytest.raises(AnnotationError, match=f"^{path}: {message}"):
        load(tmp_path)


def test_unreadable_files_are_located(tmp_path):
    root = tmp_path
    (root / "annotations").mkdir()
    (root / "images" / "train").mkdir(parents=True)
    path = root / "annotations" / "instances_train.json"
    path.write_text('{"images": [\n  {"id": 1,}\n]}')
    with pytest.raises(AnnotationError, match=rf"^{path}:2:12: not valid JSON"):
        load(root)
    path.write_text("[]")
    with pytest.raises(AnnotationError, match="expected a COCO instances object"):
        load(root)
    path.write_text(json.dumps({"images": [], "annotations": []}))
    with pytest.raises(AnnotationError, match="no 'categories'"):
        load(root)
    path.unlink()
    with pytest.raises(AnnotationError, match="annotation file not found: .*instances_train.json"):
        load(root)
    # a broken image that passed the cheap 'exists' check fails on reading, naming file and image
    make_coco(root, [IMAGE], [GOOD], CATS)
    (root / "images" / "train" / "one.png").write_bytes(b"not a png")
    data = load(root, verify="exists")
    with pytest.raises(
        AnnotationError, match=r"instances_train.json: image 1: image file .*one.png is not a readable image"
    ):
        data.train[0]


def test_skip_bad_counts_and_reports(tmp_path, caplog):
    images = [IMAGE, {**IMAGE, "id": 2, "file_name": "gone.png"}, {**IMAGE, "id": 3, "file_name": "three.png"}]
    annotations = [
        GOOD,
        {**GOOD, "id": 42, "bbox": [30, 2, 20, 5]},  # outside
        {**GOOD, "id": 43, "category_id": 99},  # unknown category
        {**GOOD, "id": 44, "image_id": 2},  # its image is missing: goes with the image
        {**GOOD, "id": 45, "image_id": 77},  # no such image
        {**GOOD, "id": 46, "image_id": 3, "bbox": [2, 2, 4, 4]},
    ]
    path = make_coco(tmp_path, images, annotations, CATS)
    (tmp_path / "images" / "train" / "gone.png").unlink()
    report = SkipReport()
    kept, categories = read_instances(path, tmp_path / "images" / "train", skip_bad=True, report=report)
    assert (report.annotations, report.images, report.skipped) == (3, 1, 4)
    assert [im.image_id for im in kept] == [1, 3]
    assert [im.ann_ids.tolist() for im in kept] == [[41], [46]]
    assert categories.ids == (3, 7, 11)
    assert "annotation 42 (image 1)" in str(report) and "gone.png" in str(report)
    with caplog.at_level(logging.WARNING, logger="modforge.data"):
        data = load(tmp_path, skip_bad=True)
    assert len(data.train) == 2
    assert "skipped 3 bad annotation(s) and 1 bad image(s)" in caplog.text
    with pytest.raises(AnnotationError, match="image file not found"):
        load(tmp_path)


# ----------------------------------------------------------------------------- transforms


def rectangle_picture(width: int, height: int, box: tuple[int, int, int, int]) -> np.ndarray:
    pixels = np.zeros((height, width, 3), dtype=np.uint8)
    x1, y1, x2, y2 = box
    pixels[y1:y2, x1:x2] = (255, 40, 40)
    return pixels


def red_bounds(chw: torch.Tensor, threshold: float) -> list[int]:
    ys, xs = torch.nonzero(chw[0] > threshold, as_tuple=True)
    return [int(xs.min()), int(ys.min()), int(xs.max()) + 1, int(ys.max()) + 1]


def test_hflip_keeps_the_box_tight_around_the_coloured_pixels():
    box = (5, 7, 17, 12)
    image = Image.fromarray(rectangle_picture(40, 20, box))
    t = BoxTransforms(min_size=None, max_size=None, hflip=1.0, mean=(0, 0, 0), std=(1, 1, 1))
    out = t.apply(image, np.array([box], dtype=float), train=True, rng=np.random.default_rng(0))
    assert out.flipped and out.scale == 1.0
    assert out.boxes.tolist() == [[23.0, 7.0, 35.0, 12.0]]
    assert red_bounds(out.input, 0.5) == [23, 7, 35, 12]


def reference_hflip(image: Image.Image, boxes: np.ndarray) -> tuple[Image.Image, np.ndarray]:
    """modforge's own flip before torchvision.transforms.v2's kernels replaced it: the reference they must equal."""
    width = image.width
    flipped = boxes.copy()
    flipped[:, 0] = width - boxes[:, 2]
    flipped[:, 2] = width - boxes[:, 0]
    return image.transpose(Image.FLIP_LEFT_RIGHT), flipped


def random_picture_and_boxes(rng: np.random.Generator, count: int) -> tuple[Image.Image, np.ndarray]:
    height, width = (int(v) for v in rng.integers(5, 90, 2))
    x1, y1 = rng.uniform(0, width - 1, count), rng.uniform(0, height - 1, count)
    boxes = np.stack([x1, y1, rng.uniform(x1, width), rng.uniform(y1, height)], 1).reshape(-1, 4)
    return Image.fromarray(rng.integers(0, 256, (height, width, 3), dtype=np.uint8)), boxes


def test_the_v2_flip_equals_modforges_former_flip_bit_for_bit():
    rng = np.random.default_rng(0)
    for count in (0, 1, 7, 3, 12):
        image, boxes = random_picture_and_boxes(rng, count)
        before = boxes.copy()
        new_image, new_boxes = hflip(image, boxes)
        old_image, old_boxes = reference_hflip(image, boxes)
        assert np.array_equal(np.asarray(new_image), np.asarray(old_image)) and new_image.size == old_image.size
        assert new_boxes.dtype == np.float64 and new_boxes.shape == (count, 4)
        assert new_boxes.tobytes() == old_boxes.tobytes() and np.array_equal(boxes, before)  # input left alone
    # the whole training pipeline: a flip drawn by BoxTransforms equals the former flip applied before it
    flip = BoxTransforms(min_size=48, max_size=80, hflip=1.0, scale_jitter=(0.7, 1.4), photometric=0.3)
    keep = dataclasses.replace(flip, hflip=0.0)  # same five draws, the flip never taken
    for seed in range(4):
        image, boxes = random_picture_and_boxes(rng, 5)
        new = flip.apply(image, boxes, train=True, rng=np.random.default_rng(seed))
        old = keep.apply(*reference_hflip(image, boxes), train=True, rng=np.random.default_rng(seed))
        assert new.flipped and new.scale == old.scale and new.boxes.tobytes() == old.boxes.tobytes()
        assert new.input.shape == old.input.shape and torch.equal(new.input, old.input)


def test_a_flipped_training_sample_from_disk_keeps_its_box_on_its_pixels(tmp_path):
    make_coco(tmp_path, [IMAGE], [{**GOOD, "bbox": [4, 6, 11, 9]}], CATS)  # x 4..15, y 6..15
    Image.fromarray(rectangle_picture(40, 30, (4, 6, 15, 15))).save(tmp_path / "images" / "train" / "one.png")
    data = load(tmp_path, hflip=1.0, min_size=60, max_size=None, mean=(0.0, 0.0, 0.0), std=(1.0, 1.0, 1.0))
    sample = data.train[0]
    assert sample["scale"] == 2.0 and tuple(sample["input"].shape) == (3, 60, 80)
    assert sample["target"]["boxes"].tolist() == [[50.0, 12.0, 72.0, 30.0]]  # (40 - 15, 6, 40 - 4, 15) × 2
    assert sample["target"]["orig_boxes"].tolist() == [[25.0, 6.0, 36.0, 15.0]]
    assert red_bounds(sample["input"], 0.5) == pytest.approx([50, 12, 72, 30], abs=1)


def test_resize_keeps_aspect_and_moves_boxes_with_the_pixels():
    assert resize_scale(30, 40, 60, 1000) == 2.0
    assert resize_scale(30, 40, 60, 70) == pytest.approx(70 / 40)  # the longer side's bound wins
    assert resize_scale(30, 40, None, None) == 1.0
    box = (6, 4, 18, 14)
    image = Image.fromarray(rectangle_picture(40, 30, box))
    t = BoxTransforms(min_size=90, max_size=500, mean=(0, 0, 0), std=(1, 1, 1))
    out = t.apply(image, np.array([box], dtype=float), train=False)
    assert tuple(out.input.shape) == (3, 90, 120) and out.scale == 3.0
    assert out.boxes.tolist() == [[18.0, 12.0, 54.0, 42.0]]
    assert red_bounds(out.input, 0.5) == pytest.approx([18, 12, 54, 42], abs=1)


def test_scale_jitter_and_photometric_only_in_training():
    image = Image.fromarray(rectangle_picture(40, 30, (6, 4, 18, 14)))
    boxes = np.array([[6.0, 4.0, 18.0, 14.0]])
    t = BoxTransforms(min_size=30, max_size=None, hflip=0.0, scale_jitter=(0.5, 2.0), photometric=0.4)
    evaluated = t.apply(image, boxes, train=False)
    assert evaluated.scale == 1.0 and tuple(evaluated.input.shape) == (3, 30, 40)
    scales = {t.apply(image, boxes, train=True, rng=np.random.default_rng(i)).scale for i in range(8)}
    assert len(scales) == 8 and all(0.5 <= s <= 2.0 for s in scales)
    jittered = t.apply(image, boxes, train=True, rng=np.random.default_rng(3))
    h, w = jittered.input.shape[1:]
    assert (h, w) == (round(30 * jittered.scale), round(40 * jittered.scale))
    np.testing.assert_allclose(jittered.boxes, boxes * jittered.scale)
    with pytest.raises(ValueError, match="scale_jitter must be"):
        BoxTransforms(scale_jitter=(2.0, 1.0))
    with pytest.raises(ValueError, match="max_size .* must not be below min_size"):
        BoxTransforms(min_size=100, max_size=50)


# ----------------------------------------------------------------------------- seeding, batches, loaders


def test_training_samples_are_seeded_by_seed_epoch_and_index(shapes):
    root, _ = shapes
    args = {"min_size": 64, "max_size": 128, "scale_jitter": (0.7, 1.4), "photometric": 0.3, "hflip": 0.5}
    a = coco_dataset(str(root), seed=1, **args).train
    b = coco_dataset(str(root), seed=1, **args).train
    c = coco_dataset(str(root), seed=2, **args).train

    def same(x: dict, y: dict) -> bool:
        return (
            x["input"].shape == y["input"].shape
            and bool(torch.equal(x["input"], y["input"]))
            and torch.equal(x["target"]["boxes"], y["target"]["boxes"])
        )

    for i in range(3):
        assert same(a[i], b[i])
    assert not all(same(a[i], c[i]) for i in range(3))
    first = [a[i] for i in range(3)]
    a.set_epoch(1)
    assert not all(same(x, a[i]) for i, x in enumerate(first))
    a.set_epoch(0)
    assert all(same(x, a[i]) for i, x in enumerate(first))


def test_collate_pads_to_the_size_divisor_with_zeros():
    def sample(h: int, w: int, n: int, index: int) -> dict:
        return {
            "input": torch.full((3, h, w), 2.0),
            "target": {"boxes": torch.ones(n, 4), "labels": torch.zeros(n, dtype=torch.long)},
            "image_id": 100 + index, "orig_size": (h * 2, w * 2), "scale": 0.5, "index": index,
        }  # fmt: skip

    batch = collate_detection([sample(40, 70, 2, 0), sample(65, 30, 0, 1)], size_divisor=32)
    assert tuple(batch["input"].shape) == (2, 3, 96, 96)
    assert batch["input"][0, :, :40, :70].eq(2).all() and batch["input"][0, :, 40:, :].eq(0).all()
    assert batch["input"][0, :, :, 70:].eq(0).all() and batch["input"][1, :, :, 30:].eq(0).all()
    assert batch["image_sizes"].tolist() == [[40, 70], [65, 30]] and batch["image_sizes"].dtype == torch.long
    assert batch["orig_sizes"].tolist() == [[80, 140], [130, 60]]
    assert batch["scale"].tolist() == [0.5, 0.5] and batch["scale"].dtype == torch.float32
    assert batch["image_id"].tolist() == [100, 101] and batch["index"].tolist() == [0, 1]
    assert [len(t["boxes"]) for t in batch["targets"]] == [2, 0]
    assert tuple(collate_detection([sample(40, 70, 1, 0)], size_divisor=1)["input"].shape) == (1, 3, 40, 70)
    assert padded_size(33, 64, 32) == (64, 64)
    with pytest.raises(ValueError, match="empty list"):
        collate_detection([])


def test_the_registered_dataset_through_the_loader(shapes):
    root, _ = shapes
    assert "coco" in DATASETS
    spec = {"type": "coco", "args": {"root": str(root), "min_size": 64, "max_size": 64, "scale_jitter": [0.8, 1.2]}}
    data = DATASETS.build(spec, path="data", seed=0)
    assert data.input_shape == (3, 64, 64) and len(data.train) == 9
    settings = LoaderSettings(batch_size=4)
    runs = []
    for _ in range(2):
        loader = make_loader(data.train, settings, train=True, generator=torch.Generator().manual_seed(7))
        data.train.set_epoch(0)
        runs.append([(b["image_id"].tolist(), b["input"].sum().item(), b["input"].shape) for b in loader])
    assert runs[0] == runs[1] and [len(r[0]) for r in runs[0]] == [4, 4, 1]
    batch = next(iter(make_loader(data.val, settings, train=False)))
    assert batch["image_id"].tolist() == [im["id"] for im in instances(root, "val")["images"]]
    assert tuple(batch["input"].shape) == (2, 3, 64, 64) and "label" not in batch
    with pytest.raises(ConfigValueError, match=r"data.args.scale_jitter: expected tuple \(float, float\)"):
        DATASETS.build({"type": "coco", "args": {"root": str(root), "scale_jitter": [0.8]}}, path="data", seed=0)
    with pytest.raises(UsageError, match="max_size .* must not be below min_size"):
        DATASETS.build(
            {"type": "coco", "args": {"root": str(root), "min_size": 64, "max_size": 32}}, path="data", seed=0
        )
    with pytest.raises(UsageError, match="dataset root not found"):
        DATASETS.build({"type": "coco", "args": {"root": str(root / "nope")}}, path="data", seed=0)


def test_shapes_workers_are_not_forked_from_a_process_running_threads(tmp_path):
    """A fork copies the locks other threads hold: with a thread running, the workers start from a
    forkserver instead, and the set is the same bytes."""
    import threading

    from modforge.data.generated_sets import worker_start_method

    args = {"images": 6, "seed": 11, "size": 48, "min_object": 6.0, "max_object": 24.0}
    make_shapes(tmp_path / "a", **args)
    stop = threading.Event()
    thread = threading.Thread(target=stop.wait, daemon=True)
    thread.start()
    try:
        assert worker_start_method() != "fork"
        make_shapes(tmp_path / "b", **args, workers=2)
    finally:
        stop.set()
        thread.join()
    files = [{str(p.relative_to(root)): p.read_bytes() for p in sorted(root.rglob("*")) if p.is_file()}
             for root in (tmp_path / "a", tmp_path / "b")]  # fmt: skip
    assert files[0] == files[1]
