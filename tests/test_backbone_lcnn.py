"""``lcnn``: the contract, the 2021 LFCC-LCNN baseline's parameter count and layers, 60 LFCC dims
at 1-10 s, any number of frequency bins and frames, dynamic-length export, bad arguments."""

from __future__ import annotations

import warnings

import pytest
import torch
import torch.nn as nn
import torch.nn.functional as F

import modforge as mf
from modforge.components.backbones.lcnn import LCNN, MaxFeatureMap, MaxPool2x2, pool_frequency
from modforge.components.frontends.lfcc import LFCC
from modforge.engines import build_engine


def n_params(module: nn.Module) -> int:
    return sum(p.numel() for p in module.parameters())


def test_parameter_count_is_the_baselines():
    # asvspoof-challenge/2021 LA/Baseline-LFCC-LCNN baseline_LA/model.py with 60 LFCC dims: m_transform
    # 157,504 + two BLSTMLayer(96, 96) 112,128 = 269,632, plus its Linear(96, 1) = 269,729 trainable parameters
    # (checked against the reference layers). With modforge's 2-class linear head: 269,632 + 96 x 2 + 2.
    backbone = mf.BACKBONES.build({"type": "lcnn"}, in_dim=1)
    assert n_params(backbone) == 269_632
    convs = sum(n_params(m) for m in backbone.modules() if isinstance(m, nn.Conv2d))
    assert (convs, n_params(backbone.blstm)) == (157_504, 112_128)
    # a [B, T, 60] LFCC sequence is adapted to a [B, 1, 60, T] image by the builder
    model = mf.build_model({"backbone": "lcnn", "head": "linear"}, in_dim=60, num_classes=2, layout="sequence")
    assert n_params(model) == 269_826


def test_layers_are_the_baselines():
    net = LCNN()
    convs = [m for m in net.modules() if isinstance(m, nn.Conv2d)]
    assert [(c.in_channels, c.out_channels, c.kernel_size[0]) for c in convs] == [
        (1, 64, 5),
        (32, 64, 1),
        (32, 96, 3),
        (48, 96, 1),
        (48, 128, 3),
        (64, 128, 1),
        (64, 64, 3),
        (32, 64, 1),
        (32, 64, 3),
    ]
    norms = [m for m in net.modules() if isinstance(m, nn.BatchNorm2d)]
    assert [m.num_features for m in norms] == [32, 48, 48, 64, 32, 32] and not any(m.affine for m in norms)
    assert sum(isinstance(m, MaxPool2x2) for m in net.modules()) == 4
    assert [m.p for m in net.modules() if isinstance(m, nn.Dropout)] == [0.7]
    lstm = net.blstm
    assert (lstm.input_size, lstm.hidden_size, lstm.num_layers, lstm.bidirectional) == (96, 48, 2, True)
    assert net.out_dim == 96


class BaselineMFM(nn.Module):  # sandbox/block_nn.py MaxFeatureMap2D: view (B, 2, C/2, ...), max over the 2
    def forward(self, x: torch.Tensor) -> torch.Tensor:
        shape = list(x.shape)
        shape[1] //= 2
        shape.insert(1, 2)
        return x.view(*shape).max(1)[0]


