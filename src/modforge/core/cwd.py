"""A working directory for the duration of a block (``contextlib.chdir`` before Python 3.11)."""

from __future__ import annotations

import contextlib
import os
from collections.abc import Iterator

__all__ = ["working_directory"]


@contextlib.contextmanager
def working_directory(folder: str | os.PathLike) -> Iterator[None]:
    """``folder`` as the process's working directory inside the block, the previous one after
    (process-wide: for code that writes beside itself or reads the cwd, run from one thread)."""
    previous = os.getcwd()
    os.chdir(folder)
    try:
        yield
    finally:
        os.chdir(previous)
