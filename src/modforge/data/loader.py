"""Loaders whose order is a pure function of a generator state, so a run can resume
mid-epoch without replaying a single batch.

:class:`ResumableRandomSampler` draws from its generator exactly as torch's
``RandomSampler`` does (one ``randperm`` per epoch, plus the one torch draws and discards
when the epoch's iterator is exhausted), so a Trainer run and a plain
``DataLoader(shuffle=True, generator=g)`` loop see the same batches. To resume at batch
``k`` of an epoch: restore the generator state saved at the epoch's start, ask the
sampler to skip ``k × batch_size`` samples, and iterate.

Several processes (``torch.distributed``): every process draws the *same* permutation
(the generator is seeded alike everywhere), pads it to a multiple of the number of
processes by repeating its head (as torch's ``DistributedSampler``), and process ``r``
takes positions ``r, r + W, r + 2W, …`` — disjoint shards of equal length that cover the
epoch. Skips count samples of the whole epoch, not of one shard, and the padding is
added after the skip: skipping ``k × batch × W`` and sharding the rest is exactly what
each process would have read next, and after a change of the number of processes the
epoch's remaining samples are shared among the new ones in shards of equal length (each
read once, plus at most ``W − 1`` padding repeats) — so every process runs the same
number of steps, as DDP requires. :class:`ShardedSequentialSampler` splits evaluation data the same
way without padding, so no sample is counted twice in a metric.

Batches by length (``data.eval_max_samples``, ``data.max_samples``).
:class:`LengthBucketBatchSampler` scores whole audio files (``eval_mode: full``) in batches of
files of similar length: the files sorted by length (longest first, ties by index), consecutive
files grouped while ``rows × longest ≤ max_samples`` (a file longer than that is a batch of its
own) — deterministic, every file exactly once. Results are mapped back to files by the batch's
``index``, so the order does not matter. It is used only for a model that handles padding
(``mask_aware``); otherwise files are read one at a time. :class:`DynamicBatchSampler` sizes
training batches by total samples: ``rows = max_samples // item length`` over the
:class:`ResumableRandomSampler`'s order. Training items all have one length (the crop), so
every batch has the same number of rows, skips still count samples (``k × rows``) and a resumed
run continues exactly.
"""

from __future__ import annotations

import dataclasses
import logging
from collections.abc import Callable, Iterator, Sequence
from typing import Literal

import torch
from torch.utils.data import BatchSampler, DataLoader, Dataset, Sampler, SequentialSampler

from .base import collate
from .device_finish import FinishedOnDevice
from .placement import DEVICE_NAMES, check_data_device, place

__all__ = [
    "DynamicBatchSampler",
    "LengthBucketBatchSampler",
    "LoaderSettings",
    "ResumableRandomSampler",
    "ShardedSequentialSampler",
    "make_loader",
]

log = logging.getLogger(__name__)

DataDevice = Literal[DEVICE_NAMES]  # type: ignore[valid-type]
"""A device name ``data.device`` takes (checked when the config is validated)."""


def _check_shard(rank: int, num_replicas: int) -> None:
    if num_replicas < 1 or not 0 <= rank < num_replicas:
        raise ValueError(f"rank {rank} is not one of {num_replicas} processes")