def baseline_model() -> tuple[nn.Sequential, nn.ModuleList]:
    """baseline_LA/model.py's m_transform and m_before_pooling for 60 LFCC dims, layer by layer."""
    def conv(i: int, o: int, k: int) -> nn.Conv2d:
        return nn.Conv2d(i, o, [k, k], 1, padding=[k // 2, k // 2])

    transform = nn.Sequential(
        conv(1, 64, 5), BaselineMFM(), nn.MaxPool2d([2, 2], [2, 2]),
        conv(32, 64, 1), BaselineMFM(), nn.BatchNorm2d(32, affine=False), conv(32, 96, 3), BaselineMFM(),
        nn.MaxPool2d([2, 2], [2, 2]), nn.BatchNorm2d(48, affine=False),
        conv(48, 96, 1), BaselineMFM(), nn.BatchNorm2d(48, affine=False), conv(48, 128, 3), BaselineMFM(),
        nn.MaxPool2d([2, 2], [2, 2]),
        conv(64, 128, 1), BaselineMFM(), nn.BatchNorm2d(64, affine=False), conv(64, 64, 3), BaselineMFM(),
        nn.BatchNorm2d(32, affine=False),
        conv(32, 64, 1), BaselineMFM(), nn.BatchNorm2d(32, affine=False), conv(32, 64, 3), BaselineMFM(),
        nn.MaxPool2d([2, 2], [2, 2]), nn.Dropout(0.7),
    )
    blstms = nn.ModuleList(nn.LSTM(96, 48, bidirectional=True) for _ in range(2))  # two BLSTMLayer(96, 96)
    return transform, blstms


def test_forward_is_the_baselines_with_its_weights_transposed():
    torch.manual_seed(0)
    transform, blstms = baseline_model()
    with torch.no_grad():
        for module in transform.modules():
            if isinstance(module, nn.BatchNorm2d):
                module.running_mean.normal_(0, 0.1)
                module.running_var.uniform_(0.5, 1.5)
    transform.eval()
    ours = LCNN().eval()
    baseline_convs = [m for m in transform if isinstance(m, nn.Conv2d)]
    our_convs = [m for m in ours.modules() if isinstance(m, nn.Conv2d)]
    baseline_bns = [m for m in transform if isinstance(m, nn.BatchNorm2d)]
    our_bns = [m for m in ours.modules() if isinstance(m, nn.BatchNorm2d)]
    with torch.no_grad():
        for b, o in zip(baseline_convs, our_convs, strict=True):  # [T, F] kernels become [F, T] kernels
            o.weight.copy_(b.weight.transpose(-1, -2))
            o.bias.copy_(b.bias)
        for b, o in zip(baseline_bns, our_bns, strict=True):
            o.load_state_dict(b.state_dict())
        for layer, blstm in enumerate(blstms):
            for name, value in blstm.state_dict().items():  # weight_ih_l0(_reverse) -> weight_ih_l{layer}(_reverse)
                getattr(ours.blstm, name.replace("_l0", f"_l{layer}")).copy_(value)
        lfcc = torch.randn(2, 150, 60)  # [B, T, 60] as the baseline's front end gives it
        hidden = transform(lfcc.unsqueeze(1)).permute(0, 2, 1, 3).contiguous()
        hidden = hidden.view(2, hidden.shape[1], -1)
        lstm = hidden
        for blstm in blstms:  # BLSTMLayer: (length, batch, dim) in and out
            lstm = blstm(lstm.permute(1, 0, 2))[0].permute(1, 0, 2)
        expected = (lstm + hidden).mean(1)  # what m_output_act receives
        assert torch.allclose(ours(lfcc.transpose(1, 2).unsqueeze(1)), expected, rtol=1e-5, atol=1e-6)


def test_max_feature_map_keeps_the_larger_half():
    x = torch.randn(2, 8, 3, 5)
    expected, _ = x.view(2, 2, 4, 3, 5).max(dim=1)  # the baseline's MaxFeatureMap2D
    assert torch.equal(MaxFeatureMap(4)(x), expected)


@pytest.mark.parametrize(("height", "width"), [(1, 1), (1, 7), (2, 3), (5, 4), (60, 101)])
def test_pool_is_the_baselines_floor_pooling_and_never_empty(height, width):
    x = torch.randn(2, 3, height, width)
    pooled = MaxPool2x2()(x)
    assert pooled.shape[-2:] == (max(height // 2, 1), max(width // 2, 1))
    if height >= 2 and width >= 2:
        assert torch.equal(pooled, F.max_pool2d(x, 2, 2))  # the baseline's nn.MaxPool2d([2, 2], [2, 2])
    else:
        window = (min(height, 2), min(width, 2))  # a 1-long axis is kept as it is, the other pooled by 2
        assert torch.equal(pooled, F.max_pool2d(x, window, 2))


def test_frequency_pooling_is_the_identity_for_60_bins_and_adaptive_otherwise():
    x = torch.randn(2, 32, 3, 7)  # 60 // 16 = 3 bins left: the baseline's width, untouched
    assert pool_frequency(x, 3) is x
    for size in (1, 2, 5, 16):
        x = torch.randn(2, 32, size, 7)
        expected = nn.AdaptiveMaxPool2d((3, 7))(x)
        assert torch.equal(pool_frequency(x, 3), expected)


@pytest.mark.parametrize("seconds", [1, 4, 10])
def test_embeds_60_lfcc_dims_of_1_to_10_seconds(seconds):
    net = LCNN().eval()
    with torch.no_grad():
        for frames in (100 * seconds, 100 * seconds + 1):  # 10 ms hop, with and without the centred frame
            out = net(torch.randn(1, 1, 60, frames))
            assert out.shape == (1, 96) and torch.isfinite(out).all()


def test_any_number_of_bins_and_frames_gives_the_same_width():
    net = LCNN().eval()
    with torch.no_grad():
        for bins, frames in ((1, 1), (7, 3), (16, 16), (20, 5), (80, 40), (257, 33)):
            out = net(torch.randn(2, 1, bins, frames))
            assert out.shape == (2, 96) and torch.isfinite(out).all()
    wider = LCNN(in_dim=2, freq_bins=4).eval()
    assert wider.out_dim == 128 and wider(torch.randn(1, 2, 40, 50)).shape == (1, 128)


def test_embedding_is_the_time_average_of_blstm_plus_residual():
    net = LCNN().eval()
    x = torch.randn(2, 1, 60, 64)
    with torch.no_grad():
        h = x
        for stage in net.stages:
            h = stage(h)
        assert h.shape == (2, 32, 3, 4)
        seq = h.permute(0, 3, 1, 2).reshape(2, 4, 96)  # the baseline's (batch, frame, channel x freq) order
        assert torch.allclose(net(x), (net.blstm(seq)[0] + seq).mean(dim=1), atol=1e-6)


def test_lfcc_frontend_feeds_it_as_a_one_channel_image():
    # the baseline's pipeline: 60 LFCC dims (20 + deltas + double-deltas, 20 ms / 10 ms) -> LCNN -> output layer
    model = mf.build_model(
        {"frontend": "lfcc", "backbone": "lcnn", "head": "linear"},
        in_dim=1,
        num_classes=2,
        layout="waveform",
        sample_rate=16000,
    ).eval()
    assert isinstance(model.stage("frontend"), LFCC) and model.stage("backbone").in_channels == 1
    with torch.no_grad():
        out = model(torch.randn(1, 16000))
    assert out.shape == (1, 2) and torch.isfinite(out).all()


def test_onnx_export_of_an_lfcc_sequence_model_keeps_a_dynamic_time_axis():
    model = mf.build_model({"backbone": "lcnn", "head": "linear"}, in_dim=60, num_classes=2, layout="sequence").eval()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        runner = build_engine("onnx", path="onnx").prepare(model, {"input": torch.randn(2, 100, 60)})
    for frames in (1, 17, 401):
        x = torch.randn(3, frames, 60)
        out = runner(x)
        out = torch.as_tensor(out["logits"] if isinstance(out, dict) else out)
        with torch.no_grad():
            assert torch.allclose(out, model(x), atol=1e-5), frames


@pytest.mark.parametrize(
    ("args", "message"),
    [
        ({"in_dim": 0}, "in_dim must be a positive"),
        ({"freq_bins": 0}, "freq_bins must be a positive"),
        ({"dropout": 1.0}, r"dropout must be in \[0, 1\)"),
    ],
)
def test_bad_arguments_raise_one_clear_error(args, message):
    with pytest.raises(ValueError, match=message):
        LCNN(**args)


def test_bad_inputs_raise_one_clear_error():
    net = LCNN().eval()
    with pytest.raises(ValueError, match=r"expected a spectrogram image \[B, 1, F, T\], got shape \[2, 100, 60\]"):
        net(torch.randn(2, 100, 60))
    with pytest.raises(ValueError, match=r"got shape \[2, 3, 60, 100\]"):
        net(torch.randn(2, 3, 60, 100))
