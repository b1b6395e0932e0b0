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
    quantization = metadata["quantization"]
    check = quantization.pop("check")
    assert quantization == {"mode": "int8", "calibration_method": "minmax", "per_channel": True, "float_ends": [],
                            "calibration_batches": 4, "calibration_split": "val"}  # fmt: skip
    assert check["split"] == "val" and check["metric"] == "accuracy" and check["samples"] == 270
    assert check["max_loss"] == 1.0 and check["loss_points"] <= 1.0
    assert check["loss_points"] == pytest.approx(100 * (check["fp32"] - check["int8"]), abs=1e-3)
    assert check["tried"] == [{"calibration_method": "minmax", "per_channel": True, "float_ends": [],
                               "loss_points": check["loss_points"]}]  # fmt: skip
    assert "int8: static, QDQ, calibrated on 4 val batch(es) — minmax calibration, per-channel weights" in res.out
    assert "val accuracy" in res.out and "within --max-loss 1" in res.out
    assert (
        "test accuracy fp32 → int8" in res.out
        and "270 samples" in res.out
        and ("× faster" in res.out or "× SLOWER" in res.out)
    )
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
    (["--engine", "onnx", "--quantize", "int8", "--calibration", "kl"], "invalid choice: 'kl'"),
    (["--engine", "onnx", "--quantize", "int8", "--keep-float", "middle"], "expected first, last or first,last"),
    (["--engine", "onnx", "--quantize", "int8", "--max-loss", "-1"], "--max-loss must be a number of points ≥ 0"),
    (["--engine", "onnx", "--quantize", "int8-dynamic", "--calibration", "entropy"], "calibrates a static graph"),
])  # fmt: skip
def test_a_wrong_combination_is_one_clear_error_and_writes_nothing(trained, cli, args, message):
    res = cli("export", str(trained / "cnn"), *args, "--out", str(trained / "refused.onnx"))
    assert res.code == 2 and message in res.err and "Traceback" not in res.err, res.err
    assert not (trained / "refused.onnx").exists()


