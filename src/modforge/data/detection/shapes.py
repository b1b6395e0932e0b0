"""A synthetic object-detection set written as COCO files on disk, generated on the spot from a seed.

Why: a detector, its data path and its COCO evaluation need a box data set that can be made offline in
seconds, that a small model can learn on a laptop's CPU, and that is not trivial — small objects, crowding and
occlusion on busy backgrounds are exactly what separates a good detector from a bad one. The set is written in
the format of a user's own COCO folder, so training on it goes through the ``coco`` dataset like real data.

Layout written by :func:`make_shapes`::

    OUT/
      images/train/000001.png …        RGB PNGs, ``size`` × ``size``; ids run on over the splits
      images/val/…  images/test/…
      annotations/instances_train.json instances_val.json instances_test.json
                                       COCO "instances" files: images (id, file_name, width, height),
                                       annotations (id, image_id, category_id, bbox [x, y, w, h], area,
                                       iscrowd 0, visible), categories (id 1…C, name, supercategory "shape")
      meta.json                        seed, parameters, counts per split and class, conventions, generator
                                       version (written last)

Design (recorded in meta.json as well):

* **Classes.** Filled shapes chosen from :data:`SHAPES` — by default circle, square, triangle, star and cross,
  category ids 1…5 in that order. Every shape but the circle is rotated by a random angle.
* **Scales.** An object's size (the diameter of its circumscribed circle) is drawn log-uniformly between
  ``min_object`` and ``max_object`` pixels (8 and 64 by default: from barely resolvable to half the image),
  so small objects are as common as large ones on a log scale.
* **Crowding and occlusion.** ``min_objects``…``max_objects`` objects per image, drawn in order, later ones
  on top; a share of them (``near``) is placed next to an object already drawn so that overlaps are common.
  An object placement that would leave an earlier object more than ``max_occlusion`` hidden (70 % by
  default) is redrawn, so every object in the picture is annotated and at least 30 % of it is visible.
* **Boxes.** As in COCO, a box is the *full* shape's tight box even where the shape is partly hidden: the
  exact bounds of its geometry (vertices, or centre ± radius), in pixel-edge coordinates (``[x, y, w, h]``
  with ``x = 0`` the left edge of the first column), rounded to 1/100 px. Shapes lie wholly inside the
  image. ``area`` is the visible area in pixels (what COCO's segmentation area measures; it decides small,
  medium and large in COCO evaluation) and ``visible`` the visible share of the shape.
* **Pictures.** Backgrounds are a random colour with low- and mid-frequency colour texture and a few
  low-contrast lines; shapes are anti-aliased (rendered at 4× and averaged), each in a colour far from the
  background under it; Gaussian pixel noise covers everything.
* **Determinism.** Image ``i`` is rendered from its own ``numpy.random.Generator`` seeded from ``(seed, i)``;
  the same seed and parameters give byte-identical files with any number of ``workers``.
* **Atomic output.** Files are written into a hidden temporary folder next to ``OUT``, ``meta.json`` last,
  and the folder is renamed to ``OUT`` only when complete.
"""

from __future__ import annotations

import dataclasses
import json
import math
import os
import shutil
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np
from PIL import Image, ImageDraw

from ..generated_sets import (
    SetKind,
    check_seed,
    check_target,
    is_integer,
    make_staging,
    publish,
    render_jobs,
    split_counts,
    split_fractions,
)

__all__ = [
    "DEFAULT_CLASSES",
    "SHAPES",
    "SPLITS",
    "ShapeSettings",
    "ShapeObject",
    "make_shapes",
    "render_image",
]

GENERATOR = "modforge.data.detection.shapes"
VERSION = "1.0"
SPLITS: tuple[str, ...] = ("train", "val", "test")
SHAPES: tuple[str, ...] = ("circle", "square", "triangle", "star", "cross", "hexagon")
"""The shapes the generator can draw; ``classes`` picks some of them, in category-id order."""
DEFAULT_CLASSES: tuple[str, ...] = ("circle", "square", "triangle", "star", "cross")
SET_KIND = SetKind("shapes set", GENERATOR, ("images", "images/*", "images/*/*.png", "annotations",
                                             "annotations/instances_*.json", "meta.json"))
