"""int8 quantization of an exported ONNX graph with ONNX Runtime's quantization tools.

* ``int8`` — post-training **static** quantization: ONNX Runtime's pre-processing (shape
  inference, graph optimisation), then activation ranges calibrated (min/max) on batches of the
  run's own data, weights per output channel in signed int8 and activations in unsigned int8
  (ONNX Runtime's recommended U8S8 on x86), written in the QDQ format (``QuantizeLinear`` /
  ``DequantizeLinear`` pairs around each quantized operator, which the runtime fuses into integer
  kernels). What most convolutional networks want.
* ``int8-dynamic`` — **dynamic** quantization: weights in int8, activations quantized on the fly
  per batch, no calibration data. Where static does not apply or helps less: matrix-multiply-bound
  models (MLPs, recurrent and attention layers).

With ``float_tail`` (what a detector's export asks for) the graph's *tail* stays in float32: the last
convolutions — those no other convolution follows, a detection head's class, box and quality
predictors — and every operator after them (the decoding: sigmoids, anchor or distance arithmetic,
concatenations). Quantized, those would round box coordinates of up to a few hundred pixels to 256
levels; kept in float they cost a few percent of the compute (their inputs are still int8-quantized
activations).

The result is another ONNX graph that :class:`~.onnx_runtime.OnnxRunner` runs as any other.
"""

from __future__ import annotations

import contextlib
import logging
import tempfile
from collections.abc import Iterable, Iterator
from pathlib import Path
from typing import Any

from ..core.cwd import working_directory
from .base import EngineError

__all__ = ["QUANTIZE_MODES", "float_tail_nodes", "quantize_onnx"]

QUANTIZE_MODES = ("int8", "int8-dynamic")


def quantize_onnx(model_bytes: bytes, mode: str, calibration: Iterable[Any] = (), *, input_name: str = "input",
                  per_channel: bool = True, float_tail: bool = False) -> bytes:  # fmt: skip
    """The int8 graph of ``model_bytes`` (an fp32 ONNX model). ``calibration``: numpy arrays fed
    as ``input_name`` to calibrate a static quantization (at least one); ``float_tail``: keep the
    last convolutions and what follows them in float32 (the module doc)."""
    if mode not in QUANTIZE_MODES:
        raise EngineError(f"unknown quantization {mode!r}; one of {', '.join(QUANTIZE_MODES)}")
    try:
        from onnxruntime.quantization import QuantFormat, QuantType, quantize_dynamic, quantize_static
        from onnxruntime.quantization.shape_inference import quant_pre_process
    except ImportError:  # pragma: no cover - onnxruntime ships them
        raise EngineError("int8 quantization needs onnxruntime's quantization tools: pip install onnxruntime") from None
    with tempfile.TemporaryDirectory(prefix="modforge-quantize-") as folder, _quiet_root_logger():
        source, prepared, target = (Path(folder) / name for name in ("fp32.onnx", "prepared.onnx", "int8.onnx"))
        source.write_bytes(model_bytes)
        try:  # in the scratch folder: a failed symbolic shape inference leaves its temporary files in the cwd
            with working_directory(folder):
                quant_pre_process(str(source), str(prepared))
        except Exception:  # noqa: BLE001 - pre-processing is an optimisation; quantize the graph as exported
            prepared = source
        excluded = float_tail_nodes(prepared.read_bytes()) if float_tail else []
        try:
            if mode == "int8-dynamic":
                quantize_dynamic(str(prepared), str(target), weight_type=QuantType.QInt8, per_channel=per_channel,
                                 nodes_to_exclude=excluded)  # fmt: skip
            else:
                reader = _reader(calibration, input_name)
                if not reader.arrays:
                    raise EngineError("static int8 quantization needs calibration batches (none were given)")
                quantize_static(str(prepared), str(target), reader, quant_format=QuantFormat.QDQ,
                                per_channel=per_channel, activation_type=QuantType.QUInt8,
                                weight_type=QuantType.QInt8, nodes_to_exclude=excluded)  # fmt: skip
        except EngineError:
            raise
        except Exception as exc:  # noqa: BLE001 - the quantizer's many failure types, one clear error
            first = next((line.strip() for line in str(exc).splitlines() if line.strip()), type(exc).__name__)
            other = "int8-dynamic" if mode == "int8" else "int8"
            raise EngineError(f"{mode} quantization of this model failed ({type(exc).__name__}: {first[:240]}); "
                              f"try --quantize {other}") from exc  # fmt: skip
        return target.read_bytes()


def float_tail_nodes(model_bytes: bytes) -> list[str]:
    """The names of the nodes ``float_tail`` keeps in float32: every node from which no ``Conv`` can
    be reached, and the ``Conv`` nodes from which no other ``Conv`` can be reached (the module doc)."""
    import onnx

    graph = onnx.load_from_string(model_bytes).graph
    consumers: dict[str, list[int]] = {}
    for i, node in enumerate(graph.node):
        for name in node.input:
            consumers.setdefault(name, []).append(i)
    reaches_conv: dict[int, bool] = {}

    def downstream_conv(i: int) -> bool:  # memoised, iterative: graphs are deep
        stack = [i]
        while stack:
            j = stack[-1]
            if j in reaches_conv:
                stack.pop()
                continue
            nexts = [k for out in graph.node[j].output for k in consumers.get(out, [])]
            pending = [k for k in nexts if k not in reaches_conv]
            if pending:
                stack.extend(pending)
                continue
            reaches_conv[j] = any(graph.node[k].op_type == "Conv" or reaches_conv[k] for k in nexts)
            stack.pop()
        return reaches_conv[i]

    return [node.name for i, node in enumerate(graph.node) if node.name and not downstream_conv(i)]


def _reader(arrays: Iterable[Any], input_name: str) -> Any:
    """ONNX Runtime's calibration reader over input arrays (``.arrays``: them, as float32)."""
    import numpy as np
    from onnxruntime.quantization import CalibrationDataReader

    class Batches(CalibrationDataReader):
        def __init__(self) -> None:
            self.arrays = [np.ascontiguousarray(a, dtype=np.float32) for a in arrays]
            self.position = 0

        def get_next(self) -> dict[str, Any] | None:
            if self.position >= len(self.arrays):
                return None
            self.position += 1
            return {input_name: self.arrays[self.position - 1]}

        def rewind(self) -> None:
            self.position = 0

    return Batches()


@contextlib.contextmanager
def _quiet_root_logger() -> Iterator[None]:
    """ONNX Runtime's quantizer logs advice through the root logger (per-tensor notes, "consider
    pre-processing", which is done); only its errors are shown."""
    root = logging.getLogger()
    level = root.level
    root.setLevel(logging.ERROR)
    try:
        yield
    finally:
        root.setLevel(level)
