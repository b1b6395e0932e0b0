"""Files → model inputs for ``modforge predict``: ``.npy`` arrays, pictures and audio files,
checked against an artifact's metadata. numpy (Pillow for pictures, soundfile and scipy for
audio) only — no torch."""

from __future__ import annotations

import contextlib
import math
import os
import struct
import warnings
from collections.abc import Iterator
from pathlib import Path
from typing import Any, BinaryIO

import numpy as np

from ..core.errors import _one_line
from .base import EngineError

__all__ = ["IMAGE_SUFFIXES", "MAX_NPY_HEADER", "MAX_PICTURE_PIXELS", "InputError", "open_input_picture", "read_input"]

IMAGE_SUFFIXES = (".png", ".jpg", ".jpeg", ".bmp", ".gif", ".tif", ".tiff")
AUDIO_SUFFIXES = (".wav", ".flac", ".ogg", ".aiff", ".aif", ".au")
TIME_AXIS = {"waveform": 0, "channels": 1, "sequence": 0}  # in one sample's shape

# What Pillow may decode from a picture file: the formats the suffixes above name (JPEG
# includes camera MPO files) — never EPS (Ghostscript) or Pillow's other plug-ins.
PICTURE_FORMATS = ("PNG", "JPEG", "BMP", "GIF", "TIFF")
# Pictures larger than this are refused before any pixel is decoded (Pillow's own default
# limit; a lower ``Image.MAX_IMAGE_PIXELS`` set in the process is honoured too).
MAX_PICTURE_PIXELS = 89_478_485
# numpy's own limit on the text header of a .npy file (``np.load``'s ``max_header_size``).
MAX_NPY_HEADER = 10_000
NPY_MAGIC = b"\x93NUMPY"


class InputError(EngineError):
    """An input file that the model cannot take (wrong kind, shape or content)."""

    def __init__(self, message: str):
        super().__init__(_one_line(message))


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
    """A ``.npy`` file's array as a float32 batch. Its header is read and checked (kind of
    values, shape, size against the file's length) before any data is: a hostile or
    damaged file is refused without allocating what its header claims."""
    try:
        with open(path, "rb") as fp:
            dims, fortran, dtype = _npy_header(path, fp)
            _check_dtype(path, dtype)
            count, available = math.prod(dims), os.fstat(fp.fileno()).st_size - fp.tell()
            needed = count * dtype.itemsize
            if needed > available:
                raise InputError(
                    f"{path}: truncated or damaged .npy array: its header promises {dtype} values of shape "
                    f"{list(dims)} ({needed} bytes) but the file holds {max(available, 0)} bytes of data"
                )
            if _fits(dims, shape, layout):
                dims = (1, *dims)
            elif not _fits(dims[1:], shape, layout):
                raise InputError(
                    f"{path}: array of shape {list(dims)}; this model takes one sample of shape {list(shape)} "
                    f"or a stack N × {list(shape)}"
                )
            if dims[0] == 0:
                raise InputError(f"{path}: holds no samples (shape {list(dims)})")
            data = fp.read(needed)
    except OSError as exc:
        raise InputError(f"{path}: cannot read the file ({exc.strerror or exc})") from None
    if len(data) != needed:  # the file shrank while it was read
        raise InputError(f"{path}: truncated .npy array ({len(data)} of {needed} bytes of data)")
    array = np.frombuffer(data, dtype=dtype, count=count).reshape(dims, order="F" if fortran else "C")
    if dtype.kind == "f" and not np.isfinite(array).all():
        raise InputError(f"{path}: contains NaN or infinite values; the model takes finite numbers")
    with np.errstate(over="ignore", invalid="ignore"):  # overflow to inf is refused just below
        batch = np.ascontiguousarray(array, dtype=np.float32)
    if not np.isfinite(batch).all():
        raise InputError(f"{path}: holds values beyond float32's range (±3.4e38); the model takes float32 inputs")
    return batch


