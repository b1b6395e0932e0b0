"""What training pictures looked like — the *input contract* an artifact records — and how a
picture handed to ``modforge predict`` differs from it. numpy only: an ONNX artifact predicts
without torch.

Values are compared in *picture space*: what the model is fed with the picture normalisation
(``mean``/``std``) and ``scale`` undone, so 0 is black and 1 white *as the model sees them*
(the digits: strokes near 1 on a ground near 0, whatever the ink of the picture files).

Polarity — light strokes on a dark ground or the reverse — is read from each picture's border
(its outer ring, where a centred object seldom is) against its centre (the middle half): the
training split has a polarity when nine in ten of its sampled pictures agree on the sign of
``centre − border``. Natural photographs agree on nothing and get no polarity, so no polarity
warning; the digits agree in every picture sampled.
"""

from __future__ import annotations

import dataclasses
from typing import Any

import numpy as np

__all__ = ["CONTRACT_VERSION", "Difference", "PictureFile", "describe_pictures", "differences", "inspect_picture",
           "picture_space"]  # fmt: skip

CONTRACT_VERSION = 1
SIZE_FACTOR = 4.0
"""A picture resized by more than this factor (either way, either side) is named in a warning: a 32×32
digit for an 8×8 model is ordinary, a 48×64 photograph is not."""
ASPECT_FACTOR = 1.25
"""A picture whose width:height differs this much from the training pictures' is stretched by the resize."""
POLARITY_SHARE = 0.9
"""The share of sampled training pictures that must agree on a polarity for the split to have one."""
POLARITY_MARGIN = 0.05
"""``|centre − border|`` (as a share of the training value range) below which a picture has no polarity."""
COLOUR_SPREAD = 32
"""A pixel whose channels differ by more than this (of 255) is coloured; one in a hundred makes a colour picture."""


def picture_space(batch: np.ndarray, image: dict[str, Any]) -> np.ndarray:
    """Model inputs ``[N, C, H, W]`` (or one ``[C, H, W]``) back in picture space: the artifact's
    per-channel ``mean``/``std`` and its ``scale`` undone (see the module doc)."""
    values = np.asarray(batch, dtype=np.float64)
    if image.get("mean") is not None and image.get("std") is not None:
        shape = (-1, 1, 1)
        values = values * np.asarray(image["std"], dtype=np.float64).reshape(shape) + np.asarray(
            image["mean"], dtype=np.float64
        ).reshape(shape)
    scale = float(image.get("scale") or 1.0)
    return values / scale