"""What a shapes set holds: ``--overwrite`` replaces only a folder holding just this, with this generator."""
SET_ENTRIES = SET_KIND.entries
SUPERSAMPLE = 4
_MIN_CONTRAST = 90.0  # Euclidean RGB distance between a shape and the background under it
_PLACEMENT_TRIES = 40
_COLOUR_TRIES = 24


@dataclasses.dataclass(frozen=True)
class ShapeSettings:
    """What a picture may hold (the parameters of :func:`make_shapes` that shape each image)."""

    size: int = 128
    classes: tuple[str, ...] = DEFAULT_CLASSES
    min_objects: int = 1
    max_objects: int = 6
    min_object: float = 8.0
    max_object: float = 64.0
    max_occlusion: float = 0.7
    near: float = 0.4
    noise: float = 8.0
    texture: float = 48.0
    clutter: int = 3


@dataclasses.dataclass
class ShapeObject:
    """One drawn shape.

    Attributes:
        label: index into ``classes`` (the COCO category id is ``label + 1``).
        box: ``(x1, y1, x2, y2)`` — the exact bounds of the whole shape, in pixels.
        coverage: ``[size, size]`` anti-aliased coverage of the whole shape, 0…1.
        visible: ``[size, size]`` coverage of what is not hidden by later shapes.
    """

    label: int
    box: tuple[float, float, float, float]
    coverage: np.ndarray
    visible: np.ndarray

    @property
    def visible_share(self) -> float:
        """The visible share of the shape (1: nothing in front of it)."""
        total = float(self.coverage.sum())
        return float(self.visible.sum()) / total if total > 0 else 0.0


def _outline(shape: str, radius: float, angle: float) -> np.ndarray | None:
    """The polygon of ``shape`` around the origin (``[K, 2]``), circumradius ``radius``; None for a circle."""
    if shape == "circle":
        return None
    if shape == "square":
        t = angle + np.arange(4) * (np.pi / 2)
        return radius * np.stack([np.cos(t), np.sin(t)], axis=1)
    if shape == "triangle":
        t = angle + np.arange(3) * (2 * np.pi / 3)
        return radius * np.stack([np.cos(t), np.sin(t)], axis=1)
    if shape == "hexagon":
        t = angle + np.arange(6) * (np.pi / 3)
        return radius * np.stack([np.cos(t), np.sin(t)], axis=1)
    if shape == "star":
        t = angle + np.arange(10) * (np.pi / 5)
        r = np.where(np.arange(10) % 2 == 0, radius, radius * 0.45)
        return np.stack([r * np.cos(t), r * np.sin(t)], axis=1)
    if shape == "cross":  # a plus sign with arms a third of its span wide, its corners on the circle
        a = 1.0 / 6.0
        b = math.sqrt(0.25 - a * a)  # half-span so that the arm ends' corners lie on the circumscribed circle
        pts = np.array([(-a, -b), (a, -b), (a, -a), (b, -a), (b, a), (a, a), (a, b), (-a, b), (-a, a), (-b, a),
                        (-b, -a), (-a, -a)]) * (2 * radius)  # fmt: skip
        c, s = math.cos(angle), math.sin(angle)
        return pts @ np.array([[c, s], [-s, c]])
    raise ValueError(f"unknown shape {shape!r}; one of {', '.join(SHAPES)}")


def _extent(shape: str, radius: float, angle: float) -> tuple[np.ndarray | None, float, float, float, float]:
    """(polygon, left, top, right, bottom) of the shape around the origin."""
    poly = _outline(shape, radius, angle)
    if poly is None:
        return None, -radius, -radius, radius, radius
    return poly, float(poly[:, 0].min()), float(poly[:, 1].min()), float(poly[:, 0].max()), float(poly[:, 1].max())


