"""Loaders whose order is a pure function of a generator state, so a run can resume
mid-epoch without replaying a single batch.

:class:`ResumableRandomSampler` draws from its generator exactly as torch's
``RandomSampler`` does (one ``randperm`` per epoch, plus the one torch draws and discards
when the epoch's iterator is exhausted), so a Trainer run and a plain
``DataLoader(shuffle=True, generator=g)`` loop see the same batches. To resume at batch
``k`` of an epoch: restore the generator state saved at the epoch's start, ask the
sampler to skip ``k × batch_size`` samples, and iterate.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Iterator

import torch
from torch.utils.data import BatchSampler, DataLoader, Dataset, Sampler, SequentialSampler

from .base import collate

__all__ = ["LoaderSettings", "ResumableRandomSampler", "make_loader"]


class ResumableRandomSampler(Sampler[int]):
    """A random permutation per epoch from ``generator``; optionally skips a prefix once.

    Args:
        n: dataset size.
        generator: the generator that alone determines the order.
    """

    def __init__(self, n: int, generator: torch.Generator):
        self.n, self.generator = n, generator
        self._skip = 0

    def skip_next(self, count: int) -> None:
        """Make the next epoch's iteration start after its first ``count`` samples."""
        self._skip = int(count)

    def __len__(self) -> int:
        return self.n

    def __iter__(self) -> Iterator[int]:
        order = torch.randperm(self.n, generator=self.generator).tolist()
        skip, self._skip = self._skip, 0
        yield from order[skip:]
        torch.randperm(self.n, generator=self.generator)  # the draw torch's RandomSampler makes here


@dataclasses.dataclass
class LoaderSettings:
    """DataLoader options from the config's ``data:`` section."""

    batch_size: int = 64
    eval_batch_size: int | None = None
    num_workers: int = 0
    pin_memory: bool = False
    drop_last: bool = False

    def __post_init__(self) -> None:
        if self.batch_size < 1 or (self.eval_batch_size is not None and self.eval_batch_size < 1):
            raise ValueError("batch sizes must be at least 1")
        if self.num_workers < 0:
            raise ValueError("num_workers must not be negative")


def make_loader(
    dataset: Dataset,
    settings: LoaderSettings,
    *,
    train: bool,
    generator: torch.Generator | None = None,
) -> DataLoader:
    """A DataLoader over ``dataset``: shuffled by a :class:`ResumableRandomSampler` for
    training, in order for evaluation."""
    batch_size = settings.batch_size if train else (settings.eval_batch_size or settings.batch_size)
    if train:
        if generator is None:
            raise ValueError("a training loader needs a generator (it defines the data order)")
        sampler: Sampler[int] = ResumableRandomSampler(len(dataset), generator)
    else:
        sampler = SequentialSampler(dataset)
    batches = BatchSampler(sampler, batch_size, drop_last=settings.drop_last and train)
    return DataLoader(
        dataset,
        batch_sampler=batches,
        num_workers=settings.num_workers,
        pin_memory=settings.pin_memory,
        collate_fn=collate,
        generator=generator,
        persistent_workers=False,
    )
