"""``data.device``: an in-memory training split held on the accelerator.

With ``data.device: cuda`` (or ``auto``: CUDA where there is one, as ``train.device``'s
default), the training split's tensors — a picture corpus's uint8 pictures, a tensor set's
arrays — are copied to the device once, and every batch is cut (and augmented, a whole batch
at a time) there: no loader workers, no host→device copy of the batch. The order and each
sample's draws are the host's (the sampler and per-sample seeds run on the CPU), so a run
resumes exactly as on the CPU. Evaluation splits stay in host memory (they are read as
before: exports and int8 calibration read them on the CPU).
"""

from __future__ import annotations

import os

import torch
from torch.utils.data import Dataset

from ..core.errors import ConfigError

__all__ = ["DEVICE_NAMES", "check_data_device", "place", "resolve_data_device"]

DEVICE_NAMES = ("auto", "cpu", "cuda", "mps", *(f"cuda:{i}" for i in range(8)))
"""The values ``data.device`` takes."""


def check_data_device(value: str | None) -> None:
    """Refuse a ``data.device`` that is not a device name (a ConfigError naming the key)."""
    if value is not None and value not in DEVICE_NAMES:
        raise ConfigError(f"expected one of {', '.join(DEVICE_NAMES)} (or leave it out: batches are then made in "
                          f"host memory), got {value!r}", path="data.device")  # fmt: skip


def resolve_data_device(value: str) -> torch.device:
    """The device ``data.device`` names on this machine: ``auto`` is CUDA when available, else
    the CPU; ``cuda`` in a process group of several processes is this process's GPU (as the
    trainer places the model). A device this machine lacks is a ConfigError."""
    check_data_device(value)
    if value == "auto":
        value = "cuda" if torch.cuda.is_available() else "cpu"
    device = torch.device(value)
    if device.type == "cuda":
        count = torch.cuda.device_count() if torch.cuda.is_available() else 0
        if count == 0:
            raise ConfigError(f"{value!r}: this machine has no CUDA device; use 'auto' or 'cpu', or leave data.device "
                              "out", path="data.device")  # fmt: skip
        if device.index is None:
            import torch.distributed as dist

            distributed = dist.is_available() and dist.is_initialized() and dist.get_world_size() > 1
            device = torch.device("cuda", int(os.environ.get("LOCAL_RANK", "0") or 0) if distributed else 0)
        if device.index >= count:
            raise ConfigError(f"{value!r}: this machine has {count} CUDA device(s)", path="data.device")
    if device.type == "mps" and not (getattr(torch.backends, "mps", None) and torch.backends.mps.is_available()):
        raise ConfigError(f"{value!r}: MPS is not available on this machine", path="data.device")
    return device


def place(dataset: Dataset, value: str) -> Dataset:
    """``dataset`` held on the device ``value`` names (its ``to_device``); a dataset that cannot
    live there (files decoded one at a time, audio) is a ConfigError saying why."""
    device = resolve_data_device(value)
    mover = getattr(dataset, "to_device", None)
    if not callable(mover):
        raise ConfigError(f"a {type(dataset).__name__} cannot live on the device: only data held in memory "
                          "(picture corpora such as MNIST and CIFAR, tensor sets) can; leave data.device out",
                          path="data.device")  # fmt: skip
    try:
        return mover(device)
    except ValueError as exc:
        raise ConfigError(f"this training split cannot live on the device: {exc}; leave data.device out",
                          path="data.device") from None  # fmt: skip
