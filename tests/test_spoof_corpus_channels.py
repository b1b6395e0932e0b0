"""The synthetic corpus's eval transmission conditions: balanced per class, byte-stable for the
clean files, each condition's signature in the audio, and the per-condition report end to end."""

from __future__ import annotations

import json
from collections import Counter
from pathlib import Path

import numpy as np
import pytest

from modforge.data.audio import spoof_channels
from modforge.data.audio.spoof_channels import CHANNELS, DEFAULT_EVAL_CHANNELS, check_channels
from modforge.data.audio.spoof_corpus import make_spoof_corpus

# 120 utterances keep every class of the eval split spread over the four conditions; a quarter second each
# (the command-line test's length) halves the rendering, and the lfcc_mlp config pads every file to 2 s anyway
SMALL = {"utts": 120, "seed": 5, "duration": 0.25, "speakers": 6}


@pytest.fixture(scope="module")
def corpora(tmp_path_factory) -> tuple[Path, Path]:
    base = tmp_path_factory.mktemp("channels")
    make_spoof_corpus(base / "with", **SMALL)
    make_spoof_corpus(base / "clean", **SMALL, eval_channels=["none"])
    return base / "with", base / "clean"


def _channels(root: Path) -> dict[str, str]:
    return dict(line.split() for line in (root / "protocols" / "eval_channels.txt").read_text().splitlines())


def test_every_eval_file_has_one_condition_balanced_within_each_class(corpora):
    root, _ = corpora
    channels = _channels(root)
    protocol = [line.split() for line in (root / "protocols" / "eval.txt").read_text().splitlines()]
    assert list(channels) == [fields[1] for fields in protocol]  # same order as eval.txt
    meta = json.loads((root / "meta.json").read_text())
    assert list(meta["eval_channels"]) == list(DEFAULT_EVAL_CHANNELS)
    assert meta["channels_file"] == "protocols/eval_channels.txt" and meta["version"] == "1.1"
    for cls in {fields[3] for fields in protocol}:
        per = Counter(channels[f[1]] for f in protocol if f[3] == cls)
        counts = [per.get(name, 0) for name in DEFAULT_EVAL_CHANNELS]
        assert max(counts) - min(counts) <= 1, (cls, per)
        key = "bonafide" if cls == "-" else cls
        assert [meta["eval_channels"][n]["files"][key] for n in DEFAULT_EVAL_CHANNELS] == counts


def test_clean_files_ids_and_training_splits_are_those_of_a_clean_corpus(corpora):
    root, clean = corpora
    assert not (clean / "protocols" / "eval_channels.txt").exists()
    assert json.loads((clean / "meta.json").read_text())["channels_file"] is None
    for split in ("train", "dev", "eval"):
        assert (root / "protocols" / f"{split}.txt").read_bytes() == (clean / "protocols" / f"{split}.txt").read_bytes()
    channels = _channels(root)
    for wav in sorted((root / "wav").iterdir()):
        same = wav.read_bytes() == (clean / "wav" / wav.name).read_bytes()
        assert same == (channels.get(wav.stem, "none") == "none"), wav.name


def _high_band_share(audio: np.ndarray, low: float) -> float:
    power = np.abs(np.fft.rfft(audio)) ** 2
    freqs = np.fft.rfftfreq(audio.size, 1 / 16000)
    return float(power[freqs > low].sum() / power.sum())


