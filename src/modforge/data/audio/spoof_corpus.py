"""A synthetic spoofing corpus laid out like ASVspoof 2019 LA, generated on the spot from a seed.

Why: anti-spoofing models, readers and metrics need a corpus with the *structure* of ASVspoof — bona fide and
spoofed speech, disjoint speakers per split, attacks A01…, attacks in the evaluation set that training never saw —
that can be made offline in seconds and that is not trivially separable. Bona fide audio comes from the
source-filter voice model in :mod:`.speech_synth`; spoofs from the attacks in :mod:`.spoof_attacks`.

Layout written by :func:`make_spoof_corpus`::

    OUT/
      wav/<utt_id>.wav                 16-bit PCM, all splits in one folder
      protocols/train.txt dev.txt eval.txt
                                       ASVspoof 2019 LA CM format, one line per utterance:
                                       "<speaker> <utt_id> - <attack> <label>", attack "-" for bona fide,
                                       label "bonafide" or "spoof"; ids SC_T_0000001 / SC_D_… / SC_E_…
      protocols/eval_channels.txt      "<utt_id> <channel>" per eval utterance: its transmission condition
                                       (absent when the eval split has only ``none``)
      meta.json                        seed, rate, duration, counts per split × attack, attack descriptions,
                                       unseen attacks, generator version (written last)

Design (recorded in meta.json as well):

* **Attacks per split.** train and dev use A01–A04; eval uses A01 and A02 (seen) plus A05, A06 and A07, which
  never occur in train or dev — as ASVspoof 2019's eval set holds the unseen A07–A19.
* **Balance.** By default bona fide is one more class with the same share as each attack: 20 % of train/dev and
  1/6 ≈ 17 % of eval (ASVspoof 2019 LA has ~10 %); ``bonafide_share`` sets another share.
* **Speakers.** Disjoint speaker sets per split, sexes alternating; within a split every class cycles through
  the split's speakers, so speaker identity carries no label information.
* **No trivial cues.** Every utterance — bona fide or spoof — lasts exactly ``duration`` seconds, starts with
  silence drawn from the same distribution (the spoofs are rendered from the same kind of utterance plan),
  goes through the same 50 Hz DC-blocking high-pass, is normalised to an active speech level of −26 dBFS with
  the same ±3 dB random gain, is peak-limited to 0.95 and quantised to 16 bits with the same TPDF dither.
* **Difficulty.** Measured on 2,000 × 2 s corpora (seeds 0 and 1) with 20 linear-filterbank cepstra + deltas,
  mean and std over frames, and a 64-unit ``MLPClassifier`` trained on train: EER ≈ 3–4 % on dev (A03 ≈ 0 %,
  A01/A02/A04 1–6 %) and ≈ 2–3 % on the seen eval attacks, but ≈ 23–25 % on A05, 11–19 % on A06 and 37–44 % on
  A07 — learnable where seen, far from solved where unseen.
* **Conditions on eval.** Every eval utterance goes through one transmission condition of
  :mod:`.spoof_channels` (``none``, ``telephone``, ``reverb``, ``noise`` by default; ``eval_channels`` picks),
  balanced within each class and drawn from streams of their own — so the ``none`` files, the ids, speakers and
  attacks are byte for byte those of a corpus made without conditions. The test then reports EER per attack ×
  condition, as ASVspoof 2021 reports per codec.
* **Determinism.** Utterance ``i`` is rendered from its own ``numpy.random.Generator`` seeded from
  ``(seed, i)``; speakers from ``(seed, speaker index)``; the class/speaker assignment from ``seed``. The same
  seed therefore gives byte-identical files with any number of ``workers``.
* **Atomic output.** Files are written into a hidden temporary folder next to ``OUT``, ``meta.json`` last, and
  the folder is renamed to ``OUT`` only when complete, so an interrupted run never leaves a corpus that looks
  finished.
"""

from __future__ import annotations

import json
import logging
import os
import shutil
import time
from collections.abc import Sequence
from functools import lru_cache
from pathlib import Path
from typing import Any

import numpy as np
import soundfile as sf
from scipy import signal

