"""The commit helper process, seen from the training process: started on first use, shared
by every :class:`~.checkpoint.CheckpointWriter` of the process, ended at exit.

Training hands it a :class:`CommitJob` (a fully written temporary file and the names it
must get) and goes on; the helper runs :func:`~.checkpoint_commit.commit` and answers.
Answers are read without blocking at the next hand-over, and blocking only in
:meth:`CommitHelper.drain` (end of training). If the helper ends unexpectedly, every job
it had not confirmed is committed on the training thread — nothing written is lost — and
the process commits its own checkpoints from then on. Where no helper can be started
(no ``posix_spawn``, no interpreter path), :meth:`CommitHelper.send` says so and the
writer commits on its own thread.
"""

from __future__ import annotations

import atexit
import dataclasses
import json
import logging
import os
import sys
import threading
from pathlib import Path
from typing import TYPE_CHECKING

if TYPE_CHECKING:  # pragma: no cover
    from .checkpoint import CheckpointWriter

__all__ = ["HELPER", "CommitHelper", "CommitJob"]

log = logging.getLogger("modforge.train")
WORKER = str(Path(__file__).with_name("checkpoint_commit.py"))


@dataclasses.dataclass
class CommitJob:
    """A checkpoint already written to ``tmp``: publish it as ``path`` and ``links``, delete ``prune``."""

    tmp: str
    path: str
    links: list[str]
    prune: list[str]


class CommitHelper:
    """One helper process per training process (see the module docstring)."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._usable = hasattr(os, "posix_spawn") and bool(sys.executable)
        self._pid: int | None = None
        self._requests = self._answers = -1
        self._jobs: dict[int, tuple[CheckpointWriter, CommitJob]] = {}  # sent, not yet answered (in order)
        self._next_id = 0
        self._partial = b""

    @property
    def pid(self) -> int | None:
        """The helper's process id while it runs."""
        return self._pid

    def send(self, writer: CheckpointWriter, job: CommitJob) -> bool:
        """Hand ``job`` to the helper; False when there is none (commit it yourself)."""
        with self._lock:
            if self._pid is None and not (self._usable and self._start()):
                return False
            self._collect(block=False)
            if self._pid is None:  # it ended while we read
                return False
            job_id, self._next_id = self._next_id, self._next_id + 1
            line = json.dumps({"id": job_id, **dataclasses.asdict(job)}).encode() + b"\n"
            try:
                _write_all(self._requests, line)
            except OSError:
                self._lost("its input pipe broke")
                return False
            self._jobs[job_id] = (writer, job)
            writer.unanswered += 1
            return True

    def drain(self, writer: CheckpointWriter) -> None:
        """Wait until the helper has answered every job of ``writer``."""
        with self._lock:
            while writer.unanswered and self._pid is not None:
                self._collect(block=True)

    def close(self) -> None:
        """End the helper after it has committed everything it was sent (at exit)."""
        with self._lock:
            if self._pid is None:
                return
            os.close(self._requests)
            os.set_blocking(self._answers, True)
            while self._pid is not None:
                self._collect(block=True)  # until end of output: then it has finished

    # ----------------------------------------------------------------- internals
    def _start(self) -> bool:
        request_read, request_write = os.pipe()
        answer_read, answer_write = os.pipe()
        try:
            pid = os.posix_spawn(
                sys.executable,
                [sys.executable, "-I", "-S", WORKER],
                os.environ,
                file_actions=[(os.POSIX_SPAWN_DUP2, request_read, 0), (os.POSIX_SPAWN_DUP2, answer_write, 1)],
            )
        except OSError as exc:
            for fd in (request_read, request_write, answer_read, answer_write):
                os.close(fd)
            self._usable = False
            log.debug("no checkpoint commit helper (%s); checkpoints are committed on the training thread", exc)
            return False
        os.close(request_read)
        os.close(answer_write)
        os.set_blocking(answer_read, False)
        self._pid, self._requests, self._answers = pid, request_write, answer_read
        return True

    def _collect(self, block: bool) -> None:
        """Read the answers available (with ``block``: wait for at least one read)."""
        os.set_blocking(self._answers, block)
        while True:
            try:
                chunk = os.read(self._answers, 1 << 16)
            except BlockingIOError:
                return
            if not chunk:
                self._ended()
                return
            *lines, self._partial = (self._partial + chunk).split(b"\n")
            for line in lines:
                answer = json.loads(line)
                writer, _ = self._jobs.pop(answer["id"])
                writer.unanswered -= 1
                if answer["error"]:
                    writer.failed(answer["error"])
            if block:
                return

    def _ended(self) -> None:
        """End of the helper's output: reap it; unexpected unless :meth:`close` asked."""
        pid, self._pid = self._pid, None
        os.close(self._answers)
        try:
            _, status = os.waitpid(pid, 0)
            code = os.waitstatus_to_exitcode(status)
        except ChildProcessError:
            code = None
        if self._jobs or code:
            self._recover(f"the checkpoint commit helper (pid {pid}) ended unexpectedly (exit status {code})")

    def _lost(self, why: str) -> None:
        """The helper cannot take more work: let it finish what it has, then recover the rest."""
        try:
            os.close(self._requests)
        except OSError:
            pass
        os.set_blocking(self._answers, True)
        while self._pid is not None:
            self._collect(block=True)
        if self._usable:  # _ended found nothing to recover
            self._recover(f"the checkpoint commit helper stopped ({why})")

    def _recover(self, why: str) -> None:
        """Commit every unanswered job here (one the helper finished unanswered is left alone)."""
        self._usable = False
        log.warning("%s; committing checkpoints on the training thread from now on", why)
        jobs, self._jobs = list(self._jobs.values()), {}
        for writer, job in jobs:
            writer.unanswered -= 1
            if os.path.exists(job.tmp) or not os.path.exists(job.path):
                writer.commit_here(job)

    def _after_fork(self) -> None:
        """In a forked child: the helper belongs to the parent; forget it (the child starts its own)."""
        self._lock = threading.Lock()
        if self._pid is not None:
            for fd in (self._requests, self._answers):
                try:
                    os.close(fd)
                except OSError:
                    pass
        self._pid, self._jobs, self._partial = None, {}, b""


def _write_all(fd: int, data: bytes) -> None:
    view = memoryview(data)
    while view:
        view = view[os.write(fd, view) :]


HELPER = CommitHelper()
atexit.register(HELPER.close)
if hasattr(os, "register_at_fork"):
    os.register_at_fork(after_in_child=HELPER._after_fork)
