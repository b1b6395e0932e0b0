"""Checkpoint files: written atomically without making training wait, read without running code.

Writing: the payload is serialized on the training thread, the moment it is taken (so the
file holds exactly that state; pickling on another thread would compete for the GIL —
measured, that competition cost more than the pickling itself), and written to a
temporary file next to its final name. Making it durable and visible — fsync, rename into
place, re-point ``last.pt`` (and ``best.pt``), prune old files, fsync the directory — is
handed to the commit helper process (:mod:`.commit_helper`, :mod:`.checkpoint_commit`).
A process killed at any moment leaves either the previous complete checkpoint or the new
complete one under every name — never a torn ``last.pt``. :meth:`CheckpointWriter.wait`
waits for the helper, at the end of training.

Reading: ``torch.load(weights_only=True)`` only: a file that would need to run code to
unpickle is refused with :class:`UnsafeCheckpointError` and the code never runs. A
truncated or damaged file is a :class:`CorruptCheckpointError`; :func:`find_resumable`
then falls back to the newest older checkpoint that loads, with a warning.

Integrity: the file is a zip archive holding a CRC-32 of every record (the pickle and each
tensor's bytes), written by ``torch.save`` as it serializes (forced on while modforge
saves) and checked against the bytes before ``torch.load`` reads them — which PyTorch
itself never does (see :mod:`modforge.core.integrity`).
"""

from __future__ import annotations

import io
import itertools
import logging
import os
import re
from collections.abc import Iterable, Sequence
from pathlib import Path
from typing import Any

import torch

from ..core.errors import UsageError
from ..core.integrity import torch_zip_checksums
from ..core.safe_files import UnsafePathError, ensure_folder
from ..core.weight_formats import UnsafeFileError, WeightFormatError, read_torch_file
from .checkpoint_commit import commit
from .commit_helper import HELPER, CommitJob

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
    "load_weights",
    "remove_abandoned_temps",
    "serialize",
    "write_temp",
]

log = logging.getLogger("modforge.train")
CHECKPOINT_FORMAT = "modforge.checkpoint/1"
_NAME = re.compile(r"^epoch(\d+)-step(\d+)\.pt$")
# write_temp's names (".NAME.tmp-PID[+PID...]-N") and the commit's staging names (".NAME.link-PID")
_TEMP = re.compile(r"^\..+\.(?:tmp|link)-(\d+(?:\+\d+)*)(?:-\d+)?$")
_TEMP_NUMBERS = itertools.count()


class CheckpointError(UsageError):
    """A checkpoint that cannot be used (missing, not a modforge checkpoint...)."""


class CorruptCheckpointError(CheckpointError):
    """A checkpoint file that is truncated or damaged."""


class UnsafeCheckpointError(CheckpointError):
    """A checkpoint that holds objects whose unpickling would run code; refused unread."""


def serialize(payload: Any) -> memoryview:
    """The bytes ``torch.save`` would write, every record's CRC-32 included, capturing the
    state at this moment (a view of the buffer, not a copy of it)."""
    buffer = io.BytesIO()
    with torch_zip_checksums():
        torch.save(payload, buffer)
    return buffer.getbuffer()


def write_temp(data: bytes | memoryview, path: Path, owners: Iterable[int] = ()) -> Path:
    """Write ``data`` to a new temporary file next to ``path`` (one system call into the
    page cache; not yet durable — :func:`~.checkpoint_commit.commit` does that).

    The name is unique and carries the ids of the processes that may still commit it
    (this one and ``owners``), so :func:`remove_abandoned_temps` never removes a file that
    a live process is about to publish.
    """
    ensure_folder(path.parent)
    pids = "+".join(str(pid) for pid in (os.getpid(), *owners))
    flags = os.O_WRONLY | os.O_CREAT | os.O_EXCL | getattr(os, "O_BINARY", 0)
    while True:
        tmp = path.with_name(f".{path.name}.tmp-{pids}-{next(_TEMP_NUMBERS)}")
        try:
            fd = os.open(tmp, flags, 0o644)
            break
        except FileExistsError:  # left by an earlier process with the same id
            continue
    try:
        view = memoryview(data).cast("B")
        while view:
            view = view[os.write(fd, view) :]
    except BaseException:
        os.close(fd)
        tmp.unlink(missing_ok=True)
        raise
    os.close(fd)
    return tmp


