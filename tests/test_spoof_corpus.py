"""The synthetic spoofing corpus: layout, ASVspoof-style protocols, counts, unseen attacks, determinism,
safe output handling, audio sanity and the absence of trivial level cues."""

from __future__ import annotations

import json
import re
from pathlib import Path

import numpy as np
import pytest
import soundfile as sf

from modforge.data.audio import speech_synth as ss
from modforge.data.audio import spoof_corpus as corpus
from modforge.data.audio.spoof_attacks import ATTACKS
from modforge.data.audio.spoof_corpus import SPLITS, UNSEEN_ATTACKS, make_spoof_corpus

TINY = {"utts": 30, "seed": 3, "duration": 0.5, "speakers": 6}
ID_PATTERN = {"train": r"SC_T_\d{7}", "dev": r"SC_D_\d{7}", "eval": r"SC_E_\d{7}"}


@pytest.fixture(scope="module")
def tiny(tmp_path_factory) -> tuple[Path, dict]:
    out = tmp_path_factory.mktemp("spoof") / "corpus"
    summary = make_spoof_corpus(out, **TINY)
    return out, summary


def read_protocol(root: Path, split: str) -> list[list[str]]:
    return [line.split(" ") for line in (root / "protocols" / f"{split}.txt").read_text().splitlines()]


def corpus_bytes(root: Path) -> dict[str, bytes]:
    return {str(p.relative_to(root)): p.read_bytes() for p in sorted(root.rglob("*")) if p.is_file()}


def test_layout_and_protocol_format(tiny):
    root, _ = tiny
    assert sorted(p.name for p in root.iterdir()) == ["meta.json", "protocols", "wav"]
    assert sorted(p.name for p in (root / "protocols").iterdir()) == [
        "dev.txt", "eval.txt", "eval_channels.txt", "train.txt"]  # fmt: skip
    ids = []
    for split in SPLITS:
        for fields in read_protocol(root, split):
            assert len(fields) == 5, fields
            speaker, utt, env, attack, label = fields
            assert re.fullmatch(r"SC_\d{4}", speaker)
            assert re.fullmatch(ID_PATTERN[split], utt)
            assert env == "-"
            assert label in ("bonafide", "spoof")
            assert (attack == "-") == (label == "bonafide")
            assert attack == "-" or attack in ATTACKS
            ids.append(utt)
    assert len(ids) == len(set(ids)) == TINY["utts"]
    assert sorted(p.name for p in (root / "wav").iterdir()) == sorted(f"{u}.wav" for u in ids)
    assert not [p for p in root.parent.iterdir() if p.name.startswith(".")], "temporary folders left behind"


def test_counts_per_split_and_attack_match_meta(tiny):
    root, summary = tiny
    meta = json.loads((root / "meta.json").read_text())
    assert meta["seed"] == TINY["seed"] and meta["sample_rate"] == 16000 and meta["duration"] == 0.5
    assert meta["utterances"] == TINY["utts"]
    assert sum(meta["counts"][s][c] for s in SPLITS for c in meta["counts"][s]) == TINY["utts"]
    for split in SPLITS:
        rows = read_protocol(root, split)
        found = {}
        for _, _, _, attack, label in rows:
            key = "bonafide" if label == "bonafide" else attack
            found[key] = found.get(key, 0) + 1
        assert found == meta["counts"][split]
        assert set(found) == {"bonafide", *corpus.SPLIT_ATTACKS[split]}
        assert max(found.values()) - min(found.values()) <= 1  # bona fide has one attack's share by default
    assert [len(read_protocol(root, s)) for s in SPLITS] == [15, 6, 9]
    assert {k: summary[k] for k in meta} == meta
    assert summary["out_dir"] == str(root.resolve()) and summary["seconds"] > 0


