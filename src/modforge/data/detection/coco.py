"""Box data in COCO's format: an ``instances_*.json`` file and a folder of images per split.

What is read (COCO's "instances" format, the one every detection tool writes):

* ``categories`` — ``{"id", "name"}``; ids need not be contiguous (COCO's run 1…90 with gaps). Label ``k`` is
  the ``k``-th category in increasing id order; the names are kept as the class names and
  :attr:`CocoDetection.label_to_category` maps labels back to ids for pycocotools. Every split is read with
  the training file's categories (a category another split adds is an unknown category there).
* ``images`` — ``{"id", "file_name", "width", "height"}``; ``file_name`` is relative to the split's image
  folder. Images without annotations are kept (empty targets): they teach what background looks like.
* ``annotations`` — ``{"id", "image_id", "category_id", "bbox": [x, y, w, h], "iscrowd", "area"}``; boxes
  in pixel-edge coordinates become ``x1, y1, x2, y2``. ``iscrowd: 1`` marks a region of many objects: it is
  kept in the target with ``iscrowd`` set, for the loss to ignore and for COCO evaluation to match without
  counting. A file without ``annotations`` (COCO's test-dev image lists) has no boxes.

A malformed entry — a box reaching more than :data:`BOX_TOLERANCE` px outside its image (real files round
coordinates; within the tolerance a box is clipped), a box of zero or negative size, an unknown category, an
annotation of an image that is not listed, an image file that is missing or whose size differs from the
listed one — raises one :class:`AnnotationError` naming the file, the annotation (or image) id and what was
expected. With ``skip_bad`` the bad entry is left out instead (an annotation alone; an image with its
annotations), counted in a :class:`SkipReport` and logged.

An annotation file is data from someone else, so it is read within bounds, whatever ``skip_bad`` says:

* the file is at most :data:`MAX_ANNOTATION_BYTES` and nests at most :data:`MAX_ANNOTATION_DEPTH` deep
  (:func:`modforge.core.json_limits.read_json`: checked before it is parsed);
* at most :data:`MAX_CATEGORIES` categories, :data:`MAX_IMAGES` images and :data:`MAX_ANNOTATIONS`
  annotations; every id is an integer in ``0 … MAX_ID`` (it must fit int64, as pycocotools and the
  tensors holding it need);
* a ``file_name`` is a relative name inside the split's image folder — an absolute name, ``..`` or a link
  leading out of the folder is refused (:func:`modforge.core.safe_files.inside`) before the file is
  looked at, so nothing outside the folder is read or even reported on;
* a listed image is at most :data:`MAX_LISTED_PIXELS` pixels, and an image file is opened with Pillow's
  decompression-bomb limit set from its listed size (:func:`pixel_limit`; exceeding it is an error, not a
  warning), and checked against that size before a pixel is decoded. Only the picture formats in
  :data:`IMAGE_FORMATS` are decoded.

Training samples are transformed by :class:`~.transforms.BoxTransforms` with a generator seeded by
``(seed, epoch, index)`` — the same run sees the same samples whatever the worker count, and a resumed run
continues exactly; the trainer calls :meth:`CocoDetection.set_epoch` at the start of every epoch.

The file is read here; what it is read into lives in :mod:`.coco_records` and one split as a torch dataset
(:class:`CocoDetection`) in :mod:`.coco_split` — both re-exported.
"""

from __future__ import annotations

import logging
import math
from pathlib import Path
from typing import Any, Optional

import numpy as np

from ...core.errors import UsageError
from ...core.json_limits import read_json
from ...core.layouts import Layout
from ...core.registries import register_dataset
from ...core.safe_files import folder_below, inside
from ..base import DataSplits
from ..pictures import IMAGE_FORMATS, PIXEL_MARGIN, pixel_limit
from .coco_records import AnnotationError, CocoCategories, CocoImage, SkipReport, Verify, open_listed_image
from .coco_split import CocoDetection
from .transforms import IMAGENET_MEAN, IMAGENET_STD, BoxTransforms

__all__ = [
    "BOX_TOLERANCE",
    "IMAGE_FORMATS",
    "MAX_ANNOTATIONS",
    "MAX_ANNOTATION_BYTES",
    "MAX_ANNOTATION_DEPTH",
    "MAX_CATEGORIES",
    "MAX_ID",
    "MAX_IMAGES",
    "MAX_LISTED_PIXELS",
    "PIXEL_MARGIN",
    "AnnotationError",
    "CocoCategories",
    "CocoDetection",
    "CocoImage",
    "SkipReport",
    "coco_dataset",
    "pixel_limit",
    "read_categories",
    "read_instances",
]

