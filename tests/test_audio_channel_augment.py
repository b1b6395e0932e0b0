"""Channel and codec augmentations: codecs, rooms, speed, noise/babble folders, band/time drop,
clipping — each deterministic given the generator, length-keeping, finite; resume is bitwise."""

from __future__ import annotations

import os

import numpy as np
import pytest
import soundfile

from modforge.core.errors import ConfigError
from modforge.core.registries import AUGMENTATIONS
from modforge.data.audio.augment import build_augmentations
from modforge.data.audio.codecs import CODECS, available_codecs, codec_round_trip
from modforge.data.audio.dataset import AudioDataset, AudioSettings
from modforge.data.audio.protocols import Utterance

SR = 16000


def speech_like(seconds: float = 0.5, seed: int = 0, amplitude: float = 0.3) -> np.ndarray:
    t = np.arange(int(seconds * SR)) / SR
    rng = np.random.default_rng(seed)
    x = sum(np.sin(2 * np.pi * f * t + rng.uniform(0, 6)) / k for k, f in enumerate((220, 440, 1250, 3100), 1))
    x = x * (0.6 + 0.4 * np.sin(2 * np.pi * 3 * t)) + 0.05 * rng.standard_normal(t.shape[0])
    return (amplitude * x / np.max(np.abs(x))).astype(np.float32)


def write_folder(root, layout: dict[str, tuple[int, int]]) -> str:
    """Audio files ``{relative name: (samples, rate)}`` of seeded noise/tones under ``root``."""
    for i, (name, (n, rate)) in enumerate(sorted(layout.items())):
        path = root / name
        path.parent.mkdir(parents=True, exist_ok=True)
        rng = np.random.default_rng(i)
        data = 0.2 * rng.standard_normal(n)
        if "rir" in name:
            data = np.zeros(n)
            data[10] = 1.0
            data[11:] = 0.3 * rng.standard_normal(n - 11) * np.exp(-np.arange(n - 11) / (0.05 * rate))
        soundfile.write(path, data, rate)
    return str(root)


@pytest.fixture(scope="module")
def folders(tmp_path_factory):
    root = tmp_path_factory.mktemp("channel")
    noise = write_folder(
        root / "musan",
        {"noise/a.wav": (4000, 16000), "noise/b.flac": (20000, 8000), "music/m.wav": (9000, 16000),
         "speech/s1.wav": (12000, 16000), "speech/s2.wav": (7000, 22050), "speech/deep/s3.wav": (5000, 16000)},
    )  # fmt: skip
    rirs = write_folder(root / "rirs", {"small/rir1.wav": (1600, 16000), "large/rir2.wav": (8000, 48000)})
    return {"noise": noise, "rirs": rirs}


def specs(folders) -> dict[str, dict]:
    """One spec per new augmentation (codecs: one per available codec)."""
    out = {
        "speed": {"type": "speed", "args": {"factors": [0.9, 1.1]}},
        "background_noise": {"type": "background_noise", "args": {"noise_dir": folders["noise"], "subfolders": ["noise", "music"]}},
        "babble": {"type": "babble", "args": {"speech_dir": folders["noise"], "subfolders": ["speech"]}},
        "drop_freq": {"type": "drop_freq", "args": {}},
        "drop_chunk": {"type": "drop_chunk", "args": {}},
        "clipping": {"type": "clipping", "args": {"percent_min": 5, "percent_max": 30}},
        "clipping_soft": {"type": "clipping", "args": {"mode": "soft"}},
        "rir": {"type": "rir", "args": {"rir_dir": folders["rirs"]}},
        "simulated_rir": {"type": "simulated_rir", "args": {"max_order": 4}},
        "codec_mix": {"type": "codec", "args": {"codecs": list(available_codecs()), "bit_rates": [12000, 32000]}},
    }  # fmt: skip
    for name in available_codecs():
        out[f"codec_{name}"] = {"type": "codec", "args": {"codecs": [name]}}
    return out


SPEC_NAMES = [
    "speed", "background_noise", "babble", "drop_freq", "drop_chunk", "clipping", "clipping_soft", "rir",
    "simulated_rir", "codec_mix", *[f"codec_{c}" for c in CODECS],
]  # fmt: skip


