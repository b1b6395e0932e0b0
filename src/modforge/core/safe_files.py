"""Files in folders modforge does not fully trust: never through a link, never a fixed temporary name.

A run folder, a sweep folder or a dataset root may come from someone else (a colleague's
shared scratch folder, an archive from the internet). Anything planted in it — a symbolic
link at the name modforge is about to write, a link out of the folder, a FIFO — must not
make modforge write, read or delete anything outside it. This module is the one way
modforge writes and reuses such folders:

- :func:`atomic_open` / :func:`write_atomic` / :func:`write_via_temp` write a new file under a
  random name made with ``O_EXCL`` (which never follows a link) next to the target, then
  rename it into place: a link planted at the target's name is replaced, not followed.
- :func:`open_append`, :func:`open_lock` and :func:`open_regular` open an *existing* name with
  ``O_NOFOLLOW`` and check on the descriptor that it is one plain regular file.
- :func:`check_folder` is run once on a folder modforge is asked to reuse (``--resume``,
  ``test``, ``--sweep-dir``, ``sweep-report``): no link in it may lead outside it, dangle
  or loop, and every entry is a regular file or a folder.
- :func:`inside` keeps a relative name read from data (a COCO ``file_name``, a trial id)
  inside its root.
- :func:`folder_below` is how every dataset reaches a folder (or file) below the root it was
  given — a COCO split folder, ``tiny-imagenet-200``, a class folder: the root may be a link
  the user named, but what lies below it must resolve inside the root's real path
  (:func:`leads_outside` is the same test for a path found while walking the root).
- :func:`remove_tree` deletes only a real folder inside the folder modforge owns, and only
  when everything in it passes the caller's test of "modforge wrote this".
- :func:`open_bounded_file` (and :func:`read_bounded_file`, :func:`open_text_table`,
  :func:`data_lines`) is how modforge opens a file it is given to *read* — a score file, a
  protocol, a manifest, a picture, a JSON annotation file, a config: only a regular file of at
  most so many bytes, checked before anything is read, never a read that blocks on a FIFO;
  each refusal is one error naming the file.
"""

from __future__ import annotations

import contextlib
import dataclasses
import errno
import io
import os
import shutil
import stat
import tempfile
from collections.abc import Callable, Iterator, Mapping
from pathlib import Path, PurePath
from types import MappingProxyType
from typing import IO, Any, BinaryIO, Literal

from .errors import UsageError
from .text_safety import plain_text, quoted

__all__ = [
    "MAX_FOLDER_ENTRIES",
    "BOUNDED_READ_WORDS",
    "MAX_TEXT_TABLE_BYTES",
    "Refusal",
    "UnsafePathError",
    "atomic_open",
    "check_folder",
    "data_lines",
    "file_kind",
    "ensure_folder",
    "folder_below",
    "foreign_entry",
    "inside",
    "leads_outside",
    "is_relative_name",
    "relative_name",
    "open_append",
    "open_bounded_file",
    "open_lock",
    "open_regular",
    "open_text_table",
    "read_bounded_file",
    "remove_tree",
    "save_figure",
    "write_atomic",
    "write_via_temp",
]

MAX_FOLDER_ENTRIES = 500_000
"""More entries than this in a folder to reuse is refused rather than walked for minutes."""

MAX_TEXT_TABLE_BYTES = 1 << 30
"""Largest score file, protocol or manifest read (1 GiB: ten times the largest real one, ASVspoof 2021 DF's
~100 MB trial metadata)."""

_NOFOLLOW = getattr(os, "O_NOFOLLOW", 0)
_CLOEXEC = getattr(os, "O_CLOEXEC", 0)
_BINARY = getattr(os, "O_BINARY", 0)
_NONBLOCK = getattr(os, "O_NONBLOCK", 0)


def _current_umask() -> int:
    mask = os.umask(0o022)
    os.umask(mask)
    return mask


_UMASK = _current_umask()


class UnsafePathError(UsageError):
    """A path that would make modforge follow a link, leave its folder or touch something it
    did not write; nothing was written, read or removed."""


def _shown(path: str | os.PathLike) -> str:
    return os.fspath(path)


# ----------------------------------------------------------------------------- writing
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