def _npy_header(path: Path, fp: BinaryIO) -> tuple[tuple[int, ...], bool, np.dtype]:
    """``(shape, fortran_order, dtype)`` from a ``.npy`` header, the file positioned at its data."""
    from numpy.lib import format as npy

    expected = "expected a .npy array written by numpy.save"
    start = fp.read(len(NPY_MAGIC) + 2)
    if not start:
        raise InputError(f"{path}: empty file (0 bytes); {expected}")
    if start.startswith(b"PK\x03\x04"):
        raise InputError(f"{path}: a .npz archive (a zip of arrays), not a .npy array; save one array per file "
                         "with numpy.save")
    if not start.startswith(NPY_MAGIC):
        what = "a pickle, which is never loaded" if start[:1] == b"\x80" else "not a .npy array"
        raise InputError(f"{path}: {what}; {expected}")
    if len(start) < len(NPY_MAGIC) + 2:
        raise InputError(f"{path}: truncated .npy header; {expected}")
    version = (start[-2], start[-1])
    if version not in ((1, 0), (2, 0), (3, 0)):
        raise InputError(f"{path}: unknown .npy format version {version[0]}.{version[1]}; {expected}")
    length_format = "<H" if version == (1, 0) else "<I"
    raw = fp.read(struct.calcsize(length_format))
    if len(raw) < struct.calcsize(length_format):
        raise InputError(f"{path}: truncated .npy header; {expected}")
    length = struct.unpack(length_format, raw)[0]
    if length > MAX_NPY_HEADER:  # checked before numpy reads (and allocates) it
        raise InputError(f"{path}: .npy header of {length} bytes, more than the {MAX_NPY_HEADER} numpy allows; "
                         f"{expected}")
    fp.seek(len(NPY_MAGIC) + 2)
    # Versions 2.0 and 3.0 differ only in the header's encoding (latin-1 / UTF-8), which for
    # a plain dtype is ASCII either way; UTF-8 names only appear in structured dtypes, refused.
    reader = npy.read_array_header_1_0 if version == (1, 0) else npy.read_array_header_2_0
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", UserWarning)  # "created on Python 2": harmless here
            dims, fortran, dtype = reader(fp, max_header_size=MAX_NPY_HEADER)
    except Exception as exc:  # noqa: BLE001 - numpy parsing a hostile (but short) header fails in many ways
        reason = str(exc).splitlines()[0] if str(exc).strip() else type(exc).__name__
        raise InputError(f"{path}: damaged .npy header ({reason[:200]}); {expected}") from None
    if any(d < 0 for d in dims):
        raise InputError(f"{path}: damaged .npy header (negative dimension in shape {list(dims)}); {expected}")
    return tuple(int(d) for d in dims), bool(fortran), dtype


def _check_dtype(path: Path, dtype: np.dtype) -> None:
    """Integers and real floats pass; everything else is named and refused."""
    if dtype.kind in "iuf" and dtype.names is None and dtype.subdtype is None:
        return
    if dtype.kind == "c":
        raise InputError(f"{path}: holds complex values ({dtype}); the model takes real numbers — save the part "
                         "you mean (array.real, array.imag or abs(array)) as integers or floats")
    what = {"b": "booleans", "O": "Python objects", "U": "text", "S": "bytes", "M": "dates", "m": "time spans",
            "V": "records (a structured or void dtype)"}.get(dtype.kind, "non-numeric values")
    raise InputError(f"{path}: holds {what} ({dtype}); the model takes integers or floats")


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


