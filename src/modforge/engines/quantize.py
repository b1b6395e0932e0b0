"""int8 quantization of an exported ONNX graph with ONNX Runtime's quantization tools.

* ``int8`` — post-training **static** quantization: ONNX Runtime's pre-processing (shape
  inference, graph optimisation), then activation ranges calibrated on batches of the run's own
  data, weights in signed int8 (per output channel by default) and activations in unsigned int8
  (ONNX Runtime's recommended U8S8 on x86), written in the QDQ format (``QuantizeLinear`` /
  ``DequantizeLinear`` pairs around each quantized operator, which the runtime fuses into integer
  kernels). What most convolutional networks want. The calibration ``method`` is ONNX Runtime's
  ``CalibrationMethod``: ``minmax`` (each activation's whole observed range: exact for the
  calibration batches, but one outlier widens the step for every other value), ``percentile``
  (the range holding 99.999 % of the observed values) or ``entropy`` (the clipping threshold
  whose 128-bin histogram loses the least information, KL divergence, as TensorRT's).
* ``float_ends`` (``first``, ``last``): keep the network's first and/or last matrix layers —
  the ``Conv``/``Gemm``/``MatMul`` nodes no other one precedes, or follows — in float32: the
  first sees raw inputs, the last writes the logits, and both are cheap in most networks.
* ``int8-dynamic`` — **dynamic** quantization: weights in int8, activations quantized on the fly
  per batch, no calibration data. Where static does not apply or helps less: matrix-multiply-bound
  models (MLPs, recurrent and attention layers).

With ``float_tail`` (what a detector's export asks for) the graph's *tail* stays in float32: the last
convolutions — those no other convolution follows, a detection head's class, box and quality
predictors — and every operator after them (the decoding: sigmoids, anchor or distance arithmetic,
concatenations). Quantized, those would round box coordinates of up to a few hundred pixels to 256
levels; kept in float they cost a few percent of the compute (their inputs are still int8-quantized
activations).

After a static quantization, a ``Shape`` (or ``Size``) that read a dequantized tensor reads the
quantized one instead (:func:`shapes_before_dequantize`): graphs exported with free height and width
ask for the shapes of their feature maps (a GroupNorm's reshape back, an interpolation to a lateral
map's size), and ONNX Runtime gives each reader its own ``DequantizeLinear`` — a whole feature map
turned back into float32 to read four integers. The FCOS detection reference had 25 of them.

The result is another ONNX graph that :class:`~.onnx_runtime.OnnxRunner` runs as any other.
"""

from __future__ import annotations

import contextlib
import io
import logging
import tempfile
from collections.abc import Iterable, Iterator
from pathlib import Path
from typing import Any

from ..core.cwd import working_directory
from .base import EngineError

__all__ = [
    "CALIBRATION_METHODS",
    "FLOAT_ENDS",
    "QUANTIZE_MODES",
    "end_nodes",
    "float_tail_nodes",
    "quantize_onnx",
    "shapes_before_dequantize",
]

QUANTIZE_MODES = ("int8", "int8-dynamic")
CALIBRATION_METHODS = ("minmax", "percentile", "entropy")
"""How a static graph's activation ranges are calibrated (ONNX Runtime's ``CalibrationMethod``)."""
FLOAT_ENDS = ("first", "last")
"""The ends of a network ``float_ends`` can keep in float32."""
MATRIX_OPS = frozenset({"Conv", "ConvTranspose", "Gemm", "MatMul"})
SHAPE_OPS = frozenset({"Shape", "Size"})
"""Operators that read only their input's shape: the same before and after a ``DequantizeLinear``."""


def quantize_onnx(model_bytes: bytes, mode: str, calibration: Iterable[Any] = (), *, input_name: str = "input",
                  per_channel: bool = True, float_tail: bool = False, method: str = "minmax",
                  float_ends: Iterable[str] = ()) -> bytes:  # fmt: skip
    """The int8 graph of ``model_bytes`` (an fp32 ONNX model). ``calibration``: numpy arrays fed
    as ``input_name`` to calibrate a static quantization (at least one); ``method``: how they
    calibrate it (:data:`CALIBRATION_METHODS`); ``per_channel``: weights per output channel (else
    per tensor); ``float_tail``: keep the last convolutions and what follows them in float32;
    ``float_ends``: keep the first and/or last matrix layers in float32 (the module doc)."""
    if mode not in QUANTIZE_MODES:
        raise EngineError(f"unknown quantization {mode!r}; one of {', '.join(QUANTIZE_MODES)}")
    if method not in CALIBRATION_METHODS:
        raise EngineError(f"unknown calibration method {method!r}; one of {', '.join(CALIBRATION_METHODS)}")
    ends = tuple(float_ends)
    if not set(ends) <= set(FLOAT_ENDS):
        raise EngineError(f"float_ends {list(ends)}: expected a subset of {', '.join(FLOAT_ENDS)}")
    try:
        from onnxruntime import quantization as ort
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
        graph = prepared.read_bytes()
        excluded = (float_tail_nodes(graph) if float_tail else []) + [n for end in ends for n in end_nodes(graph, end)]
        try:
            if mode == "int8-dynamic":
                ort.quantize_dynamic(str(prepared), str(target), weight_type=ort.QuantType.QInt8,
                                     per_channel=per_channel, nodes_to_exclude=excluded)  # fmt: skip
            else:
                reader = _reader(calibration, input_name)
                if not reader.arrays:
                    raise EngineError("static int8 quantization needs calibration batches (none were given)")
                with contextlib.redirect_stdout(io.StringIO()):  # the histogram calibrators print their progress
                    ort.quantize_static(str(prepared), str(target), reader, quant_format=ort.QuantFormat.QDQ,
                                        per_channel=per_channel, activation_type=ort.QuantType.QUInt8,
                                        weight_type=ort.QuantType.QInt8, nodes_to_exclude=excluded,
                                        calibrate_method=getattr(ort.CalibrationMethod, _METHODS[method]))  # fmt: skip
        except EngineError:
            raise
        except Exception as exc:  # noqa: BLE001 - the quantizer's many failure types, one clear error
            first = next((line.strip() for line in str(exc).splitlines() if line.strip()), type(exc).__name__)
            other = "int8-dynamic" if mode == "int8" else "int8"
            raise EngineError(f"{mode} quantization of this model failed ({type(exc).__name__}: {first[:240]}); "
                              f"try --quantize {other}") from exc  # fmt: skip
        quantized = target.read_bytes()
    return quantized if mode == "int8-dynamic" else shapes_before_dequantize(quantized)