def test_each_condition_leaves_its_signature():
    rng = np.random.default_rng(0)
    t = np.arange(16000) / 16000
    speech = np.sin(2 * np.pi * 220 * t) * (1 + rng.standard_normal(16000) * 0.1) + 0.2 * rng.standard_normal(16000)
    speech[:4000] = 0.0  # leading silence: noise and reverb tails fill it
    out = {name: spoof_channels.apply_channel_condition(speech, name, 16000, np.random.default_rng(1))
           for name in CHANNELS}  # fmt: skip
    for name, y in out.items():
        assert y.shape == speech.shape and np.isfinite(y).all(), name
    assert np.array_equal(out["none"], speech)
    assert _high_band_share(out["telephone"], 4200.0) < _high_band_share(speech, 4200.0) / 100
    assert np.abs(out["noise"][:4000]).max() > 1e-3  # noise in the silence
    assert np.abs(out["reverb"][:4000]).max() < 1e-12  # a causal room: nothing before the sound (FFT rounding)
    tail = slice(4000, 4200)
    assert not np.allclose(out["reverb"][tail], speech[tail])
    again = spoof_channels.apply_channel_condition(speech, "reverb", 16000, np.random.default_rng(1))
    assert np.array_equal(again, out["reverb"])


@pytest.mark.parametrize(("names", "message"), [
    (["none", "radio"], "unknown eval channel 'radio'"),
    ([], "at least one condition"),
    (["noise", "noise"], "names a condition twice"),
])  # fmt: skip
def test_bad_channel_lists_get_one_clear_error(names, message, tmp_path):
    with pytest.raises(ValueError, match=message):
        check_channels(names)
    with pytest.raises(ValueError, match=message):
        make_spoof_corpus(tmp_path / "c", **SMALL, eval_channels=names)
    assert not (tmp_path / "c").exists()


def test_the_test_reports_eer_per_attack_and_condition(corpora, tmp_path, monkeypatch):
    from modforge.cli.main import main

    root, _ = corpora
    monkeypatch.chdir(tmp_path)
    args = ["train", str(Path(__file__).parents[1] / "configs" / "spoofing" / "lfcc_mlp.yaml"),
            f"data.args.root={root}", "train.max_epochs=1", "train.progress=never", "--run-dir", "run"]  # fmt: skip
    assert main(args) == 0
    summary = json.loads((tmp_path / "run" / "summary.json").read_text())
    report = summary["test_conditions"]
    assert report["track"] == "spoof_corpus" and report["columns"] == "channel"
    eer = report["subsets"]["all"]["eer"]
    assert list(eer) == ["A01", "A02", "A05", "A06", "A07", "Pooled"]
    assert list(eer["Pooled"]) == [*DEFAULT_EVAL_CHANNELS, "Pooled"]
    assert eer["Pooled"]["Pooled"] == pytest.approx(summary["test"]["eer"], abs=1e-12)
    text = (tmp_path / "run" / "conditions.txt").read_text()
    assert text.startswith("== spoof_corpus all: EER %") and "telephone" in text
    # the per-condition cells are recomputed here from the run's own score file
    scores = {line.split()[0]: float(line.split()[1]) for line in (tmp_path / "run" / "scores.txt").read_text().splitlines()}
    labels = {f.split()[1]: f.split()[4] for f in (root / "protocols" / "eval.txt").read_text().splitlines()}
    from modforge.tasks.spoofing.challenge_metrics import eer as challenge_eer

    for name, channel_of in (("noise", _channels(root)),):
        picked = [u for u, c in channel_of.items() if c == name]
        s = np.array([scores[u] for u in picked])
        y = np.array([labels[u] == "bonafide" for u in picked], dtype=int)
        assert eer["Pooled"][name] == pytest.approx(challenge_eer(s, y)[0], abs=1e-12)


def test_the_command_line_picks_the_eval_conditions(cli, tmp_path):
    made = cli("data", "make-spoof-corpus", "c", "--utts", "40", "--duration", "0.25", "--eval-channels", "none,noise")
    assert made.code == 0, made.err
    assert "eval conditions: none, noise" in made.out
    assert set(_channels(tmp_path / "c").values()) == {"none", "noise"}
    refused = cli("data", "make-spoof-corpus", "d", "--utts", "40", "--eval-channels", "none,radio")
    assert refused.code == 2 and "unknown eval channel 'radio'; known: none, telephone, reverb, noise" in refused.err
    assert not (tmp_path / "d").exists()
