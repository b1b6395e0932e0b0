"""How an extraction says no: the two errors, the wording of a refusal, and the one place where a
library's complaint about an archive becomes an :class:`ArchiveError`.

Every refusal ends the same way ("refused, nothing of the archive was extracted") and names the
archive and, where there is one, the member, so that the user knows what to delete and that no
part of it was put in place.
"""

from __future__ import annotations

import contextlib
import errno
import lzma
import struct
import tarfile
import zipfile
import zlib
from collections.abc import Iterator
from pathlib import Path

from ...core.errors import UsageError
from ...core.safe_files import UnsafePathError


class ArchiveError(UsageError):
    """An archive that cannot be read (damaged, truncated, encrypted, not the kind its name says)."""


class UnsafeArchiveError(UnsafePathError):
    """An archive refused whole: a member that would land outside the folder, a link, device or
    FIFO, or more bytes or members than allowed; nothing of the archive was put in place."""


def refused(problem: str) -> UnsafeArchiveError:
    """The refusal of a whole archive for ``problem`` (a sentence that names the archive)."""
    return UnsafeArchiveError(f"{problem}; refused, nothing of the archive was extracted")


def refuse(archive: Path, member: str, problem: str) -> UnsafeArchiveError:
    """The refusal of ``archive`` because its ``member`` ``problem`` ("is a device", ...)."""
    return refused(f"archive {archive}: member {shown_name(member)} {problem}")


def shown_name(name: str) -> str:
    """A member's name as a message shows it: quoted, and cut after 200 characters."""
    return repr(name if len(name) <= 200 else name[:200] + "...")


_READ_ERRORS = (tarfile.TarError, zipfile.BadZipFile, zipfile.LargeZipFile, EOFError, zlib.error, lzma.LZMAError,
                NotImplementedError, ValueError, struct.error, OSError)  # fmt: skip


@contextlib.contextmanager
def reading(archive: Path) -> Iterator[None]:
    """Turn a library's complaint about the archive into one :class:`ArchiveError`; modforge's
    own refusals pass through, and a failed write (a full disk) says so."""
    try:
        yield
    except UsageError:
        raise
    except _READ_ERRORS as exc:
        if isinstance(exc, OSError) and exc.errno in (errno.ENOSPC, errno.EDQUOT, errno.EACCES, errno.EROFS):
            raise UsageError(f"cannot unpack archive {archive}: {exc.strerror or exc}") from None
        raise ArchiveError(f"archive {archive} cannot be read ({_why(exc)}); delete it and download it again") \
            from None  # fmt: skip


def _why(exc: BaseException) -> str:
    text = " ".join(str(exc).split())
    return text or type(exc).__name__
