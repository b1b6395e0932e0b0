"""Opening picture files from data someone else made, within bounds: one guard shared by every reader.

A picture file is untrusted input. Three things go wrong with Pillow left at its defaults:

* a few hundred bytes of PNG can declare 19,000 × 19,000 pixels and take a gigabyte once decoded (a
  *decompression bomb*); Pillow only warns below twice its limit, and its limit is process-wide;
* a file named ``.jpg`` can be an EPS document, which Pillow hands to Ghostscript;
* the exceptions differ by plug-in (``OSError``, ``SyntaxError``, ``struct.error``…) and none names the file.

So a picture is opened here with Pillow's pixel limit set for that one call (:func:`pixel_limit`: scoped,
under a lock, its warning made an error, raised from ``Image.open`` before a pixel is decoded), only the
plug-ins of a short list of plain raster formats are tried, and every failure is one :class:`PictureError`
(a ``ValueError``; :class:`PictureBombError`, :class:`PictureFormatError` and :class:`PictureDamagedError` say
which, for callers that word their own message) whose message names the file. The file itself is opened
non-blocking and checked to be a regular file on the open descriptor (:func:`open_picture_file`): a FIFO
named ``cat.png`` is an error, not a run that hangs. This is the one picture guard: the image datasets,
COCO and ``modforge predict`` (:mod:`modforge.engines.inputs`) all open pictures through it.

:func:`open_picture` reads the header only (size and mode, for checks against an annotation file);
:func:`decode_picture` decodes to a ``uint8`` array exactly as torchvision's default ``pil_loader`` does
(``Image.open(f).convert("RGB")``), so models trained on torchvision's folders see the same pixels.
"""

from __future__ import annotations

import contextlib
import os
import struct
import threading
import warnings
from collections.abc import Iterator, Sequence
from typing import BinaryIO, Literal

import numpy as np
from PIL import Image, UnidentifiedImageError

from ..core.errors import UsageError
from ..core.safe_files import open_bounded_file

__all__ = [
    "IMAGE_FORMATS",
    "MAX_PICTURE_FILE_BYTES",
    "MAX_PICTURE_PIXELS",
    "PICTURE_FORMATS",
    "PIXEL_MARGIN",
    "PictureBombError",
    "PictureDamagedError",
    "PictureError",
    "PictureFormatError",
    "decode_picture",
    "failure_reason",
    "open_picture",
    "open_picture_file",
    "pixel_limit",
]

PIXEL_MARGIN = 1.25
"""Pillow's decompression-bomb limit while an image of a *known* size is opened: that size's pixels times this."""

IMAGE_FORMATS = ("PNG", "JPEG", "BMP", "GIF", "TIFF", "WEBP")
"""Picture formats decoded for detection data (never EPS, which runs Ghostscript, nor Pillow's other plug-ins)."""

PICTURE_FORMATS = (*IMAGE_FORMATS, "PPM")
"""Picture formats :func:`open_picture` and :func:`decode_picture` try by default: :data:`IMAGE_FORMATS` and
the netpbm ``.ppm``/``.pgm`` files, which torchvision's ``IMG_EXTENSIONS`` lists too."""

MAX_PICTURE_PIXELS = 2**28
"""Default largest picture (e.g. 16,384 × 16,384 pixels; 768 MiB decoded as RGB)."""

MAX_PICTURE_FILE_BYTES = 1 << 32
"""Largest picture file opened (4 GiB: above an uncompressed 16-bit RGBA TIFF of :data:`MAX_PICTURE_PIXELS`)."""

_PIL_LOCK = threading.Lock()


class PictureError(UsageError, ValueError):
    """A picture file that cannot be used: missing, not a picture of an allowed format, unreadable."""


class PictureBombError(PictureError):
    """A picture declaring more pixels than allowed (refused before decoding).

    Attributes:
        path: the file.
        pixels: the pixel count the file declares (a string of digits, or ``"more"`` when Pillow did not say).
        max_pixels: the limit it exceeded.
        size: ``(width, height)`` from the header, or ``None`` when Pillow refused the file before giving it
            (more than twice its limit).
    """

    def __init__(self, message: str, *, path: str | os.PathLike, pixels: str, max_pixels: int,
                 size: tuple[int, int] | None = None):  # fmt: skip
        super().__init__(message)
        self.path, self.pixels, self.max_pixels, self.size = path, pixels, max_pixels, size


class PictureFormatError(PictureError):
    """A file that is not a picture of the formats allowed (Pillow does not identify it: garbage, an empty
    file, an EPS document named ``.png``)."""


class PictureDamagedError(PictureError):
    """A picture whose header Pillow recognised but could not read (truncated, corrupt).

    Attributes:
        reason: what Pillow said, one line (:func:`failure_reason`).
    """

    def __init__(self, message: str, *, reason: str):
        super().__init__(message)
        self.reason = reason


def failure_reason(exc: BaseException) -> str:
    """What a Pillow failure says, for a one-line message: the first line of its text (its class name when
    it has none), at most 200 characters."""
    text = str(exc).strip()
    return (text.splitlines()[0] if text else type(exc).__name__)[:200]