# ----------------------------------------------------------------------------- opening existing names
def _check_plain_file(fd: int, path: str | os.PathLike, single_link: bool) -> None:
    info = os.fstat(fd)
    problem = None
    if not stat.S_ISREG(info.st_mode):
        problem = "is not a regular file"
    elif single_link and info.st_nlink > 1:
        problem = f"has {info.st_nlink} hard links (another name of some other file)"
    if problem:
        os.close(fd)
        raise UnsafePathError(f"{_shown(path)} {problem}; modforge does not write through it")


def _open_nofollow(path: str | os.PathLike, flags: int, perm: int = 0o644) -> int:
    try:
        return os.open(path, flags | _NOFOLLOW | _CLOEXEC | _BINARY, perm)
    except OSError:
        if os.path.islink(path):
            raise UnsafePathError(f"{_shown(path)} is a symbolic link; modforge does not follow links "
                                  "in folders it writes or reads (remove the link)") from None  # fmt: skip
        raise


def open_append(path: str | os.PathLike, *, encoding: str = "utf-8", newline: str | None = None, binary: bool = False):
    """Open ``path`` to append (created if missing), never through a link and only when it is
    one plain regular file (a hard link to someone's file would be changed in place)."""
    try:  # non-blocking: a FIFO planted at the name cannot hang the open (no reader: an error)
        fd = _open_nofollow(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT | _NONBLOCK)
    except OSError as exc:
        raise UnsafePathError(f"{_shown(path)} cannot be opened to append ({exc.strerror or exc}); "
                              "modforge appends only to plain files it made") from None  # fmt: skip
    _check_plain_file(fd, path, single_link=True)
    if _NONBLOCK:
        os.set_blocking(fd, True)
    if binary:
        return open(fd, "ab")
    return open(fd, "a", encoding=encoding, newline=newline)


def open_lock(path: str | os.PathLike) -> int:
    """A descriptor on the lock file ``path`` (created if missing, never truncated, never a link;
    nothing is written to it, so a hard link — a ``cp -al`` backup — does no harm)."""
    fd = _open_nofollow(path, os.O_RDWR | os.O_CREAT)
    _check_plain_file(fd, path, single_link=False)
    return fd


def open_regular(path: str | os.PathLike, mode: str = "rb", *, encoding: str | None = None):
    """Open an existing regular file to read, never through a link, never a FIFO or device
    (opened non-blocking, so a FIFO cannot hang the read)."""
    if mode not in ("r", "rb"):
        raise ValueError(f"open_regular reads only ('r' or 'rb'), not {mode!r}")
    fd = _open_nofollow(path, os.O_RDONLY | _NONBLOCK)
    _check_plain_file(fd, path, single_link=False)
    if _NONBLOCK:
        os.set_blocking(fd, True)
    if mode == "rb":
        return open(fd, "rb")
    return open(fd, encoding=encoding or "utf-8")


# ----------------------------------------------------------------------------- reading files given to read
def file_kind(mode: int) -> str:
    """What a file of ``os.stat`` mode ``mode`` is, in words, for a message refusing one that is not a
    regular file ("a named pipe (FIFO)", "a folder"...)."""
    kinds = ((stat.S_ISDIR, "a folder"), (stat.S_ISFIFO, "a named pipe (FIFO)"), (stat.S_ISSOCK, "a socket"),
             (stat.S_ISCHR, "a character device"), (stat.S_ISBLK, "a block device"))  # fmt: skip
    return next((name for test, name in kinds if test(mode)), "not a regular file")


@dataclasses.dataclass(frozen=True)
class Refusal:
    """Why :func:`open_bounded_file` refused a file: :meth:`message` words it from templates, or a caller's
    ``refuse`` makes its own error from it (a config file's errors carry their own location).

    Attributes:
        reason: ``"missing"`` (no such file, or a folder on the way is not one), ``"loop"`` (links that loop),
            ``"unreadable"`` (any other system error), ``"not regular"`` (a folder, FIFO, socket, device) or
            ``"too large"``.
        detail: the system's words for ``missing``, ``loop`` and ``unreadable``.
        mode: the ``st_mode`` of a file that is ``not regular`` (:attr:`kind` says it in words).
        size: the size of a file ``too large``; ``None`` when it grew past the limit while it was read.
    """

    reason: Literal["missing", "loop", "unreadable", "not regular", "too large"]
    detail: str = ""
    mode: int = 0
    size: int | None = None

    @property
    def kind(self) -> str:
        """:func:`file_kind` of :attr:`mode`."""
        return file_kind(self.mode)

    def message(self, words: Mapping[str, str], *, what: str, shown: str, max_bytes: int) -> str:
        """The refusal in ``words`` (as :data:`BOUNDED_READ_WORDS`: a template per reason, ``"grew"`` for a
        file that grew past the limit while read; a loop is worded as ``"unreadable"``)."""
        key = self.reason
        if key == "loop":
            key = "unreadable"
        elif key == "too large" and self.size is None:
            key = "grew"
        return words[key].format(what=what, shown=shown, kind=self.kind, size=self.size, max_bytes=max_bytes,
                                 detail=self.detail)  # fmt: skip


