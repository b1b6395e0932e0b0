"""Writing into a folder modforge does not fully trust: a new file under a random ``O_EXCL`` name next
to the target, renamed into place — a link planted at the target's name is replaced, never followed."""

from __future__ import annotations

import contextlib
import os
import stat
import tempfile
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import IO, Any

from .safe_paths import UnsafePathError, _shown

__all__ = ["atomic_open", "ensure_folder", "save_figure", "write_atomic", "write_via_temp"]


def _current_umask() -> int:
    mask = os.umask(0o022)
    os.umask(mask)
    return mask


_UMASK = _current_umask()


def ensure_folder(path: str | os.PathLike, *, named: bool = False) -> Path:
    """Make the folder ``path`` (and its parents); an existing ``path`` must be a real folder,
    not a link to one (a planted ``evaluations -> ~/`` would otherwise take every write).

    ``named``: ``path`` is the folder the user named (``--run-dir``, ``--resume runs/latest``,
    ``--sweep-dir``), which may be a link to a folder; what lies inside it never may."""
    path = Path(path)
    try:
        path.mkdir(parents=True, exist_ok=True)
    except FileExistsError:  # a file there, or a link that leads nowhere
        raise UnsafePathError(f"{_shown(path)} exists and is not a folder (a file, or a link that leads nowhere); "
                              "choose another folder") from None  # fmt: skip
    if not path.is_dir():
        raise UnsafePathError(f"{_shown(path)} is not a folder; choose another folder")
    if path.is_symlink() and not named:
        raise UnsafePathError(f"{_shown(path)} is a symbolic link; modforge writes only into real folders "
                              "(remove the link or choose another folder)")  # fmt: skip
    return path


def _temporary(path: Path) -> tuple[int, str]:
    """A new, empty, uniquely named file next to ``path`` (``O_EXCL``: never a link's target).

    The folder itself may be a link the user named (``--resume runs/latest``): a reused folder
    is checked once, before use (:func:`check_folder`), and sub-folders modforge makes in it
    go through :func:`ensure_folder`."""
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".part", dir=path.parent)
    return fd, tmp


def _kept_mode(path: Path, perm: int) -> int:
    """The permission bits a file replacing ``path`` gets: those of the regular file it replaces
    (a page kept 0600 stays 0600), else ``perm`` masked by the umask, as ``open`` would."""
    try:
        info = os.lstat(path)
    except OSError:
        return perm & ~_UMASK
    return stat.S_IMODE(info.st_mode) if stat.S_ISREG(info.st_mode) else perm & ~_UMASK


def _chmod(fd: int, name: str, mode: int) -> None:
    """Give a new temporary file ``mode`` (``mkstemp`` makes it 0600)."""
    if hasattr(os, "fchmod"):  # not on Windows before Python 3.13
        os.fchmod(fd, mode)
    else:
        os.chmod(name, mode)


@contextlib.contextmanager
def atomic_open(
    path: str | os.PathLike,
    mode: str = "w",
    *,
    encoding: str | None = "utf-8",
    newline: str | None = None,
    perm: int = 0o644,
    durable: bool = False,
) -> Iterator[IO[Any]]:
    """Open a new temporary file for writing; on a clean exit it replaces ``path`` atomically.

    ``mode`` is ``"w"`` or ``"wb"``. A link planted at ``path`` is replaced by the new file,
    never written through; on an error the temporary file is removed and ``path`` is left as
    it was. ``durable`` fsyncs the file before the rename.
    """
    if mode not in ("w", "wb"):
        raise ValueError(f"atomic_open writes new files only ('w' or 'wb'), not {mode!r}")
    path = Path(path)
    fd, tmp = _temporary(path)
    try:
        _chmod(fd, tmp, _kept_mode(path, perm))
        binary = "b" in mode
        with open(fd, mode, encoding=None if binary else encoding, newline=None if binary else newline) as handle:
            yield handle
            handle.flush()
            if durable:
                os.fsync(handle.fileno())
        os.replace(tmp, path)
    except BaseException:
        with contextlib.suppress(OSError):
            os.unlink(tmp)
        raise


def write_atomic(path: str | os.PathLike, data: str | bytes, *, perm: int = 0o644, durable: bool = False) -> Path:
    """Write ``data`` (text as UTF-8, or bytes) to ``path`` through :func:`atomic_open`."""
    with atomic_open(path, "wb", perm=perm, durable=durable) as handle:
        handle.write(data.encode("utf-8") if isinstance(data, str) else data)
    return Path(path)


def write_via_temp(path: str | os.PathLike, write: Callable[[str], None], *, perm: int = 0o644) -> Path:
    """For libraries that want a file *name* (ONNX export, ``torch.jit.save``): ``write`` is
    called with a fresh, uniquely named file made with ``O_EXCL`` next to ``path``, which then
    replaces ``path`` atomically. Prefer :func:`atomic_open` where the library takes a file."""
    path = Path(path)
    fd, tmp = _temporary(path)
    try:
        _chmod(fd, tmp, _kept_mode(path, perm))
        os.close(fd)
        write(tmp)
        if os.path.islink(tmp) or not os.path.isfile(tmp):
            raise UnsafePathError(f"the temporary file for {_shown(path)} was replaced while it was written")
        os.replace(tmp, path)
    except BaseException:
        with contextlib.suppress(OSError):
            os.unlink(tmp)
        raise
    return path


def save_figure(figure: Any, path: str | os.PathLike, **savefig_args: Any) -> Path:
    """``figure.savefig`` into a new file renamed over ``path`` (the format from the suffix, PNG by default)."""
    path = Path(path)
    with atomic_open(path, "wb") as handle:
        figure.savefig(handle, format=path.suffix.lstrip(".").lower() or "png", **savefig_args)
    return path
