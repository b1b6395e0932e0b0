"""Audio data: reading, protocols and manifests, crops/windows/padding, the dataset and the registered formats."""

from __future__ import annotations

import numpy as np
import pytest
import soundfile as sf
import torch

import modforge as mf
from modforge.core.errors import UsageError
from modforge.data.audio.cropping import fit_length, pad_batch, windows
from modforge.data.audio.dataset import AudioDataset, AudioSettings, audio_settings
from modforge.data.audio.io import AudioReadError, read_audio, resample
from modforge.data.audio.protocols import (
    ParseReport,
    ProtocolError,
    Utterance,
    parse_label,
    read_asvspoof5,
    read_asvspoof2019,
    read_in_the_wild,
    read_manifest,
)


def tone(seconds: float, rate: int = 16000, freq: float = 440.0) -> np.ndarray:
    t = np.arange(int(seconds * rate)) / rate
    return (0.3 * np.sin(2 * np.pi * freq * t)).astype(np.float32)


def write(path, wave, rate=16000, **kw):
    path.parent.mkdir(parents=True, exist_ok=True)
    sf.write(str(path), wave, rate, **kw)
    return path


# ------------------------------------------------------------------ reading
def test_read_audio_mixes_down_and_resamples(tmp_path):
    stereo = np.stack([tone(0.5, 44100), np.zeros(22050, dtype=np.float32)], axis=1)
    path = write(tmp_path / "a.flac", stereo, 44100)
    wave, rate = read_audio(path, 16000)
    assert rate == 16000 and wave.dtype == np.float32 and wave.ndim == 1
    assert len(wave) == 8000  # 0.5 s at 16 kHz, exact for 44100 → 16000 (160/441)
    assert 0.1 < np.abs(wave).max() < 0.2  # the mono mix halves the tone
    native, native_rate = read_audio(path)
    assert native_rate == 44100 and len(native) == 22050


def test_resample_keeps_a_tone():
    wave = tone(1.0, 8000, 200.0)
    up = resample(wave, 8000, 16000)
    assert len(up) == 16000
    spectrum = np.abs(np.fft.rfft(up))
    assert abs(np.argmax(spectrum) * 16000 / len(up) - 200.0) < 2.0


def test_read_audio_errors_name_the_file(tmp_path):
    with pytest.raises(AudioReadError, match="not found: .*missing.wav"):
        read_audio(tmp_path / "missing.wav")
    bad = tmp_path / "bad.wav"
    bad.write_bytes(b"RIFF not really a wave file")
    with pytest.raises(AudioReadError, match="cannot read audio file .*bad.wav"):
        read_audio(bad)
    empty = write(tmp_path / "empty.wav", np.zeros(0, dtype=np.float32))
    with pytest.raises(AudioReadError, match="no samples"):
        read_audio(empty)


# ---------------------------------------------------------------- protocols
def test_asvspoof2019_protocol_and_bad_lines(tmp_path):
    proto = tmp_path / "train.txt"
    proto.write_text("LA_0079 LA_T_1 - - bonafide\n\nLA_0079 LA_T_2 - A01 spoof\nLA_0080 LA_T_3 - A02\n")
    with pytest.raises(ProtocolError, match=r"train.txt:4: expected 5 fields"):
        read_asvspoof2019(proto, tmp_path / "flac")
    report = ParseReport()
    utts = read_asvspoof2019(proto, tmp_path / "flac", skip_bad=True, report=report)
    assert [(u.utt_id, u.label, u.attack, u.speaker) for u in utts] == [
        ("LA_T_1", 1, "-", "LA_0079"),
        ("LA_T_2", 0, "A01", "LA_0079"),
    ]
    assert utts[0].path == tmp_path / "flac" / "LA_T_1.flac" and utts[0].source.endswith("train.txt:1")
    assert report.skipped == 1 and "train.txt:4" in str(report)
    proto.write_text("LA_0079 LA_T_1 - - maybe\n")
    with pytest.raises(ProtocolError, match=r"train.txt:1: unknown label 'maybe'"):
        read_asvspoof2019(proto, tmp_path)
    proto.write_text("S A - - bonafide\nS A - A01 spoof\n")
    with pytest.raises(ProtocolError, match=r"train.txt:2: utterance 'A' already listed at .*train.txt:1"):
        read_asvspoof2019(proto, tmp_path)
    with pytest.raises(ProtocolError, match="protocol file not found"):
        read_asvspoof2019(tmp_path / "nope.txt", tmp_path)


