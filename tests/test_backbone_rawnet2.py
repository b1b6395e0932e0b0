"""``rawnet2``: the contract, the reference's parameter count and filter bank, 1-10 s and short
inputs (length-robust pooling), the channels path, dynamic-length export, bad arguments."""

from __future__ import annotations

import warnings

import numpy as np
import pytest
import torch
import torch.nn as nn
import torch.nn.functional as F

import modforge as mf
from modforge.components.backbones.rawnet2 import FMSResidualBlock, MelSincConv, RawNet2, SincFront, pool_time
from modforge.components.frontends.sinc import SincFrontend
from modforge.components.layouts import Layout
from modforge.engines import build_engine

SMALL = {"gru_dim": 32, "gru_layers": 1, "fc_dim": 16}  # a fast network with the reference's front and blocks


def n_params(module: nn.Module) -> int:
    return sum(p.numel() for p in module.parameters())


def test_parameter_count_is_the_reference_configurations():
    # asvspoof-challenge/2021 LA/Baseline-RawNet2 model.py with model_config_RawNet.yaml (filts [20, [20, 20],
    # [20, 128], [128, 128]], blocks [2, 4], gru_node 1024 x 3 layers, nb_fc_node 1024, nb_classes 2): 17,621,410
    # parameters, fc2_gru (the 2-class output layer) included; checked against the reference module itself.
    backbone = mf.BACKBONES.build({"type": "rawnet2"}, in_dim=1, in_layout=Layout.WAVEFORM)
    assert n_params(backbone) == 17_619_360
    model = mf.build_model({"backbone": "rawnet2", "head": "linear"}, in_dim=1, num_classes=2, layout="waveform")
    assert n_params(model) == 17_621_410
    # without pre-activation the five dead BatchNorms of the 2021 baseline code are gone: 2 x (20 + 20 + 3 x 128)
    assert n_params(RawNet2(preactivation=False)) == 17_619_360 - 848


def test_structure_is_the_references():
    net = RawNet2()
    assert isinstance(net.front, SincFront) and net.front.sinc.filters.shape == (20, 1, 1025)  # 1024 taps made odd
    assert not any(".sinc." in name for name, _ in net.named_parameters())  # fixed filters
    assert net.front.bn.num_features == 20
    assert [(b.conv1.in_channels, b.conv2.out_channels) for b in net.blocks] == [(20, 20)] * 2 + [(20, 128)] + [
        (128, 128)
    ] * 3
    assert isinstance(net.blocks[0].pre, nn.Identity) and all(isinstance(b.pre, nn.Sequential) for b in net.blocks[1:])
    assert isinstance(net.blocks[2].shortcut, nn.Conv1d) and isinstance(net.blocks[3].shortcut, nn.Identity)
    assert (net.gru.input_size, net.gru.hidden_size, net.gru.num_layers) == (128, 1024, 3)
    assert (net.fc.in_features, net.fc.out_features, net.out_dim) == (1024, 1024, 1024)


