"""The zoo's image models have exactly the parameters of the originals they follow: ResNet-18/34
(torchvision, ImageNet stem, 1000-way head) and ViT-Tiny (timm's ``vit_tiny_patch16_224``)."""

from __future__ import annotations

import pytest
import torch

import modforge as mf


def _count(module) -> int:
    return sum(p.numel() for p in module.parameters())


@pytest.mark.parametrize("name", ["resnet18", "resnet34"])
def test_resnets_count_torchvisions_parameters(name):
    torchvision = pytest.importorskip("torchvision")
    ours = mf.build_model({"backbone": {"type": name, "args": {"stem": "imagenet"}}, "neck": "global_avg_pool",
                           "head": "linear"}, in_dim=3, num_classes=1000)  # fmt: skip
    assert _count(ours) == _count(getattr(torchvision.models, name)())


def test_vit_tiny_counts_timms_parameters():
    timm = pytest.importorskip("timm")
    ours = mf.build_model({"backbone": "vit_tiny", "head": "linear"}, in_dim=3, num_classes=1000,
                          input_shape=(3, 224, 224), layout="image")  # fmt: skip
    assert _count(ours) == _count(timm.create_model("vit_tiny_patch16_224")) == 5_717_416


def test_mammoths_initialisation_is_an_option_of_the_parts():
    """``weight_init: xavier_uniform`` (Mammoth's MNISTMLP and classifiers) and ``conv_init: pytorch``
    (Mammoth's ResNet18): zero biases, Xavier-uniform bounds, PyTorch's default conv bound."""
    import math

    import torch.nn as nn

    mlp = mf.BACKBONES.build({"type": "mlp", "args": {"hidden_dims": [100, 100], "weight_init": "xavier_uniform"}},
                             in_dim=784)  # fmt: skip
    head = mf.HEADS.build({"type": "linear", "args": {"weight_init": "xavier_uniform"}}, in_dim=100, num_classes=10)
    for layer in [m for m in [*mlp.modules(), *head.modules()] if isinstance(m, nn.Linear)]:
        fan_out, fan_in = layer.weight.shape
        weight = layer.weight.detach()
        assert float(weight.abs().max()) <= math.sqrt(6 / (fan_in + fan_out)) and not layer.bias.detach().any()
    default = mf.BACKBONES.build("mlp", in_dim=784)
    assert default.layer1[0].bias.abs().sum() > 0  # PyTorch's default: biases drawn too
    def layer1_conv(args: dict) -> torch.Tensor:  # a 64→64 3×3 convolution: fan-in = fan-out = 576
        return mf.BACKBONES.build({"type": "resnet18", "args": args}, in_dim=3).layer1[0].conv1.weight.detach()

    default = layer1_conv({"conv_init": "pytorch"})  # kaiming_uniform(a=√5): U(±1/√576), std 1/√(3·576)
    assert float(default.abs().max()) <= 1 / math.sqrt(576) and abs(float(default.std()) - 1 / math.sqrt(3 * 576)) < 0.002
    fan_out = layer1_conv({})  # torchvision's: N(0, 2/576)
    assert abs(float(fan_out.std()) - math.sqrt(2 / 576)) < 0.003