@pytest.mark.filterwarnings("ignore::DeprecationWarning")
def test_the_float_tail_is_the_last_convolutions_and_what_follows_them():
    import io

    import torch

    from modforge.engines.quantize import float_tail_nodes

    class Net(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.body, self.branch = torch.nn.Conv2d(3, 4, 3), torch.nn.Conv2d(4, 4, 1)
            self.predict = torch.nn.Conv2d(4, 2, 1)

        def forward(self, x):
            y = torch.relu(self.body(x))
            y = y + self.branch(y)  # a residual: the Add is followed by a convolution
            z = self.predict(y)
            return torch.cat([torch.sigmoid(z), z * 4.0], dim=1)

    buffer = io.BytesIO()
    torch.onnx.export(Net(), (torch.zeros(1, 3, 8, 8),), buffer, dynamo=False)
    import onnx

    nodes = {n.name: n.op_type for n in onnx.load_from_string(buffer.getvalue()).graph.node}
    tail = float_tail_nodes(buffer.getvalue())
    assert sorted(nodes[n] for n in tail if nodes[n] != "Constant") == ["Concat", "Conv", "Mul", "Sigmoid"]
    assert [n for n in tail if nodes[n] == "Conv"] == ["/predict/Conv"]
    assert not {"/body/Conv", "/branch/Conv", "/Relu", "/Add"} & set(tail)


@pytest.mark.slow
def test_a_detector_quantizes_its_network_keeps_its_decoding_in_float_and_reports_map(tmp_path, cli):
    """int8 of a (tiny) FCOS detector: the backbone, neck and towers quantized, the predictors and the
    decoding in float32, both graphs scored by COCO mAP on the test split, and the int8 artifact
    predicts a picture like any detector artifact."""
    import onnx

    from modforge.data.detection.shapes import make_shapes

    # 24 pictures (18 train, 3 val, 3 test), one epoch: what is checked is the graph's make-up and that both
    # graphs are scored and the artifact predicts, not how well the detector learnt (its test mAP is 0.02 then)
    make_shapes(tmp_path / "set", images=24, size=64, seed=0, max_object=32)
    config = str(Path(__file__).parents[1] / "configs" / "detection" / "shapes_fcos.yaml")
    small = ["data.args.min_size=64", "data.args.max_size=64", "data.batch_size=8", "train.max_epochs=1",
             "model.backbone.args.width=0.25", "model.neck.args.out_channels=32", "train.progress=never",
             "train.num_threads=1", "train.scheduler.args.warmup=2", "train.optimizer.args.lr=3e-3"]  # fmt: skip
    run = tmp_path / "run"
    assert cli("train", config, f"data.args.root={tmp_path / 'set'}", *small, "--run-dir", str(run)).code == 0
    res = cli("export", str(run), "--engine", "onnx", "--quantize", "int8", "--calibration-batches", "1")
    assert res.code == 0, res.err
    assert (
        "test mAP fp32 → int8" in res.out
        and "mAP@0.5 fp32 → int8" in res.out
        and ("× faster" in res.out or "× SLOWER" in res.out)
    )
    assert "top-1 agreement" not in res.out
    artifact = run / "exports" / "best-onnx-int8.onnx"
    graph = onnx.load(str(artifact)).graph
    dequantized = {out for node in graph.node if node.op_type == "DequantizeLinear" for out in node.output}
    convs = {node.name: node for node in graph.node if node.op_type == "Conv"}
    quantized = {name for name, node in convs.items() if node.input[1] in dequantized}  # int8 weights
    predictors = {name for name in convs if any(k in name for k in ("cls_logits", "bbox_pred", "quality"))}
    assert predictors and not predictors & quantized  # the predictors keep float32 weights
    assert len(quantized) >= len(convs) - len(predictors) - 1  # the rest is int8
    picture = sorted((tmp_path / "set" / "images" / "test").glob("*.png"))[0]
    predicted = cli("predict", str(artifact), str(picture))
    assert predicted.code == 0 and '"detections"' in predicted.out, predicted.err


def _metadata(path: Path) -> dict:
    import onnx

    return json.loads(next(p.value for p in onnx.load(str(path)).metadata_props if p.key == "modforge"))


def _float_weights(path: Path) -> set[str]:
    """The matrix nodes whose weights are float32 initializers (not dequantized int8)."""
    import onnx

    graph = onnx.load(str(path)).graph
    floats = {init.name for init in graph.initializer if init.data_type == onnx.TensorProto.FLOAT}
    return {node.name for node in graph.node if node.op_type in ("Conv", "Gemm", "MatMul") and node.input[1] in floats}


@pytest.mark.slow
def test_the_calibration_options_reach_the_quantizer_and_the_metadata(trained, cli, monkeypatch):
    import onnxruntime.quantization as ort

    seen = []
    real = ort.quantize_static
    monkeypatch.setattr(ort, "quantize_static", lambda *a, **kw: seen.append(kw) or real(*a, **kw))
    out = trained / "entropy.onnx"
    res = cli("export", str(trained / "cnn"), "--engine", "onnx", "--quantize", "int8", "--calibration", "entropy",
              "--no-per-channel", "--keep-float", "first,last", "--calibration-batches", "2", "--out", str(out))  # fmt: skip
    assert res.code == 0, res.err
    assert len(seen) == 1 and seen[0]["calibrate_method"] == ort.CalibrationMethod.Entropy
    assert seen[0]["per_channel"] is False and len(seen[0]["nodes_to_exclude"]) == 2
    # the first convolution and the classifier keep float32 weights; the middle convolution is int8
    assert _float_weights(out) == {"/model/backbone/block1/block1.0/Conv", "/model/head/fc/Gemm"}
    assert "DequantizeLinear" in _operators(out)
    quantization = _metadata(out)["quantization"]
    assert {k: quantization[k] for k in ("calibration_method", "per_channel", "float_ends", "calibration_batches")} == {
        "calibration_method": "entropy", "per_channel": False, "float_ends": ["first", "last"], "calibration_batches": 2}  # fmt: skip
    assert "entropy calibration, per-tensor weights, first and last layers in float32" in res.out


def _miscalibrated(monkeypatch, methods):
    """Calibration batches scaled ×10⁴ for ``methods``: every activation range is far too wide, so
    the int8 graph rounds nearly every activation to zero — a bad calibration, made on purpose."""
    from modforge.experiment import int8_check

    real = int8_check.quantize_onnx

    def quantize(model_bytes, mode, calibration, **kw):
        if kw["method"] in methods:
            calibration = [1e4 * np.asarray(a) for a in calibration]
        return real(model_bytes, mode, calibration, **kw)

    monkeypatch.setattr(int8_check, "quantize_onnx", quantize)


@pytest.mark.slow
def test_a_graph_that_loses_more_than_a_point_is_refused_naming_the_option_that_helps(trained, cli, monkeypatch):
    _miscalibrated(monkeypatch, {"minmax"})
    out = trained / "bad.onnx"
    args = ["export", str(trained / "cnn"), "--engine", "onnx", "--quantize", "int8", "--calibration-batches", "2"]
    res = cli(*args, "--calibration", "minmax", "--out", str(out))
    assert res.code == 2 and not out.exists(), res.err
    line = res.err.strip().splitlines()[-1]
    assert "the int8 graph loses" in line and "val accuracy, 270 samples) with minmax calibration" in line
    assert "more than --max-loss 1; nothing was written" in line
    assert "--calibration entropy loses 0.0 (measured; --calibration auto finds it)" in line  # measured, not guessed
    lost = float(line.split("loses ")[1].split(" points")[0])
    assert lost > 1 and f"--max-loss {np.ceil(lost * 10) / 10:.1f} writes it anyway" in line
    # auto passes over the bad setting to the next one, and records both
    res = cli(*args, "--out", str(out))
    assert res.code == 0, res.err
    check = _metadata(out)["quantization"]["check"]
    assert [t["calibration_method"] for t in check["tried"]] == ["minmax", "entropy"]
    assert check["tried"][0]["loss_points"] == pytest.approx(lost, abs=0.1) and check["loss_points"] <= 1
    assert "entropy calibration" in res.out and "(2 settings tried)" in res.out


@pytest.mark.slow
def test_a_loss_beyond_every_setting_is_refused_unless_the_user_accepts_it(trained, cli, monkeypatch):
    _miscalibrated(monkeypatch, {"minmax", "entropy", "percentile"})
    out = trained / "accepted.onnx"
    args = ["export", str(trained / "cnn"), "--engine", "onnx", "--quantize", "int8", "--calibration-batches", "1",
            "--keep-float", "first", "--out", str(out)]  # fmt: skip
    res = cli(*args)
    assert res.code == 2 and not out.exists(), res.err
    assert "with the best of 3 settings tried" in res.err and "quantization-aware training (train.qat)" in res.err
    res = cli(*args, "--max-loss", "100")
    assert res.code == 0, res.err
    check = _metadata(out)["quantization"]["check"]
    assert check["max_loss"] == 100 and check["loss_points"] > 1 and len(check["tried"]) == 1  # the first is within 100
    assert "MORE than 1 point, accepted by --max-loss 100" in res.out


@pytest.mark.filterwarnings("ignore::DeprecationWarning")
def test_the_ends_are_the_first_and_last_matrix_layers():
    import io

    import torch

    from modforge.engines.quantize import end_nodes

    class Net(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.a, self.b = torch.nn.Conv2d(3, 4, 3), torch.nn.Conv2d(3, 4, 3)  # two first layers, side by side
            self.middle, self.fc = torch.nn.Conv2d(4, 4, 1), torch.nn.Linear(4, 2)

        def forward(self, x):
            y = torch.relu(self.a(x) + self.b(x))
            return self.fc(self.middle(y).mean((2, 3)))

    buffer = io.BytesIO()
    torch.onnx.export(Net(), (torch.zeros(1, 3, 8, 8),), buffer, dynamo=False)
    assert sorted(end_nodes(buffer.getvalue(), "first")) == ["/a/Conv", "/b/Conv"]
    assert end_nodes(buffer.getvalue(), "last") == ["/fc/Gemm"]


@pytest.mark.filterwarnings("ignore::DeprecationWarning")
def test_shapes_are_read_before_the_dequantization(monkeypatch, tmp_path):
    """A graph exported with free height and width asks for its feature maps' shapes (a GroupNorm's
    reshape back, an interpolation to another map's size); after int8 quantization those reads take the
    quantized tensor, not a whole map dequantized for four integers, and the outputs do not change."""
    import io

    import onnx
    import torch

    from modforge.engines import quantize
    from modforge.engines.onnx_runtime import OnnxRunner

    class Net(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.a, self.norm, self.b = (
                torch.nn.Conv2d(3, 8, 3, padding=1),
                torch.nn.GroupNorm(4, 8),
                torch.nn.Conv2d(8, 8, 3, stride=2),
            )

        def forward(self, x):
            y = torch.relu(self.norm(self.a(x)))
            z = torch.nn.functional.interpolate(self.b(y), size=y.shape[-2:], mode="nearest")
            return self.b(y + z).mean((2, 3))

    torch.manual_seed(0)
    buffer = io.BytesIO()
    torch.onnx.export(Net().eval(), (torch.zeros(1, 3, 16, 16),), buffer, dynamo=False, input_names=["input"],
                      output_names=["logits"], dynamic_axes={"input": {0: "batch", 2: "height", 3: "width"}})  # fmt: skip
    rng = np.random.default_rng(0)
    calibration = [rng.standard_normal((2, 3, 16, 16)).astype(np.float32) for _ in range(2)]

    def dequantized_shapes(model_bytes: bytes) -> int:
        nodes = onnx.load_from_string(model_bytes).graph.node
        dequantized = {n.output[0] for n in nodes if n.op_type == "DequantizeLinear"}
        return sum(n.op_type == "Shape" and n.input[0] in dequantized for n in nodes)

    rewritten = quantize.quantize_onnx(buffer.getvalue(), "int8", calibration)
    monkeypatch.setattr(quantize, "shapes_before_dequantize", lambda model_bytes: model_bytes)
    plain = quantize.quantize_onnx(buffer.getvalue(), "int8", calibration)
    assert dequantized_shapes(plain) >= 2 and dequantized_shapes(rewritten) == 0
    onnx.checker.check_model(onnx.load_from_string(rewritten))

    def dequantizations_run(model_bytes: bytes, name: str) -> int:  # ONNX Runtime gives each reader its own
        import onnxruntime as ort

        options = ort.SessionOptions()
        options.graph_optimization_level = ort.GraphOptimizationLevel.ORT_ENABLE_EXTENDED
        options.optimized_model_filepath = str(tmp_path / name)
        ort.InferenceSession(model_bytes, options, providers=["CPUExecutionProvider"])
        return sum(n.op_type == "DequantizeLinear" for n in onnx.load(tmp_path / name).graph.node)

    assert dequantizations_run(rewritten, "rewritten.onnx") < dequantizations_run(plain, "plain.onnx")
    x = rng.standard_normal((3, 3, 12, 20)).astype(np.float32)  # another size: the shapes are read, not fixed
    assert np.array_equal(OnnxRunner(rewritten)({"input": x})["logits"], OnnxRunner(plain)({"input": x})["logits"])


def test_the_report_says_when_int8_is_slower():
    """A graph int8 made slower (tiny networks: the conversions cost more than the integer arithmetic
    saves) is reported as slower, with what serves better — not as "0.85× faster"."""
    from modforge.experiment.quantized import QuantizationReport

    def latency(fp32_ms: float, int8_ms: float) -> str:
        report = QuantizationReport("int8", 8, "val", "test", 100, 0.9, 0.9, 1.0, fp32_ms, int8_ms)
        return dict(report.rows())["latency batch 1 fp32 → int8"]

    assert latency(2.0, 1.0) == "2.000 → 1.000 ms (2.00× faster)"
    slower = latency(0.011, 0.013)
    assert slower.startswith("0.011 → 0.013 ms (1.18× SLOWER") and "the fp32 artifact serves better" in slower