def _rasterise(size: int, poly: np.ndarray | None, cx: float, cy: float, radius: float,
               box: tuple[float, float, float, float]) -> np.ndarray:  # fmt: skip
    """Anti-aliased coverage (0…1, ``[size, size]``) of a shape: drawn at 4× on a patch around its box and
    averaged down."""
    f = SUPERSAMPLE
    x0, y0 = max(0, int(math.floor(box[0])) - 1), max(0, int(math.floor(box[1])) - 1)
    x1, y1 = min(size, int(math.ceil(box[2])) + 1), min(size, int(math.ceil(box[3])) + 1)
    patch = Image.new("L", ((x1 - x0) * f, (y1 - y0) * f), 0)
    draw = ImageDraw.Draw(patch)
    # a continuous coordinate X lands on supersampled pixel centres at X * f - 0.5 (PIL's pixel i sits at i)
    if poly is None:
        ex, ey = (cx - x0) * f - 0.5, (cy - y0) * f - 0.5
        draw.ellipse([ex - radius * f, ey - radius * f, ex + radius * f, ey + radius * f], fill=255)
    else:
        pts = [((cx + px - x0) * f - 0.5, (cy + py - y0) * f - 0.5) for px, py in poly]
        draw.polygon(pts, fill=255)
    small = np.asarray(patch.reduce(f), dtype=np.float32) / 255.0
    coverage = np.zeros((size, size), dtype=np.float32)
    coverage[y0:y1, x0:x1] = small
    return coverage


def _background(rng: np.random.Generator, s: ShapeSettings) -> np.ndarray:
    """A textured ``[size, size, 3]`` float background (0…255)."""
    size = s.size
    base = rng.uniform(40.0, 215.0, size=3)
    image = np.broadcast_to(base, (size, size, 3)).astype(np.float32)
    for cells, amplitude in ((4, s.texture), (12, s.texture / 3.0)):
        if amplitude <= 0:
            continue
        grid = rng.uniform(-amplitude, amplitude, size=(cells, cells, 3))
        channels = [
            np.asarray(Image.fromarray(grid[:, :, c].astype(np.float32), mode="F").resize((size, size), Image.BICUBIC))
            for c in range(3)
        ]
        image = image + np.stack(channels, axis=2)
    if s.clutter > 0:  # low-contrast lines: edges that are not objects
        layer = Image.new("L", (size * SUPERSAMPLE, size * SUPERSAMPLE), 0)
        draw = ImageDraw.Draw(layer)
        lines = int(rng.integers(0, s.clutter + 1))
        shades = []
        for _ in range(lines):
            pts = rng.uniform(0, size * SUPERSAMPLE, size=4)
            width = int(rng.integers(1, 3)) * SUPERSAMPLE
            draw.line(list(map(float, pts)), fill=255, width=width)
            shades.append(rng.uniform(-40.0, 40.0, size=3))
        if lines:
            mask = np.asarray(layer.reduce(SUPERSAMPLE), dtype=np.float32)[:, :, None] / 255.0
            image = image + mask * np.mean(shades, axis=0).astype(np.float32)
    return np.clip(image, 0.0, 255.0)


def _colour(rng: np.random.Generator, under: np.ndarray) -> np.ndarray:
    """A fill colour far (in RGB) from ``under``, the mean background colour beneath the shape."""
    best, best_distance = None, -1.0
    for _ in range(_COLOUR_TRIES):
        colour = rng.uniform(0.0, 255.0, size=3)
        distance = float(np.linalg.norm(colour - under))
        if distance >= _MIN_CONTRAST:
            return colour
        if distance > best_distance:
            best, best_distance = colour, distance
    return best  # type: ignore[return-value]