def build_named(folders, key: str):
    if key.startswith("codec_") and key != "codec_mix" and key[6:] not in available_codecs():
        pytest.skip(f"the installed PyAV/FFmpeg has no encoder/decoder for {key[6:]} (available: {available_codecs()})")
    return AUGMENTATIONS.build(specs(folders)[key], sample_rate=SR)


@pytest.mark.parametrize("key", SPEC_NAMES)
def test_every_augmentation_is_seeded_shape_keeping_and_finite(folders, key):
    aug = build_named(folders, key)
    x = speech_like(0.4)
    a = aug(x, np.random.default_rng([7, 0, 3]))
    b = aug(x.copy(), np.random.default_rng([7, 0, 3]))
    assert a.dtype == np.float32 and a.shape == x.shape
    assert np.all(np.isfinite(a))
    np.testing.assert_array_equal(a, b)  # bitwise, given the generator
    others = [aug(x, np.random.default_rng([7, epoch, 3])) for epoch in range(1, 6)]
    assert any(not np.array_equal(a, o) for o in others) or key.startswith("codec_") and key != "codec_mix"
    assert not np.array_equal(a, x) or key == "speed"  # speed may draw 1.0 only when asked; here 0.9/1.1
    silent = aug(np.zeros(800, np.float32), np.random.default_rng(1))
    assert silent.shape == (800,) and np.all(np.isfinite(silent))
    assert aug(np.zeros(0, np.float32), np.random.default_rng(1)).shape == (0,)