log = logging.getLogger("modforge.data")

BOX_TOLERANCE = 1.0
"""Pixels a box may reach outside its image (rounding in real annotation files); it is clipped to the image."""

MAX_ANNOTATION_BYTES = 4 * 1024**3
"""Largest annotation file read (COCO 2017's training file is 448 MB, LVIS's 1.1 GB)."""

MAX_ANNOTATION_DEPTH = 32
"""Deepest nesting of arrays/objects in an annotation file (COCO's own needs 5: polygons in a list)."""

MAX_CATEGORIES = 10_000
"""Most categories a file may list (COCO has 80, LVIS 1,203, Objects365 365): the model's head, the
metrics and pycocotools all grow with it."""

MAX_IMAGES = 20_000_000
"""Most images a file may list."""

MAX_ANNOTATIONS = 200_000_000
"""Most annotations a file may list."""

MAX_ID = 2**63 - 1
"""Largest category, image or annotation id (ids are 0 … this: they must fit int64)."""

MAX_LISTED_PIXELS = 2**28
"""Largest listed image (width × height, e.g. 16,384 × 16,384): decoded as RGB it takes 768 MiB."""

# PIXEL_MARGIN (listed pixels times this: Pillow's limit while an image is opened), IMAGE_FORMATS (the
# picture formats decoded) and pixel_limit live in modforge.data.pictures, shared with the image readers.


def _is_int(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


def _is_number(value: Any) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value)


def _is_id(value: Any) -> bool:
    return _is_int(value) and 0 <= value <= MAX_ID


def _id_text(value: Any) -> str:
    """An id for a message: short even when the file gives a 40-digit number or a long string."""
    text = repr(value)
    return text if len(text) <= 40 else text[:37] + "..."


def _load_json(path: Path) -> dict[str, Any]:
    doc = read_json(path, what="annotation file", max_bytes=MAX_ANNOTATION_BYTES, max_depth=MAX_ANNOTATION_DEPTH,
                    error=AnnotationError)  # fmt: skip
    if not isinstance(doc, dict):
        raise AnnotationError(f"{path}: expected a COCO instances object with 'images' and 'annotations', "
                              f"got a JSON {type(doc).__name__}")  # fmt: skip
    for key in ("images", "annotations", "categories"):
        if key in doc and not isinstance(doc[key], list):
            raise AnnotationError(f"{path}: '{key}' must be a list, got {type(doc[key]).__name__}")
    if "images" not in doc:
        raise AnnotationError(f"{path}: no 'images' list (expected a COCO instances file)")
    for key, cap in (("categories", MAX_CATEGORIES), ("images", MAX_IMAGES), ("annotations", MAX_ANNOTATIONS)):
        if len(doc.get(key) or ()) > cap:
            raise AnnotationError(f"{path}: lists {len(doc[key])} {key}, more than the {cap} allowed")
    return doc


def read_categories(doc: dict[str, Any], path: Path) -> CocoCategories:
    """The label map of an instances document's ``categories`` (sorted by id)."""
    entries = doc.get("categories")
    if not entries:
        raise AnnotationError(f"{path}: no 'categories' (expected a list of {{'id', 'name'}})")
    names: dict[int, str] = {}
    if len(entries) > MAX_CATEGORIES:
        raise AnnotationError(f"{path}: lists {len(entries)} categories, more than the {MAX_CATEGORIES} allowed")
    for k, cat in enumerate(entries):
        if not isinstance(cat, dict) or not _is_int(cat.get("id")):
            raise AnnotationError(f"{path}: category #{k}: expected {{'id': <int>, 'name': <text>}}, "
                                  f"got {_id_text(cat)}")  # fmt: skip
        cid = cat["id"]
        if not _is_id(cid):
            raise AnnotationError(f"{path}: category #{k}: id {_id_text(cid)} is out of range "
                                  f"(expected 0 … {MAX_ID}, an int64)")  # fmt: skip
        if cid in names:
            raise AnnotationError(f"{path}: category id {cid} is listed twice")
        name = cat.get("name")
        if not isinstance(name, str) or not name:
            raise AnnotationError(f"{path}: category {cid}: expected a non-empty 'name', got {_id_text(name)}")
        names[cid] = name
    ids = tuple(sorted(names))
    return CocoCategories(ids, tuple(names[i] for i in ids))


