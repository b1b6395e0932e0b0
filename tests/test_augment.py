"""Waveform augmentations: RawBoost, noise, gain, shift, crop, and the pipeline built from specs."""

from __future__ import annotations

import os
import pickle

import numpy as np
import pytest
import soundfile
import torch
from scipy import signal

from modforge.core.errors import ConfigError, UnknownComponentError
from modforge.core.registries import AUGMENTATIONS
from modforge.data.audio import rawboost as rb
from modforge.data.audio.augment import Pipeline, Step, build_augmentations, colored_noise

SR = 16000


def speech_like(seconds: float = 0.5, seed: int = 0, amplitude: float = 0.1) -> np.ndarray:
    """A few harmonics plus a little noise, peak well below 1."""
    t = np.arange(int(seconds * SR)) / SR
    rng = np.random.default_rng(seed)
    x = sum(np.sin(2 * np.pi * f * t + rng.uniform(0, 6)) / k for k, f in enumerate((220, 440, 1250, 3100), 1))
    x = x + 0.05 * rng.standard_normal(t.shape[0])
    return (amplitude * x / np.max(np.abs(x))).astype(np.float32)


def build(name: str, **args):
    return AUGMENTATIONS.build({"type": name, "args": args}, sample_rate=SR)


def snr_db(clean: np.ndarray, noisy: np.ndarray) -> float:
    clean = clean.astype(np.float64)
    noise = noisy.astype(np.float64) - clean
    return float(10 * np.log10(np.mean(clean**2) / np.mean(noise**2)))


ALL_SPECS = [
    ("rawboost", {"algo": 4}),
    ("add_noise", {"noise_type": "pink"}),
    ("gain", {}),
    ("time_shift", {"max_shift": 0.1}),
    ("random_crop", {"seconds": 0.25}),
    ("one_of", {"choices": ["gain", {"type": "add_noise"}]}),
]


# ---------------------------------------------------------------- contract for every augmentation
@pytest.mark.parametrize(("name", "args"), ALL_SPECS, ids=[n for n, _ in ALL_SPECS])
def test_same_seed_same_output_other_seed_other_output(name, args):
    aug, x = build(name, **args), speech_like()
    a, b = aug(x, np.random.default_rng([0, 1, 7])), aug(x, np.random.default_rng([0, 1, 7]))
    assert a.dtype == np.float32 and a.ndim == 1 and np.isfinite(a).all()
    assert np.array_equal(a, b)
    others = [aug(x, np.random.default_rng([0, 1, k])) for k in range(8, 11)]
    assert any(not np.array_equal(a, o) for o in others)
    assert np.array_equal(x, speech_like())  # the input is never modified in place


