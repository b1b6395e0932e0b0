"""Data: in-memory datasets whose batches are dicts, resumable samplers, loaders, audio.

The names below are imported on first use, so ``modforge.data.audio.io`` (numpy and
soundfile only) can be used without importing torch — ``modforge predict`` reads audio
for ONNX artifacts that way.
"""

from __future__ import annotations

import importlib
from typing import Any

__all__ = ["ArrayDataset", "DataSplits", "LoaderSettings", "ResumableRandomSampler", "make_loader"]

_WHERE = {
    "ArrayDataset": ".base",
    "DataSplits": ".base",
    "LoaderSettings": ".loader",
    "ResumableRandomSampler": ".loader",
    "make_loader": ".loader",
}


def __getattr__(name: str) -> Any:
    if name not in _WHERE:
        raise AttributeError(f"module 'modforge.data' has no attribute {name!r}")
    return getattr(importlib.import_module(_WHERE[name], __name__), name)
