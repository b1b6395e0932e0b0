"""``ecapa_tdnn``: TaoRuijie/ECAPA-TDNN's computation (its forward written out here) and parameter count, the paper's
counts with its 128-wide attention, 1-10 s inputs, bad arguments."""

from __future__ import annotations

import warnings

import pytest
import torch
import torch.nn.functional as F

import modforge as mf
from modforge.components.backbones.ecapa_tdnn import ECAPATDNN, SERes2Block
from modforge.components.layouts import Layout
from modforge.components.necks.attentive_stats_pool import AttentiveStatsPool
from part_checks import assert_embeds, assert_engines_follow_the_frame_count, assert_layouts_agree


def n_params(module: torch.nn.Module) -> int:
    return sum(p.numel() for p in module.parameters())


@pytest.mark.parametrize(
    ("args", "count"),
    [
        # TaoRuijie/ECAPA-TDNN's model.py, ECAPA_TDNN(C=1024), exactly (its attention bottleneck is 256 wide)
        ({}, 15_444_544),
        # Desplanques et al. 2020, Table 2: 14.7 M (C=1024) and 6.2 M (C=512), 80 mel inputs; the layer
        # layout of TaoRuijie/ECAPA-TDNN with the paper's 128-wide attention bottleneck
        ({"attention_dim": 128}, 14_657_728),
        ({"channels": 512, "attention_dim": 128}, 6_191_360),
    ],
)
def test_parameter_counts_match_the_references(args, count):
    assert n_params(mf.BACKBONES.build({"type": "ecapa_tdnn", "args": args}, in_dim=80)) == count


def test_structure_is_the_papers():
    net = ECAPATDNN(80, channels=64, mfa_dim=96, embed_dim=32, se_bottleneck=16, attention_dim=8)
    assert [block.res2[0][0].dilation[0] for block in net.blocks] == [2, 3, 4]
    assert all(isinstance(block, SERes2Block) and len(block.res2) == 7 for block in net.blocks)  # scale 8
    assert net.layer0[0].kernel_size == (5,) and net.mfa[0].in_channels == 3 * 64
    assert isinstance(net.pool, AttentiveStatsPool) and net.pool.global_context  # the modforge neck, reused
    assert net.fc.in_features == 2 * 96 and net.out_dim == 32


def taoruijie_forward(net: ECAPATDNN, x: torch.Tensor) -> torch.Tensor:
    """TaoRuijie/ECAPA-TDNN model.py ECAPA_TDNN.forward after its feature extraction (x: [B, 80, T]), written out with
    the weights of ``net`` (eval mode)."""

    def crb(unit, y):  # conv -> relu -> bn
        return unit[2](F.relu(unit[0](y)))

    def bottle2neck(block, y):
        residual = y
        out = crb(block.conv_in, y)
        spx = torch.split(out, block.width, 1)
        for i, unit in enumerate(block.res2):
            sp = spx[i] if i == 0 else sp + spx[i]  # noqa: F821 (defined at i == 0)
            sp = crb(unit, sp)
            out = sp if i == 0 else torch.cat((out, sp), 1)
        out = crb(block.conv_out, torch.cat((out, spx[len(block.res2)]), 1))
        gate = torch.sigmoid(block.se.expand(F.relu(block.se.reduce(F.adaptive_avg_pool1d(out, 1)))))
        return out * gate + residual

    x = crb(net.layer0, x)
    x1 = bottle2neck(net.blocks[0], x)
    x2 = bottle2neck(net.blocks[1], x + x1)
    x3 = bottle2neck(net.blocks[2], x + x1 + x2)
    x = F.relu(net.mfa[0](torch.cat((x1, x2, x3), dim=1)))
    t = x.size()[-1]
    global_x = torch.cat((x, torch.mean(x, dim=2, keepdim=True).repeat(1, 1, t),
                          torch.sqrt(torch.var(x, dim=2, keepdim=True).clamp(min=1e-4)).repeat(1, 1, t)), dim=1)
    w = torch.softmax(net.pool.attention(global_x), dim=2)  # Conv1d, ReLU, BatchNorm1d, Tanh, Conv1d
    mu = torch.sum(x * w, dim=2)
    sg = torch.sqrt((torch.sum((x**2) * w, dim=2) - mu**2).clamp(min=1e-4))
    x = net.pool_norm(torch.cat((mu, sg), 1))
    return net.embed_norm(net.fc(x))


