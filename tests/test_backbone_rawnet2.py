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
from modforge.components.backbones.rawnet2 import (
    FMSResidualBlock,
    MelSincConv,
    RawNet2,
    SincFront,
    pool_time,
    reference_state_dict,
)
from modforge.components.frontends.sinc import SincFrontend
from modforge.components.layouts import Layout
from modforge.engines import build_engine

SMALL = {"gru_dim": 32, "gru_layers": 1, "fc_dim": 16}  # a fast network with the reference's front and blocks


def n_params(module: nn.Module) -> int:
    return sum(p.numel() for p in module.parameters())


def test_parameter_count_is_the_reference_configurations():
    # asvspoof-challenge/2021 LA/Baseline-RawNet2 model.py with model_config_RawNet.yaml (filts [20, [20, 20],
    # [20, 128], [128, 128]], blocks [2, 4], gru_node 1024 x 3 layers, nb_fc_node 1024, nb_classes 2): 17,621,410
    # parameters, fc2_gru (the 2-class output layer) included, of which the five blocks' bn1 (2 x (20 + 20 + 3 x 128)
    # = 848) never reach the output. The default computes what that code computes, without the dead layers.
    backbone = mf.BACKBONES.build({"type": "rawnet2"}, in_dim=1, in_layout=Layout.WAVEFORM)
    assert n_params(backbone) == 17_618_512
    model = mf.build_model({"backbone": "rawnet2", "head": "linear"}, in_dim=1, num_classes=2, layout="waveform")
    assert n_params(model) == 17_621_410 - 848
    # the paper's pre-activation blocks use them: the reference module's count
    assert n_params(RawNet2(preactivation=True)) == 17_618_512 + 848


def test_structure_is_the_references():
    net = RawNet2()
    assert isinstance(net.front, SincFront) and net.front.sinc.filters.shape == (20, 1, 1025)  # 1024 taps made odd
    assert not any(".sinc." in name for name, _ in net.named_parameters())  # fixed filters
    assert net.front.bn.num_features == 20
    assert [(b.conv1.in_channels, b.conv2.out_channels) for b in net.blocks] == [(20, 20)] * 2 + [(20, 128)] + [
        (128, 128)
    ] * 3
    assert all(isinstance(b.pre, nn.Identity) for b in net.blocks)  # the 2021 baseline: conv1 sees the block input
    paper = RawNet2(preactivation=True)
    assert isinstance(paper.blocks[0].pre, nn.Identity) and all(isinstance(b.pre, nn.Sequential) for b in paper.blocks[1:])
    assert isinstance(net.blocks[2].shortcut, nn.Conv1d) and isinstance(net.blocks[3].shortcut, nn.Identity)
    assert (net.gru.input_size, net.gru.hidden_size, net.gru.num_layers) == (128, 1024, 3)
    assert (net.fc.in_features, net.fc.out_features, net.out_dim) == (1024, 1024, 1024)


# ----------------------------------------------------------------------------- the reference's computation
def reference_state(gru_dim: int, gru_layers: int, fc_dim: int, seed: int = 0) -> dict[str, torch.Tensor]:
    """Random weights under the keys and shapes of the ASVspoof 2021 baseline's RawNet (asvspoof-challenge/2021
    LA/Baseline-RawNet2/model.py), written from its module list, with non-trivial BatchNorm statistics."""
    g = torch.Generator().manual_seed(seed)
    state: dict[str, torch.Tensor] = {}

    def bn(name: str, n: int) -> None:
        state.update({f"{name}.weight": 1 + 0.1 * torch.randn(n, generator=g), f"{name}.bias": 0.1 * torch.randn(n, generator=g),
                      f"{name}.running_mean": 0.1 * torch.randn(n, generator=g),
                      f"{name}.running_var": 0.5 + torch.rand(n, generator=g),
                      f"{name}.num_batches_tracked": torch.tensor(7)})

    def dense(name: str, *shape: int) -> None:
        fan_in = int(np.prod(shape[1:]))
        state[f"{name}.weight"] = torch.randn(*shape, generator=g) / fan_in**0.5
        state[f"{name}.bias"] = 0.1 * torch.randn(shape[0], generator=g)

    bn("first_bn", 20)
    for i, (cin, cout) in enumerate([(20, 20), (20, 20), (20, 128), (128, 128), (128, 128), (128, 128)]):
        if i > 0:
            bn(f"block{i}.0.bn1", cin)  # dead in the reference
        dense(f"block{i}.0.conv1", cout, cin, 3)
        bn(f"block{i}.0.bn2", cout)
        dense(f"block{i}.0.conv2", cout, cout, 3)
        if cin != cout:
            dense(f"block{i}.0.conv_downsample", cout, cin, 1)
        dense(f"fc_attention{i}.0", cout, cout)
    bn("bn_before_gru", 128)
    for layer in range(gru_layers):
        inputs = 128 if layer == 0 else gru_dim
        state[f"gru.weight_ih_l{layer}"] = torch.randn(3 * gru_dim, inputs, generator=g) / inputs**0.5
        state[f"gru.weight_hh_l{layer}"] = torch.randn(3 * gru_dim, gru_dim, generator=g) / gru_dim**0.5
        state[f"gru.bias_ih_l{layer}"] = 0.1 * torch.randn(3 * gru_dim, generator=g)
        state[f"gru.bias_hh_l{layer}"] = 0.1 * torch.randn(3 * gru_dim, generator=g)
    dense("fc1_gru", fc_dim, gru_dim)
    dense("fc2_gru", 2, fc_dim)
    return state


