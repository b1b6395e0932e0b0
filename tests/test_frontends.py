"""Audio frontends: the contract, numbers against torch.stft / scipy / independent formulas, shapes, SSL loading."""

from __future__ import annotations

import json
import math
import sys

import numpy as np
import pytest
import scipy.fft
import torch

import modforge as mf
import modforge.components.frontends as fe  # registers the frontends (before the registry snapshot)
from modforge.components.frontends.cepstral import Deltas, dct_matrix
from modforge.components.frontends.filterbanks import hz_to_mel, linear_filterbank, mel_filterbank, mel_to_hz
from modforge.components.frontends.stft import STFT
from modforge.testing import check_part
from part_checks import CORE_CHECKS, assert_contract

SR = 16000
NAMES = ["raw", "spectrogram", "log_mel", "lfcc", "mfcc", "sinc", "ssl"]


@pytest.fixture(autouse=True)
def one_thread():
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(threads)


def signal(batch: int, length: int, seed: int = 0) -> torch.Tensor:
    """Noise plus a few tones: a spectrum without empty bins, like speech."""
    gen = torch.Generator().manual_seed(seed)
    t = torch.arange(length) / SR
    tones = sum(torch.sin(2 * math.pi * f * t + p) for f, p in ((220.0, 0.1), (1234.0, 1.0), (5000.0, 2.0)))
    return 0.1 * torch.randn(batch, length, generator=gen) + 0.3 * tones


def ref_power(x: torch.Tensor, n_fft: int, hop: int, win: int, window: torch.Tensor, center=True, pad_mode="reflect"):
    spec = torch.stft(
        x.double(), n_fft, hop, win, window=window.double(), center=center, pad_mode=pad_mode, return_complex=True
    )
    return (spec.abs() ** 2).transpose(1, 2)  # [B, frames, F]


def rel_err(a: torch.Tensor, b: torch.Tensor) -> float:
    return float((a.double() - b.double()).abs().max() / b.double().abs().max())


# ----------------------------------------------------------------------------- the contract
def test_every_frontend_is_registered():
    assert set(NAMES) <= set(mf.FRONTENDS)


CONFORMANCE = [  # the defaults are checked by tests/test_conformance.py, like every registered part
    ("ssl", {"layer": "weighted", "model_type": "wavlm"}),
    ("ssl", {"model_type": "hubert", "layer": 1}),
    ("sinc", {"learnable": False, "padding": "same", "out_channels": 70, "kernel_size": 128}),
    ("mfcc", {"deltas": True, "mel_scale": "slaney", "norm": "slaney"}),
    ("spectrogram", {"power": "magnitude", "log": False, "center": False}),
    (
        "ssl",
        {
            "layer": "weighted",
            "freeze": True,
            "extra_config": {"do_stable_layer_norm": True, "feat_extract_norm": "layer"},
        },
    ),
]


@pytest.mark.parametrize(
    ("name", "args"),
    CONFORMANCE,
    ids=[f"{name}-variant{i}" for i, (name, _args) in enumerate(CONFORMANCE)],
)
def test_frontend_passes_the_contract_under_every_engine(name, args):
    results = check_part("frontend", name, args)
    assert_contract(results, CORE_CHECKS | {"batch_independence", "device", "engines"})
    engines = next(r.detail for r in results if r.check == "engines")
    assert "unsupported" not in engines and "torchscript" in engines and "onnx" in engines