@pytest.mark.parametrize("codec", list(CODECS))
def test_codec_round_trip_is_aligned(codec):
    if codec not in available_codecs():
        pytest.skip(f"the installed PyAV/FFmpeg lacks {codec} (available: {available_codecs()})")
    # voiced-speech-like: a 130 Hz pulse train through two resonances (tones alone are ambiguous for CELP codecs)
    from scipy.signal import lfilter

    pulses = np.zeros(SR // 2)
    pulses[:: SR // 130] = 1.0
    x = lfilter([1.0], [1.0, -1.6, 0.9], lfilter([1.0], [1.0, -0.5, 0.6], pulses))
    x = 0.3 * x / np.max(np.abs(x))
    y = codec_round_trip(x, SR, codec)
    assert y.shape == x.shape
    # aligned: the best lag is 0 (within a sample) and the round trip still resembles the input
    band = slice(1000, -1000)
    lags = range(-8, 9)
    scores = [float(np.dot(x[band], np.roll(y, -lag)[band])) for lag in lags]
    assert abs(list(lags)[int(np.argmax(scores))]) <= 1
    assert np.corrcoef(x[band], y[band])[0, 1] > 0.6


def test_missing_codec_is_one_clear_error():
    missing = [c for c in CODECS if c not in available_codecs()]
    if missing:  # e.g. amr_wb: the PyPI PyAV wheels have no AMR-WB encoder
        with pytest.raises(ConfigError, match=f"codec '{missing[0]}' is not available.*available here"):
            build_augmentations([{"type": "codec", "args": {"codecs": missing[:1]}}], SR)
    with pytest.raises(ConfigError, match="unknown codec"):
        build_augmentations([{"type": "codec", "args": {"codecs": ["no_such_codec"]}}], SR)


def test_speed_changes_duration_only_when_asked():
    x = speech_like(0.5)
    fast = AUGMENTATIONS.build({"type": "speed", "args": {"factors": [1.25], "keep_length": False}}, sample_rate=SR)
    assert fast.changes_length
    assert abs(fast(x, np.random.default_rng(0)).shape[0] - x.shape[0] / 1.25) <= 2


def test_drop_chunk_and_clipping_do_what_they_say():
    x = speech_like(0.5) + 0.01
    chunk = AUGMENTATIONS.build({"type": "drop_chunk", "args": {"count_min": 2, "count_max": 2}}, sample_rate=SR)
    assert np.sum(chunk(x, np.random.default_rng(0)) == 0.0) >= int(0.01 * SR)
    clip = AUGMENTATIONS.build({"type": "clipping", "args": {"percent_min": 10, "percent_max": 10}}, sample_rate=SR)
    y = clip(x, np.random.default_rng(0))
    assert np.max(np.abs(y)) < np.max(np.abs(x))
    assert 0.08 < np.mean(np.abs(y) >= np.max(np.abs(y)) - 1e-7) < 0.12


def test_folders_refuse_links_out_and_name_bad_files(tmp_path):
    outside = write_folder(tmp_path / "outside", {"secret.wav": (1000, 16000)})
    noise = tmp_path / "noise"
    write_folder(noise, {"ok.wav": (1000, 16000)})
    os.symlink(os.path.join(outside, "secret.wav"), noise / "link.wav")
    os.symlink(outside, noise / "linked_dir")
    aug = AUGMENTATIONS.build({"type": "background_noise", "args": {"noise_dir": str(noise)}}, sample_rate=SR)
    assert [p.name for p in aug._folder.files] == ["ok.wav"]
    with pytest.raises(ConfigError, match="leads outside"):
        build_augmentations([{"type": "rir", "args": {"rir_dir": str(noise), "subfolders": ["linked_dir"]}}], SR)
    (noise / "broken.wav").write_bytes(b"RIFF not really a wave file")
    broken = AUGMENTATIONS.build({"type": "background_noise", "args": {"noise_dir": str(noise)}}, sample_rate=SR)
    with pytest.raises(ValueError, match="broken.wav"):
        for seed in range(20):
            broken(speech_like(0.1), np.random.default_rng(seed))
    with pytest.raises(ConfigError, match="holds no audio files"):
        build_augmentations([{"type": "rir", "args": {"rir_dir": str(outside_empty(tmp_path))}}], SR)


def outside_empty(tmp_path):
    folder = tmp_path / "empty"
    folder.mkdir()
    return folder


def test_resume_is_bitwise_at_the_dataset_level(folders, tmp_path):
    utts = []
    for i in range(4):
        path = tmp_path / f"u{i}.wav"
        soundfile.write(path, speech_like(0.3, seed=i), SR)
        utts.append(Utterance(f"u{i}", path, i % 2, "-", "spk", f"list:{i + 1}"))
    chosen = ["speed", "drop_freq", "drop_chunk", "background_noise", "babble", "rir", "simulated_rir", "clipping"]
    chain = [{**specs(folders)[k], "p": 0.8} for k in chosen]
    if available_codecs():
        chain.append({"type": "codec", "args": {"codecs": list(available_codecs())[:3]}, "p": 0.8})

    def dataset():
        return AudioDataset(
            utts, AudioSettings(seconds=0.25), train=True, seed=11, augment=build_augmentations(chain, SR)
        )

    through = dataset()
    for epoch in range(3):
        through.set_epoch(epoch)
        batch = through.__getitems__([3, 1, 0, 2])
    resumed = dataset()
    resumed.set_epoch(2)
    again = resumed.__getitems__([0, 2, 3, 1])
    order = {3: 0, 1: 1, 0: 2, 2: 3}
    for j, idx in enumerate([0, 2, 3, 1]):
        assert np.array_equal(again["input"][j].numpy(), batch["input"][order[idx]].numpy())
    assert np.all(np.isfinite(again["input"].numpy()))
    resumed.set_epoch(1)
    assert not np.array_equal(resumed.__getitems__([0, 2, 3, 1])["input"].numpy(), again["input"].numpy())


def test_mp3_without_fast_mp3_augment_goes_through_pyav_aligned(monkeypatch):
    from modforge.data.audio import codecs

    if not codecs._pyav_has("mp3"):
        pytest.skip(f"the installed PyAV/FFmpeg has no libmp3lame (available: {available_codecs()})")
    monkeypatch.setattr(codecs, "_fast_mp3", lambda *_args: None)
    codecs._delay.cache_clear()
    try:
        x = speech_like(0.5).astype(np.float64)
        y = codec_round_trip(x, SR, "mp3", bit_rate=24000)
        assert y.shape == x.shape and np.array_equal(y, codec_round_trip(x, SR, "mp3", bit_rate=24000))
        assert np.corrcoef(x[1000:-1000], y[1000:-1000])[0, 1] > 0.9
    finally:
        codecs._delay.cache_clear()