def _place(rng: np.random.Generator, s: ShapeSettings, objects: list[ShapeObject]) -> ShapeObject | None:
    """A new shape that leaves every earlier one at least ``1 - max_occlusion`` visible, or None."""
    size = s.size
    lo, hi = math.log(s.min_object), math.log(s.max_object)
    for _ in range(_PLACEMENT_TRIES):
        label = int(rng.integers(len(s.classes)))
        radius = math.exp(rng.uniform(lo, hi)) / 2.0
        angle = float(rng.uniform(0.0, 2.0 * math.pi))
        poly, left, top, right, bottom = _extent(s.classes[label], radius, angle)
        min_cx, max_cx = -left, size - right
        min_cy, max_cy = -top, size - bottom
        if min_cx > max_cx or min_cy > max_cy:
            continue  # does not fit at this angle
        if objects and rng.random() < s.near:  # next to an earlier shape: crowding and overlap
            other = objects[int(rng.integers(len(objects)))]
            ox, oy = (other.box[0] + other.box[2]) / 2, (other.box[1] + other.box[3]) / 2
            reach = (other.box[2] - other.box[0] + right - left) / 2
            cx = float(np.clip(ox + rng.uniform(-reach, reach), min_cx, max_cx))
            cy = float(np.clip(oy + rng.uniform(-reach, reach), min_cy, max_cy))
        else:
            cx, cy = float(rng.uniform(min_cx, max_cx)), float(rng.uniform(min_cy, max_cy))
        box = (cx + left, cy + top, cx + right, cy + bottom)
        coverage = _rasterise(size, poly, cx, cy, radius, box)
        if coverage.sum() <= 0:
            continue
        hidden = 1.0 - coverage
        if any(float((o.visible * hidden).sum()) < (1.0 - s.max_occlusion) * float(o.coverage.sum()) for o in objects):
            continue
        for o in objects:
            o.visible = o.visible * hidden
        return ShapeObject(label, box, coverage, coverage.copy())
    return None


def _stream(seed: int, index: int) -> np.random.Generator:
    return np.random.default_rng(np.random.SeedSequence(int(seed), spawn_key=(int(index),)))


def render_image(
    seed: int, index: int, settings: ShapeSettings = ShapeSettings()
) -> tuple[np.ndarray, list[ShapeObject]]:
    """Image ``index`` of the set with ``seed``: ``uint8 [size, size, 3]`` and its shapes, in drawing order.

    Used by :func:`make_shapes` for every file, and by tests that need the shapes' coverage."""
    rng = _stream(seed, index)
    s = settings
    image = _background(rng, s)
    objects: list[ShapeObject] = []
    for _ in range(int(rng.integers(s.min_objects, s.max_objects + 1))):
        obj = _place(rng, s, objects)
        if obj is None:
            continue
        cover = obj.coverage[:, :, None]
        weight = float(obj.coverage.sum())
        under = (image * cover).sum(axis=(0, 1)) / weight
        image = image * (1.0 - cover) + _colour(rng, under).astype(np.float32) * cover
        objects.append(obj)
    if s.noise > 0:
        image = image + rng.standard_normal(image.shape, dtype=np.float32) * np.float32(s.noise)
    return np.clip(np.round(image), 0, 255).astype(np.uint8), objects


def _render_job(job: tuple[int, int, ShapeSettings, str]) -> tuple[int, list[dict[str, Any]]]:
    """Render image ``index``, write its PNG and return its annotations (without ids)."""
    index, seed, settings, path = job
    pixels, objects = render_image(seed, index, settings)
    Image.fromarray(pixels, mode="RGB").save(path, format="PNG", compress_level=1)
    anns = []
    for obj in objects:
        x1, y1, x2, y2 = (round(v, 2) for v in obj.box)
        anns.append({
            "category_id": obj.label + 1, "bbox": [x1, y1, round(x2 - x1, 2), round(y2 - y1, 2)],
            "area": round(float(obj.visible.sum()), 2), "iscrowd": 0, "visible": round(obj.visible_share, 4),
        })  # fmt: skip
    return index, anns


