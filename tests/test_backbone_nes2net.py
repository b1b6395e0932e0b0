"""``nes2net`` (Nes2Net-X): the contract, the reference's parameter counts and nesting, any
feature size, 1-10 s inputs, bad arguments."""

from __future__ import annotations

import pytest
import torch

import modforge as mf
from modforge.components.backbones.nes2net import InnerRes2Net, Nes2NetX
from modforge.components.layouts import Layout
from modforge.testing import check_part
from part_checks import assert_contract, assert_embeds, assert_engines_follow_the_frame_count, assert_layouts_agree


def n_params(module: torch.nn.Module) -> int:
    return sum(p.numel() for p in module.parameters())


@pytest.mark.slow
@pytest.mark.parametrize("pool", ["attentive"])  # the default (mean) is checked by tests/test_conformance.py, like every part
def test_passes_the_conformance_suite(pool):
    results = check_part("backbone", "nes2net", {"pool": pool})
    assert_contract(results, layouts=True)
    engines = [r.detail for r in results if r.check == "engines"]
    assert len(engines) == 2 and all("torchscript ≤" in d and "onnx" in d for d in engines)  # scripted, not traced


@pytest.mark.parametrize(
    ("args", "count"),
    [
        # Liu-Tianchi/Nes2Net_ASVspoof_ITW wav2vec2_Nes2Net_X.py, Nes_ratio [8, 8], SE_ratio [1], 1024-d XLS-R:
        # Nested_Res2Net_TDNN has 512,039 parameters with its 2-way fc (1024 × 2 + 2), "511k" in the paper
        ({}, 512_039 - 2_050),
        # the same with pool_func 'ASTP' (fc 2048 × 2 + 2)
        ({"pool": "attentive"}, 777_383 - 4_098),
    ],
)
def test_parameter_counts_match_the_reference(args, count):
    net = mf.BACKBONES.build({"type": "nes2net", "args": args}, in_dim=1024)
    assert n_params(net) == count
    assert net.out_dim == (2048 if args else 1024)


def test_nesting_is_the_references():
    net = Nes2NetX(1024)
    assert len(net.groups) == 7 and net.group == 128  # outer scale 8: 7 inner blocks on 128 channels, one passes
    inner = net.groups[0][0]
    assert isinstance(inner, InnerRes2Net) and inner.width == 16 and len(inner.steps) == 7  # inner scale 8
    assert [step.weights.numel() for step in inner.steps] == [2, 3, 4, 5, 6, 7, 8]  # Nes2Net-X weighted sums
    assert inner.steps[0].conv.dilation == (2, 1) and inner.se.reduce.out_channels == 128  # dilation 2, SE ratio 1


def reference_forward(net: Nes2NetX, x: torch.Tensor) -> torch.Tensor:
    """Liu-Tianchi/Nes2Net_ASVspoof_ITW Nested_Res2Net_TDNN.forward without its fc (x: [B, C, T]), written out with
    the weights of ``net`` (eval mode)."""

    def bottle2neck(block: InnerRes2Net, y: torch.Tensor) -> torch.Tensor:
        residual = y
        out = block.bn_in(torch.relu(block.conv_in(y))).unsqueeze(-1)
        spx = torch.split(out, block.width, 1)
        nums = len(block.steps)
        sp = spx[nums]
        for i, step in enumerate(block.steps):
            sp = torch.cat((sp, spx[i]), -1)
            sp = step.bn(torch.relu(step.conv(sp)))
            sp_s = torch.sum(sp * step.weights, dim=-1, keepdim=False)
            out = sp_s if i == 0 else torch.cat((out, sp_s), 1)
        out = torch.cat((out, spx[nums].squeeze(-1)), 1)
        out = block.bn_out(torch.relu(block.conv_out(out)))
        gate = torch.sigmoid(block.se.expand(torch.relu(block.se.reduce(torch.nn.functional.adaptive_avg_pool1d(out, 1)))))
        out = out * gate
        out += residual
        return out

    spx = torch.split(x, net.group, 1)
    for i, group in enumerate(net.groups):
        sp = spx[i] if i == 0 else sp + spx[i]  # noqa: F821 (defined at i == 0)
        sp = group[2](torch.relu(bottle2neck(group[0], sp)))
        out = sp if i == 0 else torch.cat((out, sp), 1)  # noqa: F821 (defined at i == 0)
    out = torch.relu(net.bn(torch.cat((out, spx[-1]), 1)))
    if not net.attentive:
        return torch.mean(out, dim=-1)
    p = net.pooling  # ASTP, global_context_att=False
    alpha = torch.softmax(p.linear2(torch.tanh(p.linear1(out))), dim=2)
    mean = torch.sum(alpha * out, dim=2)
    var = torch.sum(alpha * (out**2), dim=2) - mean**2
    return torch.cat([mean, torch.sqrt(var.clamp(min=1e-10))], dim=1)


@pytest.mark.parametrize("pool", ["mean", "attentive"])
def test_forward_is_the_references(pool):
    torch.manual_seed(0)
    net = Nes2NetX(256, pool=pool).eval()  # the reference's nesting (8 × 8) on 256-d features
    with torch.no_grad():
        for module in net.modules():
            if isinstance(module, (torch.nn.BatchNorm1d, torch.nn.BatchNorm2d)):
                module.running_mean.normal_(0, 0.1)
                module.running_var.uniform_(0.5, 1.5)
        x = torch.randn(2, 256, 60)
        assert torch.allclose(net(x.transpose(1, 2)), reference_forward(net, x), rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize(("in_dim", "out_dim"), [(12, 16), (768, 768), (1, 8)])
def test_feature_sizes_not_divisible_by_the_outer_scale_are_zero_padded(in_dim, out_dim):
    net = Nes2NetX(in_dim).eval()
    with torch.no_grad():
        out = net(torch.randn(2, 20, in_dim))
    assert net.out_dim == out_dim and out.shape == (2, out_dim) and torch.isfinite(out).all()


@pytest.mark.parametrize("frames", [50, 200, 500, 1000])  # 1 s, 4 s, 10 s of SSL features at 50 frames/s (and 1000)
def test_one_to_ten_seconds_of_features(frames):
    assert_embeds("nes2net", 1024, frames, 1024)


def test_sequence_and_channels_layouts_agree():
    seq = Nes2NetX(24, pool="attentive").eval()
    chan = Nes2NetX(24, in_layout=Layout.CHANNELS, pool="attentive").eval()
    assert_layouts_agree(seq, chan, torch.randn(3, 40, 24))


@pytest.mark.parametrize("engine", ["torchscript", "onnx"])
def test_engines_follow_the_frame_count(engine):
    assert_engines_follow_the_frame_count(Nes2NetX(12, pool="attentive").eval(), engine)


def test_bad_arguments_and_inputs_raise_one_clear_error():
    with pytest.raises(mf.BuildError, match=r"nes_ratio must be two scales \(outer, inner\), each at least 2"):
        mf.BACKBONES.build({"type": "nes2net", "args": {"nes_ratio": [8, 1]}}, in_dim=1024)
    with pytest.raises(ValueError, match="kernel_size must be a positive odd number"):
        Nes2NetX(1024, kernel_size=2)
    with pytest.raises(ValueError, match="pool must be 'mean' or 'attentive'"):
        Nes2NetX(1024, pool="max")  # type: ignore[arg-type]
    with pytest.raises(ValueError, match=r"expects frame features \[B, T, D\] with D=1024, got \[1, 50, 768\]"):
        Nes2NetX(1024).eval()(torch.randn(1, 50, 768))
