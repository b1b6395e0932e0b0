"""``modforge profile``: per-part parameters, FLOPs checked against hand-computed counts of linear
and convolution layers and against ResNet-18's published 1.82 G multiply-adds at 224×224, activation
memory (the bytes autograd saves, weights excluded), latency per engine, and clear errors."""

from __future__ import annotations

import pytest
import torch
from torch import nn

import modforge as mf
from modforge.experiment.profile import profile_model


class _OneLinear(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.linear = nn.Linear(64, 10)

    def forward(self, batch: dict) -> dict:
        return {"logits": self.linear(batch["input"])}


def test_the_flops_and_saved_bytes_of_a_linear_layer_are_the_hand_computed_ones():
    result = profile_model(_OneLinear(), {"input": torch.randn(32, 64)}, engines=())
    assert result.flops == 2 * 32 * 64 * 10  # a multiply-add per weight per sample, two FLOPs each
    assert result.macs == 32 * 64 * 10 and result.params == 64 * 10 + 10
    assert result.activation_bytes == 32 * 64 * 4  # the input, saved for the weight's gradient; the weight is not counted


def test_each_part_and_backbone_stage_gets_its_own_count():
    model = mf.build_model({"backbone": {"type": "cnn", "args": {"channels": [32, 64]}}, "neck": "global_avg_pool",
                            "head": "linear", "losses": ["cross_entropy"]}, in_dim=1, num_classes=10,
                           input_shape=(1, 8, 8))  # fmt: skip
    result = profile_model(model, {"input": torch.randn(4, 1, 8, 8)}, engines=("eager",), repeats=2)
    rows = {part.name: part for part in result.parts}
    assert {"backbone", "backbone.block1", "backbone.block2", "neck", "head"} <= set(rows)
    conv1 = 2 * 4 * (8 * 8) * 32 * (1 * 3 * 3)  # output positions × output channels × (input channels × kernel)
    conv2 = 2 * 4 * (4 * 4) * 64 * (32 * 3 * 3)  # after the 2×2 pool
    assert rows["backbone.block1"].flops == conv1 and rows["backbone.block2"].flops == conv2
    assert rows["head"].flops == 2 * 4 * 64 * 10
    assert result.flops == conv1 + conv2 + rows["head"].flops  # pooling, norms and activations are not FLOP-counted
    assert rows["backbone"].params == rows["backbone.block1"].params + rows["backbone.block2"].params
    assert result.params == sum(rows[name].params for name in ("backbone", "neck", "head"))
    assert rows["backbone"].activation_bytes >= rows["backbone.block1"].activation_bytes > 0
    assert result.latency[0].engine == "eager" and result.latency[0].median_ms > 0
    twice = profile_model(model, {"input": torch.randn(8, 1, 8, 8)}, engines=())
    assert twice.flops == 2 * result.flops and twice.activation_bytes == pytest.approx(2 * result.activation_bytes, rel=0.01)


@pytest.mark.slow
def test_resnet18_has_its_published_multiply_adds_and_parameters(cli):
    pytest.importorskip("torchvision")
    model = mf.build_model({"backbone": {"type": "torchvision", "args": {"name": "resnet18"}}, "head": "linear",
                            "losses": ["cross_entropy"]}, in_dim=3, num_classes=1000,
                           input_shape=(3, 224, 224))  # fmt: skip
    result = profile_model(model, {"input": torch.randn(1, 3, 224, 224)}, engines=())
    assert result.params == 11_689_512  # torchvision's resnet18 with a 1000-class head
    assert result.macs / 1e9 == pytest.approx(1.82, rel=0.005)  # He et al.'s "1.8 × 10⁹ FLOPs" (multiply-adds)
    stages = [p.name for p in result.parts if p.depth == 1]
    assert [s.rsplit(".", 1)[1] for s in stages if "layer" in s] == ["layer1", "layer2", "layer3", "layer4"]


def test_the_command_profiles_a_config_a_shape_and_a_run(cli, tmp_path):
    from pathlib import Path

    digits = str(Path(__file__).parents[1] / "configs" / "digits.yaml")
    res = cli("profile", digits, "--engines", "eager,torchscript", "--repeats", "2", "train.num_threads=1")
    assert res.code == 0, res.err
    assert "digits: batch 32 × 1×8×8" in res.out and "backbone.block1" in res.out and "torchscript" in res.out
    shaped = cli("profile", digits, "--input-shape", "1,16,16", "--num-classes", "3", "--batch-size", "2",
                 "--engines", "eager", "--repeats", "2")  # fmt: skip
    assert shaped.code == 0 and "batch 2 × 1×16×16" in shaped.out, shaped.err
    assert cli("train", digits, "--epochs", "1", "--run-dir", "run", "train.num_threads=1").code == 0
    run = cli("profile", "run", "--engines", "eager", "--repeats", "2")
    assert run.code == 0 and "best.pt" in run.out, run.err


@pytest.mark.parametrize(("args", "message"), [
    (["--input-shape", "3,x,8"], "expected sizes separated by commas (C,H,W), got '3,x,8'"),
    (["--input-shape", "3,0,8"], "every size must be at least 1"),
    (["--engines", "eager,nope"], "nope"),
])  # fmt: skip
def test_bad_arguments_are_one_clear_error(cli, args, message):
    from pathlib import Path

    digits = str(Path(__file__).parents[1] / "configs" / "digits.yaml")
    res = cli("profile", digits, *args, "--repeats", "1")
    assert res.code == 2 and message in res.err and "Traceback" not in res.err, res.err
