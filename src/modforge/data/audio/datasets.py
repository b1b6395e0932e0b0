"""Registered spoofing datasets: ASVspoof 2019, ASVspoof 5, CSV/Parquet manifests,
In-the-Wild and modforge's synthetic corpus.

Each returns :class:`~modforge.data.base.DataSplits` of :class:`AudioDataset` splits
(train / val = the challenge's dev / test = its eval), two classes (0 spoof, 1 bona fide),
waveform inputs at ``audio.sample_rate``. Every audio file is checked (exists, readable
header) when the dataset is built, so a bad list fails before training with the protocol
line named; ``skip_bad: true`` counts and logs what it leaves out instead. Relative paths
are taken from the working directory (``root`` for the challenge layouts).
"""

from __future__ import annotations

import dataclasses
import json
import logging
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any, Optional

from ...core.errors import UsageError
from ...core.layouts import Layout
from ...core.registries import register_dataset
from ...core.safe_files import folder_below
from ..base import DataSplits
from .dataset import AudioDataset, audio_settings, check_files
from .protocols import (
    KeyedUtterance,
    ParseReport,
    ProtocolError,
    Utterance,
    _lines,
    read_asvspoof5,
    read_asvspoof2019,
    read_in_the_wild,
    read_manifest,
)

__all__ = [
    "CLASS_NAMES",
    "SPLITS",
    "challenge_dataset",
    "challenge_lists",
    "config_path",
    "spoofing_splits",
]

log = logging.getLogger("modforge.data")
CLASS_NAMES = ["spoof", "bonafide"]


def spoofing_splits(
    lists: dict[str, list[Utterance] | None],
    *,
    audio: dict[str, Any] | None,
    augment: list[Any] | None,
    seed: int,
    report: ParseReport,
    skip_bad: bool,
    name: str,
) -> DataSplits:
    """DataSplits from per-split utterance lists (``train``, ``val``, ``test``; None: no such split)."""
    settings = audio_settings(audio)
    pipeline = None
    if augment:
        from .augment import build_augmentations

        pipeline = build_augmentations(augment, settings.sample_rate, path="data.args.augment")
    splits: dict[str, AudioDataset | None] = {}
    for split, utterances in lists.items():
        if utterances is None and split != "train":
            splits[split] = None
            continue
        utterances = utterances or []  # no training list: an evaluation-only dataset
        kept = check_files(utterances, skip_bad=skip_bad, report=report, header=settings.verify == "header")
        if utterances and not kept:
            raise UsageError(f"{name}: no usable audio file in the {split} split ({report})")
        train = split == "train"
        splits[split] = AudioDataset(kept, settings, train=train, seed=seed, augment=pipeline if train else None)
    trained_on = splits["train"]
    if trained_on is not None and len(trained_on):  # what "unseen" means for the evaluation splits
        seen = frozenset(u.attack for u in trained_on.utterances if u.label == 0)
        for split in ("val", "test"):
            if splits.get(split) is not None:
                splits[split].seen_attacks = seen
    if report.skipped:
        log.warning("%s: %s", name, report)
    return DataSplits(
        splits["train"],
        splits.get("val"),
        splits.get("test"),
        num_classes=2,
        in_dim=1,
        layout=Layout.WAVEFORM,
        input_shape=(settings.samples,),
        class_names=list(CLASS_NAMES),
        normalisation={  # how `modforge predict` turns an audio file into the input `modforge test` gives
            "sample_rate": settings.sample_rate, "mono": True, "range": "[-1, 1] float",
            "seconds": settings.seconds, "eval_mode": settings.eval_mode, "padding": settings.padding,
            "window_hop": settings.window_hop,
        },
        sample_rate=settings.sample_rate,
        task="spoofing",
    )


SPLITS = ("train", "val", "test")
"""The splits a dataset gives, in the order the challenge layouts list their protocols (train / dev / eval)."""


def challenge_lists(
    reader: Callable[..., list[Utterance]], root: str, protocols: dict[str, Optional[str]],
    audio_dirs: dict[str, str], ext: str, skip_bad: bool, report: ParseReport,
) -> dict[str, list[Utterance] | None]:
    """Per split, the utterances ``reader`` reads from its protocol file over its audio folder, both named
    below ``root`` (:func:`config_path`); a split whose protocol is None is None."""
    base = Path(root)
    if not base.is_dir():
        raise UsageError(f"dataset root not found: {base}")
    return {
        split: (
            None if protocol is None
            else reader(config_path(base, protocol, f"{split} protocol"),
                        config_path(base, audio_dirs[split], f"{split} audio"),
                        ext=ext, skip_bad=skip_bad, report=report)
        )
        for split, protocol in protocols.items()
    }  # fmt: skip


