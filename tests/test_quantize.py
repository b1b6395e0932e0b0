"""``modforge export RUN --engine onnx --quantize int8|int8-dynamic``: the graph is really quantized
(integer operators in it), calibrated on the run's validation data, reported against the fp32 graph on
the test split, predicted with like any artifact; wrong combinations are one clear error."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

DIGITS = str(Path(__file__).parents[1] / "configs" / "digits.yaml")


@pytest.fixture(scope="module")
def trained(tmp_path_factory):
    """A digits CNN and a digits MLP, two epochs each."""
    from modforge.cli.main import main

    home = tmp_path_factory.mktemp("quantize")
    common = ["--epochs", "2", "train.num_threads=1", "train.progress=never"]
    assert main(["train", DIGITS, "--run-dir", str(home / "cnn"), *common]) == 0
    assert main(["train", DIGITS, "--backbone", "mlp", "--hidden-dims", "64", "--neck", "identity",
                 "data.args.as_image=false", "--run-dir", str(home / "mlp"), *common]) == 0  # fmt: skip
    return home


def _operators(path: Path) -> set[str]:
    import onnx

    return {node.op_type for node in onnx.load(str(path)).graph.node}


@pytest.mark.slow
def test_a_static_int8_graph_is_calibrated_reported_and_predicts(trained, cli):
    res = cli("export", str(trained / "cnn"), "--engine", "onnx", "--quantize", "int8", "--calibration-batches", "4")
    assert res.code == 0, res.err
    artifact = trained / "cnn" / "exports" / "best-onnx-int8.onnx"
    assert artifact.is_file()
    assert {"QuantizeLinear", "DequantizeLinear"} <= _operators(artifact)
    import onnx

    metadata = json.loads(next(p.value for p in onnx.load(str(artifact)).metadata_props if p.key == "modforge"))
    assert metadata["quantization"] == {"mode": "int8", "calibration_batches": 4, "calibration_split": "val"}
    assert "int8: static, QDQ, calibrated on 4 val batch(es)" in res.out
    assert "test accuracy fp32 → int8" in res.out and "270 samples" in res.out and "× faster" in res.out
    line = next(ln for ln in res.out.splitlines() if "test accuracy fp32 → int8" in ln)
    fp32, int8 = (float(v) for v in line.split()[5:8:2])
    assert fp32 > 0.7 and abs(fp32 - int8) <= 0.03  # ≤ 3 points given up on this small CNN
    np.save(trained / "four.npy", np.random.default_rng(0).random((4, 1, 8, 8), dtype=np.float32))
    predicted = cli("predict", str(artifact), str(trained / "four.npy"))
    assert predicted.code == 0 and predicted.out.count("four.npy") == 4, predicted.err


@pytest.mark.slow
def test_a_dynamic_int8_graph_needs_no_calibration(trained, cli):
    res = cli("export", str(trained / "mlp"), "--engine", "onnx", "--quantize", "int8-dynamic")
    assert res.code == 0, res.err
    operators = _operators(trained / "mlp" / "exports" / "best-onnx-int8-dynamic.onnx")
    assert "DynamicQuantizeLinear" in operators and ({"MatMulInteger", "DynamicQuantizeMatMul"} & operators)
    assert "dynamic (weights int8, activations per batch)" in res.out and "test top-1 agreement" in res.out


@pytest.mark.parametrize(("args", "message"), [
    (["--engine", "torchscript", "--quantize", "int8"], "--quantize makes an int8 ONNX graph: use it with --engine onnx"),
    (["--engine", "onnx", "--quantize", "int8", "--calibration-batches", "0"], "--calibration-batches must be at least 1"),
    (["--engine", "onnx", "--quantize", "int4"], "invalid choice: 'int4'"),
])  # fmt: skip
def test_a_wrong_combination_is_one_clear_error_and_writes_nothing(trained, cli, args, message):
    res = cli("export", str(trained / "cnn"), *args, "--out", str(trained / "refused.onnx"))
    assert res.code == 2 and message in res.err and "Traceback" not in res.err, res.err
    assert not (trained / "refused.onnx").exists()
