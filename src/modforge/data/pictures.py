"""Opening picture files from data someone else made, within bounds: one guard shared by every reader.

A picture file is untrusted input. Three things go wrong with Pillow left at its defaults:

* a few hundred bytes of PNG can declare 19,000 × 19,000 pixels and take a gigabyte once decoded (a
  *decompression bomb*); Pillow only warns below twice its limit, and its limit is process-wide;
* a file named ``.jpg`` can be an EPS document, which Pillow hands to Ghostscript;
* the exceptions differ by plug-in (``OSError``, ``SyntaxError``, ``struct.error``…) and none names the file.

So a picture is opened here with Pillow's pixel limit set for that one call (:func:`pixel_limit`: scoped,
under a lock, its warning made an error, raised from ``Image.open`` before a pixel is decoded), only the
plug-ins of a short list of plain raster formats are tried, and every failure is one :class:`PictureError`
(a ``ValueError``) whose message names the file. The file itself is opened non-blocking and checked to be a
regular file on the open descriptor (:func:`open_picture_file`): a FIFO named ``cat.png`` is an error, not a
run that hangs.

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
    "PictureError",
    "decode_picture",
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
    """

    def __init__(self, message: str, *, path: str | os.PathLike, pixels: str, max_pixels: int):
        super().__init__(message)
        self.path, self.pixels, self.max_pixels = path, pixels, max_pixels


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
        PictureError: the file is missing or not a readable picture of ``formats``; the message names it.
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
    """``Image.open`` of the open ``handle`` under :func:`pixel_limit`, each failure one :class:`PictureError`."""
    try:
        with pixel_limit(max_pixels):
            return Image.open(handle, formats=tuple(formats))
    except (Image.DecompressionBombError, Image.DecompressionBombWarning) as exc:
        pixels = next((w for w in str(exc).replace("(", " ").split() if w.isdigit()), "more")
        raise PictureBombError(f"image file {file} holds {pixels} pixels, more than the {max_pixels} allowed; "
                               "refused as a possible decompression bomb",
                               path=file, pixels=pixels, max_pixels=max_pixels) from None  # fmt: skip
    except UnidentifiedImageError:
        raise PictureError(f"image file {file} is not a readable image (expected one of "
                           f"{', '.join(formats)})") from None  # fmt: skip
    except (OSError, ValueError, EOFError, SyntaxError, struct.error) as exc:
        raise PictureError(f"image file {file} is not a readable image ({str(exc)[:200]})") from None


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
            raise PictureError(f"image file {os.fspath(path)} is not a readable image ({str(exc)[:200]})") from None
    pixels = np.array(converted, dtype=np.uint8)  # a writable copy
    return pixels[:, :, None] if pixels.ndim == 2 else pixels