def test_sinc_filters_are_mel_spaced_hamming_windowed_band_passes():
    sr, count, kernel = 16000, 20, 1025
    filters = MelSincConv(count, 1024, sr).filters[:, 0].double()
    assert torch.allclose(filters, filters.flip(-1))  # symmetric: linear phase
    mel_top = 2595 * np.log10(1 + (sr // 2) / 700)
    edges = 700 * (10 ** (np.linspace(0, mel_top, count + 1) / 2595) - 1)
    assert edges[0] == 0 and abs(edges[-1] - sr / 2) < 1e-6
    # the centre tap of an ideal band-pass [f1, f2] is 2 (f2 - f1) / sr, and the Hamming window is 1 there
    centre = torch.as_tensor(2 * np.diff(edges) / sr)
    assert torch.allclose(filters[:, kernel // 2], centre, atol=1e-7)
    # each filter passes its band: its gain peaks between its edges
    spectrum = torch.fft.rfft(filters, n=8192).abs()
    peak_hz = spectrum.argmax(dim=-1).double() * sr / 8192
    assert all(edges[i] - 20 <= float(peak_hz[i]) <= edges[i + 1] + 20 for i in range(count))


@pytest.mark.parametrize("length", [1, 2, 3, 4, 5, 8, 9, 10, 100, 64600])
def test_pool_time_is_the_references_floor_pooling_and_never_empty(length):
    x = torch.randn(2, 3, length)
    pooled = pool_time(x, 3)
    if length >= 3:
        assert torch.equal(pooled, F.max_pool1d(x, 3))  # the reference's nn.MaxPool1d(3)
    else:
        assert torch.equal(pooled, x.amax(dim=-1, keepdim=True))  # one frame, not none


@pytest.mark.parametrize("seconds", [1, 4, 10])
def test_embeds_1_to_10_seconds(seconds):
    net = RawNet2().eval()
    with torch.no_grad():
        out = net(torch.randn(1, 16000 * seconds))
    assert out.shape == (1, 1024) and torch.isfinite(out).all()


def test_four_seconds_reach_the_gru_with_the_references_frame_count():
    # 64,000 samples: 62,976 after the sinc layer, then seven floor pools by 3 -> 28 GRU steps
    net = RawNet2(**SMALL).eval()
    lengths: list[int] = []
    net.gru.register_forward_hook(lambda _m, inputs, _out: lengths.append(inputs[0].shape[1]))
    with torch.no_grad():
        net(torch.randn(1, 64000))
    assert lengths == [28]


def test_short_inputs_keep_at_least_one_frame():
    net = RawNet2(**SMALL).eval()
    with torch.no_grad():
        for samples in (1025, 1100, 4000):  # the conformance suite's 4000 samples pool down to one frame
            assert torch.isfinite(net(torch.randn(2, samples))).all()
        assert net(torch.randn(2, 1, 4000)).shape == (2, 16)  # [B, 1, T] is a waveform too


def test_channels_path_starts_at_the_first_residual_block():
    net = RawNet2(in_dim=12, in_layout=Layout.CHANNELS, **SMALL).eval()
    assert isinstance(net.front, nn.Identity)  # no sinc, |x|, pool, BN or SELU: the frontend did them
    assert net.blocks[0].conv1.in_channels == 12 and isinstance(net.blocks[0].shortcut, nn.Conv1d)
    x = torch.randn(2, 12, 700)
    with torch.no_grad():
        for length in (1, 2, 3, 32, 700):
            out = net(x[..., :length])
            assert out.shape == (2, 16) and torch.isfinite(out).all()


def test_channels_path_is_the_waveform_network_after_its_front():
    waveform_net = RawNet2(**SMALL).eval()
    channels_net = RawNet2(in_dim=20, in_layout=Layout.CHANNELS, **SMALL).eval()
    channels_net.load_state_dict({k: v for k, v in waveform_net.state_dict().items() if not k.startswith("front.")})
    x = torch.randn(2, 8000)
    with torch.no_grad():
        assert torch.allclose(channels_net(waveform_net.front(x.unsqueeze(1))), waveform_net(x), atol=1e-6)


def test_sinc_frontend_feeds_the_channels_path():
    # modforge's learnable sinc frontend does RawNet2's first layer (filters, |x|, max-pool 3, BN, SELU)
    model = mf.build_model(
        {"frontend": "sinc", "backbone": {"type": "rawnet2", "args": SMALL}, "head": "linear"},
        in_dim=1,
        num_classes=2,
        layout="waveform",
        sample_rate=16000,
    ).eval()
    backbone = model.stage("backbone")
    assert isinstance(model.stage("frontend"), SincFrontend)
    assert isinstance(backbone.front, nn.Identity) and backbone.blocks[0].conv1.in_channels == 20
    with torch.no_grad():
        out = model(torch.randn(1, 64000))
    assert out.shape == (1, 2) and torch.isfinite(out).all()


def test_preactivation_false_is_the_2021_baseline_block():
    block = FMSResidualBlock(20, 20, preactivation=False).eval()
    x = torch.randn(2, 20, 30)
    with torch.no_grad():
        out = block.conv2(block.act(block.bn2(block.conv1(x)))) + x  # conv1 sees the block input directly
        out = F.max_pool1d(out, 3)
        scale = torch.sigmoid(block.attention(out.mean(-1))).unsqueeze(-1)
        assert torch.allclose(block(x), out * scale + scale)  # FMS: x * s + s


@pytest.mark.parametrize(
    ("layout", "in_dim", "example", "lengths"),
    [
        ("waveform", 1, 4000, [1500, 16000]),
        ("channels", 12, 32, [1, 5, 500]),
    ],
)
def test_onnx_export_keeps_a_dynamic_time_axis(layout, in_dim, example, lengths):
    model = mf.build_model(
        {"backbone": {"type": "rawnet2", "args": SMALL}, "head": "linear"}, in_dim=in_dim, num_classes=2, layout=layout
    ).eval()

    def batch(length: int) -> torch.Tensor:
        return torch.randn(3, length) if layout == "waveform" else torch.randn(3, in_dim, length)

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        runner = build_engine("onnx", path="onnx").prepare(model, {"input": batch(example)[:2]})
    for length in lengths:
        x = batch(length)
        out = runner(x)
        out = torch.as_tensor(out["logits"] if isinstance(out, dict) else out)
        with torch.no_grad():
            expected = model(x)
        assert torch.allclose(out, expected, atol=1e-5), length


@pytest.mark.filterwarnings("ignore::DeprecationWarning")  # torch.jit.script's notice
def test_torchscript_scripts_it_and_pools_any_length():
    net = RawNet2(in_dim=6, in_layout=Layout.CHANNELS, **SMALL).eval()
    scripted = torch.jit.script(net)
    with torch.no_grad():
        for length in (1, 2, 7, 90):
            x = torch.randn(2, 6, length)
            assert torch.allclose(scripted(x), net(x), atol=1e-6)


@pytest.mark.parametrize(
    ("args", "message"),
    [
        ({"in_layout": Layout.IMAGE, "in_dim": 3}, "waveform \\[B, T\\] or channels"),
        ({"in_dim": 2}, "waveform input has in_dim 1"),
        ({"in_layout": Layout.CHANNELS, "in_dim": 0}, "in_dim must be a positive"),
        ({"sinc_filters": 0}, "sinc_filters must be"),
        ({"widths": (20, 128, 256)}, "widths and blocks"),
        ({"blocks": (2, 0)}, "widths and blocks"),
        ({"gru_layers": 0}, "gru_layers must be a positive"),
    ],
)
def test_bad_arguments_raise_one_clear_error(args, message):
    with pytest.raises(ValueError, match=message):
        RawNet2(**args)


def test_bad_inputs_raise_one_clear_error():
    net = RawNet2(**SMALL).eval()
    with pytest.raises(ValueError, match="shorter than the sinc filters .1025 taps"):
        net(torch.randn(2, 1000))
    with pytest.raises(ValueError, match=r"expected a waveform \[B, T\]"):
        net(torch.randn(2, 3, 4000))
    channels = RawNet2(in_dim=12, in_layout=Layout.CHANNELS, **SMALL)
    with pytest.raises(ValueError, match=r"expected channels \[B, 12, T\], got shape \[2, 8, 40\]"):
        channels(torch.randn(2, 8, 40))
