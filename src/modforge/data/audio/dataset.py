"""A split of labelled audio files as a dataset of dict batches.

:class:`AudioSettings` (a dataset's ``audio:`` argument) says how files become inputs:

* training — every file is read (resampled, mono), augmented, and cropped or padded to
  ``seconds`` at a random offset;
* evaluation — ``eval_mode``: ``fixed`` (the first ``seconds``, padded like training; the
  ASVspoof baselines' practice), ``full`` (whole files; a batch is zero-padded to its
  longest file and carries ``length`` [B] and a boolean ``mask`` [B, T]), or ``windows``
  (each file cut into ``seconds``-long windows every ``window_hop`` seconds; the windows
  of a batch's files are stacked, each row keeping its file's ``label`` and ``index``, so a
  file's score is the mean of its windows' scores — what ``modforge test`` writes).

Randomness (crop offsets, augmentation) is drawn from a generator seeded with
``(seed, epoch, index)``: the same run sees the same audio, a resumed run continues
exactly, and the order in which workers load files does not matter. The trainer calls
:meth:`AudioDataset.set_epoch` at the start of every epoch.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any, Literal

import numpy as np
import torch
from torch.utils.data import Dataset

from ...core.arguments import signature_of
from .cropping import Padding, fit_length, pad_batch, windows
from .io import AudioReadError, audio_info, read_audio
from .protocols import ParseReport, Utterance

__all__ = ["AudioDataset", "AudioSettings", "audio_settings", "check_files"]

EvalMode = Literal["fixed", "full", "windows"]


class AudioSettings:
    """How audio files become model inputs.

    Args:
        sample_rate: rate every file is resampled to (Hz).
        seconds: length of a training crop (and of an evaluation window / fixed crop).
            64600 samples (4.04 s), the AASIST/RawNet2 length, is ``seconds: 4.0375``.
        eval_mode: 'fixed' (first ``seconds``), 'full' (whole files, padded batches with
            masks) or 'windows' (windows averaged per file).
        window_hop: seconds between window starts in 'windows' mode (None: ``seconds``).
        padding: how a short file is padded: 'repeat' (tiled) or 'zeros'.
        random_crop: crop training files at a random offset (False: from the start).
        cache: keep decoded (resampled) files in memory after the first read (per process:
            with ``num_workers`` > 0 each worker's cache lasts one epoch).
        verify: what is checked of every listed file when the dataset is built: 'header'
            (exists and its header reads) or 'exists' (cheaper for millions of files; a bad
            file then fails when it is first read, still naming the file and its list line).
    """

    def __init__(
        self,
        sample_rate: int = 16000,
        seconds: float = 4.0,
        eval_mode: EvalMode = "fixed",
        window_hop: float | None = None,
        padding: Padding = "repeat",
        random_crop: bool = True,
        cache: bool = False,
        verify: Literal["header", "exists"] = "header",
    ):
        if sample_rate < 1:
            raise ValueError(f"sample_rate must be positive, got {sample_rate}")
        if seconds <= 0:
            raise ValueError(f"seconds must be positive, got {seconds}")
        if window_hop is not None and not 0 < window_hop <= seconds:
            raise ValueError(f"window_hop must be in (0, seconds={seconds}] so windows cover every sample, got {window_hop}")
        self.sample_rate, self.seconds, self.eval_mode = sample_rate, seconds, eval_mode
        self.window_hop, self.padding, self.random_crop, self.cache = window_hop, padding, random_crop, cache
        self.verify = verify

    @property
    def samples(self) -> int:
        """The crop/window length in samples."""
        return max(1, round(self.seconds * self.sample_rate))

    @property
    def hop_samples(self) -> int:
        return max(1, round((self.window_hop or self.seconds) * self.sample_rate))


def audio_settings(values: dict[str, Any] | None, path: str = "data.args.audio") -> AudioSettings:
    """:class:`AudioSettings` from a config mapping, checked key by key (errors name ``path``)."""
    checked = signature_of(AudioSettings).validate(values or {}, path=path)
    return AudioSettings(**checked)


def check_files(
    utterances: Sequence[Utterance], *, skip_bad: bool, report: ParseReport | None = None, header: bool = True
) -> list[Utterance]:
    """The utterances whose audio file exists (and, with ``header``, has a readable header
    holding samples); the others raise an :class:`AudioReadError` naming the file and the
    protocol line (or, with ``skip_bad``, are counted in ``report`` and left out)."""
    kept = []
    for utt in utterances:
        try:
            if not utt.path.is_file():
                raise AudioReadError(f"audio file not found: {utt.path}")
            if header and audio_info(utt.path)[0] == 0:
                raise AudioReadError(f"audio file {utt.path} holds no samples")
        except AudioReadError as exc:
            if not skip_bad:
                raise AudioReadError(f"{utt.source}: {exc}") from None
            if report is not None:
                report.add(f"{utt.source}: {exc}")
            continue
        kept.append(utt)
    return kept


class AudioDataset(Dataset):
    """Labelled audio files of one split; batches are dicts (see the module doc).

    Args:
        utterances: the files and their labels.
        settings: how files become inputs.
        train: training split (random crops and augmentation) or evaluation split.
        seed: seeds crops and augmentation together with the epoch and the file's index.
        augment: a callable ``(wave, rng) -> wave`` applied to training files, or None.
    """

    def __init__(
        self,
        utterances: Sequence[Utterance],
        settings: AudioSettings,
        *,
        train: bool,
        seed: int = 0,
        augment: Callable[[np.ndarray, np.random.Generator], np.ndarray] | None = None,
    ):
        self.utterances = list(utterances)
        self.settings, self.train, self.seed, self.augment = settings, train, int(seed), augment
        self.labels = torch.tensor([u.label for u in self.utterances], dtype=torch.long)
        self.seen_attacks: frozenset[str] | None = None
        """The spoofing attacks of the training split, set on evaluation splits by the dataset
        builder (None: unknown) — what the test's seen/unseen figures are split by."""
        self.epoch = 0
        self._cache: dict[int, np.ndarray] = {}
        self._lengths: list[int] | None = None

    def __len__(self) -> int:
        return len(self.utterances)

    @property
    def pads_batches(self) -> bool:
        """True when batches of this split are zero-padded to their longest file ('full'
        evaluation): a file's score would then depend on what it is batched with, so
        evaluation loaders read one file at a time unless ``data.eval_batch_size`` is set."""
        return not self.train and self.settings.eval_mode == "full"

    def item_lengths(self) -> list[int]:
        """The length in samples of what each file contributes to a batch row: the crop in
        training and ``fixed`` evaluation, the whole file (at ``sample_rate``, from its header:
        not decoded) in ``full`` evaluation — what length-bucketed batches are formed by. For
        ``windows``, the windows' total."""
        settings = self.settings
        if self.train or settings.eval_mode == "fixed":
            return [settings.samples] * len(self.utterances)
        if self._lengths is None:
            self._lengths = [self._file_length(i) for i in range(len(self.utterances))]
        if settings.eval_mode == "windows":
            n, hop = settings.samples, settings.hop_samples
            return [n * (1 if m <= n else len(range(0, m - n + 1, hop)) + ((m - n) % hop != 0)) for m in self._lengths]
        return list(self._lengths)

    def _file_length(self, index: int) -> int:
        cached = self._cache.get(index)
        if cached is not None:
            return len(cached)
        utt = self.utterances[index]
        try:
            frames, rate = audio_info(utt.path)
        except AudioReadError as exc:
            raise AudioReadError(f"{utt.source}: {exc}") from None
        target = self.settings.sample_rate
        return frames if rate == target else -(-frames * target // rate)  # resample_poly's output length

    def subset(self, positions: Sequence[int], *, train: bool | None = None) -> AudioDataset:
        """The files at ``positions``, as a training split (crops, augmentation) or an
        evaluation split (``train``; None: as this one)."""
        train = self.train if train is None else train
        part = AudioDataset(
            [self.utterances[int(i)] for i in positions], self.settings, train=train, seed=self.seed,
            augment=self.augment if train else None,
        )  # fmt: skip
        part.seen_attacks = self.seen_attacks
        return part

    @staticmethod
    def concat(parts: Sequence[AudioDataset]) -> AudioDataset:
        """Every part's files in order, with the first part's settings (and the augmentation of
        whichever part trains) — how k-fold pools train and dev before re-splitting."""
        augment = next((p.augment for p in parts if p.augment is not None), None)
        utterances = [u for part in parts for u in part.utterances]
        return AudioDataset(utterances, parts[0].settings, train=parts[0].train, seed=parts[0].seed, augment=augment)

    def set_epoch(self, epoch: int) -> None:
        """Seed the next epoch's crops and augmentation (called by the trainer)."""
        self.epoch = int(epoch)

    @property
    def attacks(self) -> list[str]:
        """Each file's attack name (``-`` for bona fide), in index order."""
        return [u.attack for u in self.utterances]

    def read(self, index: int) -> np.ndarray:
        """The decoded, resampled waveform of file ``index`` (full length)."""
        cached = self._cache.get(index)
        if cached is not None:
            return cached
        utt = self.utterances[index]
        try:
            wave, _ = read_audio(utt.path, self.settings.sample_rate)
        except AudioReadError as exc:
            raise AudioReadError(f"{utt.source}: {exc}") from None
        if self.settings.cache:
            self._cache[index] = wave
        return wave

    def _rng(self, index: int) -> np.random.Generator:
        return np.random.default_rng([self.seed % (1 << 64), self.epoch, int(index)])  # numpy takes no negative seed

    def waveform(self, index: int) -> np.ndarray | list[np.ndarray]:
        """What file ``index`` contributes to a batch: a crop, the whole file, or windows."""
        wave, settings = self.read(index), self.settings
        if self.train:
            rng = self._rng(index)
            if self.augment is not None:
                wave = np.asarray(self.augment(wave, rng), dtype=np.float32)
            return fit_length(wave, settings.samples, padding=settings.padding, rng=rng if settings.random_crop else None)
        if settings.eval_mode == "fixed":
            return fit_length(wave, settings.samples, padding=settings.padding)
        if settings.eval_mode == "windows":
            return windows(wave, settings.samples, settings.hop_samples, padding=settings.padding)
        return wave

    def __getitem__(self, index: int) -> dict[str, torch.Tensor]:
        """One file unbatched: ``input`` [T] (or [windows, T]), ``label``, ``index``."""
        wave = np.asarray(self.waveform(index), dtype=np.float32)
        return {"input": torch.from_numpy(wave), "label": self.labels[index], "index": torch.tensor(index)}

    def __getitems__(self, indices: Sequence[int]) -> dict[str, torch.Tensor]:
        self.epoch = getattr(indices, "epoch", self.epoch)  # a training batch says its epoch (persistent workers)
        indices = [int(i) for i in indices]
        waves = [self.waveform(i) for i in indices]
        label = self.labels[indices]
        index = torch.tensor(indices, dtype=torch.long)
        if self.train or self.settings.eval_mode == "fixed":
            return {"input": torch.from_numpy(np.stack(waves)), "label": label, "index": index}
        if self.settings.eval_mode == "windows":
            counts = torch.tensor([len(w) for w in waves])
            return {
                "input": torch.from_numpy(np.concatenate(waves)),
                "label": label.repeat_interleave(counts),
                "index": index.repeat_interleave(counts),
                "file_windows": counts.repeat_interleave(counts),  # rows of one file: scores averaged per file
            }
        padded, length, mask = pad_batch(waves)
        return {"input": padded, "label": label, "index": index, "length": length, "mask": mask}