def _check_image(entry: Any, k: int, path: Path) -> tuple[int, str, int, int]:
    if not isinstance(entry, dict) or not _is_int(entry.get("id")):
        raise ValueError(f"image #{k}: expected an object with an integer 'id', got {_id_text(entry)}")
    image_id = entry["id"]
    if not _is_id(image_id):
        raise ValueError(f"image #{k}: id {_id_text(image_id)} is out of range (expected 0 … {MAX_ID}, an int64)")
    name, width, height = entry.get("file_name"), entry.get("width"), entry.get("height")
    if not isinstance(name, str) or not name:
        raise ValueError(f"image {image_id}: expected a 'file_name', got {_id_text(name)}")
    if not (_is_int(width) and _is_int(height) and width > 0 and height > 0):
        raise ValueError(f"image {image_id}: expected positive integer 'width' and 'height', "
                         f"got {_id_text(width)}, {_id_text(height)}")  # fmt: skip
    if width * height > MAX_LISTED_PIXELS:
        raise ValueError(f"image {image_id}: a listed size of {width}×{height} is more than the "
                         f"{MAX_LISTED_PIXELS} pixels an image may have")  # fmt: skip
    return image_id, name, width, height


def _verify_file(file: Path, width: int, height: int, verify: Verify) -> None:
    if not file.is_file():
        raise ValueError(f"image file not found: {file}")
    if verify == "header":
        open_listed_image(file, width, height).close()


def _check_annotation(
    ann: dict[str, Any], size: tuple[int, int], label_of: dict[int, int]
) -> tuple[list[float], int, bool, float]:
    """(x1y1x2y2 clipped, label, iscrowd, area) of one annotation whose image is known, or ValueError."""
    width, height = size
    cid = ann.get("category_id")
    if not _is_int(cid) or cid not in label_of:
        known = ", ".join(map(str, sorted(label_of)[:20])) + (" …" if len(label_of) > 20 else "")
        raise ValueError(f"unknown category_id {_id_text(cid)} (expected one of the categories: {known})")
    bbox = ann.get("bbox")
    if not isinstance(bbox, list) or len(bbox) != 4 or not all(_is_number(v) for v in bbox):
        raise ValueError(f"expected 'bbox' to be [x, y, w, h] (four finite numbers), got {_id_text(bbox)}")
    x, y, w, h = (float(v) for v in bbox)
    if w <= 0 or h <= 0:
        raise ValueError(f"box [x, y, w, h] = {bbox} has {'negative' if min(w, h) < 0 else 'zero'} size "
                         "(expected width and height > 0)")  # fmt: skip
    t = BOX_TOLERANCE
    if x < -t or y < -t or x + w > width + t or y + h > height + t:
        raise ValueError(f"box [x, y, w, h] = {bbox} reaches outside the {width}×{height} image "
                         f"(expected 0 <= x, 0 <= y, x + w <= {width}, y + h <= {height})")  # fmt: skip
    x1, y1, x2, y2 = max(0.0, x), max(0.0, y), min(float(width), x + w), min(float(height), y + h)
    if x2 <= x1 or y2 <= y1:
        raise ValueError(f"box [x, y, w, h] = {bbox} lies outside the {width}×{height} image")
    crowd = ann.get("iscrowd", 0)
    if crowd not in (0, 1) or isinstance(crowd, float):
        raise ValueError(f"expected 'iscrowd' 0 or 1, got {_id_text(crowd)}")
    area = ann.get("area", w * h)
    if not _is_number(area) or area < 0:
        raise ValueError(f"expected 'area' to be a number >= 0, got {_id_text(area)}")
    return [x1, y1, x2, y2], label_of[cid], bool(crowd), float(area)


