"""The exportable view of a detector: padded image batch → every location's decoded outputs.

A detector's head ends in data-dependent work — a score threshold, top-k, and NMS, a loop
whose length depends on the boxes — that tracing freezes and the ONNX exporter cannot
express. So an exported detector stops just before it: :class:`DetectionOutputs` runs the
model's stages on the normalised, zero-padded batch and, in place of the head's ``forward``,
the head's ``export_outputs(batch)`` — for ``fcos``, one ``[B, P, C + 6]`` tensor of
unclipped boxes, class probabilities, quality and level per location
(:func:`~modforge.components.heads.fcos.fcos_outputs`). Nothing in it depends on the values,
so a trace (TorchScript) or an ONNX export records it exactly, with free batch, height and
width. The post-processing the head would have run — its settings, ``export_settings()``,
recorded in the artifact's metadata under ``postprocess`` — runs after the runtime
(:mod:`modforge.tasks.detection.predict`, numpy only, so an ONNX detector predicts without
torch), and gives the eager model's ``dt_bboxes``.

A head of your own is exportable when it defines ``export_outputs(batch) -> Tensor`` and
``export_settings() -> dict`` (with a ``type`` the predictor knows).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import torch
import torch.nn as nn

from .base import EngineError

__all__ = ["DetectionOutputs", "detection_head", "for_metadata"]


def detection_head(model: Any) -> tuple[str, nn.Module]:
    """``(stage name, part)`` of the model's exportable detection head (its last stage).

    Raises:
        EngineError: the model is not a modular model, or its last stage cannot be exported.
    """
    infos = getattr(model, "stage_info", None)
    if not infos or not hasattr(model, "with_parts"):
        raise EngineError(f"a detector is exported from a modular model (built by modforge), not {type(model).__name__}")
    info = infos[-1]
    head = model.parts[info.name]
    if not (callable(getattr(head, "export_outputs", None)) and callable(getattr(head, "export_settings", None))):
        raise EngineError(
            f"the detector's last stage '{info.name}' ({info.kind} '{info.type}') cannot be exported: it defines no "
            "export_outputs(batch) and export_settings() (the decoded per-location outputs and the post-processing "
            "settings an artifact needs; see modforge.engines.detection)"
        )
    return info.name, head


class _Decoding(nn.Module):
    """Stands in for the head in the export view: writes ``export_outputs(batch)`` under the
    head's output key, and nothing else (no losses, no post-processing)."""

    def __init__(self, head: nn.Module, key: str):
        super().__init__()
        self.head, self.key = head, key

    def forward(self, batch: Mapping[str, Any]) -> dict[str, torch.Tensor]:
        return {self.key: self.head.export_outputs(batch)}


class DetectionOutputs(nn.Module):
    """``model`` seen as padded image batch ``[B, 3, H, W]`` → decoded outputs ``[B, P, K]``
    (see the module doc). It shares every parameter with ``model``; ``wrapped_model`` is the
    model itself (what eager/compile artifacts store the weights of).

    Called with a batch dict it returns ``{"logits": outputs}`` (the inference runnable
    contract), with a tensor the outputs themselves (what tracing and export record).
    """

    dynamic_input_axes = {0: "batch", 2: "height", 3: "width"}
    dynamic_output_axes = {0: "batch", 1: "locations"}
    traced_on_purpose = (
        "an exported detector is traced whole: it ends before thresholds, top-k and NMS, so no value-dependent "
        "branch is frozen, and shapes are recorded as sizes (any batch, height and width)"
    )

    def __init__(self, model: nn.Module):
        super().__init__()
        name, head = detection_head(model)
        key = next(i.output_key for i in model.stage_info if i.name == name) or "logits"
        self.view = model.with_parts({name: _Decoding(head, key)})
        self.settings = head.export_settings()
        object.__setattr__(self, "wrapped_model", model)  # not a submodule: the view already holds its parts

    def forward(self, x: Any) -> Any:
        if isinstance(x, Mapping):
            return {"logits": self.view(x["input"])}
        return self.view(x)


def for_metadata(model: nn.Module, metadata: dict[str, Any]) -> nn.Module:
    """The runnable a rebuilt torch model stands for: its :class:`DetectionOutputs` view when
    the artifact is a detector (``metadata["task"] == "detection"``), else the model."""
    if isinstance(metadata, dict) and metadata.get("task") == "detection":
        return DetectionOutputs(model).eval()
    return model