def atomic_save(payload: Any, path: str | os.PathLike) -> Path:
    """Write ``payload`` (an object, or bytes from :func:`serialize`) to ``path`` atomically
    and durably, on this thread: temporary file, fsync, rename, directory fsync."""
    path = Path(path).absolute()
    data = payload if isinstance(payload, (bytes, bytearray, memoryview)) else serialize(payload)
    commit(str(write_temp(data, path)), str(path))
    return path


class CheckpointWriter:
    """Writes checkpoints in submission order without making training wait for the disk.

    :meth:`submit` writes the bytes to a temporary file on the calling thread (a memory
    copy into the page cache) and hands the rest — fsync, renames, links, pruning — to
    the commit helper process (see :mod:`.checkpoint_commit`); where no helper can run
    (or with ``asynchronous=False``) it commits on the spot. A failed commit is raised
    as :class:`CheckpointError` at the next :meth:`submit` or :meth:`wait`, so a full
    disk stops training loudly.
    """

    def __init__(self, asynchronous: bool = True):
        self.asynchronous = asynchronous
        self._error: str | None = None

    @property
    def unanswered(self) -> int:
        """Checkpoints handed to the helper and not yet confirmed."""
        return HELPER.unanswered(self)

    def submit(self, data: bytes | memoryview, path: Path, links: Iterable[Path] = (), prune: Iterable[Path] = ()) -> None:
        """Write ``data`` (from :func:`serialize`) to ``path``, then point each of ``links``
        at it, then delete the files in ``prune``."""
        self._raise_pending()
        if not isinstance(data, (bytes, bytearray, memoryview)):
            raise TypeError(f"CheckpointWriter.submit takes serialized bytes (see serialize()), got {type(data).__name__}")
        path = Path(path).absolute()
        helper = HELPER.ensure() if self.asynchronous else None
        try:
            tmp = write_temp(data, path, owners=() if helper is None else (helper,))
        except (OSError, UnsafePathError) as exc:
            raise CheckpointError(f"writing a checkpoint failed: {type(exc).__name__}: {exc}") from exc
        job = CommitJob(str(tmp), str(path), [str(Path(p).absolute()) for p in links],
                        [str(Path(p).absolute()) for p in prune])
        if helper is None or not HELPER.send(self, job):
            self.commit_here(job)
        self._raise_pending()

    def wait(self) -> None:
        """Block until every submitted checkpoint is on disk; re-raise a commit error."""
        HELPER.drain(self)
        self._raise_pending()

    def commit_here(self, job: CommitJob) -> None:
        """Commit ``job`` on this thread, recording (not raising) a failure."""
        try:
            commit(job.tmp, job.path, job.links, job.prune)
        except OSError as exc:
            self.failed(f"{type(exc).__name__}: {exc}")

    def failed(self, error: str) -> None:
        if self._error is None:
            self._error = error

    def _raise_pending(self) -> None:
        if self._error is not None:
            error, self._error = self._error, None
            raise CheckpointError(f"writing a checkpoint failed: {error}")


def load_checkpoint(path: str | os.PathLike) -> dict[str, Any]:
    """Read a modforge checkpoint safely (``weights_only=True``), onto the CPU.

    Raises:
        CheckpointError: missing, or not a modforge checkpoint.
        UnsafeCheckpointError: it would need to execute code to load; nothing was run.
        CorruptCheckpointError: truncated or damaged (a record's bytes do not match the
            checksum written with them, or the file cannot be parsed).
    """
    path = Path(path)
    if not path.is_file():
        raise CheckpointError(f"checkpoint not found: {path}")
    try:
        payload = read_torch_file(path)
    except UnsafeFileError as exc:
        raise UnsafeCheckpointError(str(exc)) from None
    except WeightFormatError as exc:
        raise CorruptCheckpointError(str(exc)) from None
    if not isinstance(payload, dict) or payload.get("format") != CHECKPOINT_FORMAT:
        raise CheckpointError(f"{path} is not a modforge checkpoint (expected format {CHECKPOINT_FORMAT!r})")
    return payload


