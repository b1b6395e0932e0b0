"""Committing a checkpoint whose bytes are already in a temporary file: fsync it, put it
in place under its name and every link name (``last.pt``, ``best.pt``), delete pruned
checkpoints, fsync the directory.

Standard library only, on purpose: the same :func:`commit` runs in-process (synchronous
writers, recovery) and in modforge's *commit helper*, a small process started once per
training process as ``python -I -S checkpoint_commit.py``. Why a process and not a
thread: the commit is a dozen system calls, and a thread has to take the GIL back after
each of them — measured on a 2-vCPU machine, those hand-offs (the training thread waits,
its CPU idles and is woken again) slowed training more than the disk work itself. A
separate process never touches the training process's GIL.

Helper protocol, one JSON object per line: requests ``{"id", "tmp", "path", "links",
"prune"}`` on stdin, answers ``{"id", "error"}`` (``error`` is ``null`` or a message) on
stdout, in request order. The helper runs in its own process group and ignores Ctrl-C
(the training process decides what an interrupt means), and ends at end of input, after
committing everything it was sent — also when the training process was killed.
"""

from __future__ import annotations

import errno
import json
import os
import shutil
import signal
import sys
from collections.abc import Iterable
from typing import BinaryIO

__all__ = ["commit", "finish", "fsync_dir", "serve", "write_all"]


def fsync_dir(directory: str) -> None:
    """Make the renames in ``directory`` durable (a no-op where directories cannot be opened)."""
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


def _fsync_file(path: str) -> None:
    fd = os.open(path, os.O_RDWR)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def _place(source: str, target: str) -> None:
    """Make ``target`` another name of ``source`` (a hard link; a synced copy where the file
    system has none or ``target`` is on another one), replacing an existing ``target``
    atomically."""
    try:
        os.link(source, target)
        return
    except OSError:  # it exists (link under a staging name, rename over it), or no link is possible
        pass
    staged = _staged_name(target)
    try:
        try:
            os.link(source, staged)
        except OSError:  # no hard links here, or another file system: a synced copy
            _copy_to_new(source, staged)
            _fsync_file(staged)
        os.replace(staged, target)
    finally:
        if os.path.lexists(staged):
            os.unlink(staged)


def _copy_to_new(source: str, staged: str) -> None:
    """Copy ``source`` into the new file ``staged`` (``O_EXCL``: never through a link planted there)."""
    flags = os.O_WRONLY | os.O_CREAT | os.O_EXCL | getattr(os, "O_NOFOLLOW", 0) | getattr(os, "O_BINARY", 0)
    fd = os.open(staged, flags, 0o644)
    with open(fd, "wb") as out, open(source, "rb") as src:
        shutil.copyfileobj(src, out, 1 << 20)


def _staged_name(target: str) -> str:
    directory, name = os.path.split(target)
    staged = os.path.join(directory, f".{name}.link-{os.getpid()}")
    if os.path.lexists(staged):  # left by a process killed at this very step
        os.unlink(staged)
    return staged


def commit(tmp: str, path: str, links: Iterable[str] = (), prune: Iterable[str] = ()) -> None:
    """Durably publish the complete file ``tmp`` as ``path`` and as each of ``links``, then
    delete the files in ``prune`` (never one of those names).

    Each name switches atomically from its old file to the new one: a process killed at
    any moment leaves every name pointing to a complete checkpoint.
    """
    targets = [path, *links]
    try:
        _fsync_file(tmp)
        for target in targets[:-1]:
            _place(tmp, target)
        try:
            os.replace(tmp, targets[-1])  # the temporary name itself becomes the last name
        except OSError as exc:
            if exc.errno != errno.EXDEV:
                raise
            _place(tmp, targets[-1])  # a link on another file system: a synced copy
            os.unlink(tmp)
    except BaseException:
        if os.path.lexists(tmp):
            os.unlink(tmp)
        raise
    finish(targets, prune)


def finish(targets: Iterable[str], prune: Iterable[str]) -> None:
    """The last step of :func:`commit`: delete ``prune`` (but none of ``targets``), then make
    the renames durable."""
    targets = list(targets)
    for old in prune:
        if old not in targets:
            try:
                os.unlink(old)
            except FileNotFoundError:
                pass
    for directory in dict.fromkeys(os.path.dirname(t) for t in targets):
        fsync_dir(directory)


def serve(requests: BinaryIO, answers: int) -> None:
    """The helper's loop: commit each request, answer each in order on file descriptor
    ``answers``, until end of input."""
    answering = True
    for line in requests:
        job = json.loads(line)
        try:
            commit(job["tmp"], job["path"], job["links"], job["prune"])
            error = None
        except Exception as exc:  # noqa: BLE001 - reported to the training process
            error = f"{type(exc).__name__}: {exc}"
        if answering:
            try:
                write_all(answers, json.dumps({"id": job["id"], "error": error}).encode() + b"\n")
            except BrokenPipeError:  # the training process is gone: still commit what it sent
                answering = False


def write_all(fd: int, data: bytes) -> None:
    """``os.write`` until every byte is written."""
    view = memoryview(data)
    while view:
        view = view[os.write(fd, view) :]


if __name__ == "__main__":
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    serve(sys.stdin.buffer, sys.stdout.fileno())
