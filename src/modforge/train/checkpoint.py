"""Checkpoint files: written atomically (in the background), read without running code.

Writing: the payload is serialized on the training thread, the moment it is taken (so the
file holds exactly that state, and the GIL-bound pickling never competes with the
training thread from another thread — measured, that competition cost more than the
pickling itself). A single background thread then does the disk work, which is system
calls with only brief Python in between: it writes the bytes to a temporary file in the same directory in one call,
fsyncs, renames it into place (``os.replace``), re-points ``last.pt`` (and ``best.pt``
when asked) to it the same way and fsyncs the directory once. A process killed at any
moment leaves either the previous complete checkpoint or the new complete one — never a
torn ``last.pt``. Training does not wait for the disk; :meth:`CheckpointWriter.wait` does,
at the end.

Reading: ``torch.load(weights_only=True)`` only: a file that would need to run code to
unpickle is refused with :class:`UnsafeCheckpointError` and the code never runs. A
truncated or damaged file is a :class:`CorruptCheckpointError`; :func:`find_resumable`
then falls back to the newest older checkpoint that loads, with a warning.
"""

from __future__ import annotations

import io
import logging
import os
import pickle
import queue
import re
import shutil
import threading
from collections.abc import Iterable
from pathlib import Path
from typing import Any

import torch

from ..core.errors import UsageError

__all__ = [
    "CHECKPOINT_FORMAT",
    "CheckpointError",
    "CheckpointWriter",
    "CorruptCheckpointError",
    "UnsafeCheckpointError",
    "atomic_save",
    "find_resumable",
    "list_checkpoints",
    "load_checkpoint",
    "point_to",
    "serialize",
]

log = logging.getLogger("modforge.train")
CHECKPOINT_FORMAT = "modforge.checkpoint/1"
_NAME = re.compile(r"^epoch(\d+)-step(\d+)\.pt$")


class CheckpointError(UsageError):
    """A checkpoint that cannot be used (missing, not a modforge checkpoint...)."""


class CorruptCheckpointError(CheckpointError):
    """A checkpoint file that is truncated or damaged."""


class UnsafeCheckpointError(CheckpointError):
    """A checkpoint that holds objects whose unpickling would run code; refused unread."""


def _fsync_dir(directory: Path) -> None:
    try:
        fd = os.open(directory, os.O_RDONLY)
    except OSError:
        return
    try:
        os.fsync(fd)
    except OSError:
        pass
    finally:
        os.close(fd)


def serialize(payload: Any) -> memoryview:
    """The bytes ``torch.save`` would write, capturing the state at this moment (a view
    of the buffer, not a copy of it)."""
    buffer = io.BytesIO()
    torch.save(payload, buffer)
    return buffer.getbuffer()


