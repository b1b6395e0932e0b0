"""Running Mammoth's own code from a checkout of it (``continual_mammoth.py``; the parity recording
``tests/fixtures/record_mammoth_replay.py`` does the same): its top-level packages put on the path and
its ``datasets`` package entered without the ``__init__.py`` that imports every dataset module."""

from __future__ import annotations

import sys
import types
from pathlib import Path


def enter_mammoth(mammoth: Path, why: str) -> None:
    """Make the Mammoth tree ``mammoth`` importable (``utils``, ``models``, ``backbone``...). Its
    ``datasets/__init__.py`` imports every dataset module (some fetch CLIP weights on import), so the package
    is entered without it; the models import only ``get_dataset``, unused here: it raises, saying ``why``
    (who gives the models their dataset)."""
    sys.path.insert(0, str(mammoth))
    package = types.ModuleType("datasets")
    package.__path__ = [str(mammoth / "datasets")]

    def _no_dataset(*args, **kwargs):
        raise RuntimeError(why)

    package.get_dataset = package.get_dataset_names = package.get_dataset_config_names = _no_dataset
    sys.modules["datasets"] = package