from ...core.heartbeat import Heartbeat
from ..generated_sets import (
    SetKind,
    check_seed,
    check_target,
    make_staging,
    publish,
    render_jobs,
    split_counts,
    split_fractions,
)
from . import speech_synth as ss
from .spoof_attacks import ATTACKS
from .spoof_channels import CHANNELS, DEFAULT_EVAL_CHANNELS, apply_channel_condition, check_channels

log = logging.getLogger("modforge.data")

GENERATOR = "modforge.data.audio.spoof_corpus"
VERSION = "1.1"  # 1.1: transmission conditions on the eval split
SPLITS: tuple[str, ...] = ("train", "dev", "eval")
SPLIT_PREFIX: dict[str, str] = {"train": "SC_T_", "dev": "SC_D_", "eval": "SC_E_"}
SPLIT_ATTACKS: dict[str, tuple[str, ...]] = {
    "train": ("A01", "A02", "A03", "A04"),
    "dev": ("A01", "A02", "A03", "A04"),
    "eval": ("A01", "A02", "A05", "A06", "A07"),
}
UNSEEN_ATTACKS: tuple[str, ...] = tuple(
    a for a in SPLIT_ATTACKS["eval"] if a not in SPLIT_ATTACKS["train"] + SPLIT_ATTACKS["dev"]
)
BONAFIDE = "-"
TARGET_LEVEL_DBFS = -26.0
GAIN_JITTER_DB = 3.0
PEAK_LIMIT = 0.95
MIN_DURATION = 0.25
CORPUS_KIND = SetKind("spoofing corpus", GENERATOR, ("wav", "wav/*.wav", "protocols", "protocols/*.txt", "meta.json"))
"""What a corpus holds: ``overwrite`` replaces only a folder holding just this, with this generator."""
CORPUS_ENTRIES = CORPUS_KIND.entries

# independent random streams derived from the corpus seed
_SPEAKER_STREAM, _UTTERANCE_STREAM, _LAYOUT_STREAM, _CHANNEL_STREAM, _CHANNEL_LAYOUT_STREAM = 0, 1, 2, 3, 4
CHANNELS_FILE = "eval_channels.txt"
"""The eval split's conditions, ``<utt_id> <channel>`` per line, in ``protocols/``."""


def _stream(seed: int, *key: int) -> np.random.Generator:
    return np.random.default_rng(np.random.SeedSequence(seed, spawn_key=key))


@lru_cache(maxsize=8)
def _dc_block(sample_rate: int) -> np.ndarray:
    return signal.butter(2, 50.0, btype="highpass", fs=sample_rate, output="sos")


def finalize(x: np.ndarray, sample_rate: int, rng: np.random.Generator) -> np.ndarray:
    """The post-processing shared by bona fide and spoofed audio: DC block, level normalisation with a random
    gain, peak limit, TPDF-dithered 16-bit quantisation. Returns int16 samples."""
    y = signal.sosfilt(_dc_block(sample_rate), x)
    level = ss.active_level(y, sample_rate)
    if not np.isfinite(level) or level <= 0.0:
        raise RuntimeError("rendered an utterance without signal; this is a bug in the spoofing-corpus generator")
    gain_db = TARGET_LEVEL_DBFS + rng.uniform(-GAIN_JITTER_DB, GAIN_JITTER_DB)
    y = y * (10.0 ** (gain_db / 20.0) / level)
    peak = float(np.max(np.abs(y)))
    if peak > PEAK_LIMIT:
        y *= PEAK_LIMIT / peak
    dither = rng.random(y.shape[-1]) - rng.random(y.shape[-1])
    return np.clip(np.round(y * 32767.0 + dither), -32767, 32767).astype(np.int16)


def render_utterance(
    speaker: ss.Speaker, attack: str, seed: int, index: int, n_samples: int, sample_rate: int, channel: str = "none"
) -> np.ndarray:
    """Utterance ``index`` of the corpus with ``seed``: bona fide (``attack == "-"``) or spoofed, through
    transmission condition ``channel``, as int16."""
    rng = _stream(seed, _UTTERANCE_STREAM, index)
    plan = ss.plan_utterance(speaker, rng, n_samples, sample_rate)
    if attack == BONAFIDE:
        audio = ss.synthesize(plan, speaker, rng)
    else:
        audio = ATTACKS[attack].render(plan, speaker, rng)
    if channel != "none":
        audio = apply_channel_condition(audio, channel, sample_rate, _stream(seed, _CHANNEL_STREAM, index))
    return finalize(audio, sample_rate, rng)