def test_asvspoof5_protocol(tmp_path):
    proto = tmp_path / "ASVspoof5.train.tsv"
    proto.write_text("T_4850 T_0000000000 F - - - AC3 A05 spoof -\nT_4851 T_0000000001 M - - - bonafide - bonafide -\n")
    utts = read_asvspoof5(proto, tmp_path / "flac_T")
    assert [(u.utt_id, u.label, u.attack, u.speaker) for u in utts] == [
        ("T_0000000000", 0, "A05", "T_4850"),
        ("T_0000000001", 1, "-", "T_4851"),
    ]
    proto.write_text("T_4850 T_0000000000 F - -\n")
    with pytest.raises(ProtocolError, match=r"tsv:1: expected 9 fields"):
        read_asvspoof5(proto, tmp_path)


def test_manifest_and_in_the_wild(tmp_path):
    manifest = tmp_path / "train.csv"
    manifest.write_text("path,label,id,attack\naudio/a.wav,bonafide,u1,\naudio/b.wav,0,u2,tts\n/abs/c.wav,spoof,,\n")
    utts = read_manifest(manifest)
    assert [(u.utt_id, u.label, u.attack) for u in utts] == [("u1", 1, "-"), ("u2", 0, "tts"), ("/abs/c", 0, "spoof")]
    assert utts[0].path == tmp_path / "audio" / "a.wav" and str(utts[2].path) == "/abs/c.wav"
    same_names = tmp_path / "vocoders.csv"  # WaveFake-style: one file name in several folders; a spreadsheet's BOM
    same_names.write_text("\ufeffpath,label\nmelgan/001.wav,spoof\nhifigan/001.wav,spoof\n", encoding="utf-8")
    assert [u.utt_id for u in read_manifest(same_names)] == ["melgan/001", "hifigan/001"]
    (tmp_path / "bad.csv").write_text("file,label\nx.wav,spoof\n")
    with pytest.raises(ProtocolError, match=r"bad.csv: missing column\(s\) path"):
        read_manifest(tmp_path / "bad.csv")
    meta = tmp_path / "meta.csv"
    meta.write_text("file,speaker,label\n0.wav,Alec Guinness,spoof\n1.wav,Alec Guinness,bona-fide\n2.wav,X,nonsense\n")
    with pytest.raises(ProtocolError, match=r"meta.csv:4: unknown label 'nonsense'"):
        read_in_the_wild(meta)
    utts = read_in_the_wild(meta, skip_bad=True)
    assert [(u.utt_id, u.label, u.speaker) for u in utts] == [("0", 0, "Alec Guinness"), ("1", 1, "Alec Guinness")]


def test_label_words():
    assert {parse_label(w) for w in ("bonafide", "Bona-Fide", "genuine", "1", "real")} == {1}
    assert {parse_label(w) for w in ("spoof", "FAKE", "0", "deepfake")} == {0}


# ------------------------------------------------------- crops and batches
def test_fit_length_crops_and_pads():
    wave = np.arange(10, dtype=np.float32)
    assert fit_length(wave, 4).tolist() == [0, 1, 2, 3]
    crops = {tuple(fit_length(wave, 4, rng=np.random.default_rng(s))) for s in range(30)}
    assert len(crops) > 3 and all(list(c) == list(range(int(c[0]), int(c[0]) + 4)) for c in crops)
    assert fit_length(wave[:3], 7).tolist() == [0, 1, 2, 0, 1, 2, 0]
    assert fit_length(wave[:3], 5, padding="zeros").tolist() == [0, 1, 2, 0, 0]
    with pytest.raises(ValueError, match="at least 1"):
        fit_length(wave, 0)


def test_windows_cover_every_sample():
    wave = np.arange(10, dtype=np.float32)
    w = windows(wave, 4)
    assert w.tolist() == [[0, 1, 2, 3], [4, 5, 6, 7], [6, 7, 8, 9]]
    assert windows(wave, 4, 3).shape == (3, 4)
    assert windows(wave[:2], 4).tolist() == [[0, 1, 0, 1]]


def test_pad_batch_gives_lengths_and_masks():
    x, length, mask = pad_batch([np.ones(3, np.float32), np.ones(5, np.float32)])
    assert x.shape == (2, 5) and length.tolist() == [3, 5]
    assert mask.tolist() == [[True] * 3 + [False] * 2, [True] * 5]
    assert x[0, 3:].abs().sum() == 0


