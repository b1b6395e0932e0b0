"""The working directory: one for the duration of a block (``contextlib.chdir`` before Python 3.11), and
paths shown as a user would type them from it (:func:`display_path`)."""

from __future__ import annotations

import contextlib
import os
from collections.abc import Iterator
from pathlib import Path

__all__ = ["display_path", "working_directory"]


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


def display_path(path: str | os.PathLike) -> str:
    """A path as a user would type it: relative to the cwd when inside it."""
    p = Path(path)
    try:
        return os.path.relpath(p) if not os.path.relpath(p).startswith("..") else str(p)
    except ValueError:  # another drive on Windows
        return str(p)