def challenge_dataset(
    name: str, reader: Callable[..., list[Utterance]], root: str, protocols: Sequence[Optional[str]],
    audio_dirs: Sequence[str], ext: str, *, audio: dict[str, Any] | None, augment: list[Any] | None,
    skip_bad: bool, seed: int,
) -> DataSplits:
    """The splits of a challenge release: one protocol and one audio folder per split (train, dev as val,
    eval as test), read by ``reader`` below ``root``."""
    report = ParseReport()
    lists = challenge_lists(reader, root, dict(zip(SPLITS, protocols, strict=True)),
                            dict(zip(SPLITS, audio_dirs, strict=True)), ext, skip_bad, report)
    return spoofing_splits(lists, audio=audio, augment=augment, seed=seed, report=report, skip_bad=skip_bad, name=name)


def config_path(root: Path, name: str | Path, what: str) -> Path:
    """A protocol file or audio folder the config names: an absolute path as given (the user's own
    choice), a relative one below ``root`` resolving inside it — a link planted below a shared
    dataset root that leads out is refused (:func:`~modforge.core.safe_files.folder_below`)."""
    return Path(name) if Path(name).is_absolute() else folder_below(root, str(name), what)


@register_dataset("asvspoof2019")
def asvspoof2019(
    root: str,
    train_protocol: Optional[str] = "ASVspoof2019_LA_cm_protocols/ASVspoof2019.LA.cm.train.trn.txt",
    dev_protocol: Optional[str] = "ASVspoof2019_LA_cm_protocols/ASVspoof2019.LA.cm.dev.trl.txt",
    eval_protocol: Optional[str] = "ASVspoof2019_LA_cm_protocols/ASVspoof2019.LA.cm.eval.trl.txt",
    train_audio: str = "ASVspoof2019_LA_train/flac",
    dev_audio: str = "ASVspoof2019_LA_dev/flac",
    eval_audio: str = "ASVspoof2019_LA_eval/flac",
    ext: str = "flac",
    audio: Optional[dict] = None,
    augment: Optional[list] = None,
    skip_bad: bool = False,
    seed: int = 0,
) -> DataSplits:
    """ASVspoof 2019 (LA or PA): train / dev / eval countermeasure protocols
    (``speaker utt - attack key``) over folders of audio files, the official layout by default.

    Args:
        root: the LA (or PA) folder of the release.
        train_protocol: training protocol, relative to root (None: evaluation only).
        dev_protocol: development protocol (the validation split), or None.
        eval_protocol: evaluation protocol (the test split), or None.
        train_audio: folder of the training audio, relative to root.
        dev_audio: folder of the development audio.
        eval_audio: folder of the evaluation audio.
        ext: audio file suffix.
        audio: how files become inputs: sample_rate, seconds, eval_mode (fixed/full/windows),
            window_hop, padding (repeat/zeros), random_crop, cache.
        augment: training augmentations, each {type, args, p} (see `modforge list augmentation`).
        skip_bad: skip malformed lines and missing/unreadable files (counted and logged) instead of failing.
        seed: seeds crops and augmentation (wired from the config's seed).
    """
    return challenge_dataset("asvspoof2019", read_asvspoof2019, root, (train_protocol, dev_protocol, eval_protocol),
                             (train_audio, dev_audio, eval_audio), ext, audio=audio, augment=augment,
                             skip_bad=skip_bad, seed=seed)  # fmt: skip


