"""Writing a generated data set to disk safely — shared by the synthetic spoofing corpus and
the synthetic shapes set.

A set is written into a staging folder beside its target (:func:`make_staging`) and moved into
place only when complete (:func:`publish`), so an interrupted run leaves no half-written set.
An existing folder is replaced only when asked (``overwrite``) and only when it *is* an earlier
set of the same kind (:func:`check_target`): its ``meta.json`` names the generator that wrote
it, nothing in it is a link or a special file, and every entry is one the generator writes
(:class:`SetKind`'s ``layout``). A real COCO set with ``images/`` and ``annotations/`` is
therefore never replaced. The replaced folder is removed with
:func:`modforge.core.safe_files.remove_tree` (only real folders holding what the generator
wrote); a failed replacement puts the earlier set back, and the new folder keeps the
permission mode of the one it replaces.
"""

from __future__ import annotations

import dataclasses
import fnmatch
import logging
import os
import secrets
import stat
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path, PurePosixPath
from typing import Any

import numpy as np

from ..core.json_limits import JsonLimitError, read_json
from ..core.safe_files import UnsafePathError, foreign_entry, remove_tree

__all__ = [
    "MAX_META_BYTES",
    "SetKind",
    "check_seed",
    "check_target",
    "is_integer",
    "make_staging",
    "publish",
    "split_counts",
    "split_fractions",
]

log = logging.getLogger("modforge.data")

MAX_META_BYTES = 1024 * 1024
"""Largest ``meta.json`` read when deciding whether a folder is a generated set."""


@dataclasses.dataclass(frozen=True)
class SetKind:
    """What a generator writes.

    Attributes:
        what: its name in messages ("shapes set").
        generator: the ``generator`` its ``meta.json`` records.
        layout: every path it writes, relative to the set's folder, as patterns matched one path
            part at a time (``"images/*/*.png"``: a PNG one folder below ``images``).
    """

    what: str
    generator: str
    layout: tuple[str, ...]

    @property
    def entries(self) -> frozenset[str]:
        """The names at the top of the set's folder."""
        return frozenset(PurePosixPath(p).parts[0] for p in self.layout)

    def wrote(self, relative: str | os.PathLike) -> bool:
        """Whether the generator writes a path like ``relative`` (relative to the set's folder)."""
        parts = PurePosixPath(Path(relative).as_posix()).parts
        for pattern in self.layout:
            wanted = PurePosixPath(pattern).parts
            if len(wanted) == len(parts) and all(fnmatch.fnmatchcase(p, w) for p, w in zip(parts, wanted, strict=True)):
                return True
        return False


def is_integer(value: Any) -> bool:
    """Whether ``value`` is an integer (Python's or numpy's) and not a bool — a generator's count or seed."""
    return isinstance(value, (int, np.integer)) and not isinstance(value, bool)


def check_seed(seed: Any) -> None:
    """A ValueError unless ``seed`` is a non-negative integer."""
    if not is_integer(seed) or seed < 0:
        raise ValueError(f"seed must be a non-negative integer, got {seed!r}")


def split_fractions(split: Sequence[float], names: Sequence[str]) -> tuple[float, ...]:
    """``split`` as three positive fractions summing to 1, one per split of ``names``; a ValueError naming
    the splits otherwise."""
    listed = ", ".join(names)
    try:
        fractions = tuple(float(f) for f in split)
    except (TypeError, ValueError):
        raise ValueError(f"split must be three fractions ({listed}), got {split!r}") from None
    if len(fractions) != 3 or min(fractions) <= 0.0 or abs(sum(fractions) - 1.0) > 1e-6:
        raise ValueError(f"split must be three positive fractions ({listed}) summing to 1, got {split!r}")
    return fractions


def split_counts(total: int, fractions: Sequence[float]) -> list[int]:
    """``total`` items divided by ``fractions`` (rounded; the last split takes the rest)."""
    counts = [int(round(total * f)) for f in fractions[:-1]]
    counts.append(total - sum(counts))
    return counts