# ------------------------------------------------------------------ dataset
def _utterances(tmp_path, n=4, seconds=(0.3, 0.5, 0.8, 1.2)):
    utts = []
    for i in range(n):
        path = write(tmp_path / f"u{i}.wav", tone(seconds[i % len(seconds)], freq=200 + 50 * i))
        utts.append(Utterance(f"u{i}", path, i % 2, "-" if i % 2 else f"A0{i}", "spk", f"list:{i + 1}"))
    return utts


def test_audio_dataset_training_crops_are_seeded_by_epoch_and_index(tmp_path):
    utts = _utterances(tmp_path)
    settings = AudioSettings(seconds=0.25)
    ds = AudioDataset(utts, settings, train=True, seed=3)
    batch = ds.__getitems__([0, 3])
    assert batch["input"].shape == (2, 4000) and batch["label"].tolist() == [0, 1] and batch["index"].tolist() == [0, 3]
    again = AudioDataset(utts, settings, train=True, seed=3).__getitems__([3, 0])
    assert torch.equal(again["input"][0], batch["input"][1])  # order of loading does not matter
    ds.set_epoch(1)
    assert not torch.equal(ds.__getitems__([3])["input"][0], batch["input"][1])  # a new crop each epoch
    assert ds[2]["input"].shape == (4000,) and int(ds[2]["label"]) == 0


def test_audio_dataset_evaluation_modes(tmp_path):
    utts = _utterances(tmp_path)
    fixed = AudioDataset(utts, AudioSettings(seconds=0.5), train=False)
    assert fixed.__getitems__([0, 1])["input"].shape == (2, 8000)
    full = AudioDataset(utts, AudioSettings(eval_mode="full"), train=False).__getitems__([0, 3])
    assert full["input"].shape == (2, 19200) and full["length"].tolist() == [4800, 19200]
    assert full["mask"].sum(dim=1).tolist() == [4800, 19200]
    from modforge.data.loader import LoaderSettings, make_loader

    whole = AudioDataset(utts, AudioSettings(eval_mode="full"), train=False)
    assert whole.pads_batches and not AudioDataset(utts, AudioSettings(), train=False).pads_batches
    assert make_loader(whole, LoaderSettings(batch_size=8), train=False).batch_sampler.batch_size == 1  # unpadded
    chosen = make_loader(whole, LoaderSettings(batch_size=8, eval_batch_size=4), train=False)
    assert chosen.batch_sampler.batch_size == 4  # the user's choice stands
    win = AudioDataset(utts, AudioSettings(seconds=0.5, eval_mode="windows"), train=False).__getitems__([1, 3])
    assert win["input"].shape == (4, 8000)  # 0.5 s → 1 window; 1.2 s → 3 windows (the last ends at the end)
    assert win["index"].tolist() == [1, 3, 3, 3] and win["label"].tolist() == [1, 1, 1, 1]
    assert win["file_windows"].tolist() == [1, 3, 3, 3]  # marks the rows as windows of their file


def test_audio_dataset_augments_training_files_only(tmp_path):
    utts = _utterances(tmp_path)
    calls = []

    def augment(wave, rng):
        calls.append(len(wave))
        return wave * 0.0

    train = AudioDataset(utts, AudioSettings(seconds=0.1), train=True, augment=augment)
    assert train.__getitems__([0])["input"].abs().sum() == 0 and calls
    evaluation = AudioDataset(utts, AudioSettings(seconds=0.1), train=False, augment=None)
    assert evaluation.__getitems__([0])["input"].abs().sum() > 0


def test_unreadable_file_names_the_protocol_line(tmp_path):
    utts = _utterances(tmp_path)
    utts[1].path.write_bytes(b"garbage")
    ds = AudioDataset(utts, AudioSettings(), train=False)
    with pytest.raises(AudioReadError, match=r"list:2: cannot read audio file .*u1.wav"):
        ds.__getitems__([1])


def test_audio_settings_errors_are_located():
    with pytest.raises(mf.ConfigError, match=r"data.args.audio.seconds: expected float"):
        audio_settings({"seconds": "long"})
    with pytest.raises(mf.ConfigError, match=r"data.args.audio.secs: unknown argument 'secs'; did you mean 'seconds'"):
        audio_settings({"secs": 2})
    with pytest.raises(ValueError, match="seconds must be positive"):
        audio_settings({"seconds": 0})