# ----------------------------------------------------------------------------- STFT and filterbanks
@pytest.mark.parametrize(
    ("n_fft", "hop", "win", "window", "center", "pad_mode"),
    [
        (512, 160, 400, "hann", True, "reflect"),
        (512, 160, 320, "hamming", True, "constant"),
        (400, 100, 400, "hann", True, "reflect"),
        (512, 128, 317, "hann", True, "reflect"),  # odd gap: window off-centre by one tap, as torch.stft
        (256, 64, 256, "hamming", False, "reflect"),
        (64, 17, 50, "rectangular", True, "constant"),
    ],
)
def test_stft_matches_torch_stft(n_fft, hop, win, window, center, pad_mode):
    x = signal(2, 5000)
    stft = STFT(n_fft, hop, win, window, center, pad_mode)
    windows = {"hann": torch.hann_window(win), "hamming": torch.hamming_window(win), "rectangular": torch.ones(win)}
    ref = ref_power(x, n_fft, hop, win, windows[window], center, pad_mode)
    ours = stft(x)
    assert ours.shape == ref.shape == (2, stft.frames(5000), n_fft // 2 + 1)
    assert rel_err(ours, ref) < 2e-6


def test_spectrogram_magnitude_power_and_log_match_torch_stft():
    x = signal(2, 8000)
    power = ref_power(x, 512, 160, 400, torch.hann_window(400))
    mag = fe.Spectrogram(power="magnitude", log=False)(x)
    assert rel_err(mag, power.sqrt()) < 2e-6
    logp = fe.Spectrogram()(x)  # defaults: power, log
    assert torch.allclose(logp.double(), power.clamp_min(1e-10).log(), atol=2e-3)
    assert logp.shape == (2, 1 + 8000 // 160, 257)


def test_mel_scales_known_values_and_inverse():
    assert float(hz_to_mel(700.0, "htk")) == pytest.approx(2595 * math.log10(2))
    assert float(hz_to_mel(1000.0, "slaney")) == pytest.approx(15.0)  # linear part: 1000 / (200/3)
    assert float(hz_to_mel(6400.0, "slaney")) == pytest.approx(42.0)  # 27 mels per factor 6.4 above 1 kHz
    freqs = np.array([0.0, 100.0, 999.0, 1000.0, 4321.0, 8000.0])
    for scale in ("htk", "slaney"):
        assert np.allclose(mel_to_hz(hz_to_mel(freqs, scale), scale), freqs)


def ref_mel_bank(n_freqs, sr, n_mels, f_min, f_max, scale, norm):
    """A per-bin loop over the textbook formulas (independent of the vectorised implementation)."""

    def to_mel(f):
        if scale == "htk":
            return 2595.0 * math.log10(1.0 + f / 700.0)
        return f * 3.0 / 200.0 if f < 1000.0 else 15.0 + 27.0 * math.log(f / 1000.0) / math.log(6.4)

    def to_hz(m):
        if scale == "htk":
            return 700.0 * (10.0 ** (m / 2595.0) - 1.0)
        return m * 200.0 / 3.0 if m < 15.0 else 1000.0 * 6.4 ** ((m - 15.0) / 27.0)

    lo, hi = to_mel(f_min), to_mel(f_max)
    pts = [to_hz(lo + (hi - lo) * i / (n_mels + 1)) for i in range(n_mels + 2)]
    bank = np.zeros((n_freqs, n_mels))
    for k in range(n_freqs):
        f = k * sr / (2.0 * (n_freqs - 1))
        for m in range(n_mels):
            a, b, c = pts[m : m + 3]
            w = (f - a) / (b - a) if a < f <= b else (c - f) / (c - b) if b < f < c else 0.0
            bank[k, m] = w * (2.0 / (c - a) if norm == "slaney" else 1.0)
    return bank


@pytest.mark.parametrize(
    ("scale", "norm", "f_min", "f_max"), [("htk", "none", 0.0, 8000.0), ("slaney", "slaney", 20.0, 7600.0)]
)
def test_mel_filterbank_matches_the_formula(scale, norm, f_min, f_max):
    ours = mel_filterbank(257, SR, 40, f_min, f_max, scale, norm).double().numpy()
    assert np.allclose(ours, ref_mel_bank(257, SR, 40, f_min, f_max, scale, norm), atol=1e-6)


def test_log_mel_is_log_of_filterbank_on_the_power_spectrum():
    x = signal(2, 6000)
    bank = torch.from_numpy(ref_mel_bank(257, SR, 80, 0.0, 8000.0, "htk", "none"))
    ref = (ref_power(x, 512, 160, 400, torch.hann_window(400)) @ bank).clamp_min(1e-10).log()
    out = fe.LogMel()(x)
    assert out.shape == (2, 1 + 6000 // 160, 80)
    assert torch.allclose(out.double(), ref, atol=1e-4)


def test_dct_matrix_is_scipy_orthonormal_dct_ii():
    x = np.random.default_rng(0).normal(size=(3, 7, 20))
    ours = torch.from_numpy(x).float() @ dct_matrix(20, 13)
    assert np.allclose(ours.numpy(), scipy.fft.dct(x, type=2, norm="ortho", axis=-1)[..., :13], atol=1e-5)


def test_deltas_regression_and_plain_difference():
    x = torch.randn(2, 9, 4, dtype=torch.float32)
    pad = torch.cat([x[:, :1], x[:, :1], x, x[:, -1:], x[:, -1:]], dim=1)  # replicate by 2
    htk = sum(n * (pad[:, 2 + n : 11 + n] - pad[:, 2 - n : 11 - n]) for n in (1, 2)) / 10.0
    assert torch.allclose(Deltas(4, 2, normalised=True)(x), htk, atol=1e-6)
    plain = pad[:, 3:12] - pad[:, 1:10]
    assert torch.allclose(Deltas(4, 1, normalised=False)(x), plain, atol=1e-6)


# ----------------------------------------------------------------------------- LFCC and MFCC
def ref_lfcc(x: torch.Tensor) -> np.ndarray:
    """The ASVspoof 2021 LFCC-LCNN front-end as its code computes it (asvspoof-challenge/2021 LA/Baseline-LFCC-LCNN:
    baseline_LA/model.py's LFCC(320, 160, 1024, 16000, 20, with_energy=True, max_freq=0.5), sandbox/util_frontend.py):
    torch.stft with a 320-tap Hamming window in a 1024-point DFT, the lowest int(0.5 · 513) = 256 bins given the
    frequencies linspace(0, 4000, 256), a trimf filterbank loop, scipy's DCT, the energy of the kept bins."""
    x = x.double()
    x = torch.cat([x[:, :1], x[:, 1:] - 0.97 * x[:, :-1]], dim=1)
    power = ref_power(x, 1024, 160, 320, torch.hamming_window(320), pad_mode="constant").numpy()[:, :, :256]
    f = 8000.0 * np.linspace(0, 0.5, 256)
    bands = np.linspace(f.min(), f.max(), 22)
    bank = np.zeros((256, 20))
    for i in range(20):
        a, b, c = bands[i : i + 3]
        bank[:, i] = np.where((a < f) & (f < b), (f - a) / (b - a), 0.0) + np.where(
            (b < f) & (f < c), (c - f) / (c - b), 0.0
        )
        bank[f == b, i] = 1.0
    eps = np.finfo(np.float32).eps
    coeffs = scipy.fft.dct(np.log10(power @ bank + eps), type=2, norm="ortho", axis=-1)[..., :20]
    coeffs[..., 0] = np.log10((power / 1024).sum(-1) + eps)

    def delta(c):
        p = np.concatenate([c[:, :1], c, c[:, -1:]], axis=1)
        return p[:, 2:] - p[:, :-2]

    d = delta(coeffs)
    return np.concatenate([coeffs, d, delta(d)], axis=-1)


def test_lfcc_matches_the_asvspoof_baseline_recipe():
    x = signal(2, 8000)
    lfcc = fe.LFCC()
    assert (lfcc.stft.n_fft, lfcc.stft.win_length, lfcc.stft.hop_length) == (1024, 320, 160)
    assert (lfcc.low_bin, lfcc.high_bin) == (0, 256)  # the baseline's max_freq = 0.5
    ours = lfcc(x)
    assert ours.shape == (2, 1 + 8000 // 160, 60)
    assert np.allclose(ours.double().numpy(), ref_lfcc(x), atol=1e-4)
    f = 8000.0 * np.linspace(0, 0.5, 256)  # the baseline's frequencies for its 256 kept bins: the same triangles
    bands = np.linspace(0.0, 4000.0, 22)
    trimf = np.stack([np.clip(np.minimum((f - bands[i]) / (bands[i + 1] - bands[i]),
                                         (bands[i + 2] - f) / (bands[i + 2] - bands[i + 1])), 0, None) for i in range(20)], 1)
    assert np.allclose(lfcc.filterbank.double().numpy(), trimf, atol=1e-6)


def test_lfcc_options_change_the_size():
    assert fe.LFCC(deltas=False).out_dim == 20
    assert fe.LFCC(n_filters=30, n_coeffs=12).out_dim == 36
    plain = fe.LFCC(deltas=False, with_energy=False, pre_emphasis=0.0, n_fft=512, f_max=8000.0)  # the whole spectrum
    x = signal(1, 4000)
    power = ref_power(x, 512, 160, 320, torch.hamming_window(320), pad_mode="constant")
    fbank = (power @ linear_filterbank(257, SR, 20).double() + np.finfo(np.float32).eps).log10().numpy()
    assert np.allclose(plain(x).numpy(), scipy.fft.dct(fbank, norm="ortho", axis=-1), atol=2e-3)


def test_mfcc_matches_log_mel_dct_and_htk_deltas():
    x = signal(2, 8000)
    m = fe.MFCC(n_mfcc=13, n_mels=40, deltas=True, pre_emphasis=0.0, window="hann")
    bank = torch.from_numpy(ref_mel_bank(257, SR, 40, 0.0, 8000.0, "htk", "none"))
    logmel = (ref_power(x, 512, 160, 400, torch.hann_window(400)) @ bank).clamp_min(1e-10).log().numpy()
    cep = scipy.fft.dct(logmel, type=2, norm="ortho", axis=-1)[..., :13]
    out = m(x).double().numpy()
    assert out.shape == (2, 51, 39) and m.out_dim == 39
    assert np.allclose(out[..., :13], cep, atol=1e-3)
    p = np.concatenate([cep[:, :1], cep[:, :1], cep, cep[:, -1:], cep[:, -1:]], axis=1)
    delta = sum(n * (p[:, 2 + n : 53 + n] - p[:, 2 - n : 53 - n]) for n in (1, 2)) / 10.0
    assert np.allclose(out[..., 13:26], delta, atol=1e-3)


# ----------------------------------------------------------------------------- sinc
def test_sinc_filters_are_rawnet2_band_passes_with_mel_spaced_init():
    sinc = fe.SincFrontend(kernel_size=1024)
    conv = sinc.sinc
    assert conv.kernel_size == 1025  # even → odd, as RawNet2
    low, high = (t.detach().double().squeeze(1).numpy() for t in conv.cutoffs())
    mel = np.linspace(hz_to_mel(30.0), hz_to_mel(SR / 2 - 100.0), 21)
    assert np.allclose(low, 50.0 + mel_to_hz(mel[:-1]), atol=1e-2)  # SincNet: min_low_hz + |low|
    assert np.allclose(high - low, 50.0 + np.diff(mel_to_hz(mel)), atol=1e-2)
    n = np.arange(-512, 513)
    ref = np.stack(
        [
            (2 * h / SR) * np.sinc(2 * h * n / SR) - (2 * lo / SR) * np.sinc(2 * lo * n / SR)
            for lo, h in zip(low, high, strict=True)
        ]
    )
    filters = conv.filters().detach().squeeze(1).double().numpy()
    assert np.allclose(filters, ref * np.hamming(1025), atol=2e-6)
    response = np.abs(np.fft.rfft(filters, 16000, axis=-1))  # 1 Hz resolution
    for i in (0, 10, 19):
        centre = int((low[i] + high[i]) / 2)
        assert response[i, centre] == pytest.approx(1.0, abs=0.05)  # unit pass-band gain
    for i in (5, 10):
        assert response[i, int(high[i]) + 400] < 0.02 and response[i, int(low[i]) - 200] < 0.02  # stop bands


def test_sinc_cutoffs_learn_or_stay_fixed():
    sinc = fe.SincFrontend(out_channels=8, kernel_size=129).train()
    sinc(signal(2, 2000)).pow(2).mean().backward()
    assert sinc.sinc.low_hz.grad.abs().sum() > 0 and sinc.sinc.band_hz.grad.abs().sum() > 0
    fixed = fe.SincFrontend(out_channels=8, kernel_size=129, learnable=False, batch_norm=False)
    assert list(fixed.parameters()) == [] and fixed.state_dict() == {}
    assert fe.SincFrontend(out_channels=70, kernel_size=128).out_dim == 70


def test_sinc_shapes_and_short_inputs():
    sinc = fe.SincFrontend().eval()
    with torch.no_grad():
        assert sinc(torch.randn(2, 5000)).shape == (2, 20, (5000 - 1024) // 3)
        assert fe.SincFrontend(padding="same").eval()(torch.randn(1, 300)).shape == (1, 20, 100)
        assert fe.SincFrontend(max_pool=1, use_abs=False, batch_norm=False, activation="none")(
            torch.randn(1, 1025)
        ).shape == (1, 20, 1)
    with pytest.raises(ValueError, match="at least 1027 samples, got 300"):
        sinc(torch.randn(1, 300))


# ----------------------------------------------------------------------------- raw
def test_raw_normalisation_and_pre_emphasis():
    x = signal(3, 1000) * torch.tensor([[0.1], [2.0], [0.0]])
    assert torch.equal(fe.RawWaveform()(x), x)
    peak = fe.RawWaveform(normalize="peak")(x)
    assert torch.allclose(peak[:2].abs().amax(-1), torch.ones(2)) and torch.isfinite(peak).all()
    rms = fe.RawWaveform(normalize="rms")(x)
    assert torch.allclose(rms[:2].pow(2).mean(-1).sqrt(), torch.ones(2), atol=1e-5) and torch.isfinite(rms).all()
    emph = fe.RawWaveform(pre_emphasis=0.97)(x)
    assert torch.allclose(emph[:, 1:], x[:, 1:] - 0.97 * x[:, :-1]) and torch.equal(emph[:, 0], x[:, 0])
    silent = torch.zeros(1, 100, requires_grad=True)
    fe.RawWaveform(normalize="rms")(silent).sum().backward()
    assert torch.isfinite(silent.grad).all()


# ----------------------------------------------------------------------------- shapes, lengths, errors
def ssl_frames(length: int) -> int:
    for kernel, stride in ((10, 5), (8, 8), (4, 8)):
        length = (length - kernel) // stride + 1
    return length


@pytest.mark.parametrize("seconds", [1, 4, 10])
def test_shapes_for_one_four_and_ten_seconds(seconds):
    length = seconds * SR
    x = signal(1, length)
    frames = 1 + length // 160
    expected = {
        "raw": (1, length),
        "spectrogram": (1, frames, 257),
        "log_mel": (1, frames, 80),
        "lfcc": (1, frames, 60),
        "mfcc": (1, frames, 20),
        "sinc": (1, 20, (length - 1024) // 3),
        "ssl": (1, ssl_frames(length), 32),
    }
    for name, shape in expected.items():
        part = mf.FRONTENDS.build(name, sample_rate=SR).eval()
        with torch.no_grad():
            out = part(x)
        assert out.shape == shape, name
        assert torch.isfinite(out).all(), name


def test_short_inputs_work_or_name_the_minimum_length():
    x = signal(2, 300)
    for name in ("raw", "spectrogram", "log_mel", "lfcc", "mfcc", "ssl"):
        out = mf.FRONTENDS.build(name).eval()(x)
        assert out.shape[0] == 2 and out.shape[1] >= 1, name
    assert fe.LFCC()(signal(1, 10)).shape == (1, 1, 60)  # zero padding: any length
    with pytest.raises(ValueError, match="'log_mel' needs waveforms of at least 257 samples, got 200"):
        fe.LogMel()(signal(1, 200))
    with pytest.raises(ValueError, match="at least 512 samples, got 300"):
        fe.Spectrogram(center=False)(x)
    with pytest.raises(ValueError, match="'ssl' needs waveforms of at least 165 samples"):
        fe.SSLFrontend()(signal(1, 100))


def test_input_rank_is_checked_and_channel_dim_squeezed():
    x = signal(2, 1000)
    assert torch.equal(fe.LogMel()(x.unsqueeze(1)), fe.LogMel()(x))
    with pytest.raises(ValueError, match=r"expects a batch of waveforms \[B, T\], got a 1-D tensor"):
        fe.LFCC()(x[0])
    with pytest.raises(ValueError, match="got a 3-D tensor of shape"):
        fe.SincFrontend()(torch.randn(2, 2, 2000))


def test_sample_rate_sets_the_default_windows():
    lfcc = mf.FRONTENDS.build("lfcc", sample_rate=8000)
    assert (lfcc.stft.n_fft, lfcc.stft.win_length, lfcc.stft.hop_length) == (512, 160, 80)
    assert lfcc.high_bin == 128 and lfcc.filterbank.shape == (128, 20)  # the lower half of the bins, as the baseline
    mel = mf.FRONTENDS.build({"type": "log_mel", "args": {"n_mels": 64}}, sample_rate=22050)
    assert (mel.stft.n_fft, mel.stft.win_length, mel.stft.hop_length, mel.out_dim) == (1024, 551, 220, 64)
    assert fe.Spectrogram(n_fft=1024).out_dim == 513


def test_bad_arguments_are_one_clear_error():
    with pytest.raises(ValueError, match="win_length must be between 1 and n_fft=256"):
        fe.Spectrogram(n_fft=256, win_length=400)
    with pytest.raises(ValueError, match="between 1 and 20, got 30"):
        fe.LFCC(n_coeffs=30)
    with pytest.raises(ValueError, match="f_max <= sample_rate / 2 = 8000"):
        fe.LogMel(f_max=9000.0)
    with pytest.raises(ValueError, match="covers no frequency bin"):
        fe.LogMel(n_mels=128, n_fft=128, win_length=128)
    with pytest.raises(ValueError, match="pre_emphasis must be in"):
        fe.RawWaveform(pre_emphasis=1.5)
    with pytest.raises(ValueError, match="unknown window 'kaiser'"):
        fe.MFCC(window="kaiser")
    with pytest.raises(mf.ConfigError, match="window: expected one of 'hann', 'hamming', 'rectangular', got 'kaiser'"):
        mf.FRONTENDS.build({"type": "mfcc", "args": {"window": "kaiser"}})
    with pytest.raises(mf.BuildError, match="building frontend 'lfcc' failed: ValueError: .*between 1 and 20, got 30"):
        mf.FRONTENDS.build({"type": "lfcc", "args": {"n_coeffs": 30}})


def test_gradients_are_finite_on_silence():
    for part in (fe.Spectrogram(power="magnitude"), fe.LogMel(), fe.LFCC(), fe.MFCC(deltas=True)):
        x = torch.zeros(1, 1000, requires_grad=True)
        out = part(x)
        assert torch.isfinite(out).all()
        out.sum().backward()
        assert torch.isfinite(x.grad).all(), type(part).__name__


# ----------------------------------------------------------------------------- ssl
def test_ssl_layer_choice_drops_the_layers_above():
    full = fe.SSLFrontend(num_hidden_layers=3).eval()
    x = signal(2, 4000)
    with torch.no_grad():
        states = full.model(x, output_hidden_states=True).hidden_states
        assert torch.equal(full(x), states[3])
    for layer in (0, 1, 2, -2):
        part = fe.SSLFrontend(num_hidden_layers=3, layer=layer).eval()
        part.model.load_state_dict(full.model.state_dict(), strict=False)  # same weights, fewer layers
        assert len(part.model.encoder.layers) == layer % 4
        with torch.no_grad():
            assert torch.allclose(part(x), states[layer], atol=1e-6), layer
    with pytest.raises(ValueError, match=r"from -4 to 3 \(the model has 3 transformer layers\), got 4"):
        fe.SSLFrontend(num_hidden_layers=3, layer=4)


def test_ssl_weighted_sum_is_softmax_normalised_and_learnable():
    part = fe.SSLFrontend(layer="weighted", num_hidden_layers=2)
    weights = part.layer_weights
    assert isinstance(weights, torch.nn.Parameter) and weights.requires_grad and weights.shape == (3,)
    x = signal(2, 4000)
    part.eval()
    with torch.no_grad():
        states = part.model(x, output_hidden_states=True).hidden_states
        assert torch.allclose(part(x), sum(states) / 3, atol=1e-6)  # zero logits: the mean
        weights.copy_(torch.tensor([0.0, 1.0, 2.0]))
        soft = torch.softmax(torch.tensor([0.0, 1.0, 2.0]), 0)
        assert torch.allclose(part.layer_weight_values(), soft) and float(
            part.layer_weight_values().sum()
        ) == pytest.approx(1)
        assert torch.allclose(part(x), sum(w * s for w, s in zip(soft, states, strict=True)), atol=1e-6)
    part.train()
    part(x).sum().backward()
    assert weights.grad is not None and weights.grad.abs().sum() > 0


def test_ssl_freeze_keeps_only_the_layer_weights_trainable():
    part = fe.SSLFrontend(layer="weighted", freeze=True).train()
    assert [n for n, p in part.named_parameters() if p.requires_grad] == ["layer_weights"]
    assert part.training and not part.model.training  # a frozen model stays in eval mode
    encoder_only = fe.SSLFrontend(freeze_feature_encoder=True)
    assert not any(p.requires_grad for p in encoder_only.model.feature_extractor.parameters())
    assert all(p.requires_grad for p in encoder_only.model.encoder.parameters())


@pytest.mark.parametrize(("model_type", "layer"), [("wav2vec2", -1), ("wavlm", "weighted"), ("hubert", 1)])
def test_ssl_save_pretrained_and_load_from_a_local_path(tmp_path, model_type, layer):
    part = fe.SSLFrontend(model_type=model_type, layer=layer, normalize=True).eval()
    part.save_pretrained(tmp_path / "model")
    assert (tmp_path / "model" / "config.json").is_file()
    assert json.loads((tmp_path / "model" / "preprocessor_config.json").read_text())["do_normalize"] is True
    loaded = mf.FRONTENDS.build(
        {"type": "ssl", "args": {"path": str(tmp_path / "model"), "layer": layer}}, sample_rate=SR
    ).eval()
    assert loaded.normalize and loaded.out_dim == 32 and loaded.model.config.model_type == model_type
    x = signal(2, 4000)
    with torch.no_grad():
        assert torch.equal(loaded(x), part(x))
    with pytest.raises(ValueError, match="expects 16000 Hz audio but sample_rate is 8000"):
        fe.SSLFrontend(path=str(tmp_path / "model"), sample_rate=8000)


def test_ssl_missing_or_broken_path_is_one_clear_error(tmp_path):
    missing = tmp_path / "nowhere"
    with pytest.raises(ValueError, match=f"no pretrained SSL model at '{missing}'"):
        fe.SSLFrontend(path=str(missing))
    with pytest.raises(mf.BuildError, match="no pretrained SSL model at 'facebook/wav2vec2-base'"):  # never a download
        mf.FRONTENDS.build({"type": "ssl", "args": {"path": "facebook/wav2vec2-base"}})
    broken = tmp_path / "broken"
    fe.SSLFrontend().model.config.save_pretrained(str(broken))  # config.json without weights
    with pytest.raises(ValueError, match=f"could not load the pretrained SSL model at '{broken}'"):
        fe.SSLFrontend(path=str(broken))


def test_ssl_without_transformers_says_how_to_install(monkeypatch):
    monkeypatch.setitem(sys.modules, "transformers", None)
    with pytest.raises(ImportError, match=r"pip install modforge\[ssl\]"):
        fe.SSLFrontend()
