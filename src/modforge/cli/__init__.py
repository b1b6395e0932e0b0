"""The ``modforge`` command line (the top layer: the only one that prints)."""

from .main import main

__all__ = ["main"]