Refuse = Callable[[Refusal], BaseException]
"""Makes the error to raise for a :class:`Refusal` (it names the file)."""

BOUNDED_READ_WORDS: Mapping[str, str] = MappingProxyType({
    "missing": "{what} not found: {shown}",
    "not regular": "the {what} {shown} is {kind}; expected a regular file",
    "too large": "the {what} {shown} is {size} bytes, more than the {max_bytes} a {what} may have",
    "grew": "the {what} {shown} grew past the {max_bytes} bytes a {what} may have while it was read",
    "unreadable": "cannot read the {what} {shown} ({detail})",
})  # fmt: skip
"""How :func:`open_bounded_file` words a refusal by default: a template per reason, with the fields ``what``,
``shown`` (the file), ``kind`` (:func:`file_kind`), ``size``, ``max_bytes`` and ``detail`` (the system's words)."""


def _os_refusal(exc: OSError) -> Refusal:
    detail = exc.strerror or str(exc)
    if exc.errno in (errno.ENOENT, errno.ENOTDIR):
        return Refusal("missing", detail)
    return Refusal("loop" if exc.errno == errno.ELOOP else "unreadable", detail)


def _checked(info: os.stat_result, max_bytes: int) -> Refusal | None:
    if not stat.S_ISREG(info.st_mode):
        return Refusal("not regular", mode=info.st_mode)
    if info.st_size > max_bytes:
        return Refusal("too large", size=info.st_size)
    return None


def _worded(path: str | os.PathLike, what: str, max_bytes: int, error: Callable[[str], BaseException],
            words: Mapping[str, str]) -> Refuse:  # fmt: skip
    """``error(message)`` for a refusal, the message in ``words``, naming ``what`` and the file (its name with
    control characters replaced)."""
    shown = plain_text(os.fspath(path))
    return lambda refusal: error(refusal.message(words, what=what, shown=shown, max_bytes=max_bytes))


def open_bounded_file(
    path: str | os.PathLike,
    *,
    what: str,
    max_bytes: int = MAX_TEXT_TABLE_BYTES,
    error: Callable[[str], BaseException] = UsageError,
    words: Mapping[str, str] = BOUNDED_READ_WORDS,
    refuse: Refuse | None = None,
) -> BinaryIO:
    """``path`` opened to read (binary), once it is known to be a regular file of at most ``max_bytes`` bytes.

    ``path`` is the file the user (or a dataset) names, so it may be a link. It is looked at (``stat``) before
    it is opened — a folder, FIFO, socket or device is refused without being opened (opening some devices
    does something) — then opened non-blocking (a FIFO swapped in meanwhile cannot hang the run) and
    checked again on the open descriptor (``fstat``), so what is read is what was checked. The caller closes
    the handle; a file that grows while it is read is the caller's to bound (:func:`read_bounded_file` does).

    Args:
        path: the file.
        what: what the file is, for the message (``"score file"``, ``"manifest"``).
        max_bytes: the largest size accepted.
        error: the exception class (or any callable taking the message) raised.
        words: the messages, a template per reason (:data:`BOUNDED_READ_WORDS`).
        refuse: makes the error itself instead (``error`` and ``words`` unused): called with the
            :class:`Refusal`, it returns what to raise.

    Raises:
        ``error`` (:class:`~modforge.core.errors.UsageError` by default), naming ``what`` and the file —
        missing, unreadable, a link loop, not a regular file, larger than ``max_bytes`` — or what ``refuse`` made.
    """
    word = refuse or _worded(path, what, max_bytes, error, words)
    try:
        info = os.stat(path)
    except OSError as exc:
        raise word(_os_refusal(exc)) from None
    problem = _checked(info, max_bytes)
    if problem is not None:
        raise word(problem)
    try:
        fd = os.open(path, os.O_RDONLY | _NONBLOCK | _CLOEXEC | _BINARY)
    except OSError as exc:
        raise word(_os_refusal(exc)) from None
    try:
        problem = _checked(os.fstat(fd), max_bytes)
        if problem is not None:
            raise word(problem)
        if _NONBLOCK:
            os.set_blocking(fd, True)
    except BaseException:
        os.close(fd)
        raise
    return open(fd, "rb")  # noqa: SIM115 - the caller closes it


