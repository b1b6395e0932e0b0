"""How modforge starts Python children that never import from the current directory.

``python -m MODULE`` (and ``-c``) puts the current directory first on ``sys.path``: a
``yaml.py`` or ``torch.py`` lying where a sweep or ``--nproc`` run was started would be
imported in place of the real module. Sweep trials, torchrun and its workers and Ray tasks
all start through :func:`safe_module_command`, with :func:`safe_child_env` for the processes
*they* start.
"""

from __future__ import annotations

import os
import sys
from collections.abc import Mapping

__all__ = ["SAFE_BOOTSTRAP", "safe_child_env", "safe_module_command"]

SAFE_BOOTSTRAP = ("import sys, runpy; sys.path[:1] = [] if sys.path[:1] == [''] else sys.path[:1]; "
                  "runpy.run_module({module!r}, run_name='__main__', alter_sys=True)")  # fmt: skip
"""Python 3.10 has no ``-P``: ``-c`` puts ``''`` (the cwd) first on ``sys.path``; this drops it
before anything is imported (``site`` ran earlier, without the cwd on the path)."""


def safe_module_command(module: str, *, executable: str | None = None, unbuffered: bool = False) -> list[str]:
    """``python -m MODULE`` that never imports from the current directory: ``-P`` on Python
    3.11+, a bootstrap that drops the cwd entry first on 3.10."""
    python = [executable or sys.executable, *(["-u"] if unbuffered else [])]
    if sys.version_info >= (3, 11):
        return [*python, "-P", "-m", module]
    return [*python, "-c", SAFE_BOOTSTRAP.format(module=module)]


def safe_child_env(base: Mapping[str, str] | None = None, **extra: str) -> dict[str, str]:
    """``base`` (this process's environment) with ``PYTHONSAFEPATH=1`` — Python 3.11+ then puts
    neither the cwd nor a script's folder on ``sys.path`` in any process the child starts."""
    return {**(os.environ if base is None else base), **extra, "PYTHONSAFEPATH": "1"}