class ResumableRandomSampler(Sampler[int]):
    """A random permutation per epoch from ``generator`` (this process's shard of it);
    optionally skips a prefix of the epoch once.

    Args:
        n: dataset size.
        generator: the generator that alone determines the order.
        num_replicas: processes sharing the data (1: all of it here).
        rank: which of them this is.
    """

    def __init__(self, n: int, generator: torch.Generator, num_replicas: int = 1, rank: int = 0):
        _check_shard(rank, num_replicas)
        self.n, self.generator = n, generator
        self.num_replicas, self.rank = num_replicas, rank
        self._skip = 0

    def skip_next(self, count: int) -> None:
        """Make the next epoch's iteration start after its first ``count`` samples (of the
        whole epoch, over every process)."""
        self._skip = int(count)

    def __len__(self) -> int:
        """The samples the next iteration yields here (the rest of the epoch after a skip;
        the same on every process)."""
        return -(-max(0, self.n - self._skip) // self.num_replicas)

    def __iter__(self) -> Iterator[int]:
        order = torch.randperm(self.n, generator=self.generator).tolist()
        skip, self._skip = self._skip, 0
        rest = order[skip:]
        if self.num_replicas == 1:
            yield from rest
        else:
            padding = -len(rest) % self.num_replicas
            rest += (order * (1 + padding // max(1, self.n)))[:padding]  # the permutation's head again
            yield from rest[self.rank :: self.num_replicas]
        torch.randperm(self.n, generator=self.generator)  # the draw torch's RandomSampler makes here


class ShardedSequentialSampler(Sampler[int]):
    """Positions ``rank, rank + W, …`` of the data in order: evaluation split over ``W``
    processes, every sample exactly once over all of them.

    Args:
        n: dataset size.
        num_replicas: processes sharing the data.
        rank: which of them this is.
    """

    def __init__(self, n: int, num_replicas: int = 1, rank: int = 0):
        _check_shard(rank, num_replicas)
        self.n, self.num_replicas, self.rank = n, num_replicas, rank

    def __len__(self) -> int:
        return len(range(self.rank, self.n, self.num_replicas))

    def __iter__(self) -> Iterator[int]:
        return iter(range(self.rank, self.n, self.num_replicas))


class EpochTaggedBatches(BatchSampler):
    """A BatchSampler whose batches carry the epoch they belong to (``batch.epoch``).

    The epoch is read from the dataset's ``epoch`` when an epoch's iteration starts (in the
    training process, after the trainer's ``set_epoch``): worker processes — persistent ones
    too, which keep the dataset copy they started with — take a batch's epoch from its tag.

    Args:
        sampler, batch_size, drop_last: as ``BatchSampler``'s.
        dataset: whose ``epoch`` tags the batches (None: batches are not tagged).
        seed_draw: the generator a DataLoader draws its workers' base seed from when it makes
            a new iterator — which a DataLoader with persistent workers does only for its first
            iteration, reusing the iterator afterwards. Given, the draw the reused iterator skips
            is made here at the start of every later iteration, so the data generator's stream —
            and the data order, and what a checkpoint saves of it — is the same with persistent
            workers as without.
    """

    def __init__(self, sampler: Sampler[int], batch_size: int, drop_last: bool, *, dataset: Dataset | None = None,
                 seed_draw: torch.Generator | None = None):  # fmt: skip
        super().__init__(sampler, batch_size, drop_last=drop_last)
        self._dataset, self._seed_draw = dataset, seed_draw
        self._iterations = 0

    def __iter__(self) -> Iterator[list[int]]:
        # counted when iteration really starts (DataLoader makes, and drops, an unstarted one first)
        if self._seed_draw is not None and self._iterations > 0:  # what a new iterator would draw (_base_seed)
            torch.empty((), dtype=torch.int64).random_(generator=self._seed_draw)
        self._iterations += 1
        if self._dataset is None:
            yield from super().__iter__()
            return
        from .images.dataset import EpochBatch

        epoch = int(getattr(self._dataset, "epoch", 0))
        for batch in super().__iter__():
            yield EpochBatch(batch, epoch)


class LengthBucketBatchSampler(Sampler[list[int]]):
    """Evaluation batches of samples of similar length, capped by total samples.

    The samples are sorted by ``lengths`` (longest first; equal lengths by index) and
    consecutive ones grouped while ``rows × longest ≤ max_samples`` — a padded batch then holds
    at most ``max_samples`` samples. A sample longer than ``max_samples`` is a batch of its own.
    Deterministic; every sample exactly once. With several processes each takes whole batches,
    ``rank, rank + W, …`` of that list (so the batches are the same for any process count, and
    every process's work differs by at most one batch); the rows then carry their sample's
    ``index``, which is how the gathered outputs are matched to files.

    Args:
        lengths: each sample's length (what a padded batch is padded to).
        max_samples: the cap on ``rows × longest`` of a batch.
        num_replicas: processes evaluating together.
        rank: which of them this is.
    """

    def __init__(self, lengths: Sequence[int], max_samples: int, num_replicas: int = 1, rank: int = 0):
        if max_samples < 1:
            raise ValueError(f"max_samples must be at least 1, got {max_samples}")
        _check_shard(rank, num_replicas)
        self.num_replicas, self.rank = num_replicas, rank
        self.lengths = [int(n) for n in lengths]
        self.max_samples = int(max_samples)
        order = sorted(range(len(self.lengths)), key=lambda i: (-self.lengths[i], i))
        self.batches: list[list[int]] = []
        current: list[int] = []
        for i in order:
            longest = self.lengths[current[0]] if current else self.lengths[i]  # sorted: the first is the longest
            if current and (len(current) + 1) * longest > self.max_samples:
                self.batches.append(current)
                current = []
            current.append(i)
        if current:
            self.batches.append(current)
        self.all_batches = self.batches
        self.batches = self.batches[rank::num_replicas]

    def __len__(self) -> int:
        return len(self.batches)

    def __iter__(self) -> Iterator[list[int]]:
        for batch in self.batches:
            yield list(batch)


class DynamicBatchSampler(EpochTaggedBatches):
    """Training batches sized by total samples: ``max_samples // length`` rows of the items
    (all of one ``length``: training crops), in the order of ``sampler`` (a
    :class:`ResumableRandomSampler`: the order, skips and exact resume are its own).

    Args:
        sampler: the per-epoch order.
        item_length: the length of every training item (the crop, in samples).
        max_samples: the cap on samples per batch (at least one row).
        drop_last, dataset, seed_draw: as :class:`EpochTaggedBatches`'.
    """

    def __init__(self, sampler: Sampler[int], item_length: int, max_samples: int, drop_last: bool, *,
                 dataset: Dataset | None = None, seed_draw: torch.Generator | None = None):  # fmt: skip
        if max_samples < 1 or item_length < 1:
            raise ValueError(f"max_samples and item lengths must be at least 1, got {max_samples}, {item_length}")
        rows = max(1, int(max_samples) // int(item_length))
        if not drop_last:
            rows = max(1, min(rows, len(sampler)))
        super().__init__(sampler, rows, drop_last, dataset=dataset, seed_draw=seed_draw)
        self.item_length, self.max_samples = int(item_length), int(max_samples)


@dataclasses.dataclass
class LoaderSettings:
    """DataLoader options from the config's ``data:`` section.

    ``num_workers`` processes decode and augment batches while the model trains;
    ``persistent_workers`` keeps them alive between epochs (no start-up cost per epoch);
    ``prefetch_factor`` batches are loaded ahead per worker; ``pin_memory`` (on by default; it
    only acts on a machine with CUDA) puts batches in page-locked memory so copies to a CUDA
    device overlap computation (the trainer copies with ``non_blocking``) — without it each
    copy waits for the host. Results do not depend on any of them.

    ``max_samples`` sizes training batches by total samples instead of ``batch_size``
    (``max_samples // crop length`` rows). ``eval_max_samples`` scores whole files
    (``eval_mode: full``) in length-bucketed batches of at most that many samples (rows ×
    longest) when the model handles padding masks (then ``eval_batch_size`` does not apply to
    them); otherwise files are read as without it.

    ``device`` (``auto``, ``cpu``, ``cuda``, ``cuda:N``, ``mps``; None: host memory) holds an
    in-memory training split on that device, where its batches are cut and augmented
    (:mod:`.placement`); the training loader then runs in the training process (no workers,
    no pinned memory).
    """

    batch_size: int = 64
    eval_batch_size: int | None = None
    num_workers: int = 0
    pin_memory: bool = True
    drop_last: bool = False
    persistent_workers: bool = False
    prefetch_factor: int | None = None
    max_samples: int | None = None
    eval_max_samples: int | None = None
    device: DataDevice | None = None

    def __post_init__(self) -> None:
        check_data_device(self.device)
        for name in ("max_samples", "eval_max_samples"):
            value = getattr(self, name)
            if value is not None and value < 1:
                raise ValueError(f"{name} must be at least 1, got {value}")
        if self.batch_size < 1 or (self.eval_batch_size is not None and self.eval_batch_size < 1):
            raise ValueError("batch sizes must be at least 1")
        if self.num_workers < 0:
            raise ValueError("num_workers must not be negative")
        if self.prefetch_factor is not None and self.prefetch_factor < 1:
            raise ValueError("prefetch_factor must be at least 1")


def make_loader(
    dataset: Dataset,
    settings: LoaderSettings,
    *,
    train: bool,
    generator: torch.Generator | None = None,
    num_replicas: int = 1,
    rank: int = 0,
    mask_aware: bool | Callable[[], bool] = False,
    finish_on: torch.device | None = None,
) -> DataLoader:
    """A DataLoader over ``dataset``: shuffled by a :class:`ResumableRandomSampler` for
    training, in order for evaluation; with ``num_replicas > 1``, this process's shard
    (``batch_size`` is then per process). An evaluation split whose batches would be padded
    (``dataset.pads_batches``: whole audio files) is read one sample at a time unless
    ``eval_batch_size`` is given — or, with ``eval_max_samples`` and a model that handles
    padding (``mask_aware``: a bool or a callable returning one), in length-bucketed batches
    (:class:`LengthBucketBatchSampler`; whole batches shared among the processes). ``max_samples`` sizes training
    batches by total samples (:class:`DynamicBatchSampler`). ``finish_on``: the training device, when
    a picture split held in host memory may leave the workers as uint8 and be normalised there
    (:mod:`.device_finish`; the loader then yields its batches' pictures on that device)."""
    if not train and settings.eval_max_samples is not None and getattr(dataset, "pads_batches", False):
        bucketed = _bucketed_loader(dataset, settings, num_replicas, rank, mask_aware)
        if bucketed is not None:
            return bucketed
    workers, pin = settings.num_workers, settings.pin_memory
    if train and settings.device is not None:
        dataset = place(dataset, settings.device)
        if workers:
            log.info("data.device: %s — the training batches are made there, in the training process "
                     "(data.num_workers: %d applies to evaluation only)", settings.device, workers)  # fmt: skip
        workers, pin = 0, False
    served, split = None, dataset
    if train and finish_on is not None and settings.device is None and callable(getattr(dataset, "serving_uint8", None)):
        served = dataset.serving_uint8()
    batch_size = settings.batch_size if train else (settings.eval_batch_size or settings.batch_size)
    if not train and settings.eval_batch_size is None and getattr(dataset, "pads_batches", False):
        batch_size = 1  # whole files padded together would be scored with each other's padding
    if train:
        if generator is None:
            raise ValueError("a training loader needs a generator (it defines the data order)")
        sampler: Sampler[int] = ResumableRandomSampler(len(dataset), generator, num_replicas, rank)
    elif num_replicas > 1:
        sampler = ShardedSequentialSampler(len(dataset), num_replicas, rank)
    else:
        sampler = SequentialSampler(dataset)
    drop_last = settings.drop_last and train
    if not drop_last:
        # no batch holds more than the split: torch pre-allocates a list of batch_size entries
        batch_size = max(1, min(batch_size, len(sampler)))
    persistent = settings.persistent_workers and workers > 0
    seed_draw = generator if persistent and generator is not None else None
    tagged = dataset if train and hasattr(dataset, "set_epoch") else None
    if train and settings.max_samples is not None:
        batches: EpochTaggedBatches = DynamicBatchSampler(
            sampler, _training_item_length(dataset), settings.max_samples, drop_last, dataset=tagged,
            seed_draw=seed_draw)  # fmt: skip
    else:
        batches = EpochTaggedBatches(sampler, batch_size, drop_last, seed_draw=seed_draw, dataset=tagged)
    loader = DataLoader(
        served if served is not None else dataset,  # the split tags the batches' epochs; its uint8 copy makes them
        batch_sampler=batches,
        num_workers=workers,
        pin_memory=pin and torch.cuda.is_available(),
        collate_fn=collate,
        generator=generator,
        persistent_workers=persistent,
        prefetch_factor=settings.prefetch_factor if workers > 0 else None,
    )
    if served is not None:
        return FinishedOnDevice(loader, finish_on, served.pipeline.to_float, split)  # type: ignore[return-value]
    return loader


def _training_item_length(dataset: Dataset) -> int:
    """The one length of every training item (``data.max_samples`` needs it)."""
    lengths = dataset.item_lengths() if callable(getattr(dataset, "item_lengths", None)) else None
    if not lengths:
        raise ValueError("data.max_samples needs a dataset whose items have a length in samples (audio)")
    if len(set(lengths)) != 1:
        raise ValueError("data.max_samples in training needs items of one length (training crops); "
                         f"this split's range from {min(lengths)} to {max(lengths)} samples")  # fmt: skip
    return int(lengths[0])


def _bucketed_loader(dataset: Dataset, settings: LoaderSettings, num_replicas: int, rank: int,
                     mask_aware: bool | Callable[[], bool]) -> DataLoader | None:  # fmt: skip
    """A length-bucketed evaluation loader (this process's batches), or None (then files are read
    as without ``eval_max_samples``) when the model does not handle padding."""
    aware = mask_aware() if callable(mask_aware) else bool(mask_aware)
    if not aware:
        log.info("data.eval_max_samples: the model, as run here, does not handle padding masks (a part on the "
                 "input's time axis is not mask-aware, or the engine does not pass masks), so whole files are scored "
                 "as without it (one at a time unless data.eval_batch_size is set)")  # fmt: skip
        return None
    batches = LengthBucketBatchSampler(dataset.item_lengths(), settings.eval_max_samples, num_replicas, rank)
    log.info("scoring %d whole files in %d length-bucketed batches (at most %d samples each)%s", len(dataset),
             len(batches.all_batches), settings.eval_max_samples,
             f"; this process {len(batches)} of them" if num_replicas > 1 else "")  # fmt: skip
    workers = settings.num_workers
    return DataLoader(
        dataset,
        batch_sampler=batches,
        num_workers=workers,
        pin_memory=settings.pin_memory and torch.cuda.is_available(),
        collate_fn=collate,
        persistent_workers=settings.persistent_workers and workers > 0,
        prefetch_factor=settings.prefetch_factor if workers > 0 else None,
    )
