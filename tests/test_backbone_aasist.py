"""AASIST and AASIST-L: reference sizes, the released code's residual block (and the paper's
as an option), both input layouts, short inputs, the fast max-pools, Freq_aug, engines, errors."""

from __future__ import annotations

import warnings

import pytest
import torch
import torch.nn.functional as F

import modforge as mf
import modforge.components.backbones.aasist as aasist  # noqa: F401 - registers aasist, aasist_l
from modforge.components.backbones.aasist import ResidualBlock, TimeMaxPool
from modforge.components.backbones.graph_attention import GraphPool, HeteroGraphAttentionLayer, kept_nodes

NAMES = ("aasist", "aasist_l")
SAMPLE_RATE = 16_000


def n_params(module: torch.nn.Module) -> int:
    return sum(p.numel() for p in module.parameters())


def backbone(name: str, layout: str = "waveform", in_dim: int = 1, **args) -> torch.nn.Module:
    torch.manual_seed(0)
    return mf.BACKBONES.build({"type": name, "args": args}, in_dim=in_dim, in_layout=layout)


@pytest.mark.parametrize(("name", "count"), [("aasist_l", 85_306), ("aasist", 297_866)])
def test_parameter_counts_match_the_reference_models(name, count):
    # clovaai/aasist AASIST-L.conf / AASIST.conf on 64,600-sample input: 85,306 / 297,866
    # parameters, the last Linear(160, 2) being modforge's linear head
    model = mf.build_model({"backbone": name, "head": "linear"}, in_dim=1, num_classes=2, layout="waveform",
                           input_shape=(64600,))
    assert n_params(model) == count
    assert n_params(model.parts["backbone"]) == count - (160 * 2 + 2)


def test_residual_blocks_convolve_their_input_as_the_released_code_does():
    # clovaai/aasist a04c986: blocks 2-6 compute SELU(bn1(x)), discard it, and apply conv1 to x
    torch.manual_seed(0)
    block = ResidualBlock(8, 8).train()
    assert not any(p.requires_grad for p in block.bn1.parameters())  # kept for the checkpoints, never used
    assert all(p.requires_grad for name, p in block.named_parameters() if not name.startswith("bn1."))
    x = torch.randn(2, 8, 5, 30)
    with torch.no_grad():
        expected = F.max_pool2d(block.conv2(F.selu(block.bn2(block.conv1(x)))) + x, (1, 3))
        assert torch.allclose(block(x), expected, atol=1e-6)
        block.bn1.weight.fill_(3.0)
        assert torch.allclose(block(x), expected, atol=1e-6)
    paper = ResidualBlock(8, 8, preactivation=True).train()
    assert all(p.requires_grad for p in paper.parameters())
    paper.load_state_dict(block.state_dict())
    with torch.no_grad():
        pre = F.selu(paper.bn1(x))
        expected = F.max_pool2d(paper.conv2(F.selu(paper.bn2(paper.conv1(pre)))) + x, (1, 3))
        assert torch.allclose(paper(x), expected, atol=1e-6)
    assert ResidualBlock(1, 8, first=True, preactivation=True).preactivation is False  # no bn1 in the first


@pytest.mark.parametrize("preactivation", [False, True])
def test_block_gives_the_reference_formulas_values_and_gradients_bit_for_bit(preactivation):
    # the reference: SELU in place after bn2 (its backward, from the result, rounds differently
    # from an out-of-place SELU's), an out-of-place sum, nn.MaxPool2d; modforge adds in place
    # and pools with TimeMaxPool: the same bits, forward and backward
    torch.manual_seed(0)
    block = ResidualBlock(4, 6, preactivation=preactivation).train()
    x = torch.randn(3, 4, 5, 47)
    x1, x2 = x.clone().requires_grad_(), x.clone().requires_grad_()
    out = block(x1)
    out.pow(2).sum().backward()
    ours = [x1.grad, *(p.grad for p in block.parameters() if p.grad is not None)]
    torch.manual_seed(0)
    again = ResidualBlock(4, 6, preactivation=preactivation).train()  # the same weights, computed out of place
    h = F.selu(again.bn1(x2)) if preactivation else x2
    h = again.conv2(F.selu(again.bn2(again.conv1(h)), inplace=True))
    expected = F.max_pool2d(h + again.conv_downsample(x2), (1, 3))
    expected.pow(2).sum().backward()
    reference = [x2.grad, *(p.grad for p in again.parameters() if p.grad is not None)]
    assert torch.equal(out, expected)
    assert len(ours) == len(reference) and all(torch.equal(a, b) for a, b in zip(ours, reference, strict=True))
    for name, buffer in block.named_buffers():
        assert torch.equal(buffer, dict(again.named_buffers())[name]), name