# ------------------------------------------------------- registered formats
def _mini_asvspoof(root, rows, split_dir="ASVspoof2019_LA_train/flac"):
    proto = root / "ASVspoof2019_LA_cm_protocols" / "ASVspoof2019.LA.cm.train.trn.txt"
    proto.parent.mkdir(parents=True)
    proto.write_text("".join(f"SPK {utt} - {attack} {key}\n" for utt, attack, key in rows))
    for i, (utt, _, _) in enumerate(rows):
        write(root / split_dir / f"{utt}.flac", tone(0.4, freq=300 + 40 * i))
    return proto


def test_asvspoof2019_dataset(tmp_path):
    _mini_asvspoof(tmp_path, [("LA_T_1", "-", "bonafide"), ("LA_T_2", "A01", "spoof")])
    splits = mf.DATASETS.build(
        {"type": "asvspoof2019", "args": {"root": str(tmp_path), "dev_protocol": None, "eval_protocol": None,
                                          "audio": {"seconds": 0.25}}},
        path="data",
    )
    assert len(splits.train) == 2 and splits.val is None and splits.test is None
    assert splits.class_names == ["spoof", "bonafide"] and splits.sample_rate == 16000 and splits.task == "spoofing"
    assert splits.input_shape == (4000,) and splits.layout.value == "waveform"


def test_missing_audio_fails_before_training_or_is_skipped(tmp_path):
    proto = _mini_asvspoof(tmp_path, [("LA_T_1", "-", "bonafide"), ("LA_T_2", "A01", "spoof")])
    with proto.open("a") as handle:
        handle.write("SPK LA_T_9 - A02 spoof\n")
    args = {"root": str(tmp_path), "dev_protocol": None, "eval_protocol": None}
    with pytest.raises(AudioReadError, match=r"trn.txt:3: audio file not found: .*LA_T_9.flac"):
        mf.DATASETS.build({"type": "asvspoof2019", "args": args}, path="data")
    splits = mf.DATASETS.build({"type": "asvspoof2019", "args": {**args, "skip_bad": True}}, path="data")
    assert [u.utt_id for u in splits.train.utterances] == ["LA_T_1", "LA_T_2"]


def test_spoof_corpus_needs_a_finished_corpus(tmp_path):
    with pytest.raises(UsageError, match="not a finished spoofing corpus .*make-spoof-corpus"):
        mf.DATASETS.build({"type": "spoof_corpus", "args": {"root": str(tmp_path)}}, path="data")


def test_in_the_wild_splits_by_speaker(tmp_path):
    rows = ["file,speaker,label"]
    for i in range(12):
        write(tmp_path / f"{i}.wav", tone(0.2))
        rows.append(f"{i}.wav,spk{i % 6},{'spoof' if i % 3 else 'bona-fide'}")
    (tmp_path / "meta.csv").write_text("\n".join(rows) + "\n")
    everything = mf.DATASETS.build({"type": "in_the_wild", "args": {"meta": str(tmp_path / "meta.csv")}}, path="data")
    assert len(everything.train) == 0 and len(everything.test) == 12
    split = mf.DATASETS.build(
        {"type": "in_the_wild", "args": {"meta": str(tmp_path / "meta.csv"), "val_fraction": 0.2,
                                         "test_fraction": 0.4}},
        path="data",
    )
    speakers = [{u.speaker for u in s.utterances} for s in (split.train, split.val, split.test)]
    assert not (speakers[0] & speakers[1]) and not (speakers[0] & speakers[2]) and not (speakers[1] & speakers[2])
    assert sum(len(s) for s in (split.train, split.val, split.test)) == 12


def test_audio_manifest_dataset_with_augmentation(tmp_path):
    for i in range(4):
        write(tmp_path / "wav" / f"{i}.wav", tone(0.3, freq=250 + 30 * i))
    (tmp_path / "train.csv").write_text("path,label\n" + "".join(f"wav/{i}.wav,{i % 2}\n" for i in range(4)))
    spec = {
        "type": "audio_manifest",
        "args": {"train": str(tmp_path / "train.csv"), "audio": {"seconds": 0.2},
                 "augment": [{"type": "gain", "args": {"min_db": -3, "max_db": 3}, "p": 0.5}]},
    }
    splits = mf.DATASETS.build(spec, path="data")
    assert splits.train.augment is not None and len(splits.train.augment) == 1
    spec["args"]["augment"] = [{"type": "gian"}]
    with pytest.raises(mf.ConfigError, match=r"data.args.augment.0.type: no augmentation named 'gian'"):
        mf.DATASETS.build(spec, path="data")
