"""Data: in-memory datasets whose batches are dicts, resumable samplers, loaders, audio.

The names below are imported on first use, so ``modforge.data.audio.io`` (numpy and
soundfile only) can be used without importing torch — ``modforge predict`` reads audio
for ONNX artifacts that way.
"""

from __future__ import annotations

from .lazy import lazy_attributes

__all__ = ["ArrayDataset", "DataSplits", "LoaderSettings", "ResumableRandomSampler", "make_loader"]

_WHERE = {
    "ArrayDataset": ".base",
    "DataSplits": ".base",
    "LoaderSettings": ".loader",
    "ResumableRandomSampler": ".loader",
    "make_loader": ".loader",
}

__getattr__ = lazy_attributes(__name__, _WHERE)