def test_unseen_attacks_only_in_eval(tiny):
    root, _ = tiny
    meta = json.loads((root / "meta.json").read_text())
    seen = {fields[3] for s in ("train", "dev") for fields in read_protocol(root, s)} - {"-"}
    in_eval = {fields[3] for fields in read_protocol(root, "eval")} - {"-"}
    assert UNSEEN_ATTACKS and set(UNSEEN_ATTACKS) <= in_eval
    assert not seen & set(UNSEEN_ATTACKS)
    assert in_eval - set(UNSEEN_ATTACKS), "eval also holds known attacks"
    assert meta["unseen_attacks"] == list(UNSEEN_ATTACKS)
    for attack, info in meta["attacks"].items():
        assert info["unseen"] == (attack in UNSEEN_ATTACKS)
        assert info["description"] and info["name"] == ATTACKS[attack].name
        assert info["splits"] == (
            ["eval"] if info["unseen"] else [s for s in SPLITS if attack in corpus.SPLIT_ATTACKS[s]]
        )


def test_speakers_are_disjoint_across_splits(tiny):
    root, _ = tiny
    meta = json.loads((root / "meta.json").read_text())
    speakers = {s: {fields[0] for fields in read_protocol(root, s)} for s in SPLITS}
    assert all(speakers.values())
    assert not speakers["train"] & speakers["dev"]
    assert not speakers["train"] & speakers["eval"]
    assert not speakers["dev"] & speakers["eval"]
    assert {s: {spk["id"] for spk in meta["speakers"][s]} for s in SPLITS} == speakers


def test_audio_sanity(tiny):
    root, _ = tiny
    for path in sorted((root / "wav").iterdir()):
        info = sf.info(path)
        assert (info.samplerate, info.frames, info.channels, info.subtype) == (16000, 8000, 1, "PCM_16")
        audio, rate = sf.read(path, dtype="float64")
        assert rate == 16000 and audio.shape == (8000,)
        assert np.isfinite(audio).all() and np.abs(audio).max() <= 1.0
        assert np.sqrt(np.mean(audio**2)) > 1e-3, f"{path.name} is silent"


def test_level_and_trivial_cues_do_not_separate_classes(tiny):
    root, _ = tiny
    cues: dict[str, list[tuple[float, float, float]]] = {"bonafide": [], "spoof": []}
    for split in SPLITS:
        for _, utt, _, _, label in read_protocol(root, split):
            audio, _ = sf.read(root / "wav" / f"{utt}.wav")
            rms_db = 10 * np.log10(np.mean(audio**2))
            peak_db = 20 * np.log10(np.abs(audio).max())
            cues[label].append((rms_db, peak_db, audio.mean()))
    bona, spoof = np.array(cues["bonafide"]), np.array(cues["spoof"])
    for k in range(2):  # RMS and peak level: the ranges overlap and the medians are close
        assert bona[:, k].min() < spoof[:, k].max() and spoof[:, k].min() < bona[:, k].max()
        assert abs(np.median(bona[:, k]) - np.median(spoof[:, k])) < 2.5
    assert np.abs(np.concatenate([bona[:, 2], spoof[:, 2]])).max() < 1e-3  # no DC offset in either class


def test_same_seed_gives_identical_bytes_with_any_worker_count(tiny, tmp_path):
    root, _ = tiny
    again = tmp_path / "again"
    make_spoof_corpus(again, **TINY, workers=2)
    assert corpus_bytes(again) == corpus_bytes(root)


def test_different_seed_gives_different_corpus(tiny, tmp_path):
    root, _ = tiny
    other = tmp_path / "other"
    make_spoof_corpus(other, **{**TINY, "seed": TINY["seed"] + 1})
    first, second = corpus_bytes(root), corpus_bytes(other)
    assert first.keys() == second.keys()
    wavs = [name for name in first if name.startswith("wav")]
    assert sum(first[name] != second[name] for name in wavs) == len(wavs)
    assert first["protocols/train.txt"] != second["protocols/train.txt"]


def test_refuses_to_write_into_a_non_empty_folder(tmp_path):
    out = tmp_path / "taken"
    out.mkdir()
    (out / "notes.txt").write_text("mine")
    with pytest.raises(ValueError, match="not empty.*overwrite=True"):
        make_spoof_corpus(out, utts=25, duration=0.3, speakers=3)
    with pytest.raises(ValueError, match="not part of a spoofing corpus"):
        make_spoof_corpus(out, utts=25, duration=0.3, speakers=3, overwrite=True)
    assert [p.name for p in out.iterdir()] == ["notes.txt"]
    assert sorted(p.name for p in tmp_path.iterdir()) == ["taken"]