def test_forward_is_taoruijies():
    torch.manual_seed(0)
    net = ECAPATDNN(80, channels=256, mfa_dim=384).eval()  # the reference's layout at a smaller width
    with torch.no_grad():
        for module in net.modules():  # non-trivial BatchNorm statistics
            if isinstance(module, torch.nn.BatchNorm1d):
                module.running_mean.normal_(0, 0.1)
                module.running_var.uniform_(0.5, 1.5)
        x = torch.randn(2, 80, 120)
        assert torch.allclose(net(x.transpose(1, 2)), taoruijie_forward(net, x), rtol=1e-4, atol=1e-5)
        # short utterances: the sample variance and both 1e-4 floors are the reference's
        x = torch.randn(2, 80, 3)
        assert torch.allclose(net(x.transpose(1, 2)), taoruijie_forward(net, x), rtol=1e-4, atol=1e-5)
        # one frame, where the reference's sample variance is NaN: a zero variance, floored
        with warnings.catch_warnings():
            warnings.simplefilter("error")  # no degrees-of-freedom warning either
            assert torch.isfinite(net(torch.randn(2, 1, 80))).all()


def test_blocks_receive_the_sum_of_all_earlier_outputs():
    # the paper's Section 3.4: each SE-Res2Block's input is the sum of the first layer's and every earlier block's output
    net = ECAPATDNN(8, channels=16, mfa_dim=24, embed_dim=8, se_bottleneck=4, attention_dim=4).eval()
    seen: list[torch.Tensor] = []
    for block in net.blocks:
        block.register_forward_hook(lambda _m, inputs, output: seen.extend([inputs[0], output]))
    x = torch.randn(2, 30, 8)
    with torch.no_grad():
        net(x)
        x0 = net.layer0(x.transpose(1, 2))
    in1, out1, in2, out2, in3 = seen[:5]
    assert torch.allclose(in1, x0) and torch.allclose(in2, x0 + out1) and torch.allclose(in3, x0 + out1 + out2)


@pytest.mark.parametrize("frames", [100, 400, 1000])  # 1 s, 4 s, 10 s of 80-band features at 100 frames/s
def test_one_to_ten_seconds_of_features(frames):
    assert_embeds("ecapa_tdnn", 80, frames, 192)


def test_sequence_and_channels_layouts_agree():
    seq = ECAPATDNN(12, channels=32, mfa_dim=48, se_bottleneck=8, attention_dim=8).eval()
    chan = ECAPATDNN(12, in_layout=Layout.CHANNELS, channels=32, mfa_dim=48, se_bottleneck=8, attention_dim=8).eval()
    assert_layouts_agree(seq, chan, torch.randn(3, 50, 12))


@pytest.mark.parametrize("engine", ["torchscript", "onnx"])
def test_engines_follow_the_frame_count(engine):
    net = ECAPATDNN(12, channels=32, mfa_dim=48, embed_dim=16, se_bottleneck=8, attention_dim=8).eval()
    assert_engines_follow_the_frame_count(net, engine)


def test_bad_arguments_and_inputs_raise_one_clear_error():
    with pytest.raises(mf.BuildError, match="kernel_size must be a positive odd number"):
        mf.BACKBONES.build({"type": "ecapa_tdnn", "args": {"kernel_size": 4}}, in_dim=80)
    with pytest.raises(ValueError, match="scale must be at least 2"):
        ECAPATDNN(80, channels=4, scale=8)
    with pytest.raises(ValueError, match="dilations must be a non-empty list"):
        ECAPATDNN(80, dilations=())
    net = ECAPATDNN(12, channels=16, mfa_dim=24, se_bottleneck=4, attention_dim=4).eval()
    with pytest.raises(ValueError, match=r"expects frame features \[B, T, D\] with D=12, got \[2, 30, 13\]"):
        net(torch.randn(2, 30, 13))
