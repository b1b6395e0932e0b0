"""``eager`` — the model as it is: the reference every other engine is compared with."""

from __future__ import annotations

import os
from collections.abc import Callable
from pathlib import Path
from typing import Any

from ..core.registries import register_engine
from .artifact import read_torch_artifact, rebuild_model, write_torch_artifact
from .base import Capabilities, Engine
from .common import MemoryFormat, apply_memory_format
from .detection import for_metadata


@register_engine("eager")
class Eager(Engine):
    """Runs the model as written, in PyTorch's eager mode. Trains, on any number of
    devices; saves the weights and the metadata needed to rebuild the model (``.pt``,
    loaded with ``weights_only=True``). A detector's artifact loads as its
    :class:`~.detection.DetectionOutputs` view (image batch → decoded outputs), as it was exported.

    Args:
        memory_format: ``channels_last`` lays the model's 4-D weights out NHWC before training
            (faster convolutions on CPU and on tensor-core GPUs; the same numbers within float
            rounding); ``contiguous`` (default) keeps them as built.
    """

    capabilities = Capabilities(can_train=True, multi_device=True, dynamic_shapes=True, needs_example_input=False)
    suffix = ".pt"

    def __init__(self, memory_format: MemoryFormat = "contiguous"):
        self.memory_format = memory_format

    def arrange(self, model: Any) -> None:
        apply_memory_format(model, self.memory_format)

    def prepare(self, model: Any, example: dict[str, Any] | None = None, *, train: bool = False) -> Callable:
        apply_memory_format(model, self.memory_format)
        return model

    def save(self, runnable: Callable, path: str | os.PathLike, metadata: dict[str, Any]) -> Path:
        model = getattr(runnable, "wrapped_model", runnable)  # a detector's export view: the model's own weights
        return write_torch_artifact(model.state_dict(), path, metadata)

    def load(self, path: str | os.PathLike) -> tuple[Callable, dict[str, Any]]:
        state, metadata = read_torch_artifact(path)
        model = rebuild_model(metadata, path)
        model.load_state_dict(state)
        return for_metadata(model.eval(), metadata), metadata