def _validate(
    images: int, seed: int, split: Sequence[float], settings: ShapeSettings, workers: int
) -> tuple[float, ...]:
    s = settings
    check_seed(seed)
    if not is_integer(images) or images < 3:
        raise ValueError(f"images must be an integer >= 3 (one per split at least), got {images!r}")
    if not is_integer(s.size) or not 32 <= s.size <= 4096:
        raise ValueError(f"size must be an integer in 32..4096 pixels, got {s.size!r}")
    unknown = [c for c in s.classes if c not in SHAPES]
    if not s.classes or unknown or len(set(s.classes)) != len(s.classes):
        raise ValueError(f"classes must be distinct names among {', '.join(SHAPES)}, got {list(s.classes)!r}")
    if not is_integer(s.min_objects) or not is_integer(s.max_objects) or not 0 <= s.min_objects <= s.max_objects:
        raise ValueError(f"need 0 <= min_objects <= max_objects (integers), got {s.min_objects!r}, {s.max_objects!r}")
    if s.max_objects > 100:
        raise ValueError(f"max_objects must be at most 100, got {s.max_objects}")
    if not 4.0 <= float(s.min_object) <= float(s.max_object) <= s.size:
        raise ValueError(f"need 4 <= min_object <= max_object <= size ({s.size}) pixels, "
                         f"got {s.min_object!r}, {s.max_object!r}")  # fmt: skip
    if not 0.0 <= float(s.max_occlusion) < 1.0:
        raise ValueError(f"max_occlusion must be in [0, 1), got {s.max_occlusion!r}")
    if not 0.0 <= float(s.near) <= 1.0:
        raise ValueError(f"near must be in [0, 1], got {s.near!r}")
    if float(s.noise) < 0 or float(s.texture) < 0 or not is_integer(s.clutter) or s.clutter < 0:
        raise ValueError(
            f"noise, texture and clutter must not be negative, got {s.noise!r}, {s.texture!r}, {s.clutter!r}"
        )
    fractions = split_fractions(split, SPLITS)
    if min(split_counts(int(images), fractions)) < 1:
        raise ValueError(f"images={images} leaves a split empty with split={list(fractions)}; use more images")
    if not is_integer(workers) or workers < 1:
        raise ValueError(f"workers must be an integer >= 1, got {workers!r}")
    return fractions


def _instances(split: str, ids: list[int], anns: dict[int, list[dict[str, Any]]], first_ann: int,
               settings: ShapeSettings, seed: int) -> dict[str, Any]:  # fmt: skip
    """The COCO instances document of one split (annotation ids from ``first_ann`` on)."""
    images, annotations = [], []
    for image_id in ids:
        images.append({"id": image_id, "file_name": f"{image_id:06d}.png", "width": settings.size,
                       "height": settings.size})  # fmt: skip
        for ann in anns[image_id]:
            annotations.append({"id": first_ann + len(annotations), "image_id": image_id, **ann})
    categories = [{"id": k + 1, "name": name, "supercategory": "shape"} for k, name in enumerate(settings.classes)]
    info = {"description": f"modforge synthetic shapes, {split} split", "version": VERSION, "generator": GENERATOR,
            "seed": int(seed)}  # fmt: skip
    return {"info": info, "licenses": [], "images": images, "annotations": annotations, "categories": categories}