def _render_job(job: tuple[int, ss.Speaker, str, int, int, int, str, str]) -> int:
    index, speaker, attack, seed, n_samples, sample_rate, path, channel = job
    audio = render_utterance(speaker, attack, seed, index, n_samples, sample_rate, channel)
    sf.write(path, audio, sample_rate, subtype="PCM_16", format="WAV")
    return index


def _class_counts(n: int, attacks: Sequence[str], bonafide_share: float | None) -> dict[str, int]:
    if bonafide_share is None:
        classes = [BONAFIDE, *attacks]
        base, extra = divmod(n, len(classes))
        return {c: base + (1 if i < extra else 0) for i, c in enumerate(classes)}
    n_bona = max(1, int(round(n * bonafide_share)))
    base, extra = divmod(n - n_bona, len(attacks))
    return {BONAFIDE: n_bona, **{a: base + (1 if i < extra else 0) for i, a in enumerate(attacks)}}


def _validate(
    utts: int,
    seed: int,
    duration: float,
    sample_rate: int,
    split: Sequence[float],
    speakers: int,
    bonafide_share: float | None,
    workers: int,
) -> tuple[float, float, float]:
    check_seed(seed)
    if not isinstance(sample_rate, (int, np.integer)) or not 16000 <= sample_rate <= 48000:
        raise ValueError(f"sample_rate must be an integer in 16000..48000 Hz, got {sample_rate!r}")
    if not isinstance(duration, (int, float)) or not MIN_DURATION <= float(duration) <= 60.0:
        raise ValueError(f"duration must be between {MIN_DURATION} and 60 seconds, got {duration!r}")
    fractions = split_fractions(split, SPLITS)
    if not isinstance(speakers, (int, np.integer)) or speakers < 3:
        raise ValueError(f"speakers must be an integer >= 3 (the splits have disjoint speakers), got {speakers!r}")
    if bonafide_share is not None and not 0.0 < float(bonafide_share) < 1.0:
        raise ValueError(f"bonafide_share must be in (0, 1) or None (one class share), got {bonafide_share!r}")
    if not isinstance(workers, (int, np.integer)) or workers < 1:
        raise ValueError(f"workers must be an integer >= 1, got {workers!r}")
    if not isinstance(utts, (int, np.integer)) or utts < 1:
        raise ValueError(f"utts must be a positive integer, got {utts!r}")
    for name, n in zip(SPLITS, split_counts(int(utts), fractions), strict=True):
        counts = _class_counts(n, SPLIT_ATTACKS[name], bonafide_share)
        if min(counts.values()) < 1:
            need = len(SPLIT_ATTACKS[name]) + 1
            raise ValueError(
                f"utts={utts} gives the {name} split {n} utterances, fewer than its {need} classes "
                f"(bona fide + {', '.join(SPLIT_ATTACKS[name])}); use more utterances"
            )
    return fractions[0], fractions[1], fractions[2]


def _assign(
    fractions: Sequence[float], utts: int, speakers: int, seed: int, bonafide_share: float | None
) -> tuple[dict[str, list[tuple[str, ss.Speaker, str]]], dict[str, list[ss.Speaker]]]:
    """Per split: (utt_id, speaker, attack) rows in id order; and the split's speakers."""
    roster = [
        ss.make_speaker(f"SC_{j + 1:04d}", _stream(seed, _SPEAKER_STREAM, j), "female" if j % 2 == 0 else "male")
        for j in range(speakers)
    ]
    speaker_counts = [max(1, c) for c in split_counts(speakers, fractions)]
    while sum(speaker_counts) > speakers:  # tiny rosters: take the surplus from the largest split
        speaker_counts[int(np.argmax(speaker_counts))] -= 1
    rng = _stream(seed, _LAYOUT_STREAM)
    rows: dict[str, list[tuple[str, ss.Speaker, str]]] = {}
    split_speakers: dict[str, list[ss.Speaker]] = {}
    start = 0
    for name, n, n_spk in zip(SPLITS, split_counts(utts, fractions), speaker_counts, strict=True):
        members = roster[start : start + n_spk]
        start += n_spk
        pairs: list[tuple[ss.Speaker, str]] = []
        for attack, count in _class_counts(n, SPLIT_ATTACKS[name], bonafide_share).items():
            offset = int(rng.integers(len(members)))
            pairs.extend((members[(offset + i) % len(members)], attack) for i in range(count))
        order = rng.permutation(len(pairs))
        rows[name] = [(f"{SPLIT_PREFIX[name]}{k + 1:07d}", *pairs[int(j)]) for k, j in enumerate(order)]
        used = {spk.speaker_id for _, spk, _ in rows[name]}
        split_speakers[name] = [s for s in members if s.speaker_id in used]
    return rows, split_speakers


