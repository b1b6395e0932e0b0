"""Unpacking a downloaded archive into a folder: the public entry point, kept where it always was.

The work is done in :mod:`modforge.data.archives` (one module per job: reading members, writing
them by descriptor, the marker, staging); see its docstring for what is refused and why. Import
:func:`extract_archive` and its errors from here or from there: they are the same objects.
"""

from __future__ import annotations

from .archives import *  # noqa: F403  (exactly the package's public names, so the two cannot drift apart)
from .archives import __all__  # noqa: F401