def test_overwrite_replaces_an_earlier_corpus_and_empty_folders_are_fine(tmp_path):
    out = tmp_path / "corpus"
    out.mkdir()
    make_spoof_corpus(out, utts=25, seed=1, duration=0.3, speakers=3)
    with pytest.raises(ValueError, match="not empty"):
        make_spoof_corpus(out, utts=25, seed=2, duration=0.3, speakers=3)
    make_spoof_corpus(out, utts=26, seed=2, duration=0.3, speakers=3, overwrite=True)
    meta = json.loads((out / "meta.json").read_text())
    assert (meta["seed"], meta["utterances"]) == (2, 26)
    assert len(list((out / "wav").iterdir())) == 26
    assert sorted(p.name for p in tmp_path.iterdir()) == ["corpus"]


def test_a_failed_run_leaves_no_corpus_behind(tmp_path, monkeypatch):
    calls = {"n": 0}
    real = corpus._render_job

    def failing(job):
        calls["n"] += 1
        if calls["n"] == 5:
            raise RuntimeError("disk full")
        return real(job)

    monkeypatch.setattr(corpus, "_render_job", failing)
    with pytest.raises(RuntimeError, match="disk full"):
        make_spoof_corpus(tmp_path / "corpus", utts=25, duration=0.3, speakers=3)
    assert list(tmp_path.iterdir()) == []


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"utts": 10}, "fewer than its"),
        ({"split": (0.5, 0.5)}, "three positive fractions"),
        ({"split": (0.6, 0.3, 0.3)}, "summing to 1"),
        ({"speakers": 2}, "speakers"),
        ({"duration": 0.1}, "duration"),
        ({"sample_rate": 8000}, "sample_rate"),
        ({"seed": -1}, "seed"),
        ({"workers": 0}, "workers"),
        ({"bonafide_share": 1.5}, "bonafide_share"),
    ],
)
def test_bad_arguments_get_one_clear_error(tmp_path, kwargs, message):
    with pytest.raises(ValueError, match=message):
        make_spoof_corpus(tmp_path / "c", **{"utts": 30, "duration": 0.3, **kwargs})
    assert not (tmp_path / "c").exists()


def test_bonafide_share_and_other_sample_rates(tmp_path):
    summary = make_spoof_corpus(
        tmp_path / "c", utts=40, duration=0.3, sample_rate=22050, speakers=4, bonafide_share=0.1
    )
    assert summary["counts"]["train"]["bonafide"] == 2 and summary["counts"]["eval"]["bonafide"] == 1
    path = next((tmp_path / "c" / "wav").iterdir())
    info = sf.info(path)
    assert (info.samplerate, info.frames) == (22050, round(0.3 * 22050))


@pytest.mark.parametrize("attack", ["-", *ATTACKS])
def test_every_attack_renders_a_sane_utterance(attack):
    speaker = ss.make_speaker("SC_0001", np.random.default_rng(7))
    audio = corpus.render_utterance(speaker, attack, seed=0, index=4, n_samples=12000, sample_rate=16000)
    assert audio.dtype == np.int16 and audio.shape == (12000,)
    level = 20 * np.log10(np.sqrt(np.mean((audio / 32768.0) ** 2)))
    assert -36.0 < level < -20.0  # active level -26 dBFS ± 3 dB, leading/trailing silence lowers the plain RMS
    again = corpus.render_utterance(speaker, attack, seed=0, index=4, n_samples=12000, sample_rate=16000)
    assert np.array_equal(audio, again)


def test_telephone_and_mdct_codecs_remove_the_high_band():
    speaker = ss.make_speaker("SC_0001", np.random.default_rng(1))

    def band_share(attack: str, low: float) -> float:
        audio = corpus.render_utterance(speaker, attack, seed=0, index=2, n_samples=16000, sample_rate=16000)
        power = np.abs(np.fft.rfft(audio / 32768.0)) ** 2
        freqs = np.fft.rfftfreq(audio.size, 1 / 16000)
        return float(power[freqs > low].sum() / power.sum())

    assert band_share("A03", 4200.0) < band_share("-", 4200.0) / 100  # telephone band ends at 3.4 kHz
    assert band_share("A06", 7300.0) < band_share("-", 7300.0) / 10  # the codec drops the top 10-28 %
