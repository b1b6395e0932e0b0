"""Zoo parts: faithful sizes, documented options, numeric behaviour."""

from __future__ import annotations

import pytest
import torch

import modforge as mf
from modforge.core.errors import ConfigValueError
from modforge.model import StageError


def n_params(module) -> int:
    return sum(p.numel() for p in module.parameters())


@pytest.mark.parametrize(
    ("name", "count"),
    [("resnet18", 11_689_512 - 513_000), ("resnet34", 21_797_672 - 513_000)],  # torchvision totals minus the 1000-way fc
)
def test_resnet_parameter_counts_match_torchvision(name, count):
    assert n_params(mf.BACKBONES.build({"type": name, "args": {"stem": "imagenet"}}, in_dim=3)) == count


def test_vit_tiny_matches_deit_ti():
    # DeiT-Ti/16 at 224: 5,717,416 parameters including its 1000-way head (192*1000 + 1000)
    assert n_params(mf.BACKBONES.build("vit_tiny", in_dim=3)) == 5_717_416 - 193_000


def test_resnet_stems_width_and_channels():
    net = mf.BACKBONES.build({"type": "resnet18", "args": {"stem": "imagenet", "width": 0.5}}, in_dim=1).eval()
    assert net(torch.randn(2, 1, 64, 64)).shape == (2, 256, 2, 2)  # stride 32
    cifar = mf.BACKBONES.build({"type": "resnet18", "args": {"width": 0.25}}, in_dim=5).eval()
    assert cifar(torch.randn(2, 5, 32, 32)).shape == (2, 128, 4, 4)  # stride 8
    multi = mf.BACKBONES.build({"type": "resnet34", "args": {"width": 0.25, "features_only": True}}, in_dim=3).eval()
    maps = multi(torch.randn(1, 3, 32, 32))
    assert [m.shape[1] for m in maps] == multi.out_dim == [16, 32, 64, 128] and multi.out_strides == [1, 2, 4, 8]
    with pytest.raises(ConfigValueError, match=r"backbone.args.width: expected a finite number > 0, got 0"):
        mf.BACKBONES.build({"type": "resnet18", "args": {"width": 0}}, in_dim=3)  # refused before building


def test_vit_interpolates_position_embeddings_and_checks_patch_multiples():
    model = mf.build_model({"backbone": {"type": "vit_tiny", "args": {"patch_size": 8, "image_size": 32}}, "head": "linear"},
                           in_dim=3, num_classes=3, input_shape=(3, 32, 32)).eval()
    assert model(torch.randn(2, 3, 64, 48)).shape == (2, 3)
    with pytest.raises(StageError, match="image size 30×30 is not a multiple of patch_size 8"):
        model(torch.randn(1, 3, 30, 30))
    with pytest.raises(mf.BuildError, match="must be a positive multiple of patch_size"):
        mf.BACKBONES.build({"type": "vit_tiny", "args": {"patch_size": 7, "image_size": 32}}, in_dim=3)


def test_attentive_stats_pool_with_uniform_attention_is_mean_and_std():
    pool = mf.NECKS.build({"type": "attentive_stats_pool", "args": {"global_context": False}}, in_dim=4,
                          in_layout="channels").eval()
    last = pool.attention[-1]
    torch.nn.init.zeros_(last.weight)
    torch.nn.init.zeros_(last.bias)
    x = torch.randn(3, 4, 50)
    out = pool(x)
    assert torch.allclose(out[:, :4], x.mean(dim=2), atol=1e-6)
    assert torch.allclose(out[:, 4:], x.std(dim=2, unbiased=False), atol=1e-5)
    seq = mf.NECKS.build("attentive_stats_pool", in_dim=4, in_layout="sequence").eval()
    assert seq(x.transpose(1, 2)).shape == (3, 8)


def test_global_avg_pool_per_layout():
    x = torch.randn(2, 3, 4, 5)
    image = mf.NECKS.build("global_avg_pool", in_dim=3, in_layout="image")
    assert torch.allclose(image(x), x.mean(dim=(2, 3)))
    seq = mf.NECKS.build("global_avg_pool", in_dim=5, in_layout="sequence")
    assert torch.allclose(seq(x[0]), x[0].mean(dim=1))
    multi = mf.NECKS.build("global_avg_pool", in_dim=[3, 3], in_layout="multiscale")
    assert multi.out_dim == 6 and multi([x, x[..., :2, :2]]).shape == (2, 6)


def test_fpn_keeps_resolutions_and_adds_top_down():
    fpn = mf.NECKS.build({"type": "fpn", "args": {"out_channels": 8}}, in_dim=[4, 6]).eval()
    levels = [torch.randn(1, 4, 8, 8), torch.randn(1, 6, 4, 4)]
    out = fpn(levels)
    assert [tuple(o.shape) for o in out] == [(1, 8, 8, 8), (1, 8, 4, 4)]
    with pytest.raises(mf.BuildError, match="fpn needs a list of channel counts"):
        mf.NECKS.build("fpn", in_dim=4)


def test_mlp_backbone_and_head_options():
    identity_like = mf.BACKBONES.build({"type": "mlp", "args": {"hidden_dims": []}}, in_dim=7)
    assert identity_like.out_dim == 7
    normed = mf.BACKBONES.build({"type": "mlp", "args": {"hidden_dims": [5, 3], "norm": "layer", "activation": "gelu"}}, in_dim=4)
    assert normed(torch.randn(2, 4)).shape == (2, 3) and len(list(normed.children())) == 2
    with pytest.raises(ConfigValueError, match=r"hidden_dims: expected tuple of whole numbers > 0, got \[0\]"):
        mf.BACKBONES.build({"type": "mlp", "args": {"hidden_dims": [0]}}, in_dim=4)  # refused before building
    head = mf.HEADS.build({"type": "mlp", "args": {"hidden_dims": [6]}}, in_dim=4, num_classes=2)
    assert head(torch.randn(3, 4)).shape == (3, 2)


def test_describe_shows_layouts_out_dim_rule_and_arguments(cli):
    res = cli("describe", "backbone", "resnet18")
    assert res.code == 0
    assert "input layouts: image [B, C, H, W]" in res.out
    assert "output layout: image [B, C, H, W]" in res.out
    assert "out_dim: 512 × width channels" in res.out
    for arg in ("stem", "width", "features_only"):
        assert any(line.startswith(arg) for line in res.out.splitlines()), arg
    loss = cli("describe", "loss", "cross_entropy")
    assert "reads: batch['logits'] and batch['label']" in loss.out
