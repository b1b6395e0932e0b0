"""ASVspoof 2021 LA and DF: the evaluation trials of the official key release, with their conditions.

The 2021 release has no training data of its own: systems train on ASVspoof 2019 LA
train/dev, which this dataset reads (through :func:`.datasets.asvspoof2019`'s reader) from
``train_root``; its test split is the 2021 evaluation set. The keys come from the full key
release (``LA-keys-full.tar.gz`` / ``DF-keys-full.tar.gz`` → ``keys/LA/CM/trial_metadata.txt``),
one trial a line:

========  =====================================================================================
track     fields (whitespace separated)
========  =====================================================================================
LA        ``speaker trial codec transmission attack key trim subset``
          (``LA_0009 LA_E_9332881 alaw ita_tx A07 spoof notrim eval``)
DF        ``speaker trial codec source attack key trim subset vocoder [task team gender_pair
          language]`` (``LA_0023 DF_E_2000011 nocodec asvspoof A14 spoof notrim progress
          traditional_vocoder - - - -``)
========  =====================================================================================

Every trial keeps these columns (:attr:`Trial2021.conditions`), so the test report can give
the organisers' per-condition and per-subset tables (:mod:`modforge.tasks.spoofing.conditions`).
For LA's min t-DCF the release's ASV trials are read too: ``keys/LA/ASV/trial_metadata.txt``
(same eight fields, key ``target``/``nontarget``/``spoof``) and the organisers' ASV scores
``keys/LA/ASV/ASVTorch_Kaldi/score.txt`` (``speaker trial score``, line for line), as the
eval-package pairs them.

Audio: ``ASVspoof2021_LA_eval/flac/<trial>.flac``; DF ships in four archives that all extract
into ``ASVspoof2021_DF_eval/flac`` — or, kept apart, ``ASVspoof2021_DF_eval_part0{0..3}/
ASVspoof2021_DF_eval/flac``: every listed folder is searched. A trial id from the keys must
name a file inside its folder (:func:`modforge.core.safe_files.inside`).
"""

from __future__ import annotations

import dataclasses
import logging
from collections.abc import Sequence
from pathlib import Path
from typing import Optional, Union

import numpy as np

from ...core.errors import UsageError
from ...core.registries import register_dataset
from ...core.safe_files import UnsafePathError, inside, relative_name
from ...core.text_safety import MAX_QUOTED, quoted
from ..base import DataSplits
from .datasets import challenge_lists, config_path, spoofing_splits
from .protocols import BONAFIDE, KeyedUtterance, ParseReport, ProtocolError, _collect, _lines, _need, parse_label
from .protocols import read_asvspoof2019 as _read_2019

__all__ = ["AsvTrials", "KEY_COLUMNS", "Trial2021", "read_asv_trials_2021", "read_asvspoof2021"]

log = logging.getLogger("modforge.data")

KEY_COLUMNS = {
    "LA": ("speaker", "trial", "codec", "transmission", "attack", "key", "trim", "subset"),
    "DF": ("speaker", "trial", "codec", "source", "attack", "key", "trim", "subset", "vocoder",
           "task", "team", "gender_pair", "language"),
}  # fmt: skip
"""The key file's columns per track (the eval-package's ``p_names``, spelled out)."""
_REQUIRED = {"LA": 8, "DF": 9}
SUBSETS = ("eval", "progress", "hidden")
_DEFAULT_AUDIO = {
    "LA": ["ASVspoof2021_LA_eval/flac"],
    "DF": ["ASVspoof2021_DF_eval/flac"] + [f"ASVspoof2021_DF_eval_part{i:02d}/ASVspoof2021_DF_eval/flac" for i in range(4)],
}
_ASV_METADATA = "LA/ASV/trial_metadata.txt"
_ASV_SCORES = "LA/ASV/ASVTorch_Kaldi/score.txt"


@dataclasses.dataclass(frozen=True)
class Trial2021(KeyedUtterance):
    """A :class:`.protocols.KeyedUtterance` whose key columns are the 2021 keys' (``codec``,
    ``transmission``/``source``, ``attack``, ``trim``, ``subset``, DF's ``vocoder``…)."""


@dataclasses.dataclass
class AsvTrials:
    """The release's ASV trials (LA): score, key (``target``/``nontarget``/``spoof``) and key columns."""

    scores: np.ndarray
    labels: list[str]
    columns: dict[str, list[str]]


def _track(track: str) -> str:
    upper = str(track).upper()
    if upper not in KEY_COLUMNS:
        raise UsageError(f"asvspoof2021: track must be la or df, got {track!r}")
    return upper