def _assign_channels(eval_rows: Sequence[tuple[str, ss.Speaker, str]], channels: Sequence[str], seed: int
                     ) -> dict[str, str]:  # fmt: skip
    """The eval utterances' conditions: cycled within each class from a seeded offset, so every
    class × condition cell holds the same number of files (±1); ``{}`` when only ``none``."""
    if tuple(channels) == ("none",):
        return {}
    rng = _stream(seed, _CHANNEL_LAYOUT_STREAM)
    out: dict[str, str] = {}
    for cls in (BONAFIDE, *SPLIT_ATTACKS["eval"]):
        offset = int(rng.integers(len(channels)))
        members = [utt_id for utt_id, _, attack in eval_rows if attack == cls]
        out.update({utt_id: channels[(offset + i) % len(channels)] for i, utt_id in enumerate(members)})
    return out


def _metadata(
    rows: dict[str, list[tuple[str, ss.Speaker, str]]],
    split_speakers: dict[str, list[ss.Speaker]],
    *,
    seed: int,
    duration: float,
    sample_rate: int,
    fractions: Sequence[float],
    bonafide_share: float | None,
    channels: dict[str, str],
    eval_channels: Sequence[str],
) -> dict[str, Any]:
    counts = {
        name: {c: sum(1 for _, _, a in rows[name] if a == c) for c in (BONAFIDE, *SPLIT_ATTACKS[name])}
        for name in SPLITS
    }
    counts = {name: {("bonafide" if c == BONAFIDE else c): n for c, n in cs.items()} for name, cs in counts.items()}
    used = sorted({a for name in SPLITS for a in SPLIT_ATTACKS[name]})
    return {
        "generator": GENERATOR,
        "version": VERSION,
        "seed": int(seed),
        "sample_rate": int(sample_rate),
        "duration": float(duration),
        "samples_per_utterance": int(round(duration * sample_rate)),
        "utterances": sum(len(r) for r in rows.values()),
        "split_fractions": dict(zip(SPLITS, (float(f) for f in fractions), strict=True)),
        "bonafide_share": None if bonafide_share is None else float(bonafide_share),
        "counts": counts,
        "speakers": {
            name: [{"id": s.speaker_id, "sex": s.sex, "f0_mean": round(s.f0_mean, 1)} for s in split_speakers[name]]
            for name in SPLITS
        },
        "attacks": {
            a: {
                "name": ATTACKS[a].name,
                "description": ATTACKS[a].description,
                "splits": [name for name in SPLITS if a in SPLIT_ATTACKS[name]],
                "unseen": a in UNSEEN_ATTACKS,
            }
            for a in used
        },
        "attacks_per_split": {name: list(SPLIT_ATTACKS[name]) for name in SPLITS},
        "eval_channels": {
            name: {
                "description": CHANNELS[name].description,
                "files": {
                    ("bonafide" if c == BONAFIDE else c): sum(
                        1 for u, _, a in rows["eval"] if a == c and channels.get(u, "none") == name
                    )
                    for c in (BONAFIDE, *SPLIT_ATTACKS["eval"])
                },
            }
            for name in eval_channels
        },
        "channels_file": f"protocols/{CHANNELS_FILE}" if channels else None,
        "unseen_attacks": list(UNSEEN_ATTACKS),
        "protocol_format": "<speaker> <utt_id> - <attack> <label>; attack '-' for bona fide; label bonafide|spoof",
        "post_processing": {
            "dc_block_hz": 50.0,
            "active_level_dbfs": TARGET_LEVEL_DBFS,
            "gain_jitter_db": GAIN_JITTER_DB,
            "peak_limit": PEAK_LIMIT,
            "pcm": "16-bit, TPDF dither",
        },
    }