def reference_forward(state: dict[str, torch.Tensor], x: torch.Tensor, filters: torch.Tensor) -> torch.Tensor:
    """RawNet.forward of the ASVspoof 2021 baseline in eval mode, step by step (its log-softmax output)."""

    def bn(y: torch.Tensor, name: str) -> torch.Tensor:
        return F.batch_norm(y, state[f"{name}.running_mean"], state[f"{name}.running_var"], state[f"{name}.weight"],
                            state[f"{name}.bias"], False, 0.1, 1e-5)

    x = F.conv1d(x.view(x.shape[0], 1, x.shape[1]), filters)
    x = F.selu(bn(F.max_pool1d(torch.abs(x), 3), "first_bn"))
    for i in range(6):
        p = f"block{i}.0."
        out = F.conv1d(x, state[p + "conv1.weight"], state[p + "conv1.bias"], padding=1)  # x, not bn1(x)
        out = F.leaky_relu(bn(out, p + "bn2"), 0.3)
        out = F.conv1d(out, state[p + "conv2.weight"], state[p + "conv2.bias"], padding=1)
        if p + "conv_downsample.weight" in state:
            out += F.conv1d(x, state[p + "conv_downsample.weight"], state[p + "conv_downsample.bias"])
        else:
            out += x
        x0 = F.max_pool1d(out, 3)
        y = F.linear(F.adaptive_avg_pool1d(x0, 1).view(x0.size(0), -1), state[f"fc_attention{i}.0.weight"],
                     state[f"fc_attention{i}.0.bias"])
        y = torch.sigmoid(y).view(y.size(0), y.size(1), -1)
        x = x0 * y + y
    x = F.selu(bn(x, "bn_before_gru")).permute(0, 2, 1)
    hidden = state["fc1_gru.weight"].shape[1]
    gru = nn.GRU(128, hidden, num_layers=sum(k.startswith("gru.weight_ih") for k in state), batch_first=True)
    gru.load_state_dict({k.removeprefix("gru."): v for k, v in state.items() if k.startswith("gru.")})
    x, _ = gru(x)
    x = F.linear(x[:, -1, :], state["fc1_gru.weight"], state["fc1_gru.bias"])
    return F.log_softmax(F.linear(x, state["fc2_gru.weight"], state["fc2_gru.bias"]), dim=1)


def test_default_computes_the_2021_baseline_with_its_weights():
    state = reference_state(gru_dim=32, gru_layers=2, fc_dim=16)
    args = {"gru_dim": 32, "gru_layers": 2, "fc_dim": 16}
    model = mf.build_model(
        {"backbone": {"type": "rawnet2", "args": args}, "head": "linear"}, in_dim=1, num_classes=2, layout="waveform"
    ).eval()
    model.load_state_dict(reference_state_dict(state))  # strict: every key accounted for
    filters = MelSincConv(20, 1024, 16000).filters
    x = 0.1 * torch.randn(3, 16000, generator=torch.Generator().manual_seed(1))
    with torch.no_grad():
        ours = torch.log_softmax(model(x), dim=1)
        expected = reference_forward(state, x, filters)
    assert torch.allclose(ours, expected, rtol=0, atol=1e-6)
    # the bare backbone takes the same weights without the output layer
    backbone = RawNet2(**args).eval()
    backbone.load_state_dict(reference_state_dict(state, backbone_prefix="", head_prefix=None))
    with torch.no_grad():
        assert torch.equal(backbone(x), model.stage("backbone")(x))


