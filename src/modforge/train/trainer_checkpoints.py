"""Checkpoints of the :class:`~modforge.train.trainer.Trainer`: everything needed to continue
exactly (module doc of :mod:`modforge.train.trainer`), written in the background, and restored.

Besides the trainer's own entries, a checkpoint holds every callback's state (keyed by class and
place among its class) and every run extension's entries (top-level keys of its own name).
"""

from __future__ import annotations

import logging
from pathlib import Path
from typing import Any

import torch

from .._version import __version__
from ..core.errors import ModforgeError
from ..core.safe_files import ensure_folder
from . import distributed
from .callbacks.base import Callback
from .checkpoint import CHECKPOINT_FORMAT, list_checkpoints, load_weights, remove_abandoned_temps, serialize
from .extension import RunExtension
from .rng import capture_rng, restore_rng, seed_everything

__all__ = ["NonFiniteLossError", "TrainerCheckpoints"]

log = logging.getLogger("modforge.train")


class NonFiniteLossError(ModforgeError):
    """The training loss became NaN or infinite."""


class TrainerCheckpoints:
    """The trainer's checkpoints (a part of the trainer, kept in a file of its own)."""

    def check_finite(self) -> None:
        """Raise :class:`NonFiniteLossError` if a NaN/Inf entered this epoch's loss sum (of
        any process: every process decides alike)."""
        total, count = self._reduced_loss()
        if count and not bool(torch.isfinite(total.reshape(-1)[0])):
            self.writer.wait()  # checkpoints already queued are good ones: let them land first
            last = list_checkpoints(self.run_dir / "checkpoints") if self.run_dir else []
            kept = f"; the last good checkpoint is {last[0]}" if last else ""
            raise NonFiniteLossError(
                f"the training loss became non-finite in epoch {self.epoch + 1} (by step {self.global_step}); "
                f"training stopped{kept}. Lower the learning rate, clip gradients (train.grad_clip) or check the data"
            )

    def settle_checkpoints(self) -> None:
        """Wait until every submitted checkpoint is on disk, then sweep the folder again: the commit
        helper of a process killed just before this run may still have been committing at this run's
        first save, which therefore kept that process's temporary file; by now the helper is gone."""
        self.writer.wait()
        if self.rank == 0 and self.run_dir is not None and self._saved is not None:
            remove_abandoned_temps(self.run_dir / "checkpoints")

    def checkpoint_payload(self) -> dict[str, Any]:
        """Everything needed to continue exactly from here. With several processes every
        process must call it (it gathers their RNG states and loss sums)."""
        losses = torch.stack(self._losses).cpu() if self._losses else torch.zeros(0)
        sizes, per_rank = list(self._sizes), None
        if self.world_size > 1:  # every process's RNG state and epoch losses so far
            per_rank = distributed.all_gather_objects((capture_rng(), losses, sizes), "saving a checkpoint")
        return {
            "format": CHECKPOINT_FORMAT,
            "versions": {"modforge": __version__, "torch": str(torch.__version__)},
            "model": self.model.state_dict(),
            "optimizer": self.optimizer.state_dict(),
            "scheduler": self.scheduler.state_dict() if self.scheduler is not None else None,
            "scaler": self.scaler.state_dict() if self.scaler is not None else None,
            "epoch": self.epoch,
            "batch_in_epoch": self.batch_in_epoch,
            "samples_in_epoch": self.samples_in_epoch,
            "world_size": self.world_size,
            "global_step": self.global_step,
            "loader_generator": self.epoch_start_generator,
            "rng": capture_rng() if per_rank is None else per_rank[0][0],
            "rng_per_rank": None if per_rank is None else [rng for rng, _, _ in per_rank],
            "epoch_losses": losses,
            "epoch_sizes": sizes,
            "loss_parts": list(self.loss_parts) if self.loss_parts is not None else None,
            "epoch_losses_per_rank": None if per_rank is None else [lo for _, lo, _ in per_rank],
            "epoch_sizes_per_rank": None if per_rank is None else [si for _, _, si in per_rank],
            "history": [dict(row) for row in self.history],
            "callbacks": {self._callback_key(cb): cb.state_dict() for cb in self.callbacks
                          if not isinstance(cb, RunExtension)},
            "config": self.config,
            "name": self.name,
            "train_seconds": self.train_seconds,
            **self._extension_entries(),
            # the entry test, export and predict evaluate (its "average"): the extension that swaps weights in
            "evaluated_weights": next((e.name for e in self.extensions if e.evaluated_as), None),
        }

    def _extension_entries(self) -> dict[str, Any]:
        """Every extension's checkpoint entries, each under keys of its own name (``ema``,
        ``distill_adapters``): one clear error for an entry that would overwrite another's."""
        entries: dict[str, Any] = {}
        for extension in self.extensions:
            for key, value in extension.checkpoint_entries().items():
                if key != extension.name and not key.startswith(f"{extension.name}_") or key in entries:
                    raise ModforgeError(f"run extension '{extension.name}' writes the checkpoint entry '{key}': "
                                        f"its entries must be named '{extension.name}' or '{extension.name}_…'")
                entries[key] = value
        return entries

    def save_checkpoint(self, *, keep_last: int = 3, best: bool = False) -> Path | None:
        """Serialize the state now, write it in the background; re-point ``last.pt`` (and
        ``best.pt``). With several processes every process calls it; rank 0 writes."""
        if self.run_dir is None:
            return None
        if self.guard_nonfinite:
            self.check_finite()
        directory = self.run_dir / "checkpoints"
        path = directory / f"epoch{self.epoch:04d}-step{self.global_step:07d}.pt"
        payload = self.checkpoint_payload()
        if self.rank != 0:
            return path
        links = [directory / "last.pt"] + ([directory / "best.pt"] if best else [])
        if self._saved is None:  # first save in this process: pick up what earlier runs left
            ensure_folder(directory)  # a planted checkpoints -> elsewhere link takes no checkpoint
            remove_abandoned_temps(directory)
            self._saved = list(reversed(list_checkpoints(directory)))
        self._saved = [p for p in self._saved if p != path] + [path]
        prune, self._saved = self._saved[:-keep_last], self._saved[-keep_last:]
        self.writer.submit(serialize(payload), path, links, prune)
        return path

    def load_state(self, payload: dict[str, Any], generator: torch.Generator | None = None) -> None:
        """Restore a :meth:`checkpoint_payload` (the model's weights included)."""
        saved_world = int(payload.get("world_size") or 1)
        in_epochs = getattr(self.scheduler, "follows_epochs", False)  # it carries its position over in epochs
        if saved_world != self.world_size and self.scheduler_interval == "step" and self.scheduler is not None \
                and not in_epochs:
            raise ModforgeError(
                f"this checkpoint was trained by {saved_world} process(es) with a learning-rate schedule that counts "
                f"optimizer steps (interval: step); with {self.world_size} the remaining epochs would take a different "
                f"number of steps than the schedule planned. Resume with {saved_world} process(es), or use a "
                "schedule with interval: epoch"
            )
        self._saved_world, self._reduced = saved_world, None
        load_weights(self.model, payload.get("model"), "the checkpoint being resumed")
        for extension in self.extensions:  # after the weights: an extension may start from them
            extension.restore(payload)
        self.optimizer.load_state_dict(payload["optimizer"])
        if self.scheduler is not None and payload.get("scheduler") is not None:
            self.scheduler.load_state_dict(payload["scheduler"])
        if self.scaler is not None and payload.get("scaler") is not None:
            self.scaler.load_state_dict(payload["scaler"])
        self.epoch, self.batch_in_epoch = payload["epoch"], payload["batch_in_epoch"]
        self.samples_in_epoch = payload.get("samples_in_epoch")
        self.global_step = payload["global_step"]
        self.train_seconds_before = float(payload.get("train_seconds") or 0.0)
        self.history = [dict(row) for row in payload["history"]]
        if "loss_parts" in payload:  # None: saved before the first training batch named them
            self.loss_parts = tuple(payload["loss_parts"]) if payload["loss_parts"] is not None else None
        else:  # an older modforge's checkpoint: plain losses this epoch — terms from the next epoch on
            self.loss_parts = () if len(payload.get("epoch_losses", ())) else None
        self._losses, self._sizes = self._restored_losses(payload, saved_world)
        self.epoch_start_generator = payload.get("loader_generator")
        if generator is not None and self.epoch_start_generator is not None:
            generator.set_state(self.epoch_start_generator)
        per_rank = payload.get("rng_per_rank")
        if per_rank and len(per_rank) == self.world_size and saved_world == self.world_size:
            restore_rng(per_rank[self.rank])
        else:  # another process count: rank 0's state, and for the others a stream of their own drawn from it
            restore_rng(payload["rng"])
            if self.rank > 0:
                seed_everything(int(torch.randint(0, 2**62, (1,))) + self.rank)
        if saved_world != self.world_size and self.rank == 0:
            log.warning(
                "resuming a %d-process checkpoint with %d process%s: the model, optimizer and progress carry over; "
                "the rest of epoch %d is shared anew among the processes (each remaining sample read once), so the "
                "data order — and the result — differ from an uninterrupted run",
                saved_world, self.world_size, "" if self.world_size == 1 else "es", self.epoch + 1,
            )  # fmt: skip
        states = payload.get("callbacks", {})
        for cb in self.callbacks:
            state = self._saved_callback_state(states, cb)
            if state is not None:
                cb.load_state_dict(state)

    def _restored_losses(self, payload: dict[str, Any], saved_world: int) -> tuple[list[torch.Tensor], list[int]]:
        """This process's share of the epoch's losses so far: its own with as many processes
        as saved; otherwise all of them on rank 0 (each loss counted once) and none elsewhere."""
        losses, sizes = payload.get("epoch_losses_per_rank"), payload.get("epoch_sizes_per_rank")
        if losses is None:
            losses, sizes = [payload["epoch_losses"]], [payload["epoch_sizes"]]
        if len(losses) == self.world_size and saved_world == self.world_size:
            mine, my_sizes = [losses[self.rank]], [sizes[self.rank]]
        else:
            mine, my_sizes = (losses, sizes) if self.rank == 0 else ([], [])
        restored = [t for part in mine for t in part.to(self.device).unbind(0)]
        return restored, [int(n) for part in my_sizes for n in part]

    def _callback_key(self, cb: Callback) -> str:
        if id(cb) not in self._callback_keys:  # appended to self.callbacks after construction
            name = type(cb).__name__
            self._callback_keys[id(cb)] = f"{name}.{sum(type(c).__name__ == name for c in self.callbacks) - 1}"
        return self._callback_keys[id(cb)]

    def _saved_callback_state(self, states: dict[str, Any], cb: Callback) -> dict[str, Any] | None:
        """``cb``'s state in a checkpoint's ``callbacks``: the k-th saved entry of ``cb``'s class
        for the k-th callback of that class. Earlier checkpoints numbered a callback by its place
        among *all* callbacks (``Checkpoint.3``); ordering each class's entries by number maps
        both forms alike."""
        name, _, ordinal = self._callback_key(cb).rpartition(".")
        saved = sorted((k for k in states if k.rpartition(".")[0] == name and k.rpartition(".")[2].isdigit()),
                       key=lambda k: int(k.rpartition(".")[2]))  # fmt: skip
        k = int(ordinal)
        return states[saved[k]] if k < len(saved) else None
