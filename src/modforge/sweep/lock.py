"""The sweep folder's lock: one sweep at a time per folder, and no restarted sweep racing a
trial process a killed sweep left behind.

The lock is an exclusive ``flock`` on ``SWEEP/.lock`` (opened with
:func:`~modforge.core.safe_files.open_lock`: never through a link, never truncated before
it is held). The sweep hands the locked file
descriptor to every trial process it starts (and they to theirs: the checkpoint commit
helper, torchrun's workers), and the kernel releases the lock only when the last process
holding it has ended — so a sweep started again after a SIGKILL waits for its
predecessor's trials to die before it touches their folders.
"""

from __future__ import annotations

import logging
import os
import time
from pathlib import Path

from ..core.config import display_path
from ..core.errors import UsageError
from ..core.safe_files import open_lock

__all__ = ["SweepBusyError", "SweepLock"]

log = logging.getLogger("modforge.sweep")


class SweepBusyError(UsageError):
    """Another sweep, or trial processes of a killed one, still hold the sweep folder."""


class SweepLock:
    """``with SweepLock(folder, wait_s) as lock:`` — hold the folder; ``lock.fd`` to pass on."""

    def __init__(self, folder: Path, wait_s: float = 30.0):
        self.path = folder / ".lock"
        self.wait_s = wait_s
        self.fd = -1

    def __enter__(self) -> SweepLock:
        import fcntl

        self.fd = open_lock(self.path)
        deadline, told = time.monotonic() + self.wait_s, False
        while True:
            try:
                fcntl.flock(self.fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
                break
            except BlockingIOError:
                if time.monotonic() >= deadline:
                    holder = os.pread(self.fd, 64, 0).decode(errors="replace").strip() or "?"
                    os.close(self.fd)
                    raise SweepBusyError(
                        f"sweep folder {display_path(self.path.parent)} is in use by another 'modforge sweep' or "
                        f"by trials it started (pid {holder} took the lock); nothing was changed. Wait for it to "
                        "end, or choose another --sweep-dir"
                    ) from None
                if not told:
                    log.info("waiting for the processes of an earlier sweep in %s to end...",
                             display_path(self.path.parent))  # fmt: skip
                    told = True
                time.sleep(0.1)
        os.ftruncate(self.fd, 0)
        os.pwrite(self.fd, f"{os.getpid()}\n".encode(), 0)
        return self

    def __exit__(self, *exc) -> None:
        if self.fd >= 0:
            os.close(self.fd)  # the trials' copies keep it held until they end
            self.fd = -1
