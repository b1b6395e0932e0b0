"""The zoo's image models have exactly the parameters of the originals they follow: ResNet-18/34
(torchvision, ImageNet stem, 1000-way head) and ViT-Tiny (timm's ``vit_tiny_patch16_224``)."""

from __future__ import annotations

import pytest

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
