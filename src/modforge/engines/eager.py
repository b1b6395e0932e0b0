"""``eager`` — the model as it is: the reference every other engine is compared with."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from ..core.registries import register_engine
from .base import Capabilities
from .common import MemoryFormat, apply_memory_format
from .weights import WeightsEngine


@register_engine("eager")
class Eager(WeightsEngine):
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

    def __init__(self, memory_format: MemoryFormat = "contiguous"):
        self.memory_format = memory_format

    def prepare(self, model: Any, example: dict[str, Any] | None = None, *, train: bool = False) -> Callable:
        apply_memory_format(model, self.memory_format)
        return model
