"""How the :class:`~modforge.train.trainer.Trainer` executes the model: the engine's runnable
(eager, TorchScript, torch.compile), the ``DistributedDataParallel`` wrapper with several processes,
autocast for reduced precision, and train/eval mode (told to the run extensions too).
"""

from __future__ import annotations

import contextlib
from typing import Any

import torch
import torch.nn as nn

from ..core.errors import ModforgeError

__all__ = ["TrainerExecution"]


class TrainerExecution:
    """The trainer's execution of the model (a part of the trainer, kept in a file of its own)."""

    def _autocast(self):
        if self._autocast_dtype is None:
            return contextlib.nullcontext()
        return torch.autocast(self.device.type, dtype=self._autocast_dtype)

    def prepare_runnable(self, loader: Any, generator: torch.Generator | None = None) -> Any:
        """The engine's runnable for training; the example batch an engine may need is the
        loader's first, drawn without changing the data order (the generator is restored).

        A later ``fit`` of the same model (a continual run's next task, training continued) keeps
        the runnable it has: preparing again would compile (or trace) and warm up once more, and
        draw an example batch that throws away what persistent loader workers had prepared. It
        is prepared again only when the engine, or the model's modules, parameters or buffers
        (which a traced or compiled runnable holds), are no longer the ones it was made of."""
        made_of, before = self._runnable_made_of(), self._runnable_parts
        if before is not None and len(before) == len(made_of) and all(a is b for a, b in zip(before, made_of, strict=True)):
            return self.runnable
        example = None
        if self.engine.capabilities.needs_example_input:
            state = generator.get_state() if generator is not None else None
            try:
                with torch.random.fork_rng(devices=[]):  # a loader without a generator draws from the global one
                    example = self.prepare_batch(next(iter(loader)))
            except StopIteration:
                raise ModforgeError("the training data is empty: no batch to prepare the engine with") from None
            finally:
                if state is not None:
                    generator.set_state(state)
        self.engine.arrange(self.model)  # before DDP wraps it: the reducer's buckets take the final layout
        # torch.compile's warm-up under the run's autocast: the graphs it compiles are the ones training and
        # evaluation then run (outside it, the first training step would compile the model a second time)
        under = self.engine.capabilities.prepared_under_autocast
        with self._autocast() if under else contextlib.nullcontext():
            runnable = self.engine.prepare(self._replicated(), example, train=True)
        self._runnable_parts = self._runnable_made_of()  # after: an engine may convert the model (float64)
        return runnable

    def _runnable_made_of(self) -> list[Any]:
        """What a prepared runnable depends on, compared by identity: the engine, the wrapper, and
        every module, parameter and buffer of the model (held, so that no new object can take the
        place of one that is gone)."""
        model = self.model
        return [self.engine, self.ddp, *model.modules(), *model.parameters(), *model.buffers()]

    def _replicated(self) -> nn.Module:
        """The module training runs: the model, or (several processes) its DDP wrapper."""
        if self.world_size < 2:
            return self.model
        if self.ddp is None:
            from torch.nn.parallel import DistributedDataParallel

            self.ddp = DistributedDataParallel(
                self.model,
                device_ids=[self.device.index] if self.device.type == "cuda" else None,
                find_unused_parameters=self.find_unused_parameters,
            )
        return self.ddp

    def _evaluation_runnable(self) -> Any:
        """What evaluation calls: the runnable, or with several processes the plain model
        (each process evaluates its own shard; DDP's forward would expect every process to
        run the same number of batches)."""
        return self.model if self.ddp is not None else self.runnable

    def train_mode(self, training: bool) -> None:
        """Train or eval mode for the model and, when it is a separate module, the runnable; the
        extensions hear of it (``train.qat``: ranges are recorded only while the model trains)."""
        self.model.train(training)
        if self.runnable is not self.model and isinstance(self.runnable, nn.Module):
            self.runnable.train(training)
        for extension in self._set_training:  # train.qat: observers record only while training
            extension.set_training(self.model, training)
