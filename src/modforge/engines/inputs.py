"""Files → model inputs for ``modforge predict``: ``.npy`` arrays, pictures and audio files,
checked against an artifact's metadata. numpy (Pillow for pictures, soundfile and scipy for
audio) only — no torch."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np

from .base import EngineError

__all__ = ["IMAGE_SUFFIXES", "InputError", "read_input"]

IMAGE_SUFFIXES = (".png", ".jpg", ".jpeg", ".bmp", ".gif", ".tif", ".tiff")
AUDIO_SUFFIXES = (".wav", ".flac", ".ogg", ".aiff", ".aif", ".au")
TIME_AXIS = {"waveform": 0, "channels": 1, "sequence": 0}  # in one sample's shape


class InputError(EngineError):
    """An input file that the model cannot take (wrong kind, shape or content)."""


def read_input(path: str | Path, metadata: dict[str, Any]) -> tuple[np.ndarray, list[str]]:
    """One file as a float32 batch for the artifact's model, and a name per sample.

    A ``.npy`` file holds one sample (the model's input shape) or a stack of them
    (``N × shape``), already in the model's input space; a picture is converted as the
    metadata's ``input.image`` says (grey levels, size, ink colour, scale).
    """
    path = Path(path)
    spec = metadata.get("input") or {}
    shape, layout = tuple(spec.get("shape") or ()), spec.get("layout")
    if not path.is_file():
        raise InputError(f"input not found: {path}")
    suffix = path.suffix.lower()
    if suffix == ".npy":
        batch = _array(path, shape, layout)
    elif suffix in IMAGE_SUFFIXES:
        batch = _picture(path, spec.get("image"), shape)
    elif suffix in AUDIO_SUFFIXES:
        batch = _audio(path, layout, shape, spec.get("normalisation") or {})
    else:
        raise InputError(f"{path}: unsupported input type '{suffix}' (expected .npy, a picture "
                         f"({', '.join(IMAGE_SUFFIXES)}) or audio ({', '.join(AUDIO_SUFFIXES)}))")
    if suffix in AUDIO_SUFFIXES:  # one file, one prediction (its windows are averaged)
        return batch, [path.name] * len(batch)
    names = [path.name] if len(batch) == 1 else [f"{path.name}[{i}]" for i in range(len(batch))]
    return batch, names


def _fits(sample_shape: tuple[int, ...], shape: tuple[int, ...], layout: str | None) -> bool:
    if len(sample_shape) != len(shape):
        return False
    free = TIME_AXIS.get(layout or "")
    return all(a == b or i == free for i, (a, b) in enumerate(zip(sample_shape, shape, strict=True)))


def _array(path: Path, shape: tuple[int, ...], layout: str | None) -> np.ndarray:
    try:
        array = np.load(path, allow_pickle=False)
    except (ValueError, OSError) as exc:
        raise InputError(f"{path}: not a readable .npy array ({exc})") from None
    if not np.issubdtype(array.dtype, np.number):
        raise InputError(f"{path}: holds {array.dtype} values, expected numbers")
    if _fits(array.shape, shape, layout):
        array = array[None]
    elif not _fits(array.shape[1:], shape, layout):
        raise InputError(
            f"{path}: array of shape {list(array.shape)}; this model takes one sample of shape {list(shape)} "
            f"or a stack N × {list(shape)}"
        )
    if len(array) == 0:
        raise InputError(f"{path}: holds no samples (shape {list(array.shape)})")
    if not np.isfinite(array).all():
        raise InputError(f"{path}: contains NaN or infinite values")
    return np.ascontiguousarray(array, dtype=np.float32)


def _audio(path: Path, layout: str | None, shape: tuple[int, ...], normalisation: dict[str, Any]) -> np.ndarray:
    """An audio file, mono at the model's sample rate, made into what ``modforge test`` fed
    the model: the first ``seconds`` (``fixed``), the whole file (``full``) or its windows
    (``windows``: several rows, one file — the predictor averages them)."""
    rate = normalisation.get("sample_rate")
    if layout != "waveform" or not rate:
        raise InputError(f"{path}: audio input, but this model takes {layout} inputs of shape {list(shape)}")
    from ..core.errors import UsageError
    from ..data.audio.cropping import fit_length, windows
    from ..data.audio.io import read_audio

    try:
        wave, _ = read_audio(path, int(rate))
    except UsageError as exc:
        raise InputError(str(exc)) from None
    mode, padding = normalisation.get("eval_mode", "full"), normalisation.get("padding", "repeat")
    samples = max(1, round(float(normalisation.get("seconds") or 0) * int(rate)))
    if mode == "fixed":
        return fit_length(wave, samples, padding=padding)[None]
    if mode == "windows":
        hop = max(1, round(float(normalisation.get("window_hop") or normalisation["seconds"]) * int(rate)))
        return windows(wave, samples, hop, padding=padding)
    return wave[None]


def _picture(path: Path, image: dict[str, Any] | None, shape: tuple[int, ...]) -> np.ndarray:
    if not image:
        raise InputError(f"{path}: a picture, but this model was not trained on pictures (it takes {list(shape)})")
    from PIL import Image, UnidentifiedImageError

    try:
        with Image.open(path) as picture:
            grey = picture.convert("L" if image.get("channels", 1) == 1 else "RGB")
            grey = grey.resize((int(image["width"]), int(image["height"])), Image.Resampling.LANCZOS)
            values = np.asarray(grey, dtype=np.float32) / 255.0
    except (UnidentifiedImageError, OSError) as exc:
        raise InputError(f"{path}: not a readable picture ({exc})") from None
    if image.get("ink", "light") == "dark":  # dark strokes on a light ground: strokes become high values
        values = 1.0 - values
    values = values * float(image.get("scale", 1.0))
    if values.ndim == 3:
        values = values.transpose(2, 0, 1)  # H×W×C → C×H×W
    if values.size != int(np.prod(shape)):
        raise InputError(f"{path}: the picture gives {values.size} values, the model takes {list(shape)}")
    return values.reshape(1, *shape)