def read_bounded_file(
    path: str | os.PathLike,
    *,
    what: str,
    max_bytes: int,
    error: Callable[[str], BaseException] = UsageError,
    words: Mapping[str, str] = BOUNDED_READ_WORDS,
    refuse: Refuse | None = None,
) -> bytes:
    """The whole content of ``path``, opened through :func:`open_bounded_file` and read to at most
    ``max_bytes`` bytes (a file that grows past that while it is read is refused too, never read on).

    Raises:
        as :func:`open_bounded_file`; a read error is an ``"unreadable"`` refusal.
    """
    word = refuse or _worded(path, what, max_bytes, error, words)
    with open_bounded_file(path, what=what, max_bytes=max_bytes, refuse=word) as handle:
        try:
            data = handle.read(max_bytes + 1)
        except OSError as exc:
            raise word(_os_refusal(exc)) from None
    if len(data) > max_bytes:
        raise word(Refusal("too large"))
    return data


def open_text_table(
    path: str | os.PathLike,
    *,
    what: str,
    max_bytes: int = MAX_TEXT_TABLE_BYTES,
    encoding: str = "utf-8",
    errors: str = "replace",
    newline: str | None = None,
    error: Callable[[str], BaseException] = UsageError,
) -> IO[str]:
    """:func:`open_bounded_file` as text (a score file, a protocol: read line by line). The caller closes it.

    Raises:
        ``error``: see :func:`open_bounded_file`.
    """
    binary = open_bounded_file(path, what=what, max_bytes=max_bytes, error=error)
    return io.TextIOWrapper(binary, encoding=encoding, errors=errors, newline=newline)


def data_lines(
    path: str | os.PathLike,
    *,
    what: str,
    max_bytes: int = MAX_TEXT_TABLE_BYTES,
    error: Callable[[str], BaseException] = UsageError,
) -> Iterator[tuple[int, str]]:
    """``(line number, line)`` of each line of a whitespace-separated text table (a score file, a protocol)
    that is neither blank nor a ``#`` comment, read through :func:`open_text_table` (a regular file of at most
    ``max_bytes`` bytes; UTF-8, undecodable bytes replaced).

    Raises:
        ``error``: see :func:`open_bounded_file` (on the first ``next``).
    """
    with open_text_table(path, what=what, max_bytes=max_bytes, error=error) as handle:
        for number, line in enumerate(handle, 1):
            text = line.lstrip()
            if text and not text.startswith("#"):
                yield number, line


# ----------------------------------------------------------------------------- paths from data
def inside(root: str | os.PathLike, name: str, what: str = "path") -> Path:
    """``root / name`` when ``name`` is a relative path that stays inside ``root``: no absolute
    name, no ``..``, no NUL, and no link on the way that leads out of ``root``. A refusal quotes at
    most :data:`~modforge.core.text_safety.MAX_QUOTED` characters of ``name`` (a 5 MB ``file_name``
    in an annotation file gives a one-line error).

    Raises:
        UnsafePathError: naming ``what`` (e.g. ``"file_name of image 7 in instances_val.json"``).
    """
    text = relative_name(name, what, root)
    target = Path(root) / text
    if _escape(root, target, f"{what} {quoted(text)}") is not None:
        raise UnsafePathError(f"{what} {quoted(text)} leads outside {_shown(root)} through a link; refused")
    return target


def folder_below(root: str | os.PathLike, name: str, what: str) -> Path:
    """``root / name`` — a folder (or file) a dataset reads below the root it was given — when
    ``name`` is a relative name and ``root / name`` resolves inside the real path of ``root``.

    ``root`` itself may be a link the user named (``data.args.root: ~/data/coco``); nothing below
    it may lead out: a split folder ``images/test`` planted as a link to someone's pictures in a
    shared dataset folder would otherwise be read, drawn into ``detections.png`` and trained on.
    Whether ``root / name`` exists is left to the caller (its own "not found" message).

    Args:
        root: the dataset root.
        name: the relative name below it (``images/test``, ``tiny-imagenet-200``, a class name).
        what: the dataset and the role of the folder, for the message (``"coco: test_images"``).

    Raises:
        UnsafePathError: one line naming ``what``, the folder, the root and where the link leads.
    """
    text = relative_name(name, what, root)
    target = Path(root) / text
    real = _escape(root, target, f"{what}: {_shown(target)}")
    if real is not None:
        raise UnsafePathError(f"{what}: {_shown(target)} leads outside the dataset root {_shown(root)} through a "
                              f"link (to {real}); refused, nothing in it was read — copy the files into the root, "
                              "or name their own folder as the root")  # fmt: skip
    return target


