"""How a continual method's state stays *one* state when several processes train (``--nproc N``).

A continual method is more than a gradient: it keeps a buffer, draws replay minibatches,
counts the stream. Sharding all of that would make N different methods. modforge keeps the
method's state **replicated** instead — every process holds the same buffer and the same
generators and makes the same draws — and splits only the work that averages:

* the stream: each process trains on its shard of every global batch (``data.batch_size`` is
  per process, as in any modforge run); what the method remembers of the batch is
  :meth:`Processes.gather_rows`-ed first, back in the order one process would have seen it
  (the sampler deals positions ``rank, rank + N, …`` of the permutation), so the buffer takes
  exactly the samples, in exactly the order, of a one-process run with ``N ×`` the batch;
* a replay minibatch: drawn on every process alike (``N ×`` the per-process minibatch, as one
  process with ``N ×`` the batch would draw), then each process takes its
  :meth:`Processes.share`;
* gradients: each process's mean-loss gradient over its equal share, averaged (the trainer
  does it once per step, as DDP would) — the gradient of the mean over the whole batch.

So a method whose loss is a mean over samples trains under N processes as one process with
``N ×`` the batch does (up to float summation order). Methods whose loss is not such a mean
(a hinge averaged over data-dependent violations, decisions taken on the first samples of a
batch) say so (:attr:`~modforge.continual.algorithms.base.Algorithm.distributed`) and are
refused under several processes.
"""

from __future__ import annotations

from collections.abc import Mapping

import torch

from ..train import distributed

__all__ = ["Processes"]


class Processes:
    """The processes a continual method trains over (one, unless ``--nproc N``).

    Args:
        world_size: how many processes train.
        rank: which of them this is.
    """

    def __init__(self, world_size: int = 1, rank: int = 0):
        if world_size < 1 or not 0 <= rank < world_size:
            raise ValueError(f"rank {rank} of {world_size} processes is not a process")
        self.world_size, self.rank = int(world_size), int(rank)

    @property
    def many(self) -> bool:
        return self.world_size > 1

    def gather_rows(self, rows: Mapping[str, torch.Tensor]) -> dict[str, torch.Tensor]:
        """Every process's ``rows`` (tensors of one batch, B rows each), joined in the stream's
        order: row ``i`` of process ``r`` becomes row ``i·N + r`` — where the sampler took it
        from. Each tensor comes back on its own device. The rows themselves with one process."""
        if not self.many:
            return dict(rows)
        shards = distributed.all_gather_objects({k: v.detach().cpu() for k, v in rows.items()},
                                                "sharing the batch with the continual method")  # fmt: skip
        joined: dict[str, torch.Tensor] = {}
        for key, value in rows.items():
            parts = [shard[key] for shard in shards]
            if len({len(part) for part in parts}) != 1:
                raise ValueError(f"the processes' batches differ in size ({[len(p) for p in parts]} rows of '{key}'); "
                                 "the training sampler gives every process the same number of samples")
            joined[key] = torch.stack(parts, 1).reshape(-1, *parts[0].shape[1:]).to(value.device)
        return joined

    def draw_size(self, per_process: int, available: int) -> int:
        """How many samples to draw in all when each process wants ``per_process`` and
        ``available`` are held: ``N × per_process``, or the largest multiple of N that is
        available (every process gets an equal share, so means average to the whole draw's)."""
        if not self.many:
            return min(int(per_process), int(available))
        return self.world_size * min(int(per_process), int(available) // self.world_size)

    def share(self, rows: Mapping[str, torch.Tensor]) -> dict[str, torch.Tensor]:
        """This process's equal, contiguous share of rows drawn alike on every process."""
        if not self.many:
            return dict(rows)
        out = {}
        for key, value in rows.items():
            if len(value) % self.world_size:
                raise ValueError(f"{len(value)} rows of '{key}' cannot be shared equally by {self.world_size} processes")
            size = len(value) // self.world_size
            out[key] = value[self.rank * size : (self.rank + 1) * size]
        return out

    def mean(self, tensor: torch.Tensor) -> torch.Tensor:
        """The mean of ``tensor`` over the processes (a gradient a method computed itself)."""
        if not self.many:
            return tensor
        return distributed.all_reduce_sum(tensor.detach(), "averaging a gradient over the processes") / self.world_size