def test_time_max_pool_matches_max_pool2d_with_ties_and_remainders():
    pool = TimeMaxPool()
    generator = torch.Generator().manual_seed(0)
    for length in (3, 29, 30, 31):
        x = torch.randint(-2, 3, (2, 3, 4, length), generator=generator).float()  # many ties within windows
        a, b = x.clone().requires_grad_(), x.clone().requires_grad_()
        out, expected = pool(a), F.max_pool2d(b, (1, 3))
        grad = torch.randn(expected.shape, generator=generator)
        out.backward(grad)
        expected.backward(grad)
        assert torch.equal(out, expected) and torch.equal(a.grad, b.grad), length  # gradient to the first maximum
        with torch.no_grad():
            assert torch.equal(pool(x), expected)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        scripted = torch.jit.script(pool)
    assert torch.equal(scripted(x), F.max_pool2d(x, (1, 3)))


def test_waveform_front_without_autograd_equals_the_max_pool2d_path():
    net = backbone("aasist_l").eval()
    x = torch.randn(2, 5000)
    with torch.no_grad():
        fast = net.front(x)
    slow = net.front(x.clone().requires_grad_())  # the autograd path: abs, then F.max_pool2d
    assert torch.equal(fast, slow.detach())


def test_freq_aug_masks_a_run_of_filters_in_train_mode_only():
    plain = backbone("aasist_l").eval()
    aug = backbone("aasist_l", freq_aug=True)
    aug.load_state_dict(plain.state_dict())
    x = torch.randn(2, 4000)
    with torch.no_grad():
        assert torch.equal(aug.eval()(x), plain(x))
        torch.manual_seed(1)
        widths = set()
        for _ in range(60):
            bank = aug.front._masked(aug.front.band_pass)
            zeroed = (bank.abs().sum(dim=(1, 2)) == 0).nonzero().flatten().tolist()
            assert zeroed == list(range(zeroed[0], zeroed[0] + len(zeroed))) if zeroed else True  # one run
            widths.add(len(zeroed))
        assert max(widths) <= 19 and len(widths) > 5
    assert not torch.equal(aug.front.band_pass, torch.zeros_like(aug.front.band_pass))  # the buffer untouched
    with pytest.raises(ValueError, match="freq_aug"):
        aasist.AASIST(in_dim=8, in_layout="sequence", freq_aug=True)


def test_ssl_variant_size_matches_ssl_aasist():
    # SSL-AASIST (TakHemlata/SSL_Anti-spoofing, pool ratios 0.5) after a 1024-wide wav2vec 2.0:
    # 446,920 parameters besides the SSL model and the 2-way output layer
    net = backbone("aasist", "sequence", 1024, pool_ratios=[0.5, 0.5, 0.5, 0.5])
    assert n_params(net) == 446_920


@pytest.mark.slow
@pytest.mark.parametrize("name", NAMES)
def test_one_four_and_ten_second_waveforms(name):
    net = backbone(name).eval()
    with torch.no_grad():
        for seconds in (1, 4, 10):
            out = net(torch.randn(1, seconds * SAMPLE_RATE))
            assert out.shape == (1, 160) and torch.isfinite(out).all(), seconds


@pytest.mark.parametrize("name", NAMES)
def test_sequences_of_one_four_and_ten_seconds_of_ssl_frames(name):
    net = backbone(name, "sequence", 32).eval()
    with torch.no_grad():
        for frames in (50, 200, 500):  # wav2vec 2.0 gives 50 frames a second
            out = net(torch.randn(1, frames, 32))
            assert out.shape == (1, 160) and torch.isfinite(out).all(), frames