@register_dataset("asvspoof5")
def asvspoof5(
    root: str,
    train_protocol: Optional[str] = "ASVspoof5_protocols/ASVspoof5.train.tsv",
    dev_protocol: Optional[str] = "ASVspoof5_protocols/ASVspoof5.dev.track_1.tsv",
    eval_protocol: Optional[str] = "ASVspoof5_protocols/ASVspoof5.eval.track_1.tsv",
    train_audio: str = "flac_T",
    dev_audio: str = "flac_D",
    eval_audio: str = "flac_E_eval",
    ext: str = "flac",
    audio: Optional[dict] = None,
    augment: Optional[list] = None,
    skip_bad: bool = False,
    seed: int = 0,
) -> DataSplits:
    """ASVspoof 5 track 1: protocols of ten whitespace-separated fields (speaker, file,
    gender, codec, codec quality, codec seed, attack tag, attack label, key, unused).

    Args:
        root: the release folder.
        train_protocol: training protocol, relative to root (None: evaluation only).
        dev_protocol: development protocol (the validation split), or None.
        eval_protocol: evaluation protocol (the test split), or None.
        train_audio: folder of the training audio, relative to root.
        dev_audio: folder of the development audio.
        eval_audio: folder of the evaluation audio.
        ext: audio file suffix.
        audio: how files become inputs (see asvspoof2019).
        augment: training augmentations, each {type, args, p}.
        skip_bad: skip malformed lines and missing/unreadable files instead of failing.
        seed: seeds crops and augmentation (wired from the config's seed).
    """
    return challenge_dataset("asvspoof5", read_asvspoof5, root, (train_protocol, dev_protocol, eval_protocol),
                             (train_audio, dev_audio, eval_audio), ext, audio=audio, augment=augment,
                             skip_bad=skip_bad, seed=seed)  # fmt: skip


@register_dataset("spoof_corpus")
def spoof_corpus(
    root: str,
    audio: Optional[dict] = None,
    augment: Optional[list] = None,
    skip_bad: bool = False,
    seed: int = 0,
) -> DataSplits:
    """modforge's synthetic spoofing corpus (``modforge data make-spoof-corpus OUT``):
    ``protocols/{train,dev,eval}.txt`` in the ASVspoof 2019 format over ``wav/``; the eval
    split holds attacks never seen in training.

    Args:
        root: the corpus folder (OUT of make-spoof-corpus).
        audio: how files become inputs (see asvspoof2019).
        augment: training augmentations, each {type, args, p}.
        skip_bad: skip malformed lines and missing/unreadable files instead of failing.
        seed: seeds crops and augmentation (wired from the config's seed).
    """
    report = ParseReport()
    if not (Path(root) / "meta.json").is_file():
        raise UsageError(
            f"{root} is not a finished spoofing corpus (no meta.json); make one with "
            f"'modforge data make-spoof-corpus {root}'"
        )
    lists = challenge_lists(
        read_asvspoof2019, root,
        {"train": "protocols/train.txt", "val": "protocols/dev.txt", "test": "protocols/eval.txt"},
        {"train": "wav", "val": "wav", "test": "wav"}, "wav", skip_bad, report,
    )
    channels = _corpus_channels(Path(root))
    if channels is not None:  # the test reports EER per attack × transmission condition
        lists["test"] = [
            KeyedUtterance(**{f.name: getattr(u, f.name) for f in dataclasses.fields(u)},
                           conditions={"attack": u.attack, "channel": channels.get(u.utt_id, "none")})
            for u in lists["test"]
        ]  # fmt: skip
    splits = spoofing_splits(lists, audio=audio, augment=augment, seed=seed, report=report, skip_bad=skip_bad,
                             name="spoof_corpus")
    if channels is not None and splits.test is not None:  # the layout the spoofing task's report takes
        attacks = sorted({u.attack for u in splits.test.utterances if u.label == 0})
        splits.test.condition_track = {
            "name": "spoof_corpus", "attacks": attacks, "column": "channel",
            "values": list(dict.fromkeys(channels.values())),
        }  # fmt: skip
    return splits


def _corpus_channels(root: Path) -> dict[str, str] | None:
    """``{utt_id: channel}`` of a corpus's ``protocols/eval_channels.txt`` (None when it has none),
    conditions in the order meta.json lists them."""
    from .spoof_corpus import CHANNELS_FILE

    path = folder_below(root, f"protocols/{CHANNELS_FILE}", "transmission channels")
    if not path.is_file():
        return None
    out: dict[str, str] = {}
    for number, fields in _lines(path):
        if len(fields) != 2:
            raise ProtocolError(f"{path}:{number}: expected '<utt_id> <channel>', got {' '.join(fields)!r}")
        out[fields[0]] = fields[1]
    try:
        order = list(json.loads((root / "meta.json").read_text(encoding="utf-8")).get("eval_channels", {}))
    except (OSError, ValueError, AttributeError):
        order = []
    rank = {name: i for i, name in enumerate(order)}
    return dict(sorted(out.items(), key=lambda item: rank.get(item[1], len(rank))))