def check_target(out: Path, overwrite: bool, kind: SetKind) -> None:
    """Refuse an output folder that is a file or a link, that is not empty (unless ``overwrite``),
    or — with ``overwrite`` — that is not an earlier set of ``kind``: its ``meta.json`` must name
    ``kind.generator``, and every entry under it must be a regular file or real folder the
    generator writes. Nothing is changed.

    Raises:
        ValueError: naming the folder, what was found and what to do.
    """
    try:
        info = os.lstat(out)
    except FileNotFoundError:
        return
    if stat.S_ISLNK(info.st_mode):
        raise ValueError(f"output path {out} is a symbolic link; name the folder itself")
    if not stat.S_ISDIR(info.st_mode):
        raise ValueError(f"output path {out} exists and is not a directory")
    present = sorted(p.name for p in out.iterdir())
    if not present:
        return
    if not overwrite:
        raise ValueError(
            f"output directory {out} is not empty ({len(present)} entries); choose an empty or new directory, "
            f"or pass overwrite=True to replace a {kind.what} made earlier"
        )
    refuse = f"refusing to replace it even with overwrite=True (only a {kind.what} modforge made is replaced)"
    foreign = [name for name in present if name not in kind.entries]
    if foreign:
        raise ValueError(f"output directory {out} holds files that are not part of a {kind.what} "
                         f"({', '.join(foreign[:5])}); {refuse}")  # fmt: skip
    _check_meta(out, kind, refuse)
    found = foreign_entry(out, kind.wrote)
    if found is not None:
        raise ValueError(f"output directory {out} holds {found[0]}, {found[1]} (a {kind.what} has none); {refuse}")


def _check_meta(out: Path, kind: SetKind, refuse: str) -> None:
    meta = out / "meta.json"
    try:
        mode = os.lstat(meta).st_mode
    except FileNotFoundError:
        raise ValueError(f"output directory {out} has no meta.json saying it is a {kind.what}; {refuse}") from None
    if not stat.S_ISREG(mode):
        raise ValueError(f"output directory {out}: meta.json is not a regular file; {refuse}")
    try:
        doc = read_json(meta, what="meta.json", max_bytes=MAX_META_BYTES)
    except JsonLimitError as exc:
        raise ValueError(f"{exc}; {refuse}") from None
    generator = doc.get("generator") if isinstance(doc, dict) else None
    if generator != kind.generator:
        shown = repr(generator)[:60]
        raise ValueError(f"output directory {out}: meta.json names generator {shown}, not {kind.generator!r}: "
                         f"it is not a {kind.what}; {refuse}")  # fmt: skip


def make_staging(out: Path) -> Path:
    """A new, empty, uniquely named hidden folder beside ``out`` (made with ``mkdir``, which never
    follows a link, and with the usual permission mode, unlike ``tempfile.mkdtemp``'s 0700)."""
    out.parent.mkdir(parents=True, exist_ok=True)
    for _ in range(100):
        staging = out.parent / f".{out.name}.partial-{secrets.token_hex(6)}"
        try:
            staging.mkdir()
        except FileExistsError:
            continue
        return staging
    raise FileExistsError(f"could not make a staging folder beside {out}")


def publish(staging: Path, out: Path, kind: SetKind) -> None:
    """Move the finished staging folder to ``out``, replacing an empty folder or an earlier set of
    ``kind`` (checked with :func:`check_target` before generating); the result keeps ``out``'s
    permission mode. The earlier set is removed only if it still holds nothing but what the
    generator writes; otherwise it is left beside ``out`` under a hidden name, with a warning."""
    try:
        info = os.lstat(out)
    except FileNotFoundError:
        staging.rename(out)
        return
    os.chmod(staging, stat.S_IMODE(info.st_mode))
    if not any(out.iterdir()):
        out.rmdir()
        staging.rename(out)
        return
    retired = out.parent / f".{out.name}.old-{secrets.token_hex(6)}"
    out.rename(retired)
    try:
        staging.rename(out)
    except OSError:
        retired.rename(out)  # put the earlier set back: a failed overwrite loses nothing
        raise
    try:
        remove_tree(retired, out.parent, kind.wrote, what=f"the earlier {kind.what}")
    except UnsafePathError as exc:
        log.warning("%s; it was left at %s", exc, retired)


def worker_start_method() -> str:
    """How a generator starts its worker processes: ``fork`` (no start-up cost) only when this
    process runs no other thread — a fork copies whatever locks other threads hold at that moment
    (a queue's, the allocator's) and the worker can wait on them forever — else ``forkserver``,
    else ``spawn``."""
    import multiprocessing
    import threading

    methods = multiprocessing.get_all_start_methods()
    if "fork" in methods and threading.active_count() == 1:
        return "fork"
    return "forkserver" if "forkserver" in methods else "spawn"


def render_jobs(render: Callable[[Any], Any], jobs: Sequence[Any], workers: int) -> Iterator[Any]:
    """``render(job)`` of every job, in this process (``workers == 1``, in order) or in a pool of
    ``workers`` processes started by :func:`worker_start_method` (as they finish: a generator's jobs
    carry their own index and seed, so the set does not depend on the order). ``render`` must be a
    module-level function, the pool pickles it."""
    if workers == 1:
        yield from map(render, jobs)
        return
    import multiprocessing

    chunk = max(1, len(jobs) // (8 * workers))
    with multiprocessing.get_context(worker_start_method()).Pool(int(workers)) as pool:
        yield from pool.imap_unordered(render, jobs, chunksize=chunk)