def _find_audio(dirs: Sequence[Path], utt: str, ext: str) -> Path:
    """The first folder's ``<utt>.<ext>`` that exists (else the first folder's, for the
    missing-file error); the name must stay inside its folder, links included."""
    name = f"{utt}.{ext}" if ext else utt
    what = f"trial {quoted(utt)}"
    try:
        relative_name(name, what)
        chosen = next((d for d in dirs if (d / name).is_file()), dirs[0]) if len(dirs) > 1 else dirs[0]
        return inside(chosen, name, what)
    except UnsafePathError as exc:
        raise ValueError(str(exc)) from None


def read_asvspoof2021(
    keys: str | Path, audio_dirs: Sequence[str | Path], track: str, *, ext: str = "flac",
    subset: Optional[str] = None, skip_bad: bool = False, report: ParseReport | None = None,
) -> list[Trial2021]:
    """The trials of a 2021 ``trial_metadata.txt`` (LA or DF layout), optionally of one subset.
    A malformed line raises :class:`~.protocols.ProtocolError` naming the file and line."""
    track, keys = _track(track), Path(keys)
    dirs = [Path(d) for d in audio_dirs]
    dirs = [d for d in dirs if d.is_dir()] or dirs[:1]  # absent part folders are not searched
    names, need = KEY_COLUMNS[track], _REQUIRED[track]
    if subset is not None and subset not in SUBSETS:
        raise UsageError(f"asvspoof2021: subset must be one of {', '.join(SUBSETS)} or null, got {subset!r}")

    def parse(fields: list[str], where: str) -> Trial2021:
        _need(fields, need, " ".join(names[:need]))
        columns = dict(zip(names, fields, strict=False))
        if columns["subset"] not in SUBSETS:
            raise ValueError(f"subset {quoted(columns['subset'])} is not one of {', '.join(SUBSETS)}")
        label = parse_label(columns["key"])
        attack = "-" if label == BONAFIDE else columns["attack"]
        kept = {k: v for k, v in columns.items() if k not in ("speaker", "trial", "key")}
        utt = columns["trial"]
        return Trial2021(utt, _find_audio(dirs, utt, ext), label, attack, columns["speaker"], where, conditions=kept)

    lines = _lines(keys)
    if subset is not None:  # a line of another subset is left out before it is parsed
        lines = ((n, f) for n, f in lines if not (len(f) >= need and f[7] != subset))
    return _collect(keys, lines, parse, skip_bad, report)


def read_asv_trials_2021(metadata: str | Path, scores: str | Path) -> AsvTrials:
    """LA's ASV trials: ``metadata`` (eight fields, key target/nontarget/spoof) and ``scores``
    (``speaker trial score``), paired line by line as the eval-package pairs them; a line
    that does not pair (other trial, bad score, missing line) is a ``ProtocolError``."""
    metadata, scores = Path(metadata), Path(scores)
    names = KEY_COLUMNS["LA"]
    rows = list(_lines(metadata))
    score_rows = list(_lines(scores))
    if len(rows) != len(score_rows):
        raise ProtocolError(f"{scores}: {len(score_rows)} ASV scores for the {len(rows)} trials of {metadata}")
    values, labels = np.empty(len(rows), dtype=np.float64), []
    columns: dict[str, list[str]] = {k: [] for k in names if k not in ("speaker", "trial", "key")}
    for i, ((number, fields), (s_number, s_fields)) in enumerate(zip(rows, score_rows, strict=True)):
        if len(fields) < 8 or fields[5] not in ("target", "nontarget", "spoof"):
            raise ProtocolError(f"{metadata}:{number}: expected '{' '.join(names)}' with key "
                                f"target/nontarget/spoof, got {quoted(' '.join(fields))}")
        if len(s_fields) != 3 or s_fields[1] != fields[1]:
            raise ProtocolError(f"{scores}:{s_number}: expected 'speaker {fields[1][:MAX_QUOTED]} score' "
                                f"(pairs with {metadata}:{number}), got {quoted(' '.join(s_fields))}")
        try:
            values[i] = float(s_fields[2])
        except ValueError:
            raise ProtocolError(f"{scores}:{s_number}: score {quoted(s_fields[2])} is not a number") from None
        labels.append(fields[5])
        for key in columns:
            columns[key].append(fields[names.index(key)])
    return AsvTrials(values, labels, columns)


def _under(base: Path, name: Union[str, Path]) -> Path:
    """``name`` as the config gives it (as a path: ``keys/`` is ``keys``), below ``base`` (:func:`.datasets.config_path`)."""
    return config_path(base, Path(name), "asvspoof2021")


