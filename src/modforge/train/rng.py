"""Seeding and random-number-generator state in a form ``torch.load(weights_only=True)`` reads.

numpy's and Python's generator states are tuples holding arrays and long integers;
they are stored as tensors and lists so checkpoints stay plain data.
"""

from __future__ import annotations

import random
from typing import Any

import numpy as np
import torch

__all__ = ["capture_rng", "restore_rng", "seed_everything"]


def seed_everything(seed: int) -> None:
    """Seed Python's, numpy's and torch's (CPU and all GPUs) global generators."""
    random.seed(seed)
    np.random.seed(seed % 2**32)
    torch.manual_seed(seed)


def capture_rng() -> dict[str, Any]:
    """The state of every global generator, as plain data."""
    kind, keys, pos, has_gauss, cached = np.random.get_state()
    version, internal, gauss = random.getstate()
    state: dict[str, Any] = {
        "torch": torch.get_rng_state(),
        "numpy": {
            "kind": kind,
            "keys": torch.from_numpy(keys.astype(np.int64)),
            "pos": int(pos),
            "has_gauss": int(has_gauss),
            "cached": float(cached),
        },
        "python": {
            "version": version,
            "internal": torch.from_numpy(np.array(internal, dtype=np.int64)),
            "gauss": gauss,
        },
    }
    if torch.cuda.is_initialized():  # a CUDA generator that was never initialised was never used
        state["cuda"] = torch.cuda.get_rng_state_all()
    return state


def restore_rng(state: dict[str, Any]) -> None:
    """Put every global generator back into a :func:`capture_rng` state."""
    torch.set_rng_state(state["torch"])
    n = state["numpy"]
    np.random.set_state((n["kind"], n["keys"].numpy().astype(np.uint32), n["pos"], n["has_gauss"], n["cached"]))
    p = state["python"]
    random.setstate((p["version"], tuple(int(v) for v in p["internal"].tolist()), p["gauss"]))
    if "cuda" in state and torch.cuda.is_available():
        torch.cuda.set_rng_state_all(state["cuda"])