def make_shapes(
    out: str | os.PathLike[str],
    *,
    images: int = 2000,
    seed: int = 0,
    size: int = 128,
    classes: Sequence[str] = DEFAULT_CLASSES,
    min_objects: int = 1,
    max_objects: int = 6,
    min_object: float = 8.0,
    max_object: float = 64.0,
    max_occlusion: float = 0.7,
    split: Sequence[float] = (0.75, 0.125, 0.125),
    near: float = 0.4,
    noise: float = 8.0,
    texture: float = 48.0,
    clutter: int = 3,
    workers: int = 1,
    overwrite: bool = False,
) -> dict[str, Any]:
    """Write a synthetic COCO-format detection set of filled shapes to ``out`` and return its summary.

    Args:
        out: output folder; must be new or empty unless ``overwrite`` (then it must hold only a shapes set).
        images: images over train, val and test.
        seed: seed of everything; the same seed and parameters give byte-identical files.
        size: image width and height in pixels.
        classes: the shapes to draw (see :data:`SHAPES`), category ids 1… in this order.
        min_objects: fewest shapes an image is asked to hold (0 allows images without boxes).
        max_objects: most shapes per image (a placement that cannot satisfy ``max_occlusion`` in 40
            tries is dropped, so crowded images may hold fewer).
        min_object: smallest shape size (diameter of the circumscribed circle), pixels.
        max_object: largest shape size, pixels.
        max_occlusion: largest hidden share of any shape (later shapes cover earlier ones).
        split: fractions of the images in train, val and test.
        near: probability that a shape is placed next to an earlier one (crowding).
        noise: standard deviation of the Gaussian pixel noise (0…255 scale).
        texture: amplitude of the background's colour texture (0…255 scale).
        clutter: most low-contrast lines drawn on a background.
        workers: processes rendering images (the output does not depend on it).
        overwrite: replace an existing shapes set in ``out``.

    Returns:
        The contents of meta.json plus ``out_dir`` and ``seconds`` (wall-clock generation time).
    """
    begin = time.perf_counter()
    settings = ShapeSettings(
        size=size, classes=tuple(classes), min_objects=min_objects, max_objects=max_objects,
        min_object=float(min_object), max_object=float(max_object), max_occlusion=float(max_occlusion),
        near=float(near), noise=float(noise), texture=float(texture), clutter=clutter,
    )  # fmt: skip
    fractions = _validate(images, seed, split, settings, workers)
    target = Path(out).expanduser().resolve()
    if not target.name:
        raise ValueError(f"output directory must be a named folder, got {str(out)!r}")
    check_target(target, overwrite, SET_KIND)
    counts = split_counts(int(images), fractions)
    ids: dict[str, list[int]] = {}
    start = 1
    for name, n in zip(SPLITS, counts, strict=True):
        ids[name] = list(range(start, start + n))
        start += n

    staging = make_staging(target)
    try:
        (staging / "annotations").mkdir()
        jobs = []
        for name in SPLITS:
            (staging / "images" / name).mkdir(parents=True)
            for image_id in ids[name]:
                path = str(staging / "images" / name / f"{image_id:06d}.png")
                jobs.append((image_id - 1, int(seed), settings, path))
        anns: dict[int, list[dict[str, Any]]] = {index + 1: a for index, a in render_jobs(_render_job, jobs, workers)}
        per_split: dict[str, dict[str, Any]] = {}
        first_ann = 1
        for name in SPLITS:
            doc = _instances(name, ids[name], anns, first_ann, settings, int(seed))
            first_ann += len(doc["annotations"])
            (staging / "annotations" / f"instances_{name}.json").write_text(json.dumps(doc))
            per_class = {c: 0 for c in settings.classes}
            for ann in doc["annotations"]:
                per_class[settings.classes[ann["category_id"] - 1]] += 1
            per_split[name] = {
                "images": len(doc["images"]), "objects": len(doc["annotations"]),
                "images_without_objects": sum(1 for i in ids[name] if not anns[i]), "per_class": per_class,
            }  # fmt: skip
        meta = _metadata(settings, int(seed), int(images), fractions, per_split)
        (staging / "meta.json").write_text(json.dumps(meta, indent=2) + "\n")
        publish(staging, target, SET_KIND)
    except BaseException:
        shutil.rmtree(staging, ignore_errors=True)
        raise
    return {**meta, "out_dir": str(target), "seconds": time.perf_counter() - begin}


def _metadata(settings: ShapeSettings, seed: int, images: int, fractions: Sequence[float],
              counts: dict[str, dict[str, Any]]) -> dict[str, Any]:  # fmt: skip
    s = settings
    return {
        "generator": GENERATOR,
        "version": VERSION,
        "seed": seed,
        "images": images,
        "image_size": [s.size, s.size],
        "classes": list(s.classes),
        "categories": {name: k + 1 for k, name in enumerate(s.classes)},
        "split_fractions": dict(zip(SPLITS, (float(f) for f in fractions), strict=True)),
        "counts": counts,
        "parameters": {
            "min_objects": s.min_objects,
            "max_objects": s.max_objects,
            "min_object": s.min_object,
            "max_object": s.max_object,
            "max_occlusion": s.max_occlusion,
            "near": s.near,
            "noise": s.noise,
            "texture": s.texture,
            "clutter": s.clutter,
        },  # fmt: skip
        "layout": {
            "images": "images/<split>/<image id, 6 digits>.png",
            "annotations": "annotations/instances_<split>.json (COCO instances format)",
            "splits": list(SPLITS),
        },
        "conventions": {
            "bbox": "[x, y, w, h] in pixels, pixel-edge coordinates: the exact bounds of the whole shape, "
            "also where later shapes hide part of it (as COCO boxes)",
            "area": "visible area in pixels (anti-aliased coverage not hidden by later shapes)",
            "visible": "visible share of the shape",
            "occlusion": f"no shape is hidden by more than {s.max_occlusion:.0%}; placements that would do so are redrawn",
            "object_size": "diameter of the circumscribed circle, log-uniform in [min_object, max_object]",
        },
    }
