"""Data: in-memory datasets whose batches are dicts, resumable samplers, loaders."""

from .base import ArrayDataset, DataSplits
from .loader import LoaderSettings, ResumableRandomSampler, make_loader

__all__ = ["ArrayDataset", "DataSplits", "LoaderSettings", "ResumableRandomSampler", "make_loader"]