def leads_outside(path: str | os.PathLike, real_root: Path) -> Path | None:
    """Where ``path`` really leads when that is outside ``real_root`` (an already resolved folder);
    ``None`` when it resolves to ``real_root`` or inside it (a loop resolves to where it stops)."""
    return _beyond(Path(os.path.realpath(path)), real_root)


def _beyond(real: Path, real_root: Path) -> Path | None:
    return None if real == real_root or real.is_relative_to(real_root) else real


def _escape(root: str | os.PathLike, target: Path, shown: str) -> Path | None:
    """:func:`leads_outside` for ``target`` below ``root`` (both resolved here); a loop is refused, and so
    is a name the system cannot look up (too long), each with its own words."""
    try:
        real_root = Path(root).resolve()
        try:  # strict: a loop raises on every Python (non-strict stops at it from 3.13 on)
            real = target.resolve(strict=True)
        except FileNotFoundError:  # not there (yet): where it would be
            real = target.resolve()
    except RuntimeError:
        raise UnsafePathError(f"{shown}: a link on its way loops") from None
    except OSError as exc:
        if exc.errno == errno.ELOOP:
            raise UnsafePathError(f"{shown}: a link on its way loops") from None
        raise UnsafePathError(f"{shown}: cannot be looked up ({exc.strerror or exc})") from None
    return _beyond(real, real_root)


def relative_name(name: str, what: str = "path", root: str | os.PathLike = "its folder") -> str:
    """``name`` when it is, as written, a relative path that cannot climb out of the folder it
    is joined to (no absolute name, drive, ``..`` or NUL). Unlike :func:`inside` it looks at no
    file, so links in a dataset (a subset made of links, a folder on shared storage) still work.
    A refusal quotes at most :data:`~modforge.core.text_safety.MAX_QUOTED` characters of ``name``.

    Raises:
        UnsafePathError: naming ``what``.
    """
    text = str(name)
    if not is_relative_name(text):
        raise UnsafePathError(f"{what} {quoted(text)} is not a relative path inside {_shown(root)} "
                              "(absolute names and '..' are refused)")  # fmt: skip
    return text


def is_relative_name(name: object) -> bool:
    """Whether ``name`` is a non-empty string that, as written, stays inside the folder it is
    joined to: not absolute, no drive, no ``..`` (``/`` or ``\\`` separated), no NUL, no ``~``."""
    if not isinstance(name, str) or not name or "\x00" in name or name.startswith(("/", "\\", "~")):
        return False
    pure = PurePath(name)
    return not pure.is_absolute() and ".." not in pure.parts and ".." not in name.split("\\") \
        and not (len(name) > 1 and name[1] == ":")  # fmt: skip


# ----------------------------------------------------------------------------- folders to reuse
def check_folder(root: str | os.PathLike, what: str = "folder", max_entries: int = MAX_FOLDER_ENTRIES) -> None:
    """Refuse a folder to reuse that holds a link leading outside it (or dangling, or looping)
    or an entry that is neither a regular file nor a folder. Links that stay inside are fine
    (they are not descended into: their targets are checked where they lie).

    ``root`` itself may be a link the user named; it is resolved once.

    Raises:
        UnsafePathError: one line naming the entry and what it is.
    """
    root_path = Path(root)
    try:
        real_root = root_path.resolve(strict=True)
    except (OSError, RuntimeError):
        raise UnsafePathError(f"{what} {_shown(root)} does not exist or is a link that leads nowhere") from None
    if not real_root.is_dir():
        raise UnsafePathError(f"{what} {_shown(root)} is not a folder")
    seen = 0
    pending = [real_root]
    while pending:
        folder = pending.pop()
        try:
            entries = list(os.scandir(folder))
        except FileNotFoundError:  # removed meanwhile by the run or sweep that owns it
            continue
        except OSError as exc:
            raise UnsafePathError(f"{what} {_shown(root)}: cannot read {_relative(folder, real_root, root_path)} "
                                  f"({exc.strerror or exc})") from None  # fmt: skip
        seen += len(entries)
        if seen > max_entries:
            raise UnsafePathError(f"{what} {_shown(root)} holds more than {max_entries} entries; refused")
        for entry in entries:
            problem = _entry_problem(entry, real_root)
            if problem:
                raise UnsafePathError(f"{what} {_shown(root)}: {_relative(entry.path, real_root, root_path)} "
                                      f"{problem}; nothing was changed (remove it, or copy the folder without it)")  # fmt: skip
            if entry.is_dir(follow_symlinks=False):
                pending.append(Path(entry.path))