@contextlib.contextmanager
def pixel_limit(pixels: int) -> Iterator[None]:
    """While open: Pillow's ``Image.MAX_IMAGE_PIXELS`` is ``pixels`` and its
    ``DecompressionBombWarning`` is an error (raised from ``Image.open``, before anything is decoded).

    The setting is scoped: the earlier value comes back on exit, and a lock keeps threads from
    seeing each other's limit. Keep only ``Image.open`` (and header reads) inside it."""
    with _PIL_LOCK, warnings.catch_warnings():
        warnings.simplefilter("error", Image.DecompressionBombWarning)
        saved = Image.MAX_IMAGE_PIXELS
        Image.MAX_IMAGE_PIXELS = max(1, int(pixels))
        try:
            yield
        finally:
            Image.MAX_IMAGE_PIXELS = saved


def open_picture_file(path: str | os.PathLike) -> BinaryIO:
    """``path`` opened to read once the open descriptor shows a regular file of at most
    :data:`MAX_PICTURE_FILE_BYTES` (:func:`~modforge.core.safe_files.open_bounded_file`): opened non-blocking,
    so a FIFO (or a device) named like a picture is refused at once instead of hanging the reader.

    Raises:
        PictureError: missing, unreadable, not a regular file (a FIFO, socket, device, folder), too large;
            naming the file.
    """
    return open_bounded_file(path, what="image file", max_bytes=MAX_PICTURE_FILE_BYTES, error=PictureError)


def open_picture(path: str | os.PathLike, *, max_pixels: int, formats: Sequence[str] = PICTURE_FORMATS) -> Image.Image:
    """``path`` opened by Pillow, header only (nothing decoded yet), refused when it declares more than
    ``max_pixels`` pixels or is not one of ``formats``.

    The caller closes the image (``with open_picture(...) as image:``).

    Raises:
        PictureBombError: more pixels than ``max_pixels`` (Pillow's warning range included).
        PictureFormatError: not a picture of ``formats``.
        PictureDamagedError: a picture Pillow recognised but cannot read.
        PictureError: the file is missing, not a regular file or too large; each message names the file.
    """
    file = os.fspath(path)
    handle = open_picture_file(file)
    try:
        image = _pillow_open(handle, file, max_pixels, formats)
    except BaseException:
        handle.close()
        raise
    image._exclusive_fp = True  # the image owns the file, as when Pillow opens a name: closed with the image
    return image


def _pillow_open(handle: BinaryIO, file: str, max_pixels: int, formats: Sequence[str]) -> Image.Image:
    """``Image.open`` of the open ``handle`` under :func:`pixel_limit`, each failure one :class:`PictureError`.

    Pillow refuses more than twice the limit itself (before its plug-in returns); between once and twice it
    only warns, and that band is refused here from the header's width and height (which the warning does not
    carry), so the error can say ``W×H``."""
    try:
        with pixel_limit(max_pixels), warnings.catch_warnings():
            warnings.simplefilter("ignore", Image.DecompressionBombWarning)  # checked just below, with the size
            image = Image.open(handle, formats=tuple(formats))
    except (Image.DecompressionBombError, Image.DecompressionBombWarning) as exc:
        pixels = next((w for w in str(exc).replace("(", " ").split() if w.isdigit()), "more")
        raise _bomb(file, pixels, max_pixels, None) from None
    except UnidentifiedImageError:
        raise PictureFormatError(f"image file {file} is not a readable image (expected one of "
                                 f"{', '.join(formats)})") from None  # fmt: skip
    except (OSError, ValueError, EOFError, SyntaxError, struct.error) as exc:
        reason = failure_reason(exc)
        raise PictureDamagedError(f"image file {file} is not a readable image ({reason})", reason=reason) from None
    width, height = image.size
    if width * height > max_pixels:
        raise _bomb(file, str(width * height), max_pixels, (width, height))
    return image


def _bomb(file: str, pixels: str, max_pixels: int, size: tuple[int, int] | None) -> PictureBombError:
    return PictureBombError(f"image file {file} holds {pixels} pixels, more than the {max_pixels} allowed; "
                            "refused as a possible decompression bomb",
                            path=file, pixels=pixels, max_pixels=max_pixels, size=size)  # fmt: skip


def decode_picture(
    path: str | os.PathLike,
    *,
    mode: Literal["RGB", "L"],
    max_pixels: int = MAX_PICTURE_PIXELS,
    formats: Sequence[str] = PICTURE_FORMATS,
) -> np.ndarray:
    """The pixels of ``path`` as a ``uint8`` array ``[H, W, C]`` (C = 3 for ``"RGB"``, 1 for ``"L"``).

    Decoded with Pillow and converted with ``Image.convert(mode)``, as torchvision's default loader does
    (so a palette, CMYK or 16-bit file gives the same values as with ``torchvision.datasets.ImageFolder``);
    of an animated GIF, the first frame. Opened through :func:`open_picture` (bounded, formats limited).

    Raises:
        PictureError: missing, not a picture, truncated or corrupt data, too many pixels; naming the file.
    """
    if mode not in ("RGB", "L"):
        raise ValueError(f"decode_picture: mode must be 'RGB' or 'L', got {mode!r}")
    with open_picture(path, max_pixels=max_pixels, formats=formats) as image:
        try:
            image.load()
            converted = image.convert(mode)
        except (OSError, ValueError, EOFError, SyntaxError, struct.error, MemoryError) as exc:
            reason = failure_reason(exc)
            raise PictureDamagedError(f"image file {os.fspath(path)} is not a readable image ({reason})",
                                      reason=reason) from None  # fmt: skip
    pixels = np.array(converted, dtype=np.uint8)  # a writable copy
    return pixels[:, :, None] if pixels.ndim == 2 else pixels