@pytest.mark.parametrize(("name", "args"), ALL_SPECS, ids=[n for n, _ in ALL_SPECS])
def test_silent_input_stays_finite_and_length_is_kept(name, args):
    aug = build(name, **args)
    silent = np.zeros(SR // 2, dtype=np.float32)
    y = aug(silent, np.random.default_rng(3))
    assert y.dtype == np.float32 and np.isfinite(y).all()
    assert y.shape[0] == (SR // 4 if name == "random_crop" else SR // 2)
    if name != "random_crop":
        assert aug(np.zeros(0, dtype=np.float32), np.random.default_rng(0)).shape == (0,)


def test_no_global_or_torch_randomness_is_used():
    np.random.seed(123)
    torch.manual_seed(123)
    np_state, torch_state = np.random.get_state()[1].copy(), torch.get_rng_state().clone()
    x = speech_like()
    for name, args in ALL_SPECS:
        build(name, **args)(x, np.random.default_rng(0))
    for algo in range(9):
        build("rawboost", algo=algo)(x, np.random.default_rng(0))
    assert np.array_equal(np.random.get_state()[1], np_state)
    assert torch.equal(torch.get_rng_state(), torch_state)


def test_bad_waveform_or_rng_is_refused_clearly():
    gain = build("gain")
    with pytest.raises(ValueError, match="1-D waveform"):
        gain(np.zeros((2, 100), dtype=np.float32), np.random.default_rng(0))
    with pytest.raises(ValueError, match="floating-point"):
        gain(np.zeros(100, dtype=np.int16), np.random.default_rng(0))
    with pytest.raises(TypeError, match="numpy.random.Generator"):
        gain(np.zeros(100, dtype=np.float32), np.random.RandomState(0))


# ----------------------------------------------------------------------------------- RawBoost
def test_notch_filter_is_a_band_stop_with_the_drawn_peak_gain():
    params = rb.RawBoostParams(n_bands=1, min_f=2000, max_f=2000, min_bw=400, max_bw=400, min_coeff=101, max_coeff=101)
    b = rb.notch_filter_coefficients(np.random.default_rng(0), SR, params, -6.0, -6.0)
    assert b.shape == (101,) and np.allclose(b, b[::-1])  # odd length, linear phase
    freqs, h = signal.freqz(b, 1, worN=[2000.0, 6000.0], fs=SR)
    assert abs(h[0]) < 0.1 * abs(h[1])  # the band around 2 kHz is removed
    _, full = signal.freqz(b, 1, fs=SR)
    assert np.max(np.abs(full)) == pytest.approx(10 ** (-6 / 20), rel=1e-9)


def test_lnl_keeps_length_changes_the_spectrum_and_is_nonlinear_only_with_n_f_above_1():
    x = speech_like(seed=1).astype(np.float64)
    y = rb.lnl_convolutive_noise(x, np.random.default_rng(0), SR, rb.RawBoostParams())
    assert y.shape == x.shape and abs(np.mean(y)) < 1e-9 and np.max(np.abs(y)) <= 1.0
    spec_x, spec_y = np.abs(np.fft.rfft(x)), np.abs(np.fft.rfft(y))
    assert np.linalg.norm(spec_x - spec_y) > 0.2 * np.linalg.norm(spec_x)

    linear = rb.RawBoostParams(n_f=1)
    a = rb.lnl_convolutive_noise(x, np.random.default_rng(5), SR, linear)
    b = rb.lnl_convolutive_noise(0.5 * x, np.random.default_rng(5), SR, linear)
    assert np.allclose(b, 0.5 * a, atol=1e-12)  # one filter: scales with the input
    a = rb.lnl_convolutive_noise(x, np.random.default_rng(5), SR, rb.RawBoostParams())
    b = rb.lnl_convolutive_noise(0.5 * x, np.random.default_rng(5), SR, rb.RawBoostParams())
    assert not np.allclose(b, 0.5 * a, atol=1e-6)  # powers of x: it does not


def test_isd_changes_only_up_to_p_percent_of_samples():
    x = speech_like(1.0, seed=2).astype(np.float64)
    shares = []
    for seed in range(20):
        y = rb.isd_additive_noise(x, np.random.default_rng(seed), rb.RawBoostParams(isd_max_percent=10, g_sd=2))
        changed = np.count_nonzero(y != x) / x.shape[0]
        assert changed <= 0.10
        assert np.max(np.abs(y - x) / np.maximum(np.abs(x), 1e-12)) <= 2.0 + 1e-9  # |g_sd * u1 * u2| <= g_sd
        shares.append(changed)
    assert 0.02 < np.mean(shares) < 0.08  # beta ~ U(0, 10) %


def test_ssi_adds_coloured_noise_at_an_snr_in_range():
    x = speech_like(seed=3).astype(np.float64)
    for seed in range(10):
        y = rb.ssi_additive_noise(x, np.random.default_rng(seed), SR, rb.RawBoostParams(snr_min=10, snr_max=40))
        assert y.shape == x.shape and 10 - 1e-6 <= snr_db(x, y) <= 40 + 1e-6
    fixed = rb.RawBoostParams(snr_min=20, snr_max=20)
    assert snr_db(x, rb.ssi_additive_noise(x, np.random.default_rng(0), SR, fixed)) == pytest.approx(20, abs=1e-6)


@pytest.mark.parametrize("algo", range(9))
def test_every_rawboost_algo_runs_and_keeps_length(algo):
    x = speech_like(seed=4)
    y = build("rawboost", algo=algo)(x, np.random.default_rng(algo))
    assert y.shape == x.shape and y.dtype == np.float32 and np.isfinite(y).all()
    assert np.array_equal(y, x) == (algo == 0)


def test_rawboost_algos_combine_the_stages_as_the_reference():
    x = speech_like(seed=5).astype(np.float64)
    p = rb.RawBoostParams()
    rng = np.random.default_rng(9)
    series = rb.isd_additive_noise(rb.lnl_convolutive_noise(x, rng, SR, p), rng, p)
    assert np.allclose(rb.rawboost(x, np.random.default_rng(9), 5, SR, p), series)
    rng = np.random.default_rng(9)
    both = rb.lnl_convolutive_noise(x, rng, SR, p) + rb.isd_additive_noise(x, rng, p)
    both = both / max(1.0, np.max(np.abs(both)))
    assert np.allclose(rb.rawboost(x, np.random.default_rng(9), 8, SR, p), both)


def test_rawboost_works_below_16_khz_and_refuses_bad_parameters():
    aug = AUGMENTATIONS.build({"type": "rawboost", "args": {"algo": 4}}, sample_rate=8000)  # max_f 8000 > Nyquist
    assert np.isfinite(aug(speech_like(), np.random.default_rng(0))).all()
    with pytest.raises(ConfigError, match=r"augment\.0: .*algo must be one of 0\.\.8"):
        build_augmentations([{"type": "rawboost", "args": {"algo": 9}}], SR, path="augment")
    with pytest.raises(ConfigError, match="snr_min <= snr_max"):
        build("rawboost", snr_min=30, snr_max=10)


# ---------------------------------------------------------------------------------- add_noise
@pytest.mark.parametrize("color", ["white", "pink", "brown"])
def test_add_noise_hits_the_requested_snr(color):
    x = speech_like(seed=6)
    for seed, target in enumerate((0.0, 7.5, 25.0)):
        y = build("add_noise", snr_min=target, snr_max=target, noise_type=color)(x, np.random.default_rng(seed))
        assert snr_db(x, y) == pytest.approx(target, abs=0.1)
    ranged = build("add_noise", snr_min=5, snr_max=15, noise_type=color)
    assert all(5 - 0.1 <= snr_db(x, ranged(x, np.random.default_rng(s))) <= 15 + 0.1 for s in range(5))


def test_noise_colours_have_falling_spectra():
    def low_high_ratio(color: str) -> float:
        power = np.abs(np.fft.rfft(colored_noise(SR, np.random.default_rng(0), color))) ** 2
        return float(power[10:500].mean() / power[4000:8000].mean())

    white, pink, brown = (low_high_ratio(c) for c in ("white", "pink", "brown"))
    assert 0.7 < white < 1.4 and pink > 5 * white and brown > 5 * pink


def test_add_noise_from_a_folder_round_trip(tmp_path):
    folder = tmp_path / "noises" / "sub"
    folder.mkdir(parents=True)
    noise = np.random.default_rng(0).standard_normal((800, 2)) * 0.1  # 0.1 s stereo at 8 kHz: looped + resampled
    soundfile.write(folder / "hum.wav", noise, 8000)
    (tmp_path / "noises" / "notes.txt").write_text("not audio")
    aug = build("add_noise", snr_min=10, snr_max=10, noise_type="file", noise_dir=str(tmp_path / "noises"))
    x = speech_like(seed=7)
    y = aug(x, np.random.default_rng(1))
    assert y.shape == x.shape and np.isfinite(y).all()
    assert snr_db(x, y) == pytest.approx(10, abs=0.1)
    assert np.array_equal(y, aug(x, np.random.default_rng(1)))
    restored = pickle.loads(pickle.dumps(aug))  # DataLoader workers get a copy
    assert np.array_equal(y, restored(x, np.random.default_rng(1)))


def test_add_noise_missing_or_empty_folder_is_one_clear_error(tmp_path):
    missing = tmp_path / "nope"
    with pytest.raises(ConfigError, match=r"data\.augment\.0: .*noise_dir '.*nope' does not exist"):
        build_augmentations([{"type": "add_noise", "args": {"noise_type": "file", "noise_dir": str(missing)}}], SR)
    (tmp_path / "empty").mkdir()
    with pytest.raises(ConfigError, match=r"noise_dir '.*empty' holds no audio files"):
        build("add_noise", noise_type="file", noise_dir=str(tmp_path / "empty"))
    with pytest.raises(ConfigError, match="needs noise_dir"):
        build("add_noise", noise_type="file")


# ------------------------------------------------------------------------ gain, shift, crop
def test_gain_is_in_range_and_clipping_protection_caps_the_peak():
    x = speech_like(seed=8)
    aug = build("gain", min_db=-3, max_db=9, protect_clipping=False)
    gains = []
    for seed in range(30):
        y = aug(x, np.random.default_rng(seed))
        ratio = y.astype(np.float64) / x
        assert np.allclose(ratio, ratio[0], rtol=1e-5)
        gains.append(20 * np.log10(ratio[0]))
    assert -3 - 1e-4 <= min(gains) and max(gains) <= 9 + 1e-4 and max(gains) - min(gains) > 6
    loud = (x / np.max(np.abs(x)) * 0.9).astype(np.float32)
    protected = build("gain", min_db=6, max_db=12)
    for seed in range(5):
        assert np.max(np.abs(protected(loud, np.random.default_rng(seed)))) <= 1.0 + 1e-6


@pytest.mark.parametrize("mode", ["circular", "zero"])
def test_time_shift_is_an_exact_shift_within_the_limit(mode):
    x = speech_like(0.1, seed=9)
    limit = int(0.01 * SR)
    aug = build("time_shift", max_shift=0.01, mode=mode)
    seen = set()
    for seed in range(10):
        y = aug(x, np.random.default_rng(seed))
        matches = []
        for k in range(-limit, limit + 1):
            expected = np.roll(x, k)
            if mode == "zero" and k > 0:
                expected[:k] = 0
            elif mode == "zero" and k < 0:
                expected[k:] = 0
            if np.array_equal(y, expected):
                matches.append(k)
        assert len(matches) == 1
        seen.add(matches[0])
    assert len(seen) > 1


def test_random_crop_length_and_content():
    x = np.arange(SR, dtype=np.float32)  # a ramp: every sample holds its own position (exact in float32)
    crop = build("random_crop", seconds=0.25)
    starts = set()
    for seed in range(10):
        y = crop(x, np.random.default_rng(seed))
        assert y.shape == (SR // 4,) and np.all(np.diff(y) == 1)  # one contiguous slice
        starts.add(float(y[0]))
    assert len(starts) > 1
    short = x[:1000]
    rep = build("random_crop", seconds=0.25)(short, np.random.default_rng(0))
    assert rep.shape == (SR // 4,) and set(rep.astype(int)) == set(range(1000))
    zero = build("random_crop", seconds=0.25, pad_mode="zero")(short, np.random.default_rng(0))
    assert zero.shape == (SR // 4,) and np.count_nonzero(zero) == 999  # the ramp starts at 0.0
    with pytest.raises(ValueError, match="empty waveform"):
        crop(np.zeros(0, dtype=np.float32), np.random.default_rng(0))


# -------------------------------------------------------------------------------- composition
def test_probability_zero_never_one_always_half_about_half():
    x = speech_like(0.1)

    def applied_share(p: float, trials: int = 400) -> float:
        pipe = build_augmentations([{"type": "gain", "args": {"min_db": 3, "max_db": 6}, "p": p}], SR)
        return np.mean([not np.array_equal(pipe(x, np.random.default_rng([1, i])), x) for i in range(trials)])

    assert applied_share(0.0) == 0.0
    assert applied_share(1.0) == 1.0
    assert 0.42 < applied_share(0.5) < 0.58


def test_pipeline_applies_steps_in_order_and_reports_length_changes():
    specs = [
        {"type": "random_crop", "args": {"seconds": 0.5}},
        {"type": "gain", "args": {"min_db": 6, "max_db": 6, "protect_clipping": False}},
        "time_shift",
    ]
    pipe = build_augmentations(specs, SR)
    assert len(pipe) == 3 and [s.name for s in pipe] == ["random_crop", "gain", "time_shift"]
    assert pipe.changes_length and "gain(p=1)" in repr(pipe)
    x = speech_like(1.0)
    y = pipe(x, np.random.default_rng(4))
    assert y.shape == (SR // 2,) and y.dtype == np.float32
    assert np.array_equal(y, pickle.loads(pickle.dumps(pipe))(x, np.random.default_rng(4)))
    empty = build_augmentations(None, SR)
    assert not empty and np.array_equal(empty(x, np.random.default_rng(0)), x)
    direct = Pipeline([Step(build("gain", min_db=0, max_db=0), p=1.0, name="gain")])
    assert np.array_equal(direct(x, np.random.default_rng(0)), x)


def test_one_of_picks_by_weight():
    x = speech_like(0.1)
    spec = {
        "type": "one_of",
        "args": {
            "choices": [
                {"type": "gain", "args": {"min_db": 6, "max_db": 6, "protect_clipping": False}},
                {"type": "time_shift", "args": {"max_shift": 0.01}},
            ],
            "weights": [1.0, 0.0],
        },
    }
    pipe = build_augmentations([spec], SR)
    for seed in range(10):
        assert np.allclose(pipe(x, np.random.default_rng(seed)), x * 10 ** (6 / 20), rtol=1e-5)
    spec["args"]["weights"] = [1.0, 1.0]
    pipe = build_augmentations([spec], SR)
    gained = [np.allclose(pipe(x, np.random.default_rng(s)), x * 10 ** (6 / 20), rtol=1e-5) for s in range(200)]
    assert 0.35 < np.mean(gained) < 0.65


def test_bad_specs_give_one_clear_located_error():
    with pytest.raises(UnknownComponentError, match=r"data\.augment\.1\.type: no augmentation named 'gian'.*'gain'"):
        build_augmentations(["gain", {"type": "gian"}], SR)
    with pytest.raises(ConfigError, match=r"data\.augment\.0\.p: .*\[0, 1\], got 1\.5"):
        build_augmentations([{"type": "gain", "p": 1.5}], SR)
    with pytest.raises(ConfigError, match=r"data\.augment\.0\.p: expected float"):
        build_augmentations([{"type": "gain", "p": "often"}], SR)
    with pytest.raises(ConfigError, match=r"data\.augment: expected a list"):
        build_augmentations({"type": "gain"}, SR)
    with pytest.raises(ConfigError, match=r"data\.augment\.0\.prob: unknown key"):
        build_augmentations([{"type": "gain", "prob": 0.5}], SR)
    with pytest.raises(ConfigError, match=r"data\.augment\.0\.args\.max_dB: "):
        build_augmentations([{"type": "gain", "args": {"max_dB": 3}}], SR)
    nested = {"type": "one_of", "args": {"choices": ["gain", {"type": "one_of", "args": {"choices": ["nope"]}}]}}
    with pytest.raises(
        UnknownComponentError, match=r"^x\.2\.args\.choices\.1\.args\.choices\.0\.type: no augmentation"
    ):
        build_augmentations(["gain", "gain", nested], SR, path="x")
    bad_p = {"type": "one_of", "args": {"choices": [{"type": "gain", "p": 2}]}}
    with pytest.raises(ConfigError, match=r"^data\.augment\.0\.args\.choices\.0\.p: "):
        build_augmentations([bad_p], SR)
    with pytest.raises(ValueError, match=r"must be in \[0, 1\]"):
        Step(build("gain"), p=-0.1)


def test_add_noise_never_reads_a_link_leading_out_of_its_folder(tmp_path):
    outside = tmp_path / "private"
    outside.mkdir()
    soundfile.write(outside / "secret.wav", np.zeros(800), 8000)
    folder = tmp_path / "noises"
    folder.mkdir()
    soundfile.write(folder / "hum.wav", np.random.default_rng(0).standard_normal(800) * 0.1, 8000)
    (folder / "link.wav").symlink_to(outside / "secret.wav")
    (folder / "linked_dir").symlink_to(outside, target_is_directory=True)
    aug = build("add_noise", noise_type="file", noise_dir=str(folder))
    assert [os.path.basename(f) for f in aug._folder.files] == ["hum.wav"]