def load_weights(model: torch.nn.Module, state: Any, what: str) -> None:
    """Load a checkpoint's weights into ``model``; a misfit is one message, not torch's dump.

    Raises:
        CheckpointError: no weights, or keys missing, unexpected or of another shape (the
            first few of each named) — ``what`` names the file.
    """
    if not isinstance(state, dict):
        raise CheckpointError(f"{what} holds no model weights")
    target = model.state_dict()
    missing = [k for k in target if k not in state]
    unexpected = [str(k) for k in state if k not in target]
    resized = _quantization_statistics(model)  # their modules resize them on loading (per-channel ranges)
    mismatched = [k for k, v in state.items()
                  if k in target and getattr(v, "shape", None) != target[k].shape and not k.startswith(resized)]  # fmt: skip
    if missing or unexpected or mismatched:
        parts = [f"{len(keys)} {label}: {', '.join(keys[:5])}{' …' if len(keys) > 5 else ''}"
                 for label, keys in (("missing", missing), ("unexpected", unexpected), ("mis-shaped", mismatched))
                 if keys]  # fmt: skip
        raise CheckpointError(f"the weights in {what} do not fit the model its config builds ({'; '.join(parts)})")
    model.load_state_dict(state)


def _quantization_statistics(model: torch.nn.Module) -> tuple[str, ...]:
    """The state-dict prefixes of the model's fake-quantization modules (``train.qat``): their
    scales and observed ranges are sized by the data they saw, and they load any size."""
    return tuple(f"{name}." for name, module in model.named_modules()
                 if name and type(module).__name__ == "FakeQuantize")  # fmt: skip


def remove_abandoned_temps(directory: Path) -> list[Path]:
    """Delete the temporary files that processes killed mid-save left in ``directory``
    (only those whose process is gone: a live one may still be committing its file)."""
    removed = []
    if os.name != "posix" or not directory.is_dir():
        return removed
    for entry in directory.iterdir():
        match = _TEMP.match(entry.name)
        if match is None:
            continue
        pids = [int(pid) for pid in match.group(1).split("+")]
        if os.getpid() in pids or any(_alive(pid) for pid in pids):
            continue
        entry.unlink(missing_ok=True)
        removed.append(entry)
    return removed


def _alive(pid: int) -> bool:
    """Whether process ``pid`` still runs. A zombie does not: a commit helper orphaned by a killed
    trainer lingers as one where nothing reaps orphans (a container whose first process is not an
    init), and its temporary files would otherwise be kept forever."""
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:  # no /proc (macOS), or it ended just now: signal 0 answered, so trust it
        return True
    return stat[stat.rfind(")") + 2 :][:1] not in ("Z", "X")  # the state follows the parenthesised name


def list_checkpoints(directory: Path) -> list[Path]:
    """Periodic checkpoints in ``directory``, newest (highest epoch, step) first."""
    found = []
    for entry in Path(directory).glob("epoch*-step*.pt"):
        match = _NAME.match(entry.name)
        if match:
            found.append(((int(match.group(1)), int(match.group(2))), entry))
    return [p for _, p in sorted(found, reverse=True)]


def find_resumable(
    target: str | os.PathLike, first: Sequence[str] = ("last.pt",), using: str = "resuming from"
) -> tuple[Path, dict[str, Any]]:
    """The checkpoint to resume from: a file as given, or a run folder's ``last.pt`` —
    falling back, with a warning, to the newest older checkpoint that loads.

    Args:
        first: the names tried, in order, before the periodic checkpoints (``modforge test``
            tries ``best.pt``, then ``last.pt``); a missing one is skipped silently.
        using: what the fallback warning says is done with the file chosen instead.

    Raises:
        CheckpointError: nothing loadable was found (each file's problem is listed).
        UnsafeCheckpointError: a file would run code when loaded (never skipped silently).
    """
    target = Path(target)
    if target.is_file():
        return target, load_checkpoint(target)
    directory = target / "checkpoints" if (target / "checkpoints").is_dir() else target
    if not directory.is_dir():
        raise CheckpointError(f"nothing to resume at {target}: not a checkpoint file or a run folder")
    candidates = list(dict.fromkeys([*(directory / name for name in first), *list_checkpoints(directory)]))
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
            log.warning("%s; %s %s instead", "; ".join(problems), using, candidate)
        return candidate, payload
    detail = "; ".join(problems) if problems else "no checkpoint files"
    raise CheckpointError(f"no usable checkpoint in {directory} ({detail})")
