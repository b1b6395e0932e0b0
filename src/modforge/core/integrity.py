"""Content checksums of saved files: written when a file is saved, verified before it is loaded.

* Zip archives — checkpoints and torch-based artifacts (``torch.save``), TorchScript files
  (``torch.jit.save``). The zip format already stores a CRC-32 of every record, which
  PyTorch computes at save time (:func:`torch_zip_checksums` makes sure it does) but never
  checks when loading: a flipped bit in a tensor loads silently. :func:`verify_zip` checks
  every record's CRC-32 against its bytes before the file is handed to PyTorch.
* Protobuf files — ONNX models. :func:`checksum_trailer` is a ``metadata_props`` entry
  (``modforge.sha256``: the SHA-256 of every byte before it) appended to the serialized
  model — protobuf merges a repeated field's entries from anywhere in the message, so the
  file stays an ordinary ONNX model; :func:`verify_trailer` recomputes it from the raw
  bytes (no protobuf parser needed).

Standard library only (torch is imported by :func:`torch_zip_checksums` alone, when called).
"""

from __future__ import annotations

import contextlib
import hashlib
import os
import struct
import zipfile
import zlib
from collections.abc import Iterator

__all__ = ["CHECKSUM_KEY", "IntegrityError", "checksum_trailer", "file_sha256", "torch_zip_checksums", "verify_trailer",
           "verify_zip"]

CHECKSUM_KEY = "modforge.sha256"
_CHUNK = 1 << 20
_LOCAL_HEADER = struct.Struct("<4s5H3L2H")  # zip local file header: signature ... name length, extra length
_ZIP_MAGIC = b"PK\x03\x04"


class IntegrityError(ValueError):
    """A file whose content does not match its checksums. The message completes
    ``f"{path} is {message}"`` (``damaged: checksum mismatch in record 'archive/data/0'``)."""


@contextlib.contextmanager
def torch_zip_checksums() -> Iterator[None]:
    """Make ``torch.save`` write every record's CRC-32 inside the block (it does by default;
    ``torch.serialization.set_crc32_options(False)`` turns it off), restoring the setting after."""
    from torch import serialization

    getter = getattr(serialization, "get_crc32_options", None)
    if getter is None or getter():  # older PyTorch always computes them
        yield
        return
    serialization.set_crc32_options(True)
    try:
        yield
    finally:
        serialization.set_crc32_options(False)


def verify_zip(path: str | os.PathLike) -> bool:
    """Check the CRC-32 of every record of the zip archive at ``path`` against its bytes.

    Returns:
        True when every record matched; False when there is nothing to verify: the file is
        not a zip archive (its reader will judge it), or no record has a checksum (written
        with PyTorch's ``compute_crc32`` off).

    Raises:
        IntegrityError: a record's bytes do not match its checksum, or the archive's
            structure is truncated or damaged.
        OSError: the file cannot be read.
    """
    with open(path, "rb") as file:
        if file.read(4) != _ZIP_MAGIC:
            return False
        size = os.fstat(file.fileno()).st_size
        try:
            archive = zipfile.ZipFile(file)
        except (zipfile.BadZipFile, ValueError, EOFError) as exc:
            raise IntegrityError(f"truncated or damaged (its zip directory is unreadable: {exc})") from None
        records = archive.infolist()
        if not any(info.CRC for info in records):
            return False
        buffer = bytearray(_CHUNK)
        for info in records:
            if info.compress_type == zipfile.ZIP_STORED:
                crc = _stored_crc(file, info, size, buffer)
            else:
                crc = _packed_crc(archive, info)
            if crc != info.CRC:
                raise IntegrityError(f"damaged: checksum mismatch in record '{info.filename}'")
    return True