def atomic_save(payload: Any, path: str | os.PathLike, *, sync_dir: bool = True) -> Path:
    """Write ``payload`` (an object, or bytes from :func:`serialize`) to a temporary file,
    fsync, rename over ``path`` (then fsync the directory, unless the caller does it once
    for several renames)."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f".{path.name}.tmp-{os.getpid()}-{threading.get_ident()}")
    try:
        with open(tmp, "wb") as fh:
            if isinstance(payload, (bytes, bytearray, memoryview)):
                fh.write(payload)  # one write: one GIL release, whatever the number of tensors
            else:
                torch.save(payload, fh)
            fh.flush()
            os.fsync(fh.fileno())
        os.replace(tmp, path)
    finally:
        if tmp.exists():
            tmp.unlink()
    if sync_dir:
        _fsync_dir(path.parent)
    return path


def point_to(target: Path, link: Path, *, sync_dir: bool = True) -> None:
    """Make ``link`` (e.g. ``last.pt``) a hard link to ``target``, atomically (a copy
    where hard links are not supported)."""
    tmp = link.with_name(f".{link.name}.tmp-{os.getpid()}")
    if tmp.exists():
        tmp.unlink()
    try:
        os.link(target, tmp)
    except OSError:
        shutil.copyfile(target, tmp)
    os.replace(tmp, link)
    if sync_dir:
        _fsync_dir(link.parent)


class CheckpointWriter:
    """One background thread writing checkpoints in submission order.

    Errors in the thread are re-raised on the training thread at the next
    :meth:`submit` or :meth:`wait`, so a full disk stops training loudly.
    """

    def __init__(self, asynchronous: bool = True):
        self.asynchronous = asynchronous
        self._queue: queue.Queue = queue.Queue()
        self._error: BaseException | None = None
        self._thread: threading.Thread | None = None

    def submit(self, data: bytes | memoryview, path: Path, links: Iterable[Path] = (), prune: Iterable[Path] = ()) -> None:
        """Write ``data`` (from :func:`serialize`) to ``path`` in the background, then point
        each of ``links`` at it, then delete the files in ``prune``."""
        self._raise_pending()
        if not isinstance(data, (bytes, bytearray, memoryview)):
            raise TypeError(f"CheckpointWriter.submit takes serialized bytes (see serialize()), got {type(data).__name__}")
        job = (data, Path(path), [Path(p) for p in links], [Path(p) for p in prune])
        if not self.asynchronous:
            self._run(job)
            self._raise_pending()
            return
        if self._thread is None or not self._thread.is_alive():
            self._thread = threading.Thread(target=self._loop, name="modforge-checkpoint-writer", daemon=True)
            self._thread.start()
        self._queue.put(job)

    def wait(self) -> None:
        """Block until every submitted checkpoint is on disk; re-raise a writer error."""
        if self._thread is not None and self._thread.is_alive():
            self._queue.join()
        self._raise_pending()

    def _loop(self) -> None:
        while True:
            job = self._queue.get()
            try:
                self._run(job)
            finally:
                self._queue.task_done()

    def _run(self, job: tuple) -> None:
        data, path, links, prune = job
        try:
            atomic_save(data, path, sync_dir=False)
            for link in links:
                point_to(path, link, sync_dir=False)
            for old in prune:
                if old.exists() and old != path:
                    old.unlink()
            _fsync_dir(path.parent)  # one directory sync makes every rename above durable
        except BaseException as exc:  # noqa: BLE001 - handed to the training thread
            self._error = exc

    def _raise_pending(self) -> None:
        if self._error is not None:
            error, self._error = self._error, None
            raise CheckpointError(f"writing a checkpoint failed: {type(error).__name__}: {error}") from error


def load_checkpoint(path: str | os.PathLike) -> dict[str, Any]:
    """Read a modforge checkpoint safely (``weights_only=True``), onto the CPU.

    Raises:
        CheckpointError: missing, or not a modforge checkpoint.
        UnsafeCheckpointError: it would need to execute code to load; nothing was run.
        CorruptCheckpointError: truncated or damaged.
    """
    path = Path(path)
    if not path.is_file():
        raise CheckpointError(f"checkpoint not found: {path}")
    try:
        payload = torch.load(path, map_location="cpu", weights_only=True)
    except pickle.UnpicklingError as exc:
        found = re.search(r"(?:Unsupported global: GLOBAL|unsupported GLOBAL) ([\w.]+)", str(exc))
        if found:  # the file asks to import and call something: exactly what weights_only exists to stop
            raise UnsafeCheckpointError(
                f"refused to load {path}: it references {found.group(1)}, and unpickling that could run code; "
                "nothing in it was executed"
            ) from None
        raise CorruptCheckpointError(
            f"{path} is not a readable checkpoint (damaged, or not written by torch.save)"
        ) from None
    except (EOFError, RuntimeError, ValueError, OSError, KeyError, IndexError) as exc:
        text = " ".join(str(exc).split()) or type(exc).__name__
        raise CorruptCheckpointError(f"{path} is truncated or damaged ({text[:200]})") from None
    if not isinstance(payload, dict) or payload.get("format") != CHECKPOINT_FORMAT:
        raise CheckpointError(f"{path} is not a modforge checkpoint (expected format {CHECKPOINT_FORMAT!r})")
    return payload


def list_checkpoints(directory: Path) -> list[Path]:
    """Periodic checkpoints in ``directory``, newest (highest epoch, step) first."""
    found = []
    for entry in Path(directory).glob("epoch*-step*.pt"):
        match = _NAME.match(entry.name)
        if match:
            found.append(((int(match.group(1)), int(match.group(2))), entry))
    return [p for _, p in sorted(found, reverse=True)]


def find_resumable(target: str | os.PathLike) -> tuple[Path, dict[str, Any]]:
    """The checkpoint to resume from: a file as given, or a run folder's ``last.pt`` —
    falling back, with a warning, to the newest older checkpoint that loads.

    Raises:
        CheckpointError: nothing loadable was found (each file's problem is listed).
    """
    target = Path(target)
    if target.is_file():
        return target, load_checkpoint(target)
    directory = target / "checkpoints" if (target / "checkpoints").is_dir() else target
    if not directory.is_dir():
        raise CheckpointError(f"nothing to resume at {target}: not a checkpoint file or a run folder")
    candidates = [directory / "last.pt", *list_checkpoints(directory)]
    problems = []
    for candidate in candidates:
        if not candidate.exists():
            continue
        try:
            payload = load_checkpoint(candidate)
        except UnsafeCheckpointError:
            raise
        except CheckpointError as exc:
            problems.append(str(exc))
            continue
        if problems:
            log.warning("%s; resuming from %s instead", "; ".join(problems), candidate)
        return candidate, payload
    detail = "; ".join(problems) if problems else "no checkpoint files"
    raise CheckpointError(f"no usable checkpoint in {directory} ({detail})")
