"""``train.qat``: parts trained with int8 fake quantization — observers record ranges only while
training, their state is in the checkpoints (a resumed run continues bitwise, ``modforge test``
reproduces the run's figures), and ``modforge export --engine onnx`` writes an int8 (QDQ) graph."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch

DIGITS = str(Path(__file__).parents[1] / "configs" / "digits.yaml")
# on the CPU: a GPU's convolution backward (cuDNN) is not deterministic, so "bitwise" would fail there for any run
QAT = ["train.qat={parts: [backbone]}", "train.num_threads=1", "train.progress=never", "train.callbacks=[]",
       "train.device=cpu"]


@pytest.mark.slow
def test_a_qat_run_resumes_bitwise_tests_as_it_ran_and_exports_an_int8_graph(cli, tmp_path):
    import onnx

    steps = "train.checkpoint={every_n_steps: 25, keep_last: 10}"
    assert cli("train", DIGITS, "--epochs", "2", *QAT, steps, "--run-dir", "qat").code == 0
    last = torch.load(tmp_path / "qat" / "checkpoints" / "last.pt", weights_only=True)
    observed = [k for k in last["model"] if k.endswith("activation_post_process.min_val")]
    assert observed and all(last["model"][k].numel() for k in observed)  # ranges recorded, in the checkpoint
    scale = next(k for k in last["model"] if "weight_fake_quant.scale" in k)
    assert last["model"][scale].numel() > 1  # weights per output channel
    res = cli("train", "--resume", str(tmp_path / "qat" / "checkpoints" / "epoch0000-step0000025.pt"),
              "--run-dir", "resumed")  # fmt: skip
    assert res.code == 0, res.err
    again = torch.load(tmp_path / "resumed" / "checkpoints" / "last.pt", weights_only=True)
    for name, value in last["model"].items():
        assert torch.equal(again["model"][name], value), name

    assert cli("test", "qat").code == 0  # the ranges as trained: evaluation does not move them
    record = json.loads((tmp_path / "qat" / "evaluations" / "best-test.json").read_text())
    summary = json.loads((tmp_path / "qat" / "summary.json").read_text())
    assert record["accuracy"] == pytest.approx(summary["test"]["accuracy"], abs=1e-9) and record["accuracy"] > 0.5

    res = cli("export", "qat", "--engine", "onnx")
    assert res.code == 0, res.err
    graph = onnx.load(str(tmp_path / "qat" / "exports" / "best-onnx.onnx")).graph
    assert {"QuantizeLinear", "DequantizeLinear"} <= {node.op_type for node in graph.node}


def test_evaluation_leaves_the_observed_ranges_alone():
    import modforge as mf
    from modforge.model.qat import observing, prepare_parts

    model = mf.build_model({"backbone": {"type": "cnn", "args": {"channels": [4]}}, "neck": "global_avg_pool",
                            "head": "linear", "losses": ["cross_entropy"]}, in_dim=1, num_classes=3,
                           input_shape=(1, 8, 8))  # fmt: skip
    prepare_parts(model, ["backbone"], torch.zeros(2, 1, 8, 8))
    model.train()
    model({"input": torch.randn(4, 1, 8, 8), "label": torch.tensor([0, 1, 2, 0])})
    before = {k: v.clone() for k, v in model.state_dict().items() if "min_val" in k or "max_val" in k}
    observing(model, False)
    model({"input": 100 * torch.randn(4, 1, 8, 8), "label": torch.tensor([0, 1, 2, 0])})
    assert all(torch.equal(model.state_dict()[k], v) for k, v in before.items())
    observing(model, True)
    model({"input": 100 * torch.randn(4, 1, 8, 8), "label": torch.tensor([0, 1, 2, 0])})
    assert any(not torch.equal(model.state_dict()[k], v) for k, v in before.items())


@pytest.mark.parametrize(("args", "message"), [
    (["train.qat={parts: [trunk]}"], "train.qat.parts: trunk not in this model"),
    (["train.qat={parts: []}"], "parts must name at least one part"),
    (["train.qat={parts: [backbone]}", "train.engine=torchscript"], "train.qat trains fake-quantized parts with the eager engine"),
])  # fmt: skip
def test_a_bad_qat_section_is_one_clear_error(cli, args, message):
    res = cli("train", DIGITS, "--epochs", "1", *args, "--run-dir", "bad")
    assert res.code == 2 and message in res.err and "Traceback" not in res.err, res.err