def _stored_crc(file, info: zipfile.ZipInfo, size: int, buffer: bytearray) -> int:
    """The CRC-32 of an uncompressed record's bytes, located through its local header the
    way PyTorch's reader locates them."""
    file.seek(info.header_offset)
    header = file.read(_LOCAL_HEADER.size)
    if len(header) < _LOCAL_HEADER.size:
        raise IntegrityError(f"truncated or damaged (record '{info.filename}' lies past the end of the file)")
    fields = _LOCAL_HEADER.unpack(header)
    name_length, extra_length = fields[-2], fields[-1]
    encoding = "utf-8" if info.flag_bits & 0x800 else "cp437"
    if fields[0] != _ZIP_MAGIC or file.read(name_length) != info.orig_filename.encode(encoding, "replace"):
        raise IntegrityError(f"damaged: the header of record '{info.filename}' does not match the zip directory")
    start = info.header_offset + _LOCAL_HEADER.size + name_length + extra_length
    if start + info.compress_size > size:
        raise IntegrityError(f"truncated or damaged (record '{info.filename}' lies past the end of the file)")
    file.seek(start)
    crc, left = 0, info.compress_size
    view = memoryview(buffer)
    while left:
        got = file.readinto(view[: min(left, _CHUNK)])
        if not got:
            raise IntegrityError(f"truncated or damaged (record '{info.filename}' lies past the end of the file)")
        crc = zlib.crc32(view[:got], crc)
        left -= got
    return crc


def _packed_crc(archive: zipfile.ZipFile, info: zipfile.ZipInfo) -> int:
    """The stored CRC-32 when a compressed record's bytes inflate to match it (zipfile
    checks as it reads); a mismatch or a damaged stream is an :class:`IntegrityError`."""
    try:
        with archive.open(info) as record:
            while record.read(_CHUNK):
                pass
    except zipfile.BadZipFile as exc:
        if "CRC" in str(exc):
            raise IntegrityError(f"damaged: checksum mismatch in record '{info.filename}'") from None
        raise IntegrityError(f"damaged (record '{info.filename}': {exc})") from None
    except (zlib.error, EOFError, ValueError) as exc:
        raise IntegrityError(f"damaged (record '{info.filename}' does not decompress: {exc})") from None
    return info.CRC


# --------------------------------------------------------------- protobuf (ONNX) files
# One ModelProto.metadata_props entry (field 14, length-delimited) holding a
# StringStringEntryProto {key (1) = CHECKSUM_KEY, value (2) = 64 hex digits}: 85 bytes.
_ENTRY = b"\x0a" + bytes([len(CHECKSUM_KEY)]) + CHECKSUM_KEY.encode() + b"\x12\x40"
_TRAILER_PREFIX = b"\x72" + bytes([len(_ENTRY) + 64]) + _ENTRY
_TRAILER_SIZE = len(_TRAILER_PREFIX) + 64


def checksum_trailer(body: bytes | memoryview) -> bytes:
    """The bytes to append to a serialized ONNX model (``body``, which must hold no
    ``modforge.sha256`` entry): a ``metadata_props`` entry with the SHA-256 of ``body``."""
    return _TRAILER_PREFIX + hashlib.sha256(body).hexdigest().encode("ascii")


def verify_trailer(data: bytes) -> bool:
    """Check a file written as ``body + checksum_trailer(body)``.

    Returns:
        True when the checksum matches; False when the file carries none (written before
        modforge added it).

    Raises:
        IntegrityError: the content does not match the checksum, or the checksum entry is
            damaged or not where modforge writes it (the last bytes of the file).
    """
    if len(data) >= _TRAILER_SIZE and data[-_TRAILER_SIZE:-64] == _TRAILER_PREFIX:
        with memoryview(data) as view, view[:-_TRAILER_SIZE] as body:
            computed = hashlib.sha256(body).hexdigest().encode("ascii")
        if computed != data[-64:]:
            raise IntegrityError("damaged: checksum mismatch in its model data (SHA-256)")
        return True
    if CHECKSUM_KEY.encode() in data:
        raise IntegrityError(f"damaged: its {CHECKSUM_KEY} entry is not where modforge writes it (the end of the file)")
    return False


def file_sha256(path: str | os.PathLike) -> str:
    """The SHA-256 of a file's bytes (hex), read in 1 MiB blocks."""
    import hashlib

    digest = hashlib.sha256()
    with open(path, "rb") as file:
        for block in iter(lambda: file.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()
