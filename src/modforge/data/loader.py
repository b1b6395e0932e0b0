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
"""

from __future__ import annotations

import dataclasses
from collections.abc import Iterator

import torch
from torch.utils.data import BatchSampler, DataLoader, Dataset, Sampler, SequentialSampler

from .base import collate

__all__ = ["LoaderSettings", "ResumableRandomSampler", "ShardedSequentialSampler", "make_loader"]


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


@dataclasses.dataclass
class LoaderSettings:
    """DataLoader options from the config's ``data:`` section.

    ``num_workers`` processes decode and augment batches while the model trains;
    ``persistent_workers`` keeps them alive between epochs (no start-up cost per epoch);
    ``prefetch_factor`` batches are loaded ahead per worker; ``pin_memory`` puts batches in
    page-locked memory so copies to a CUDA device overlap computation (the trainer copies
    with ``non_blocking``). Results do not depend on any of them.
    """

    batch_size: int = 64
    eval_batch_size: int | None = None
    num_workers: int = 0
    pin_memory: bool = False
    drop_last: bool = False
    persistent_workers: bool = False
    prefetch_factor: int | None = None

    def __post_init__(self) -> None:
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
) -> DataLoader:
    """A DataLoader over ``dataset``: shuffled by a :class:`ResumableRandomSampler` for
    training, in order for evaluation; with ``num_replicas > 1``, this process's shard
    (``batch_size`` is then per process). An evaluation split whose batches would be padded
    (``dataset.pads_batches``: whole audio files) is read one sample at a time unless
    ``eval_batch_size`` is given."""
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
    workers = settings.num_workers
    persistent = settings.persistent_workers and workers > 0
    seed_draw = generator if persistent and generator is not None else None
    batches = EpochTaggedBatches(sampler, batch_size, drop_last, seed_draw=seed_draw,
                                 dataset=dataset if train and hasattr(dataset, "set_epoch") else None)  # fmt: skip
    return DataLoader(
        dataset,
        batch_sampler=batches,
        num_workers=workers,
        pin_memory=settings.pin_memory and torch.cuda.is_available(),
        collate_fn=collate,
        generator=generator,
        persistent_workers=persistent,
        prefetch_factor=settings.prefetch_factor if workers > 0 else None,
    )