@contextlib.contextmanager
def open_input_picture(path: Path, takes: str = "") -> Iterator[Any]:
    """The picture at ``path`` for ``modforge predict``, open (header read, nothing decoded) inside the
    ``with`` block, through :func:`modforge.data.pictures.open_picture` — the shared guard: a regular file,
    PNG/JPEG/BMP/GIF/TIFF only (never EPS), refused before decoding above :data:`MAX_PICTURE_PIXELS` (or
    a lower ``Image.MAX_IMAGE_PIXELS`` set in this process). Every failure, in the block too (decoding,
    converting), is one :class:`InputError` naming the file; ``takes`` (``"28×28"``) ends a bomb's message
    with the size the model takes.

    Raises:
        InputError: a decompression bomb, not a picture of those formats, a damaged or truncated one, one
            of no pixels, or a file that cannot be opened.
    """
    from PIL import Image

    from ..data.pictures import (
        PictureBombError,
        PictureDamagedError,
        PictureError,
        PictureFormatError,
        failure_reason,
        open_picture,
    )

    limit = min(MAX_PICTURE_PIXELS, Image.MAX_IMAGE_PIXELS or MAX_PICTURE_PIXELS)
    try:
        with open_picture(path, max_pixels=limit, formats=PICTURE_FORMATS) as picture:
            width, height = picture.size
            if width * height == 0:
                raise InputError(f"{path}: a picture of {width}×{height} pixels has no pixels")
            yield picture
    except PictureBombError as exc:
        what = f"{exc.size[0]}×{exc.size[1]} = {exc.pixels} pixels" if exc.size else f"{exc.pixels} pixels"
        suffix = f" — this model takes {takes} pixels" if takes else ""
        raise InputError(f"{path}: picture of {what} refused as a possible decompression bomb (the limit is "
                         f"{exc.max_pixels} pixels); expected an ordinary picture{suffix}") from None  # fmt: skip
    except PictureFormatError:
        raise InputError(f"{path}: not a picture this command reads; expected a PNG, JPEG, BMP, GIF or TIFF "
                         "picture") from None  # fmt: skip
    except PictureDamagedError as exc:
        raise InputError(f"{path}: damaged or truncated picture ({exc.reason})") from None
    except PictureError as exc:  # the file itself: gone meanwhile, a FIFO, too large (the message names it)
        raise InputError(str(exc)) from None
    except (OSError, ValueError, EOFError, SyntaxError, struct.error) as exc:  # Pillow decoding in the block
        raise InputError(f"{path}: damaged or truncated picture ({failure_reason(exc)})") from None


def _picture(path: Path, image: dict[str, Any] | None, shape: tuple[int, ...]) -> np.ndarray:
    if not image:
        raise InputError(f"{path}: a picture, but this model was not trained on pictures (it takes {list(shape)})")
    from PIL import Image

    size = f"{int(image['width'])}×{int(image['height'])}"
    with open_input_picture(path, takes=size) as picture:
        grey = _evaluation_steps(picture.convert("L" if image.get("channels", 1) == 1 else "RGB"),
                                 image.get("steps") or [])  # fmt: skip
        if grey.size != (int(image["width"]), int(image["height"])):
            grey = grey.resize((int(image["width"]), int(image["height"])), Image.Resampling.LANCZOS)
        values = np.asarray(grey, dtype=np.float32) / 255.0
    if image.get("ink", "light") == "dark":  # dark strokes on a light ground: strokes become high values
        values = 1.0 - values
    values = values * float(image.get("scale", 1.0))
    if values.ndim == 3:
        values = values.transpose(2, 0, 1)  # H×W×C → C×H×W
    if image.get("mean") is not None:  # per-channel normalisation of the picture datasets
        mean = np.asarray(image["mean"], dtype=np.float32).reshape(-1, 1, 1)
        std = np.asarray(image["std"], dtype=np.float32).reshape(-1, 1, 1)
        values = (values.reshape(-1, *values.shape[-2:]) - mean) / std
    if values.size != int(np.prod(shape)):
        raise InputError(f"{path}: the picture gives {values.size} values, the model takes {list(shape)}")
    return values.reshape(1, *shape)


def _evaluation_steps(picture: Any, steps: list) -> Any:
    """The picture resized and cropped as the evaluation split's transforms did (recorded in the
    artifact's ``input.image.steps``): torchvision's rules — an int size matches the shorter side
    keeping the aspect ratio, a centre crop starts at ``round((side - size) / 2)`` — with Pillow's
    bilinear resampling, of which torchvision's antialiased kernel is a port (the tests find the
    same pixels)."""
    from PIL import Image

    for kind, size in steps:
        width, height = picture.size
        if kind == "resize":
            if len(size) == 1:
                short, long = (width, height) if width <= height else (height, width)
                new_short, new_long = int(size[0]), int(int(size[0]) * long / short)
                size = [new_long, new_short] if width <= height else [new_short, new_long]
            picture = picture.resize((int(size[1]), int(size[0])), Image.Resampling.BILINEAR)
        elif kind == "center_crop":
            top, left = int(round((height - size[0]) / 2.0)), int(round((width - size[1]) / 2.0))
            picture = picture.crop((left, top, left + int(size[1]), top + int(size[0])))
    return picture