def read_instances(
    annotation_file: str | Path,
    image_dir: str | Path,
    *,
    categories: CocoCategories | None = None,
    skip_bad: bool = False,
    report: SkipReport | None = None,
    verify: Verify = "header",
) -> tuple[list[CocoImage], CocoCategories]:
    """The images of one COCO instances file, with their annotations, and the label map.

    Args:
        annotation_file: the ``instances_*.json`` file.
        image_dir: the folder its ``file_name``s are relative to.
        categories: the label map to read with (another split's); None: this file's own.
        skip_bad: leave bad entries out (counted in ``report``) instead of raising.
        report: where left-out entries are counted.
        verify: what is checked of every image file now: 'header' (it opens as an image of the listed size)
            or 'exists' (cheaper; a bad file then fails when first read, still naming file and image).

    Raises:
        AnnotationError: naming the file and the image or annotation id.
    """
    path, folder = Path(annotation_file), Path(image_dir)
    report = report if report is not None else SkipReport()
    doc = _load_json(path)
    if categories is None:
        categories = read_categories(doc, path)
    elif doc.get("categories"):
        own = read_categories(doc, path)
        expected = dict(zip(categories.ids, categories.names, strict=True))
        for cid, name in zip(own.ids, own.names, strict=True):
            if cid in expected and expected[cid] != name:
                raise AnnotationError(f"{path}: category {cid} is called {name!r} here but {expected[cid]!r} in the "
                                      "training annotations (every split must use the same categories)")  # fmt: skip
    if not folder.is_dir():
        raise AnnotationError(f"image folder not found: {folder} (images of {path})")
    label_of = categories.label_of()

    def bad(message: str, *, image: bool = False) -> None:
        if not skip_bad:
            raise AnnotationError(f"{path}: {message}") from None
        report.add(f"{path.name}: {message}", image=image)

    sizes: dict[int, tuple[int, int]] = {}
    listed: dict[int, tuple[str, int, int]] = {}
    dropped: set[int] = set()  # images left out by skip_bad: their annotations go with them
    for k, entry in enumerate(doc["images"]):
        try:
            image_id, name, width, height = _check_image(entry, k, path)
            if image_id in listed or image_id in dropped:
                raise ValueError(f"image {image_id} is listed twice")
            # a name leaving the folder is refused even with skip_bad: nothing outside it is looked at
            file = inside(folder, name, what=f"{path}: image {image_id}: file_name")
            try:
                _verify_file(file, width, height, verify)
            except ValueError as exc:
                raise ValueError(f"image {image_id}: {exc}") from None
        except ValueError as exc:
            bad(str(exc), image=True)
            if isinstance(entry, dict) and _is_int(entry.get("id")) and entry["id"] not in listed:
                dropped.add(entry["id"])
            continue
        listed[image_id] = (str(file), width, height)
        sizes[image_id] = (width, height)

    per_image: dict[int, list[tuple[list[float], int, bool, float, int]]] = {i: [] for i in listed}
    seen_ann: set[int] = set()
    for k, ann in enumerate(doc.get("annotations") or []):
        if not isinstance(ann, dict) or not _is_int(ann.get("id")):
            bad(f"annotation #{k}: expected an object with an integer 'id', got {_id_text(ann)}")
            continue
        ann_id = ann["id"]
        if not _is_id(ann_id):
            bad(f"annotation #{k}: id {_id_text(ann_id)} is out of range (expected 0 … {MAX_ID}, an int64)")
            continue
        image_id = ann.get("image_id")
        where = f"annotation {ann_id} (image {_id_text(image_id)})"
        try:
            if ann_id in seen_ann:
                raise ValueError("annotation id listed twice")
            seen_ann.add(ann_id)
            if _is_int(image_id) and image_id in dropped:
                continue  # its image was left out and counted
            if not _is_int(image_id) or image_id not in sizes:
                raise ValueError(
                    f"image_id {_id_text(image_id)} is not among the file's images (expected the id of a listed image)"
                )
            box, label, crowd, area = _check_annotation(ann, sizes[image_id], label_of)
        except ValueError as exc:
            bad(f"{where}: {exc}")
            continue
        per_image[image_id].append((box, label, crowd, area, ann_id))

    images = []
    for image_id, (name, width, height) in listed.items():
        anns = per_image[image_id]
        images.append(CocoImage(
            image_id=image_id, path=Path(name), width=width, height=height,
            boxes=np.array([a[0] for a in anns], dtype=np.float64).reshape(-1, 4),
            labels=np.array([a[1] for a in anns], dtype=np.int64),
            iscrowd=np.array([a[2] for a in anns], dtype=bool),
            area=np.array([a[3] for a in anns], dtype=np.float64),
            ann_ids=np.array([a[4] for a in anns], dtype=np.int64),
            source=f"{path}: image {image_id}",
        ))  # fmt: skip
    return images, categories


