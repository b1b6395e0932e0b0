"""Names read from data kept inside their root, and the error every refusal of :mod:`.safe_files` raises.

:func:`inside` keeps a relative name read from data (a COCO ``file_name``, a trial id) inside its root;
:func:`folder_below` is how a dataset reaches a folder below the root it was given (the root may be a link
the user named, what lies below it may not lead out); :func:`relative_name` / :func:`is_relative_name`
judge a name as written, looking at no file.
"""

from __future__ import annotations

import errno
import os
from pathlib import Path, PurePath

from .errors import UsageError
from .text_safety import quoted

__all__ = ["UnsafePathError", "folder_below", "inside", "is_relative_name", "leads_outside", "relative_name"]


class UnsafePathError(UsageError):
    """A path that would make modforge follow a link, leave its folder or touch something it
    did not write; nothing was written, read or removed."""


def _shown(path: str | os.PathLike) -> str:
    return os.fspath(path)


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