def test_reference_state_dict_names_what_it_cannot_map():
    state = reference_state(gru_dim=8, gru_layers=1, fc_dim=4)
    mapped = reference_state_dict(state)
    assert not any(".bn1." in k or k.endswith("pre.0.weight") for k in mapped)  # the dead bn1 layers are left out
    assert mapped["parts.backbone.blocks.2.shortcut.weight"] is state["block2.0.conv_downsample.weight"]
    assert mapped["parts.head.fc.weight"] is state["fc2_gru.weight"]
    assert mapped["parts.backbone.front.bn.running_var"] is state["first_bn.running_var"]
    with pytest.raises(ValueError, match=r"2 key\(s\) are not those of .*module.fc1_gru.weight, block0.0.bn3.weight"):
        reference_state_dict({"module.fc1_gru.weight": state["fc1_gru.weight"], "block0.0.bn3.weight": torch.ones(2),
                              "gru.weight_ih_l0": state["gru.weight_ih_l0"]})


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


def test_blocks_compute_the_2021_baseline_block_by_default():
    block = FMSResidualBlock(20, 20).eval()
    assert isinstance(block.pre, nn.Identity)
    x = torch.randn(2, 20, 30)
    with torch.no_grad():
        out = block.conv2(F.leaky_relu(block.bn2(block.conv1(x)), 0.3)) + x  # conv1 sees the block input directly
        out = F.max_pool1d(out, 3)
        scale = torch.sigmoid(block.attention(out.mean(-1))).unsqueeze(-1)
        assert torch.equal(block(x), out * scale + scale)  # FMS: x * s + s
        paper = FMSResidualBlock(20, 20, preactivation=True).eval()
        pre = F.leaky_relu(paper.pre[0](x), 0.3)
        out = F.max_pool1d(paper.conv2(F.leaky_relu(paper.bn2(paper.conv1(pre)), 0.3)) + x, 3)
        scale = torch.sigmoid(paper.attention(out.mean(-1))).unsqueeze(-1)
        assert torch.allclose(paper(x), out * scale + scale)


def test_training_gradients_match_the_out_of_place_computation():
    # the in-place activations and additions must leave autograd's saved tensors intact
    torch.manual_seed(0)
    net = RawNet2(**SMALL).train()
    x = 0.1 * torch.randn(2, 6000)
    net(x).square().sum().backward()
    grads = {name: p.grad.clone() for name, p in net.named_parameters()}
    net.zero_grad()

    def plain_block(block: FMSResidualBlock, y: torch.Tensor) -> torch.Tensor:
        out = block.conv2(F.leaky_relu(block.bn2(block.conv1(block.pre(y))), 0.3)) + block.shortcut(y)
        out = F.max_pool1d(out, 3)
        scale = torch.sigmoid(block.attention(out.mean(-1))).unsqueeze(-1)
        return out * scale + scale

    with torch.no_grad():  # the same batch statistics again: reset the running ones the first pass moved
        for module in net.modules():
            if isinstance(module, nn.BatchNorm1d):
                module.reset_running_stats()
    y = F.selu(net.front.bn(F.max_pool1d(torch.abs(net.front.sinc(x.unsqueeze(1))), 3)))
    for block in net.blocks:
        y = plain_block(block, y)
    y, _ = net.gru(F.selu(net.gru_bn(y)).transpose(1, 2))
    net.fc(y[:, -1]).square().sum().backward()
    for name, p in net.named_parameters():
        assert torch.allclose(p.grad, grads[name], rtol=1e-3, atol=1e-5), name
    # a gradient with respect to the waveform (saliency, adversarial examples) goes through the out-of-place |x|
    x.requires_grad_(True)
    net(x).sum().backward()
    assert x.grad is not None and torch.isfinite(x.grad).all() and x.grad.abs().sum() > 0  # SELU's in-place backward rounds differently


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