def _relative(path: str | os.PathLike, real_root: Path, shown_root: Path) -> str:
    try:
        return str(shown_root / Path(path).relative_to(real_root))
    except ValueError:
        return _shown(path)


def _entry_problem(entry: os.DirEntry, real_root: Path) -> str | None:
    """What is wrong with ``entry`` of a folder to reuse (``None``: nothing, or it is gone —
    another process of the same run or sweep may rename its temporaries meanwhile)."""
    if entry.is_symlink():
        try:
            target = os.readlink(entry.path)
        except FileNotFoundError:
            return None
        try:
            real = Path(entry.path).resolve(strict=True)
        except RuntimeError:
            return f"is a symbolic link that loops ({target})"
        except OSError:
            return f"is a symbolic link to {target}, which does not exist"
        if real != real_root and not real.is_relative_to(real_root):
            return f"is a symbolic link to {real}, outside the folder"
        if not (real.is_file() or real.is_dir()):
            return f"is a symbolic link to {real}, which is neither a regular file nor a folder"
        return None
    try:
        mode = entry.stat(follow_symlinks=False).st_mode
    except FileNotFoundError:
        return None
    except OSError as exc:
        return f"cannot be examined ({exc.strerror or exc})"
    if stat.S_ISREG(mode) or stat.S_ISDIR(mode):
        return None
    kind = ("a FIFO" if stat.S_ISFIFO(mode) else "a socket" if stat.S_ISSOCK(mode)
            else "a device" if stat.S_ISCHR(mode) or stat.S_ISBLK(mode) else "a special file")  # fmt: skip
    return f"is {kind}, not a regular file or folder"


# ----------------------------------------------------------------------------- removing
def foreign_entry(path: str | os.PathLike, wrote: Callable[[Path], bool]) -> tuple[Path, str] | None:
    """The first entry under the folder ``path`` that modforge did not write, and what it is: a
    link, a special file, or a regular file for which ``wrote(relative_path)`` is false
    (folders are judged by what they hold); ``None`` when there is none."""
    for current, folders, files in os.walk(path, followlinks=False):
        for name in folders + files:
            full = Path(current) / name
            rel = full.relative_to(path)
            mode = os.lstat(full).st_mode
            if stat.S_ISLNK(mode):
                return rel, "a symbolic link"
            if stat.S_ISREG(mode):
                if not wrote(rel):
                    return rel, "a file modforge did not write"
            elif not stat.S_ISDIR(mode):
                return rel, "a special file (FIFO, socket or device)"
    return None


def remove_tree(path: str | os.PathLike, owner: str | os.PathLike, wrote: Callable[[Path], bool], what: str) -> None:
    """Delete the folder ``path`` — only when ``lstat`` says it is a real folder (not a link)
    lying inside ``owner`` (the folder modforge owns), and every file under it is a regular
    file for which ``wrote(relative_path)`` says modforge wrote it (no link, no special file).

    Raises:
        UnsafePathError: naming the first entry that fails; nothing was removed.
    """
    path = Path(path)
    try:
        info = os.lstat(path)
    except FileNotFoundError:
        return
    if not stat.S_ISDIR(info.st_mode):
        raise UnsafePathError(f"{what} {_shown(path)} is not a real folder (a link or a file); modforge removes "
                              "only folders it made, nothing was removed")  # fmt: skip
    real_owner = Path(owner).resolve()
    real_parent = path.parent.resolve()
    if not (real_parent == real_owner or real_parent.is_relative_to(real_owner)):
        raise UnsafePathError(f"{what} {_shown(path)} lies outside {_shown(owner)}; nothing was removed")
    found = foreign_entry(path, wrote)
    if found is not None:
        raise UnsafePathError(f"{what} {_shown(path)} holds {found[0]}, {found[1]}; nothing was removed "
                              "(move it away, or choose another folder)")  # fmt: skip
    shutil.rmtree(path)
