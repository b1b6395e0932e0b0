"""``train.qat``: quantization-aware training as a run extension (the preparation itself, and why it
is done this way, is :mod:`modforge.model.qat`).

The extension prepares the named parts once the model is built and its ``model.init`` weights are
loaded (QAT fine-tunes trained weights; a checkpoint of a QAT run then fits the prepared model), and
lets the observers record ranges only while the model trains: evaluation, test, export and predict
use the ranges learned so far. The observers' state is part of the model's ``state_dict``, so the
checkpoints carry it with the weights and nothing else needs saving.
"""

from __future__ import annotations

from torch import nn

from ..core.registries import register_extension
from ..model.qat import QatSettings, observing, prepare_parts
from .extension import RunExtension

__all__ = ["QuantizationAwareTraining"]


@register_extension("qat")
class QuantizationAwareTraining(RunExtension):
    """Train some parts of the model with int8 fake quantization; ``modforge export --engine onnx``
    then writes an int8 graph.

    Args:
        parts: the model's parts trained with fake quantization (``[backbone]``, ``[backbone, neck, head]``).
    """

    engines = ("eager",)
    engine_reason = "train.qat trains fake-quantized parts with the eager engine (export to onnx after)"
    # an int8 graph runs integer kernels where eager simulates them in float: rounding differs by up to
    # a quantization step of an activation, so its export is held to a percent of the outputs
    export_tolerance = 0.01
    half_weights_reason = "its fake quantizers calibrate and round float32 weights"

    def __init__(self, parts: list[str] | None = None):
        self.settings = QatSettings(list(parts) if parts is not None else ["backbone"])

    def prepare_model(self, model: nn.Module, example) -> None:
        prepare_parts(model, self.settings.parts, example)

    def set_training(self, model: nn.Module, training: bool) -> None:
        observing(model, training)