def make_spoof_corpus(
    out_dir: str | os.PathLike[str],
    *,
    utts: int = 2000,
    seed: int = 0,
    duration: float = 2.0,
    sample_rate: int = 16000,
    split: Sequence[float] = (0.5, 0.2, 0.3),
    speakers: int = 30,
    bonafide_share: float | None = None,
    eval_channels: Sequence[str] = DEFAULT_EVAL_CHANNELS,
    workers: int = 1,
    overwrite: bool = False,
) -> dict[str, Any]:
    """Write a synthetic ASVspoof-2019-LA-style spoofing corpus to ``out_dir`` and return its summary.

    Args:
        out_dir: output folder; must be new or empty unless ``overwrite`` (then it must hold only a corpus).
        utts: total number of utterances over train, dev and eval.
        seed: seed of everything; the same seed gives byte-identical files.
        duration: length of every utterance in seconds.
        sample_rate: samples per second (16000..48000).
        split: fractions of the utterances (and speakers) in train, dev and eval.
        speakers: number of synthetic speakers, divided disjointly among the splits like ``split``.
        bonafide_share: share of bona fide utterances per split; None gives bona fide the same share as each attack.
        eval_channels: the transmission conditions of the eval split (:data:`.spoof_channels.CHANNELS`), balanced
            within each class; ``("none",)`` for a clean eval split.
        workers: processes rendering utterances (the output does not depend on it).
        overwrite: replace an existing corpus in ``out_dir``.

    Returns:
        The contents of meta.json plus ``out_dir`` and ``seconds`` (wall-clock generation time).
    """
    begin = time.perf_counter()
    fractions = _validate(utts, seed, duration, sample_rate, split, speakers, bonafide_share, workers)
    eval_channels = check_channels(eval_channels)
    out = Path(out_dir).expanduser().resolve()
    if not out.name:
        raise ValueError(f"output directory must be a named folder, got {str(out_dir)!r}")
    check_target(out, overwrite, CORPUS_KIND)
    n_samples = int(round(float(duration) * sample_rate))
    rows, split_speakers = _assign(fractions, int(utts), int(speakers), int(seed), bonafide_share)
    channels = _assign_channels(rows["eval"], eval_channels, int(seed))

    staging = make_staging(out)
    try:
        (staging / "wav").mkdir()
        (staging / "protocols").mkdir()
        jobs = []
        for name in SPLITS:
            for utt_id, speaker, attack in rows[name]:
                path = str(staging / "wav" / f"{utt_id}.wav")
                channel = channels.get(utt_id, "none")
                jobs.append((len(jobs), speaker, attack, int(seed), n_samples, int(sample_rate), path, channel))
        beat = Heartbeat(log, f"rendering {out.name}", len(jobs))
        for done, _ in enumerate(render_jobs(_render_job, jobs, workers), 1):
            beat.tick(done)
        for name in SPLITS:
            lines = [
                f"{spk.speaker_id} {utt_id} - {attack} {'bonafide' if attack == BONAFIDE else 'spoof'}\n"
                for utt_id, spk, attack in rows[name]
            ]
            (staging / "protocols" / f"{name}.txt").write_text("".join(lines))
        if channels:
            lines = [f"{utt_id} {channels[utt_id]}\n" for utt_id, _, _ in rows["eval"]]
            (staging / "protocols" / CHANNELS_FILE).write_text("".join(lines))
        meta = _metadata(
            rows,
            split_speakers,
            seed=int(seed),
            duration=float(duration),
            sample_rate=int(sample_rate),
            fractions=fractions,
            bonafide_share=bonafide_share,
            channels=channels,
            eval_channels=eval_channels,
        )
        (staging / "meta.json").write_text(json.dumps(meta, indent=2) + "\n")
        publish(staging, out, CORPUS_KIND)
    except BaseException:
        shutil.rmtree(staging, ignore_errors=True)
        raise
    return {**meta, "out_dir": str(out), "seconds": time.perf_counter() - begin}