@register_dataset("asvspoof2021")
def asvspoof2021(
    root: str,
    track: str = "la",
    keys: Optional[str] = None,
    subset: Optional[str] = None,
    eval_audio: Optional[Union[str, list]] = None,
    asv_metadata: Optional[str] = _ASV_METADATA,
    asv_scores: Optional[str] = _ASV_SCORES,
    train_root: Optional[str] = None,
    train_protocol: Optional[str] = "ASVspoof2019_LA_cm_protocols/ASVspoof2019.LA.cm.train.trn.txt",
    dev_protocol: Optional[str] = "ASVspoof2019_LA_cm_protocols/ASVspoof2019.LA.cm.dev.trl.txt",
    train_audio: str = "ASVspoof2019_LA_train/flac",
    dev_audio: str = "ASVspoof2019_LA_dev/flac",
    ext: str = "flac",
    audio: Optional[dict] = None,
    augment: Optional[list] = None,
    skip_bad: bool = False,
    seed: int = 0,
) -> DataSplits:
    """ASVspoof 2021 LA or DF: the test split is the 2021 evaluation set from the official
    keys (codec, transmission/source, attack, trim, subset and DF's vocoder kept per trial,
    for the per-condition report); train/val are ASVspoof 2019 LA train/dev from ``train_root``.

    Args:
        root: the folder holding ASVspoof2021_LA_eval (or the DF folders).
        track: la or df.
        keys: the key release's ``keys`` folder (holding LA/CM/trial_metadata.txt), or the
            trial_metadata.txt itself; relative to root (default: root/keys).
        subset: only the trials of this subset (eval, progress, hidden); null: all three.
        eval_audio: folder(s) of the 2021 audio, relative to root (default: the official names;
            DF's four part folders are searched too).
        asv_metadata: LA's ASV trial_metadata.txt, relative to keys (null: no min t-DCF).
        asv_scores: LA's ASV score file, relative to keys (null: no min t-DCF).
        train_root: the ASVspoof 2019 LA folder for train/dev (null: evaluation only).
        train_protocol: 2019 training protocol, relative to train_root.
        dev_protocol: 2019 development protocol (the validation split), or None.
        train_audio: 2019 training audio folder, relative to train_root.
        dev_audio: 2019 development audio folder.
        ext: audio file suffix.
        audio: how files become inputs (see asvspoof2019).
        augment: training augmentations, each {type, args, p}.
        skip_bad: skip malformed lines and missing/unreadable files (counted and logged) instead of failing.
        seed: seeds crops and augmentation (wired from the config's seed).
    """
    upper = _track(track)
    base = Path(root)
    if not base.is_dir():
        raise UsageError(f"dataset root not found: {base}")
    key_path = _under(base, keys if keys is not None else "keys")
    key_dir = key_path
    if key_path.is_dir():
        key_path = _under(key_path, f"{upper}/CM/trial_metadata.txt")
    else:
        key_dir = key_path.parent.parent.parent  # keys/LA/CM/trial_metadata.txt → keys
    dirs = eval_audio if eval_audio is not None else _DEFAULT_AUDIO[upper]
    dirs = [dirs] if isinstance(dirs, (str, Path)) else list(dirs)
    report = ParseReport()
    lists = (
        challenge_lists(_read_2019, train_root, {"train": train_protocol, "val": dev_protocol},
                   {"train": train_audio, "val": dev_audio}, ext, skip_bad, report)
        if train_root is not None else {"train": None, "val": None}
    )  # fmt: skip
    lists["test"] = read_asvspoof2021(key_path, [_under(base, d) for d in dirs], upper, ext=ext, subset=subset,
                                      skip_bad=skip_bad, report=report)
    asv = _asv(upper, key_dir, asv_metadata, asv_scores)
    splits = spoofing_splits(lists, audio=audio, augment=augment, seed=seed, report=report, skip_bad=skip_bad,
                             name="asvspoof2021")
    splits.test.condition_track = upper  # the test reports the organisers' per-condition tables
    splits.test.asv_trials = asv
    return splits


def _asv(track: str, key_dir: Path, metadata: Optional[str], scores: Optional[str]) -> Optional[AsvTrials]:
    """LA's ASV trials, or None (DF; switched off; the default files absent — with a warning)."""
    if track != "LA" or metadata is None or scores is None:
        return None
    meta_path, score_path = _under(key_dir, metadata), _under(key_dir, scores)
    if not (meta_path.is_file() and score_path.is_file()):
        if metadata == _ASV_METADATA and scores == _ASV_SCORES:
            log.warning("asvspoof2021: no ASV trials at %s and %s: min t-DCF is not reported", meta_path, score_path)
            return None
        missing = meta_path if not meta_path.is_file() else score_path
        raise UsageError(f"asvspoof2021: ASV file not found: {missing}")
    return read_asv_trials_2021(meta_path, score_path)