def test_ssl_path_on_wav2vec_features():
    net = backbone("aasist", "sequence", 768)
    assert net.front.LL.in_features == 768 and net.front.LL.out_features == 128
    assert net.pos_S.shape == (1, 128 // 3, 64)  # 42 spectral nodes after the 3×3 pool
    x = torch.randn(2, 50, 768, requires_grad=True)
    out = net.train()(x)
    assert out.shape == (2, 160) and torch.isfinite(out).all()
    out.sum().backward()
    assert x.grad is not None and torch.isfinite(x.grad).all()
    with torch.no_grad():
        assert torch.isfinite(net.eval()(x)).all()


def test_waveform_front_is_a_fixed_mel_sinc_bank():
    net = backbone("aasist_l")
    bank = net.front.band_pass
    assert bank.shape == (70, 1, 129)  # first_conv 128 made odd, as in the reference
    assert not bank.requires_grad and "band_pass" not in dict(net.named_parameters())
    assert torch.allclose(bank, bank.flip(-1))  # symmetric (linear-phase) band-pass filters
    response = torch.fft.rfft(bank.squeeze(1), n=4096).abs()
    peaks = response.argmax(dim=1).float() * SAMPLE_RATE / 4096
    assert (peaks[1:] >= peaks[:-1] - 1).all()  # bands rise in frequency
    assert (peaks[1:] - peaks[:-1])[-5:].mean() > 2 * (peaks[1:] - peaks[:-1])[1:6].mean()  # wider up high (mel)


@pytest.mark.parametrize("name", NAMES)
def test_dropout_acts_in_train_mode_only(name):
    net = backbone(name, in_dim=1)
    x = torch.randn(2, 4000)
    with torch.no_grad():
        assert not torch.equal(net.train()(x), net(x))
        net.eval()
        assert torch.equal(net(x), net(x))
    calm = backbone(name, dropout=0.0, branch_dropout=0.0, gat_dropout=0.0, pool_dropout=0.0).train()
    with torch.no_grad():
        assert torch.allclose(calm(x), calm(x))  # train mode without dropout: batch norm only, no randomness


def test_short_waveforms_are_padded_with_silence_and_short_sequences_repeat_their_last_frame():
    net = backbone("aasist_l").eval()
    x = torch.randn(2, 300)
    with torch.no_grad():
        assert torch.allclose(net(x), net(F.pad(x, [0, 2315 - 300])))
        assert torch.isfinite(net(torch.randn(1, 1))).all()
    seq = backbone("aasist_l", "sequence", 12).eval()
    frame = torch.randn(1, 1, 12)
    with torch.no_grad():
        assert torch.allclose(seq(frame), seq(frame.expand(-1, 3, -1)), atol=1e-6)
        assert seq(torch.randn(4, 2, 12)).shape == (4, 160)


def test_graph_pool_keeps_at_least_one_node_of_the_best_scored():
    assert [kept_nodes(n, 0.7) for n in (1, 2, 10, 29)] == [1, 1, 7, 20]
    pool = GraphPool(0.5, 4, dropout=0.0)
    h = torch.randn(2, 6, 4)
    out = pool(h)
    scores = torch.sigmoid(pool.proj(h))
    best = scores.squeeze(-1).topk(3, dim=1).indices
    assert out.shape == (2, 3, 4)
    assert torch.allclose(out, torch.stack([(h * scores)[b, best[b]] for b in range(2)]))


def test_hs_gal_edge_types_match_the_block_wise_reference():
    layer = HeteroGraphAttentionLayer(8, 6, temperature=100.0).eval()
    x = torch.randn(2, 7, 8)
    n1 = 3
    hidden = torch.tanh(layer.att_proj(x.unsqueeze(2) * x.unsqueeze(1)))
    board = torch.zeros(2, 7, 7, 1)  # the reference fills each block with its own attention vector
    board[:, :n1, :n1] = hidden[:, :n1, :n1] @ layer.att_weight11
    board[:, n1:, n1:] = hidden[:, n1:, n1:] @ layer.att_weight22
    board[:, :n1, n1:] = hidden[:, :n1, n1:] @ layer.att_weight12
    board[:, n1:, :n1] = hidden[:, n1:, :n1] @ layer.att_weight12
    expected = torch.softmax(board / 100.0, dim=-2).squeeze(-1)
    with torch.no_grad():
        assert torch.allclose(layer._node_attention(x, n1), expected, atol=1e-6)


@pytest.mark.slow
def test_torchscript_scripts_and_onnx_follows_the_input_length():
    from modforge.engines import build_engine

    for layout, in_dim, example, lengths in (("waveform", 1, torch.randn(2, 4000), (300, 16000)),
                                             ("sequence", 12, torch.randn(2, 16, 12), (2, 61))):
        net = backbone("aasist_l", layout, in_dim).eval()
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            scripted = torch.jit.script(net)  # scripted, not traced: shape-dependent counts stay exact
            onnx = build_engine("onnx", path="onnx").prepare(net, {"input": example})
        for length in lengths:
            x = torch.randn(3, length) if layout == "waveform" else torch.randn(3, length, in_dim)
            with torch.no_grad():
                expected = net(x)
                assert torch.equal(scripted(x), expected)
            out = onnx(x)
            out = torch.as_tensor(out["logits"] if isinstance(out, dict) else out)
            assert torch.allclose(out, expected, atol=1e-5), (layout, length)


@pytest.mark.parametrize(
    ("args", "message"),
    [
        ({"pool_ratios": [0.5, 1.5, 0.5, 0.5]}, r"pool_ratios must be 4 values in \(0, 1\]"),
        ({"pool_ratios": [0.0, 0.7, 0.5, 0.5]}, r"pool_ratios must be 4 values in \(0, 1\]"),
        ({"temperatures": [2.0, 2.0, 0.0, 100.0]}, "temperatures must be 4 positive values"),
        ({"filts": [[1, 32], [16, 32], [32, 64], [64, 64]]}, "filts must chain"),
        ({"gat_dims": [64, 0]}, "gat_dims must be 2 positive integers"),
        ({"dropout": 1.0}, r"dropout must be in \[0, 1\)"),
        ({"sinc_filters": 2}, "sinc_filters must be at least 3"),
    ],
)
def test_bad_arguments_give_one_clear_error(args, message):
    with pytest.raises(ValueError, match=message):
        aasist.AASIST(**args)
    with pytest.raises(mf.BuildError, match=message):
        mf.BACKBONES.build({"type": "aasist_l", "args": args}, in_dim=1, in_layout="waveform")


def test_wrong_input_shapes_are_named():
    with pytest.raises(ValueError, match=r"waveform \[B, T\]"):
        backbone("aasist_l").eval()(torch.randn(1, 1, 4000))
    with pytest.raises(ValueError, match=r"sequence \[B, T, 12\]"):
        backbone("aasist_l", "sequence", 12).eval()(torch.randn(1, 16, 13))
    with pytest.raises(ValueError, match="in_dim 1"):
        aasist.AASISTL(in_dim=3)
