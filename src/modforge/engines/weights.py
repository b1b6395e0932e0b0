"""What ``eager`` and ``compile`` share: an engine whose artifact is the eager model's weights plus metadata
(``.pt``, read back with ``weights_only=True`` and loaded into the model rebuilt from the metadata), and
whose ``memory_format`` lays the model's 4-D weights out before training."""

from __future__ import annotations

import os
from collections.abc import Callable
from pathlib import Path
from typing import Any

from .artifact import read_torch_artifact, rebuild_model, write_torch_artifact
from .base import Engine
from .common import MemoryFormat, apply_memory_format
from .detection import for_metadata

__all__ = ["WeightsEngine"]


class WeightsEngine(Engine):
    """Base of the engines that save the eager weights (subclasses set :attr:`capabilities`, implement
    :meth:`prepare` and may run the loaded model through it, as ``compile`` does)."""

    suffix = ".pt"
    memory_format: MemoryFormat = "contiguous"

    def arrange(self, model: Any) -> None:
        apply_memory_format(model, self.memory_format)

    def save(self, runnable: Callable, path: str | os.PathLike, metadata: dict[str, Any]) -> Path:
        model = getattr(runnable, "_orig_mod", runnable)  # torch.compile's wrapper: the model it compiled
        model = getattr(model, "wrapped_model", model)  # a detector's export view: the model's own weights
        return write_torch_artifact(model.state_dict(), path, metadata)

    def load(self, path: str | os.PathLike) -> tuple[Callable, dict[str, Any]]:
        """The rebuilt model in eval mode (a detector: its export view, as it was exported) and the metadata."""
        state, metadata = read_torch_artifact(path)
        model = rebuild_model(metadata, path)
        model.load_state_dict(state)
        return for_metadata(model.eval(), metadata), metadata
