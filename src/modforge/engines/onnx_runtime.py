"""Running an exported ONNX model with ONNX Runtime — numpy and onnxruntime only, no torch.

This module must not import torch (directly or through modforge's other modules):
``modforge predict model.onnx`` uses it on machines that only have onnxruntime.
A file's ``modforge.sha256`` checksum (see :mod:`modforge.core.integrity`) is verified
before ONNX Runtime reads it.
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

import numpy as np

from ..core.integrity import IntegrityError, verify_trailer

__all__ = ["METADATA_KEY", "OnnxRunner"]

METADATA_KEY = "modforge"
_LEVELS = {"all": "ORT_ENABLE_ALL", "extended": "ORT_ENABLE_EXTENDED", "basic": "ORT_ENABLE_BASIC",
           "none": "ORT_DISABLE_ALL"}


class OnnxRunner:
    """An ONNX Runtime session behind the runnable contract: ``runner({"input": x})`` →
    ``{"logits": y}``; ``x`` a numpy array or a torch tensor, ``y`` of the same kind."""

    def __init__(self, model_bytes: bytes, *, threads: int = 0, optimization: str = "all",
                 metadata: dict[str, Any] | None = None):
        try:
            import onnxruntime as ort
        except ImportError:  # pragma: no cover - onnxruntime is a dependency of the onnx engine
            from .base import EngineError

            raise EngineError("the onnx engine needs onnxruntime: pip install onnxruntime") from None
        options = ort.SessionOptions()
        options.intra_op_num_threads = threads
        options.graph_optimization_level = getattr(ort.GraphOptimizationLevel, _LEVELS[optimization])
        self.model_bytes = model_bytes
        self.session = ort.InferenceSession(model_bytes, options, providers=["CPUExecutionProvider"])
        self.input_name = self.session.get_inputs()[0].name
        self.metadata = metadata if metadata is not None else _metadata_of(self.session)

    @classmethod
    def from_file(cls, path: str | os.PathLike, **options: Any) -> OnnxRunner:
        """Load an ``.onnx`` artifact (a clear error when it is not one)."""
        path = Path(path)
        if not path.is_file():
            raise _error(f"artifact not found: {path}")
        try:
            data = path.read_bytes()
        except OSError as exc:
            raise _error(f"{path} cannot be read ({type(exc).__name__}: {exc})") from None
        try:
            verified = verify_trailer(data)
        except IntegrityError as exc:
            raise _error(f"{path} is {exc}") from None
        try:
            runner = cls(data, **options)
        except Exception as exc:  # noqa: BLE001 - onnxruntime raises its own exception types
            if type(exc).__name__ == "EngineError":
                raise
            raise _error(f"{path} is not a loadable ONNX model ({' '.join(str(exc).split())[:200]})") from None
        if not verified and runner.metadata:  # a modforge artifact exported before checksums
            from .artifact import warn_unverified

            warn_unverified(path)
        return runner

    def __call__(self, batch: Any) -> dict[str, Any]:
        x = batch["input"] if isinstance(batch, dict) else batch
        from_torch = not isinstance(x, np.ndarray) and hasattr(x, "detach")
        array = x.detach().cpu().numpy() if from_torch else np.asarray(x)
        try:
            (logits,) = self.session.run(None, {self.input_name: np.ascontiguousarray(array, dtype=np.float32)})
        except Exception as exc:  # noqa: BLE001 - onnxruntime's own exception types
            detail = " ".join(str(exc).split())
            raise _error(f"the ONNX model cannot run on an input of shape {list(array.shape)}: {detail[:240]}") from None
        if from_torch:
            import torch  # already imported by whoever passed a tensor

            return {"logits": torch.from_numpy(logits)}
        return {"logits": logits}


def _metadata_of(session: Any) -> dict[str, Any]:
    text = session.get_modelmeta().custom_metadata_map.get(METADATA_KEY)
    return json.loads(text) if text else {}


def _error(message: str) -> Exception:
    from .base import EngineError

    return EngineError(message)
