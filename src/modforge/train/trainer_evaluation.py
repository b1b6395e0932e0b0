"""Evaluation passes of the :class:`~modforge.train.trainer.Trainer`: metrics over a loader, the
model's outputs collected (several processes: each evaluates its shard; the results are combined
to equal one process's), and the weights evaluation runs with (what the run extensions swap in).
"""

from __future__ import annotations

import contextlib
from typing import Any

import torch

from ..core.errors import ModforgeError
from . import distributed

__all__ = ["TrainerEvaluation"]


class TrainerEvaluation:
    """The trainer's evaluation (a part of the trainer, kept in a file of its own)."""

    def evaluation_weights(self) -> contextlib.AbstractContextManager[None]:
        """The weights validation and the test run with: what the extensions swap in for the
        duration (``train.ema``: the weight average), else the trained weights."""
        contexts = [c for e in self.extensions if (c := e.evaluation_weights(self)) is not None]
        if not contexts:
            return contextlib.nullcontext()
        stack = contextlib.ExitStack()
        for context in contexts:
            stack.enter_context(context)
        return stack

    @property
    def evaluated_as(self) -> str:
        """How the weights evaluation swaps in are named ("their average"), or "" for the trained ones."""
        return next((e.evaluated_as for e in self.extensions if e.evaluated_as), "")

    @torch.no_grad()
    def evaluate(self, loader, prefix: str) -> dict[str, Any]:
        """One pass of ``loader`` in eval mode; ``{prefix_metric: value}`` for scalar metrics
        (non-scalar ones, like a confusion matrix, go to :attr:`extra_results`)."""
        was_training = self.model.training
        self.train_mode(False)
        for metric in self.metrics.values():
            metric.reset()
        runnable = self._evaluation_runnable()
        try:
            for batch in loader:
                with self._autocast():
                    out = runnable(self.prepare_batch(batch))
                for metric in self.metrics.values():
                    metric.update(out)
        finally:
            self.train_mode(was_training)
        if _is_sharded(loader):
            for name, metric in self.metrics.items():
                metric.sync(f"metric '{name}'")
        row = {}
        for name, metric in self.metrics.items():
            value = metric.compute()
            if metric.logs:  # a family: several named figures from one evaluation
                for key, figure in value.items():
                    target = row if key in metric.logs else self.extra_results
                    target[f"{prefix}_{key}"] = figure
            elif metric.scalar:
                row[f"{prefix}_{name}"] = value
                row.update({f"{prefix}_{key}": figure for key, figure in metric.extra_columns().items()})
            else:
                self.extra_results[f"{prefix}_{name}"] = value
        return row

    @torch.no_grad()
    def predict(self, loader) -> torch.Tensor:
        """Logits for every batch of ``loader``, concatenated (eval mode)."""
        return self.collect(loader, ("logits",))["logits"]

    @torch.no_grad()
    def collect(self, loader, keys: tuple[str, ...]) -> dict[str, torch.Tensor]:
        """The output keys ``keys`` (model outputs or batch keys such as ``index``) for every
        batch of ``loader``, concatenated on the CPU (eval mode; the mode is restored)."""
        was_training = self.model.training
        self.train_mode(False)
        outputs: dict[str, list[torch.Tensor]] = {key: [] for key in keys}
        runnable = self._evaluation_runnable()
        try:
            for batch in loader:
                with self._autocast():
                    out = runnable(self.prepare_batch(batch))
                for key in keys:
                    if key not in out:
                        raise ModforgeError(f"the model's output has no '{key}' (it has: {', '.join(map(str, out))})")
                    value = out[key].detach()
                    outputs[key].append(value.float().cpu() if value.is_floating_point() else value.cpu())
        finally:
            self.train_mode(was_training)
        collected = {key: torch.cat(values) if values else torch.empty(0) for key, values in outputs.items()}
        if _is_sharded(loader):  # every process's shard, back in the data's order where rows are samples
            shards = distributed.all_gather_objects(collected, "collecting model outputs")
            sampler = getattr(loader.batch_sampler, "sampler", None)
            if hasattr(sampler, "n"):
                counts = [len(range(r, sampler.n, sampler.num_replicas)) for r in range(sampler.num_replicas)]
            else:  # whole batches per process (length buckets): joined in rank order, rows carry their index
                counts = [-1] * len(shards)
            collected = {key: _merge_shards([shard[key] for shard in shards], counts) for key in keys}
        return collected


def _is_sharded(loader: Any) -> bool:
    """True when ``loader`` reads one process's shard of its data (so results are combined)."""
    batches = getattr(loader, "batch_sampler", None)
    sampler = getattr(batches, "sampler", batches)  # a batch sampler that shards itself (length buckets)
    return distributed.is_distributed() and getattr(sampler, "num_replicas", 1) > 1


def _merge_shards(shards: list[torch.Tensor], samples: list[int]) -> torch.Tensor:
    """One tensor from every process's rows. When each shard has one row per sample it
    read (``samples``), the rows go back in data order (:func:`_interleave`); when samples
    give several rows (audio windows), the shards are joined in rank order — rows then carry
    their sample's ``index``, which is what such outputs are grouped by."""
    if [len(s) for s in shards] == samples:
        return _interleave(shards)
    kept = [s.cpu() for s in shards if len(s)] or [shards[0].cpu()]  # a process without rows adds none
    return torch.cat(kept)


def _interleave(shards: list[torch.Tensor]) -> torch.Tensor:
    """Rows of shards taken ``rank::W`` put back in order: row i of the data is row
    ``i // W`` of shard ``i % W``."""
    shards = [s.cpu() for s in shards]
    total = sum(len(s) for s in shards)
    if total == 0:
        return shards[0]
    out = torch.empty((total, *shards[0].shape[1:]), dtype=shards[0].dtype)
    for r, shard in enumerate(shards):
        out[r :: len(shards)] = shard
    return out