@register_dataset("coco")
def coco_dataset(
    root: str,
    train_annotations: Optional[str] = "annotations/instances_train.json",
    val_annotations: Optional[str] = "annotations/instances_val.json",
    test_annotations: Optional[str] = "annotations/instances_test.json",
    train_images: str = "images/train",
    val_images: str = "images/val",
    test_images: str = "images/test",
    min_size: Optional[int] = 800,
    max_size: Optional[int] = 1333,
    size_divisor: int = 32,
    hflip: float = 0.5,
    scale_jitter: tuple[float, float] = (1.0, 1.0),
    photometric: float = 0.0,
    mean: tuple[float, float, float] = IMAGENET_MEAN,
    std: tuple[float, float, float] = IMAGENET_STD,
    skip_bad: bool = False,
    verify: Verify = "header",
    cache: bool = False,
    seed: int = 0,
) -> DataSplits:
    """Object detection from COCO files: an instances JSON and an image folder per split (the layout of
    ``modforge data make-shapes`` by default; for COCO 2017 itself set e.g. ``train_annotations:
    annotations/instances_train2017.json`` and ``train_images: train2017``).

    Args:
        root: the data folder; the other paths are relative to it and must stay inside it (no
            absolute name, no ``..``, no link leading out of it; ``root`` itself may be a link).
        train_annotations: training instances file (None: evaluation only).
        val_annotations: validation instances file, or None.
        test_annotations: test instances file, or None.
        train_images: folder of the training images.
        val_images: folder of the validation images.
        test_images: folder of the test images.
        min_size: shorter side after resizing, in pixels (None: keep the size unless max_size applies).
        max_size: longest side after resizing, at most (None: no bound).
        size_divisor: batches are zero-padded to a multiple of this (a backbone's total stride).
        hflip: probability of a horizontal flip of a training image.
        scale_jitter: (low, high) range of a log-uniform factor on a training image's resize scale.
        photometric: brightness/contrast/saturation jitter of training images, factors in 1 ± this.
        mean: per-channel mean (pixels / 255) subtracted before the model.
        std: per-channel standard deviation divided by.
        skip_bad: leave out malformed annotations and unusable images (counted and logged) instead of failing.
        verify: check of every image file when the data is loaded: 'header' (opens, listed size) or 'exists'.
        cache: keep decoded images in memory after their first read.
        seed: seeds the training transforms (wired from the config's seed).
    """
    base = Path(root)
    if not base.is_dir():
        raise UsageError(f"dataset root not found: {base} (a synthetic set: modforge data make-shapes {base})")
    try:
        transforms = BoxTransforms(min_size=min_size, max_size=max_size, hflip=hflip, scale_jitter=tuple(scale_jitter),
                                   photometric=photometric, mean=tuple(mean), std=tuple(std))  # type: ignore[arg-type]  # fmt: skip
    except ValueError as exc:
        raise UsageError(f"coco: {exc}") from None
    if size_divisor < 1:
        raise UsageError(f"coco: size_divisor must be at least 1, got {size_divisor}")
    files = {"train": train_annotations, "val": val_annotations, "test": test_annotations}
    folders = {"train": train_images, "val": val_images, "test": test_images}
    if all(f is None for f in files.values()):
        raise UsageError(
            "coco: no annotation file given (train_annotations, val_annotations and test_annotations are all null)"
        )
    report = SkipReport()
    categories: CocoCategories | None = None
    splits: dict[str, CocoDetection | None] = {}
    for split in ("train", "val", "test"):
        name = files[split]
        if name is None:
            splits[split] = None
            continue
        # below a root that may be a link the user named, nothing may lead out (a planted images/test link)
        path = folder_below(base, name, f"coco: {split}_annotations")
        image_dir = folder_below(base, folders[split], f"coco: {split}_images")
        images, categories = read_instances(path, image_dir, categories=categories, skip_bad=skip_bad, report=report,
                                            verify=verify)  # fmt: skip
        splits[split] = CocoDetection(images, categories, transforms, train=split == "train", seed=seed,
                                      size_divisor=size_divisor, annotation_file=path, cache=cache)  # fmt: skip
    if report.skipped:
        log.warning("coco: %s", report)
    assert categories is not None  # at least one file was read
    first = next((s for s in splits.values() if s is not None and len(s)), None)
    if first is None:
        raise UsageError(f"coco: no usable image in {', '.join(str(base / f) for f in files.values() if f)} ({report})")
    train = splits["train"]
    if train is None:  # evaluation only: an empty training split keeps the DataSplits contract
        train = CocoDetection([], categories, transforms, train=True, seed=seed, size_divisor=size_divisor)
    return DataSplits(
        train,
        splits["val"],
        splits["test"],
        num_classes=len(categories.ids),
        in_dim=3,
        layout=Layout.IMAGE,
        input_shape=first.input_shape(),
        class_names=list(categories.names),
        normalisation={
            "range": "pixels / 255",
            "mean": list(transforms.mean),
            "std": list(transforms.std),
            "min_size": min_size,
            "max_size": max_size,
            "size_divisor": size_divisor,
            "padding": "zeros, bottom/right",
            "label_to_category": list(categories.ids),
        },  # fmt: skip
        task="detection",
    )