def _border_and_centre(grey: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Each picture's mean over its outer ring (an eighth of the shorter side, at least one pixel)
    and over its middle half; ``grey`` is ``[N, H, W]``."""
    height, width = grey.shape[-2:]
    ring = max(1, round(min(height, width) / 8))
    border = np.ones((height, width), dtype=bool)
    if height > 2 * ring and width > 2 * ring:
        border[ring : height - ring, ring : width - ring] = False
    centre = np.zeros((height, width), dtype=bool)
    centre[height // 4 : height - height // 4 or height, width // 4 : width - width // 4 or width] = True
    return grey[:, border].mean(axis=1), grey[:, centre].mean(axis=1)


def describe_pictures(values: np.ndarray, source_size: tuple[int, int] | None = None) -> dict[str, Any]:
    """The contract of sampled training pictures ``values`` ``[N, C, H, W]`` in picture space.

    ``source_size`` is the (typical) ``[height, width]`` of the training pictures before the
    evaluation transforms (None: the model's input size). The record: ``channels``, ``size``,
    ``input_size``, the value ``range`` (min, max) and its 1st/99th ``percentiles``, the ``mean``,
    the median per-picture ``std``, the 5/50/95th percentiles of the ``border`` and ``centre``
    means, the ``polarity`` (``light-on-dark``, ``dark-on-light`` or ``mixed``) and the share of
    pictures that showed it."""
    values = np.asarray(values, dtype=np.float64)
    if values.ndim != 4 or len(values) == 0:
        raise ValueError(f"expected sampled pictures [N, C, H, W], got shape {list(values.shape)}")
    count, channels, height, width = values.shape
    low, high = (float(v) for v in np.percentile(values, [1, 99]))
    span = max(high - low, 1e-6)
    border, centre = _border_and_centre(values.mean(axis=1))
    contrast = (centre - border) / span
    light, dark = float((contrast > POLARITY_MARGIN).mean()), float((contrast < -POLARITY_MARGIN).mean())
    polarity = "light-on-dark" if light >= POLARITY_SHARE else "dark-on-light" if dark >= POLARITY_SHARE else "mixed"

    def spread(v: np.ndarray) -> list[float]:
        return [round(float(p), 4) for p in np.percentile(v, [5, 50, 95])]

    return {
        "version": CONTRACT_VERSION,
        "sampled": int(count),
        "channels": int(channels),
        "size": [int(s) for s in (source_size or (height, width))],
        "input_size": [int(height), int(width)],
        "range": [round(float(values.min()), 4), round(float(values.max()), 4)],
        "percentiles": [round(low, 4), round(high, 4)],
        "mean": round(float(values.mean()), 4),
        "std": round(float(np.median(values.reshape(count, -1).std(axis=1))), 4),
        "border": spread(border),
        "centre": spread(centre),
        "polarity": polarity,
        "polarity_share": round(max(light, dark), 4),
    }


@dataclasses.dataclass(frozen=True)
class PictureFile:
    """A picture file as it is before it is converted for the model."""

    width: int
    height: int
    colour: bool
    """RGB whose channels differ (not grey stored as RGB)."""
    transparent: bool
    """Some pixel is (partly) transparent."""
    constant: int | None
    """The one grey level of a picture whose pixels are all alike (None: not constant)."""


def inspect_picture(picture: Any) -> PictureFile:
    """What :class:`PictureFile` says about an open Pillow picture (decoded here)."""
    width, height = picture.size
    transparent = False
    if picture.mode in ("RGBA", "LA", "PA") or (picture.mode == "P" and "transparency" in picture.info):
        alpha = np.asarray(picture.convert("RGBA").getchannel("A"))
        transparent = bool(alpha.min() < 255)
    rgb = np.asarray(picture.convert("RGB"), dtype=np.int16)
    spread = rgb.max(axis=-1) - rgb.min(axis=-1)
    colour = bool((spread > COLOUR_SPREAD).mean() >= 0.01)
    constant = int(rgb[0, 0].mean()) if bool((rgb == rgb[:1, :1]).all()) else None
    return PictureFile(int(width), int(height), colour, transparent, constant)


@dataclasses.dataclass(frozen=True)
class Difference:
    """One way a picture differs from the training pictures: its ``kind`` (``polarity``,
    ``channels``, ``transparency``, ``size``, ``constant``) and the sentence a warning shows."""

    kind: str
    message: str


def _ratio(width: float, height: float) -> str:
    from fractions import Fraction

    fraction = Fraction(int(width), int(height)).limit_denominator(16)
    return f"{fraction.numerator}:{fraction.denominator}"


def differences(
    name: str, found: PictureFile, values: np.ndarray, image: dict[str, Any], *, inverted: bool, flipped: bool = False
) -> list[Difference]:
    """How the picture file ``name`` (``found``; ``values`` ``[C, H, W]``: the model's input made
    of it, in picture space) differs from the training pictures the artifact's ``image`` entry
    (and its ``contract``, when recorded) describes. ``inverted``: its grey levels were turned over
    for the model; ``flipped``: because ``--invert`` asked for the opposite of the artifact's way.
    Each difference says what was done and what fixes it."""
    out: list[Difference] = []
    contract = image.get("contract") if isinstance(image.get("contract"), dict) else {}
    channels = int(contract.get("channels") or image.get("channels") or 1)
    if found.constant is not None:
        out.append(Difference("constant", (
            f"{name}: every pixel reads as the same grey level ({found.constant} of 255): there is nothing in it "
            "for the model to recognise, and its answer means nothing — check the file (an empty canvas, a failed "
            "save, values outside 0..255?)"
        )))  # fmt: skip
    if found.colour and channels == 1:
        out.append(Difference("channels", (
            f"{name}: a colour picture, but this model was trained on grey (1-channel) pictures: it was converted "
            "to grey levels (L = 0.299 R + 0.587 G + 0.114 B); if colour tells the classes apart the model "
            "cannot see it — convert the picture to grey yourself to choose how"
        )))  # fmt: skip
    elif not found.colour and channels == 3 and found.constant is None:
        out.append(Difference("channels", (
            f"{name}: a grey picture, but this model was trained on colour (3-channel) pictures: its grey levels "
            "were copied into R, G and B; expect less reliable answers than on colour pictures like its training data"
        )))  # fmt: skip
    if found.transparent:
        out.append(Difference("transparency", (
            f"{name}: has transparent pixels; the transparency was dropped, so they show their stored colour "
            "(often black) — flatten the picture onto its background (save it without an alpha channel) first"
        )))  # fmt: skip
    size = _size_difference(name, found, image, contract) if found.constant is None else None
    if size is not None:
        out.append(size)
    if found.constant is None and contract.get("polarity") in ("light-on-dark", "dark-on-light"):
        polarity = _polarity_difference(name, values, contract, inverted, flipped)
        if polarity is not None:
            out.append(polarity)
    return out


def _size_difference(
    name: str, found: PictureFile, image: dict[str, Any], contract: dict[str, Any]
) -> Difference | None:
    """A resize by more than :data:`SIZE_FACTOR`, or a stretch to the training pictures' shape."""
    trained_h, trained_w = (int(v) for v in (contract.get("size") or (image["height"], image["width"])))
    model_h, model_w = int(image["height"]), int(image["width"])
    steps = bool(image.get("steps"))
    if steps:  # resized on the shorter side, then cropped: the shape is kept, only the scale matters
        factor = min(found.width, found.height) / max(min(trained_w, trained_h), 1)
        factors = [factor, 1 / factor]
        stretched = False
    else:
        factors = [found.width / trained_w, trained_w / found.width, found.height / trained_h, trained_h / found.height]
        ratio = (found.width / found.height) / (trained_w / trained_h)
        stretched = max(ratio, 1 / ratio) >= ASPECT_FACTOR
    factor = max(factors)
    if factor <= SIZE_FACTOR and not stretched:
        return None
    trained = f"{trained_w}×{trained_h}"
    what = f"{name}: {found.width}×{found.height} pixels"
    if factor > SIZE_FACTOR:
        way = "shrunk" if found.width * found.height > trained_w * trained_h else "enlarged"
        what += f", {way} about {factor:.3g}× to the model's {model_w}×{model_h}"
    if stretched:
        what += f", stretched from {_ratio(found.width, found.height)} to {_ratio(trained_w, trained_h)}"
    return Difference("size", (
        f"{what}, while the model was trained on {trained} pictures: details are lost or invented at this scale "
        f"— crop the picture to the object and resize it to about {trained} yourself (keeping its proportions)"
    ))  # fmt: skip


def _polarity_difference(
    name: str, values: np.ndarray, contract: dict[str, Any], inverted: bool, flipped: bool
) -> Difference | None:
    """The picture's polarity, as the model sees it, against the training pictures': opposite,
    beyond :data:`POLARITY_MARGIN`, with a ground outside what the training pictures' borders held."""
    low, high = (float(v) for v in contract.get("percentiles") or (0.0, 1.0))
    span = max(high - low, 1e-6)
    grey = np.asarray(values, dtype=np.float64).reshape(-1, *np.shape(values)[-2:]).mean(axis=0, keepdims=True)
    border, centre = (float(v[0]) for v in _border_and_centre(grey))
    contrast = (centre - border) / span
    borders = contract.get("border") or (low, 0.5 * (low + high), high)
    if contract["polarity"] == "light-on-dark":
        opposite = contrast < -POLARITY_MARGIN and border > float(borders[-1])
    else:
        opposite = contrast > POLARITY_MARGIN and border < float(borders[0])
    if not opposite:
        return None
    trained_light = contract["polarity"] == "light-on-dark"
    file_light = (not trained_light) != inverted  # what the file shows: the model's view, turned back if inverted
    drawn = "light strokes on a dark ground" if file_light else "dark strokes on a light ground"
    expected = "dark strokes on a light ground" if file_light else "light strokes on a dark ground"
    why = (f"it turns pictures over to the {contract['polarity'].replace('-', ' ')} values it was trained on"
           if inverted else "like its training pictures")  # fmt: skip
    fix = "leave out --invert" if flipped else "pass --invert"
    return Difference("polarity", (
        f"{name}: looks inverted — {drawn}, where this model takes {expected} ({why}); {fix} to read it the "
        f"other way round, or save it as {expected}"
    ))  # fmt: skip