def shapes_before_dequantize(model_bytes: bytes) -> bytes:
    """``model_bytes`` with every ``Shape``/``Size`` node that reads a ``DequantizeLinear``'s output
    reading that node's quantized input instead (a dequantization keeps the shape; the module doc).
    The dequantizations stay for their other readers: ONNX Runtime gives each reader its own copy
    when it prepares the graph, so no longer reading one is what saves it."""
    import onnx

    model = onnx.load_from_string(model_bytes)
    dequantized = {node.output[0]: node.input[0] for node in model.graph.node if node.op_type == "DequantizeLinear"}
    moved = [node for node in model.graph.node if node.op_type in SHAPE_OPS and node.input[0] in dequantized]
    for node in moved:
        node.input[0] = dequantized[node.input[0]]
    return model.SerializeToString() if moved else model_bytes


def float_tail_nodes(model_bytes: bytes) -> list[str]:
    """The names of the nodes ``float_tail`` keeps in float32: every node from which no ``Conv`` can
    be reached, and the ``Conv`` nodes from which no other ``Conv`` can be reached (the module doc)."""
    import onnx

    nodes = onnx.load_from_string(model_bytes).graph.node
    reaches_conv = _reaches(nodes, _edges(nodes, forward=True), lambda node: node.op_type == "Conv")
    return [node.name for node, reaches in zip(nodes, reaches_conv, strict=True) if node.name and not reaches]


def end_nodes(model_bytes: bytes, end: str) -> list[str]:
    """The names of the graph's ``first`` matrix layers (``Conv``, ``ConvTranspose``, ``Gemm``,
    ``MatMul`` nodes no other one precedes) or ``last`` ones (that no other one follows)."""
    import onnx

    if end not in FLOAT_ENDS:
        raise EngineError(f"unknown end {end!r}; one of {', '.join(FLOAT_ENDS)}")
    nodes = onnx.load_from_string(model_bytes).graph.node
    reaches = _reaches(nodes, _edges(nodes, forward=end == "last"), lambda node: node.op_type in MATRIX_OPS)
    return [node.name for node, other in zip(nodes, reaches, strict=True)
            if node.name and node.op_type in MATRIX_OPS and not other]  # fmt: skip


def _edges(nodes: Any, *, forward: bool) -> list[list[int]]:
    """Each node's neighbours: the nodes reading its outputs (``forward``), else those writing its inputs."""
    producer = {name: i for i, node in enumerate(nodes) for name in node.output}
    consumers: dict[str, list[int]] = {}
    for i, node in enumerate(nodes):
        for name in node.input:
            consumers.setdefault(name, []).append(i)
    if forward:
        return [[k for out in node.output for k in consumers.get(out, [])] for node in nodes]
    return [[producer[name] for name in node.input if name in producer] for node in nodes]


def _reaches(nodes: Any, edges: list[list[int]], target: Any) -> list[bool]:
    """For each node: whether a node for which ``target`` holds lies beyond it along ``edges``
    (memoised and iterative: graphs are deep)."""
    memo: dict[int, bool] = {}
    for start in range(len(nodes)):
        stack = [start]
        while stack:
            j = stack[-1]
            if j in memo:
                stack.pop()
                continue
            pending = [k for k in edges[j] if k not in memo]
            if pending:
                stack.extend(pending)
                continue
            memo[j] = any(target(nodes[k]) or memo[k] for k in edges[j])
            stack.pop()
    return [memo[i] for i in range(len(nodes))]


_METHODS = {"minmax": "MinMax", "percentile": "Percentile", "entropy": "Entropy"}
"""ONNX Runtime's ``CalibrationMethod`` member of each method."""


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
