"""``onnx`` — export through ``torch.onnx``, run with ONNX Runtime; inference only.

The model is exported as input tensor → logits with a dynamic batch axis (and a dynamic
time axis when the first stage takes a waveform, channels-over-time or sequence input). A
module that declares ``dynamic_input_axes``/``dynamic_output_axes`` gets those instead — a
detector's export view (:class:`~.detection.DetectionOutputs`: padded images of any batch,
height and width → every location's decoded outputs; NMS runs after the runtime).
The runnable and the artifact are run by :class:`~.onnx_runtime.OnnxRunner`, which needs
numpy and onnxruntime but not torch — ``modforge predict model.onnx`` never imports it.
The metadata lives in the ONNX model's ``metadata_props`` under ``modforge``; the last
entry, ``modforge.sha256``, is the SHA-256 of every byte of the file before it, checked
when the file is loaded (:mod:`modforge.core.integrity`).

Exporter: 'auto' uses PyTorch's TorchScript-based exporter while the installed PyTorch
has it (fast, no extra dependency; its deprecation notice is silenced because we chose
it deliberately) and the torch.export-based one otherwise (that needs ``onnxscript``).
"""

from __future__ import annotations

import io
import json
import os
import warnings
from collections.abc import Callable
from pathlib import Path
from typing import Annotated, Any, Literal

from pydantic import Field

from ..core.integrity import checksum_trailer
from ..core.registries import register_engine
from .artifact import write_atomically
from .base import Capabilities, Engine, EngineError
from .common import LogitsOnly, example_from_metadata, example_input, training_mode
from .onnx_runtime import METADATA_KEY, OnnxRunner

TIME_AXIS_LAYOUTS = {"waveform": 1, "channels": 2, "sequence": 1}


@register_engine("onnx")
class Onnx(Engine):
    """ONNX Runtime on an exported graph (inference only; dynamic batch and time axes).

    Args:
        opset: the ONNX opset to export to.
        exporter: 'auto', 'torchscript' (PyTorch's TorchScript-based exporter) or 'dynamo'
            (the torch.export-based one; needs onnxscript).
        threads: ONNX Runtime intra-op threads (0: its default, all cores).
        optimization: ONNX Runtime graph optimisation level.
    """

    capabilities = Capabilities(can_train=False, multi_device=False, dynamic_shapes=True, needs_example_input=True)
    suffix = ".onnx"

    def __init__(self, opset: Annotated[int, Field(ge=7)] = 17, exporter: Literal["auto", "torchscript", "dynamo"] = "auto", threads: int = 0,
                 optimization: Literal["all", "extended", "basic", "none"] = "all"):
        self.opset, self.exporter, self.threads, self.optimization = opset, exporter, threads, optimization

    def prepare(self, model: Any, example: dict[str, Any] | None = None, *, train: bool = False) -> Callable:
        if train:
            self.refuse_training()
        x = example_input(example, "onnx")
        layout = _first_layout(model)
        return OnnxRunner(self._export(model, x, layout), threads=self.threads, optimization=self.optimization)

    def save(self, runnable: Callable, path: str | os.PathLike, metadata: dict[str, Any]) -> Path:
        import onnx

        if isinstance(runnable, OnnxRunner):
            proto = onnx.load_from_string(runnable.model_bytes)
        else:  # a torch model: export it now, from the metadata's input shape
            proto = onnx.load_from_string(
                self._export(runnable, example_from_metadata(metadata), metadata.get("input", {}).get("layout"))
            )
        import onnxruntime

        metadata = dict(metadata, versions={**metadata.get("versions", {}), "onnx": onnx.__version__,
                                            "onnxruntime": onnxruntime.__version__})
        del proto.metadata_props[:]
        entry = proto.metadata_props.add()
        entry.key, entry.value = METADATA_KEY, json.dumps(metadata)
        body = proto.SerializeToString()
        return write_atomically(path, lambda tmp: Path(tmp).write_bytes(body + checksum_trailer(body)))

    def load(self, path: str | os.PathLike) -> tuple[Callable, dict[str, Any]]:
        runner = OnnxRunner.from_file(path, threads=self.threads, optimization=self.optimization)
        return runner, runner.metadata

    # ----------------------------------------------------------------- internals
    def _export(self, model: Any, x: Any, layout: str | None) -> bytes:
        import torch

        axes = {0: "batch"}
        if layout in TIME_AXIS_LAYOUTS and x.dim() > TIME_AXIS_LAYOUTS[layout]:
            axes[TIME_AXIS_LAYOUTS[layout]] = "time"
        axes = dict(getattr(model, "dynamic_input_axes", None) or axes)  # a detector: free height and width too
        output_axes = dict(getattr(model, "dynamic_output_axes", None) or {0: "batch"})
        dynamo = self.exporter == "dynamo" or (self.exporter == "auto" and not _has_torchscript_exporter())
        wrapper = LogitsOnly(model).eval()
        buffer = io.BytesIO()
        with training_mode(model, False), torch.no_grad(), warnings.catch_warnings():
            warnings.filterwarnings("ignore", message=".*legacy TorchScript-based ONNX export.*")
            warnings.filterwarnings("ignore", message="The feature will be removed.*")
            warnings.simplefilter("ignore", torch.jit.TracerWarning)
            try:
                if dynamo:
                    program = torch.onnx.export(
                        wrapper, (x,), dynamo=True, input_names=["input"], output_names=["logits"],
                        dynamic_shapes=({i: torch.export.Dim.AUTO for i in axes},), opset_version=self.opset,
                    )
                    return program.model_proto.SerializeToString()
                torch.onnx.export(
                    wrapper, (x,), buffer, dynamo=False, input_names=["input"], output_names=["logits"],
                    dynamic_axes={"input": axes, "logits": output_axes}, opset_version=self.opset,
                )
            except Exception as exc:  # noqa: BLE001 - the exporter's many failure types, one clear error
                first = next((line.strip() for line in str(exc).splitlines() if line.strip()), type(exc).__name__)
                raise EngineError(f"onnx: the model could not be exported ({type(exc).__name__}: {first[:300]})") from exc
        return buffer.getvalue()


def _has_torchscript_exporter() -> bool:
    import inspect

    import torch

    return "dynamo" in inspect.signature(torch.onnx.export).parameters and hasattr(torch.onnx, "utils")


def _first_layout(model: Any) -> str | None:
    """The input layout: a modular model's (before any adapter), else a part's first accepted one."""
    layout = getattr(model, "input_layout", None)
    if layout is not None:
        return getattr(layout, "value", layout)
    accepts = getattr(model, "accepts", ())
    return accepts[0].value if accepts else None