@register_dataset("audio_manifest")
def audio_manifest(
    train: Optional[str],
    val: Optional[str] = None,
    test: Optional[str] = None,
    audio_root: Optional[str] = None,
    audio: Optional[dict] = None,
    augment: Optional[list] = None,
    skip_bad: bool = False,
    seed: int = 0,
) -> DataSplits:
    """CSV or Parquet manifests, one per split, with columns ``path`` and ``label``
    (bonafide/spoof or 1/0) and optionally ``id``, ``attack``, ``speaker`` — DeepFense's format.

    Args:
        train: the training manifest (null: evaluation only).
        val: the validation manifest, or None.
        test: the test manifest, or None.
        audio_root: folder relative audio paths start from (default: each manifest's folder).
        audio: how files become inputs (see asvspoof2019).
        augment: training augmentations, each {type, args, p}.
        skip_bad: skip malformed rows and missing/unreadable files instead of failing.
        seed: seeds crops and augmentation (wired from the config's seed).
    """
    report = ParseReport()
    lists = {
        split: None if path is None else read_manifest(path, audio_root=audio_root, skip_bad=skip_bad, report=report)
        for split, path in (("train", train), ("val", val), ("test", test))
    }
    return spoofing_splits(lists, audio=audio, augment=augment, seed=seed, report=report, skip_bad=skip_bad,
                           name="audio_manifest")


@register_dataset("in_the_wild")
def in_the_wild(
    meta: str,
    audio_dir: Optional[str] = None,
    val_fraction: float = 0.0,
    test_fraction: float = 1.0,
    audio: Optional[dict] = None,
    augment: Optional[list] = None,
    skip_bad: bool = False,
    seed: int = 0,
) -> DataSplits:
    """In-the-Wild (Müller et al., 2022): ``meta.csv`` with ``file,speaker,label``. Usually an
    evaluation-only set (the default puts every file in the test split: train elsewhere and
    ``modforge test RUN data.type=in_the_wild data.args.meta=...``); give fractions to train
    on it, split by speaker so no speaker is on both sides.

    Args:
        meta: the meta.csv file.
        audio_dir: folder of the audio files (default: meta.csv's folder).
        val_fraction: share of speakers held out for validation.
        test_fraction: share of speakers held out for testing (1.0: everything is test data).
        audio: how files become inputs (see asvspoof2019).
        augment: training augmentations, each {type, args, p}.
        skip_bad: skip malformed rows and missing/unreadable files instead of failing.
        seed: seeds the speaker split, crops and augmentation (wired from the config's seed).
    """
    for name, value in (("val_fraction", val_fraction), ("test_fraction", test_fraction)):
        if not 0.0 <= value <= 1.0:
            raise ValueError(f"{name} must be in [0, 1], got {value}")
    if val_fraction + test_fraction > 1.0:
        raise ValueError(f"val_fraction + test_fraction must be at most 1, got {val_fraction + test_fraction}")
    report = ParseReport()
    utterances = read_in_the_wild(meta, audio_dir=audio_dir, skip_bad=skip_bad, report=report)
    lists = _speaker_split(utterances, val_fraction, test_fraction, seed)  # train may be empty: evaluation only
    return spoofing_splits(lists, audio=audio, augment=augment, seed=seed, report=report, skip_bad=skip_bad,
                           name="in_the_wild")


def _speaker_split(
    utterances: list[Utterance], val_fraction: float, test_fraction: float, seed: int
) -> dict[str, list[Utterance] | None]:
    """Speaker-disjoint train/val/test lists (a split with fraction 0 is None)."""
    import numpy as np

    speakers = sorted({u.speaker for u in utterances})
    order = np.random.default_rng(seed % (1 << 64)).permutation(len(speakers))
    n_test = round(test_fraction * len(speakers))
    n_val = min(len(speakers) - n_test, round(val_fraction * len(speakers)))
    test_set = {speakers[i] for i in order[:n_test]}
    val_set = {speakers[i] for i in order[n_test : n_test + n_val]}
    return {
        "train": [u for u in utterances if u.speaker not in test_set and u.speaker not in val_set],
        "val": [u for u in utterances if u.speaker in val_set] if val_fraction > 0 else None,
        "test": [u for u in utterances if u.speaker in test_set] if test_fraction > 0 else None,
    }
