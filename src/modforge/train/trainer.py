"""The Trainer: epochs of ``training_step`` over batches from ``prepare_batch``.

Algorithms (continual-learning methods...) subclass it and override the *step* —
``training_step`` (forward and loss) or ``optimizer_step`` — never the loop.

Exact resume. A checkpoint holds the model, optimizer, scheduler and scaler states, the
epoch, the number of batches already consumed in it and the global step, the state the
data-order generator had at the epoch's start, every global RNG state, the epoch's running
loss sums, the metrics history, every callback's state and the resolved config. Resuming
restores all of it, regenerates the epoch's order and skips the consumed batches without
loading them, so on the CPU a run that is killed and resumed ends bitwise identical to one
that never stopped.

Hot loop. The loss is accumulated on the device; the host reads it only every
``log_every`` steps and at epoch ends. Checkpoints are serialized on the spot and
committed to disk by the commit helper process.

Engines. Forward passes go through ``self.runnable``, which the engine prepares from the
model at the start of :meth:`fit` (eager: the model itself; TorchScript, torch.compile:
compiled modules sharing the model's parameters). Optimizer steps, gradient clipping and
checkpoints work on the model itself.

Several processes (torchrun). Inside a process group of more than one process the model
is wrapped in ``DistributedDataParallel`` for training (gradients averaged across
processes; an engine that cannot be replicated falls back to eager with a warning);
evaluation runs the plain model on this process's shard and the metrics are combined
from sums and counts (:meth:`Metric.sync`), so they equal a single process's on the same
data. Only rank 0 writes checkpoints and runs the file-writing callbacks; a checkpoint
holds every process's RNG state and counts its progress in samples of the whole epoch,
so it resumes with any number of processes (exactly with the same number).
"""

from __future__ import annotations

import contextlib
import logging
import math
import time
from collections.abc import Iterable
from pathlib import Path
from typing import Any

import torch
import torch.nn as nn

from .._version import __version__
from ..core.errors import ConfigError, ModforgeError
from ..core.safe_files import ensure_folder
from ..engines import Engine
from ..engines.eager import Eager
from . import distributed
from .callbacks.base import Callback
from .checkpoint import (
    CHECKPOINT_FORMAT,
    CheckpointWriter,
    list_checkpoints,
    load_weights,
    remove_abandoned_temps,
    serialize,
)
from .extension import RunContext, RunExtension, refusal
from .metrics import Metric, batch_size_of, is_loss_term
from .rng import capture_rng, restore_rng, seed_everything

__all__ = ["NonFiniteLossError", "Trainer"]

log = logging.getLogger("modforge.train")
PRECISIONS = ("32", "bf16", "16")


class NonFiniteLossError(ModforgeError):
    """The training loss became NaN or infinite."""


def loss_terms(out: dict[str, Any]) -> tuple[str, ...]:
    """The named loss terms of a model's output: every scalar tensor under a loss key
    (:func:`~modforge.model.spec.is_loss_key`: ``loss_*``, ``*_loss``) besides ``loss`` —
    UP-style ``cls_loss``, ``box_loss``, a config's ``loss_<name>`` — in output order; none when
    there is only one (it is the total, perhaps weighted: a column of its own would repeat it)."""
    terms = tuple(k for k, v in out.items() if is_loss_term(k) and isinstance(v, torch.Tensor) and v.ndim == 0)
    return terms if len(terms) > 1 else ()


def loss_of(out: dict[str, Any]) -> torch.Tensor:
    """The ``loss`` of a training forward pass, or one clear error saying how to get one."""
    if "loss" not in out:
        raise ModforgeError(
            "the model returned no 'loss' for a training batch: configure model.losses "
            "(e.g. losses: [cross_entropy]) or have a stage add a loss key"
        )
    return out["loss"]


class Trainer:
    """Trains a model whose ``forward(batch_dict)`` returns a dict with ``loss``.

    Subclassing (delira's ``closure`` and ``prepare_batch``; continual-learning algorithms).
    Override the per-batch hooks, never :meth:`fit`'s loop — the loop owns checkpoints, exact
    resume, accumulation, precision and several processes:

    * :meth:`prepare_batch` ``(batch) -> batch`` — every batch, training *and* evaluation,
      before the model sees it (moving to the device is the default; transform inputs here);
    * :meth:`training_step` ``(batch) -> loss`` — forward and loss of one training batch (the
      closure: call ``self.runnable(batch)``, combine losses, add regularisers);
    * :meth:`backward` ``(loss)`` — back-propagation (scaled for accumulation and fp16);
    * :meth:`optimizer_step` ``()`` — clip, step, zero the gradients.

    A subclass keeps this constructor's arguments. State of its own that must survive a
    resume goes into :meth:`checkpoint_payload` / :meth:`load_state` (call ``super()``). A
    config selects it with ``train.trainer: NAME`` (:mod:`modforge.train.trainers`).

    Args:
        model: the module to train (a :class:`~modforge.model.ModularModel` or any module
            with that dict contract).
        optimizer: its optimizer.
        scheduler: an LR scheduler, stepped every epoch or every optimizer step.
        scheduler_interval: ``"epoch"`` or ``"step"``.
        scheduler_monitor: metric passed to ``ReduceLROnPlateau``-style schedulers.
        metrics: name → metric, computed on validation/test passes.
        directions: metric name → True when higher is better (for "auto" modes).
        callbacks: the callbacks, run in their ``order``.
        max_epochs / max_steps: when to stop (whichever comes first).
        grad_clip: clip the gradient norm to this value (None: no clipping).
        accumulate: micro-batches per optimizer step.
        precision: ``"32"``, ``"bf16"`` (autocast; works on CPU) or ``"16"`` (with a grad scaler).
        device: where to train (``"auto"``: CUDA when available).
        log_every: steps between reads of the loss on the host.
        run_dir: the run folder (checkpoints go to ``run_dir/checkpoints``).
        config: the resolved config, stored in every checkpoint.
        name: the run's name (the config's), stored in every checkpoint.
        async_checkpoints: commit checkpoints in the background (the commit helper process).
        engine: how the model is executed (:mod:`modforge.engines`; default eager). The
            trainer calls only the engine's runnable, which shares the model's parameters.
        find_unused_parameters: passed to ``DistributedDataParallel`` in a multi-process run.
        extensions: run extensions (:mod:`modforge.train.extension`: EMA, QAT, distillation, a
            user's own), run in their ``order`` at their hooks; each is set up at the end of this
            constructor.
        context: what the run lends the extensions' :meth:`~RunExtension.setup` (its config,
            data, resumed checkpoint); None for a trainer used on its own.
    """

    def __init__(
        self,
        model: nn.Module,
        optimizer: torch.optim.Optimizer,
        *,
        scheduler: Any = None,
        scheduler_interval: str = "epoch",
        scheduler_monitor: str | None = None,
        metrics: dict[str, Metric] | None = None,
        directions: dict[str, bool] | None = None,
        callbacks: Iterable[Callback] = (),
        max_epochs: int = 1,
        max_steps: int | None = None,
        grad_clip: float | None = None,
        accumulate: int = 1,
        precision: str = "32",
        device: str | torch.device = "cpu",
        log_every: int = 50,
        run_dir: str | Path | None = None,
        config: dict[str, Any] | None = None,
        name: str = "run",
        async_checkpoints: bool = True,
        engine: Engine | None = None,
        find_unused_parameters: bool = False,
        extensions: Iterable[RunExtension] = (),
        context: RunContext | None = None,
    ):
        if precision not in PRECISIONS:
            raise ValueError(f"precision must be one of {', '.join(PRECISIONS)}, got {precision!r}")
        if scheduler_interval not in ("epoch", "step"):
            raise ValueError(f"scheduler interval must be 'epoch' or 'step', got {scheduler_interval!r}")
        if accumulate < 1 or max_epochs < 1 or log_every < 1:
            raise ValueError("accumulate, max_epochs and log_every must be at least 1")
        distributed.join_if_launched(device=str(device))  # launched by torchrun and nobody joined yet
        self.world_size, self.rank = distributed.world_size(), distributed.rank()
        if str(device) == "auto":
            device = "cuda" if torch.cuda.is_available() else "cpu"
        if self.world_size > 1 and str(device) == "cuda":
            device = f"cuda:{distributed.local_rank()}"  # one GPU per process
        self.device = torch.device(device)
        self.model = model.to(self.device)
        self.find_unused_parameters = find_unused_parameters
        self.ddp: nn.Module | None = None  # the DistributedDataParallel wrapper, built by fit()
        self.optimizer, self.scheduler = optimizer, scheduler
        self.scheduler_interval, self.scheduler_monitor = scheduler_interval, scheduler_monitor
        self.metrics = dict(metrics or {})
        self.directions = dict(directions or {})
        self.extensions = sorted(extensions, key=lambda e: e.order)  # their state: checkpoint_entries
        every = sorted([*callbacks, *self.extensions], key=lambda cb: cb.order)
        # a callback's checkpoint key is its class and its place among the callbacks of that class — the
        # same on every process, and unchanged when a resumed run adds or drops a callback of another class
        seen: dict[str, int] = {}
        self._callback_keys: dict[int, str] = {}
        for cb in every:
            if isinstance(cb, RunExtension):
                continue
            kind = type(cb).__name__  # not `name`: that is the run's name, an argument of this method
            self._callback_keys[id(cb)] = f"{kind}.{seen.get(kind, 0)}"
            seen[kind] = seen.get(kind, 0) + 1
        self.callbacks = [cb for cb in every if self.rank == 0 or not getattr(cb, "rank_zero_only", False)]
        self._step_callbacks = [cb for cb in self.callbacks if cb.overrides("on_step_end")]
        self.max_epochs, self.max_steps = max_epochs, max_steps
        self.grad_clip, self.accumulate, self.precision = grad_clip, accumulate, precision
        self.log_every = log_every
        self.run_dir = Path(run_dir) if run_dir else None
        self.config = config or {}
        self.name = name
        self.writer = CheckpointWriter(asynchronous=async_checkpoints)
        self.engine = engine if engine is not None else Eager()
        self.engine.refuse_training()  # before any work starts
        note = self.engine.single_device_note(
            self.device.type,
            torch.cuda.device_count() if self.device.type == "cuda" else 1,
            max(self.world_size, distributed.env_world_size()),
        )
        if note:
            log.warning(note)
            if max(self.world_size, distributed.env_world_size()) > 1:
                self.engine = Eager()  # replicas must stay in step: DDP over the eager model
        self.runnable: Any = self.model  # what forward passes call; fit() asks the engine for it
        self.scaler = torch.amp.GradScaler(self.device.type) if precision == "16" else None
        self._autocast_dtype = {"bf16": torch.bfloat16, "16": torch.float16}.get(precision)
        self._move = self.device.type != "cpu"
        # progress state (all of it goes into checkpoints)
        self.epoch = 0
        self.batch_in_epoch = 0
        self.global_step = 0
        self.samples_in_epoch: int | None = 0  # consumed this epoch over every process (None: from batch_in_epoch)
        self.history: list[dict[str, Any]] = []
        self.epoch_start_generator: torch.Tensor | None = None
        self._losses: list[torch.Tensor] = []  # this epoch's detached batch losses (read rarely)
        self._sizes: list[int] = []
        # the model's named loss terms (``cls_loss``, ``box_loss``...): found on the first training
        # batch, then each batch's entry in ``_losses`` is the vector (loss, term 1, term 2, ...)
        self.loss_parts: tuple[str, ...] | None = None
        self._step_parts: torch.Tensor | None = None
        # transient state
        self.should_stop = False
        self.stop_reason = ""
        self.epoch_finished = False
        self.steps_per_epoch = 0
        self.guard_nonfinite = False
        self.last_logged_loss: float | None = None
        self.last_loss: torch.Tensor | None = None  # the latest batch loss, detached (not synchronised)
        self.extra_results: dict[str, Any] = {}
        self._saved: list[Path] | None = None  # periodic checkpoints of this run, oldest first
        self._saved_world = self.world_size  # the process count of the checkpoint resumed from
        self._reduced: tuple[Any, torch.Tensor, int] | None = None  # the last loss reduction (several processes)
        self.train_seconds_before = 0.0  # training time of the sessions before a resume (from the checkpoint)
        self._session_started: float | None = None
        self._set_up_extensions(context)

    def _set_up_extensions(self, context: RunContext | None) -> None:
        """Refuse what the extensions declare they cannot run with (this trainer's class and
        engine; :func:`~modforge.train.extension.refusal`), then set each up, in order."""
        if self.extensions:
            refused = refusal(self.extensions, engine=self.engine.name, trainer_class=type(self))
            if refused is not None:
                raise ConfigError(refused[0], path=refused[1])
        hooks = {hook: [e for e in self.extensions if getattr(type(e), hook) is not getattr(RunExtension, hook)]
                 for hook in ("loss", "before_optimizer_step", "after_optimizer_step", "set_training")}  # fmt: skip
        self._loss_extensions, self._set_training = hooks["loss"], hooks["set_training"]
        self._before_step, self._after_step = hooks["before_optimizer_step"], hooks["after_optimizer_step"]
        for extension in self.extensions:
            extension.setup(self, context)

    def extension(self, name: str) -> RunExtension | None:
        """The run extension configured as ``train.<name>``, or None."""
        return next((e for e in self.extensions if e.name == name), None)

    # ------------------------------------------------------------------ steps
    def prepare_batch(self, batch: Any) -> Any:
        """Move a batch to the training device (a no-op on the CPU)."""
        if not self._move:
            return batch
        if isinstance(batch, dict):
            return {
                k: (v.to(self.device, non_blocking=True) if isinstance(v, torch.Tensor) else v)
                for k, v in batch.items()
            }
        return batch.to(self.device, non_blocking=True)

    def training_step(self, batch: dict[str, Any]) -> torch.Tensor:
        """Forward and loss for one batch (the closure algorithms override). The model's named
        loss terms (scalar ``*_loss`` outputs besides ``loss``) are noted for the epoch's
        ``train_<term>`` columns (:meth:`note_loss_parts`)."""
        out = self.runnable(batch)
        if not self._loss_extensions:
            self.note_loss_parts(out)
            return loss_of(out)
        loss, terms = loss_of(out), {}
        for extension in self._loss_extensions:  # distillation...
            loss, more = extension.loss(self, batch, out, loss)
            terms.update(more)
        self.note_loss_parts({**out, **terms})
        return loss

    def note_loss_parts(self, out: dict[str, Any]) -> None:
        """Note this batch's loss terms — every scalar ``*_loss`` tensor of ``out`` besides
        ``loss`` (UP-style ``cls_loss``, ``box_loss``...) — so the epoch's row logs their mean
        as ``train_<term>``. An overriding :meth:`training_step` may call it with its output;
        epochs with batches that did not are logged without the terms."""
        if self.loss_parts is None:
            self.loss_parts = loss_terms(out)
        if self.loss_parts and all(isinstance(out.get(k), torch.Tensor) for k in self.loss_parts):
            self._step_parts = torch.stack([out[k].detach().float().reshape(()) for k in self.loss_parts])

    def backward(self, loss: torch.Tensor) -> None:
        """Back-propagate (scaled for accumulation and fp16)."""
        if self.accumulate > 1:
            loss = loss / self.accumulate
        if self.scaler is not None:
            self.scaler.scale(loss).backward()
        else:
            loss.backward()

    def optimizer_step(self) -> None:
        """Clip, step, zero the gradients."""
        if self.grad_clip is not None:
            if self.scaler is not None:
                self.scaler.unscale_(self.optimizer)
            torch.nn.utils.clip_grad_norm_(self.model.parameters(), self.grad_clip)
        if self.scaler is not None:
            self.scaler.step(self.optimizer)
            self.scaler.update()
        else:
            self.optimizer.step()
        self.optimizer.zero_grad(set_to_none=True)

    def _autocast(self):
        if self._autocast_dtype is None:
            return contextlib.nullcontext()
        return torch.autocast(self.device.type, dtype=self._autocast_dtype)

    # ------------------------------------------------------------------- loop
    def fit(self, train_loader, val_loader=None, resume: dict[str, Any] | None = None) -> list[dict[str, Any]]:
        """Train until ``max_epochs``/``max_steps`` or a stop request; return the history."""
        generator: torch.Generator | None = getattr(train_loader, "generator", None)
        sampler = getattr(getattr(train_loader, "batch_sampler", None), "sampler", None)
        self.steps_per_epoch = len(train_loader)
        self.train_loader = train_loader  # for callbacks that read the training data at fit start (whitening_init)
        # the engine first (it may change the parameters' dtype or device: float64, a device of its own),
        # then the state, so the optimizer's restored state takes the parameters' final dtype and device
        self.runnable = self.prepare_runnable(train_loader, generator)
        if resume is not None:
            self.load_state(resume, generator)
        if self._session_started is None:  # the first fit() of this process (a continual run calls it per task)
            self._session_started = time.perf_counter()
        try:
            for cb in self.callbacks:
                cb.on_fit_start(self)
            while self.epoch < self.max_epochs and not self.should_stop and not self._steps_done():
                self._run_epoch(train_loader, val_loader, generator, sampler)
            for cb in self.callbacks:
                cb.on_fit_end(self)
        except (RuntimeError, distributed.PeerFailure) as exc:  # DDP's gradient averaging fails as RuntimeError
            failure = exc if isinstance(exc, distributed.PeerFailure) else distributed.peer_failure(
                exc, f"training (epoch {self.epoch + 1}, step {self.global_step})"
            )
            if failure is None:
                raise
            hint = f" (modforge train --resume {self.run_dir})" if self.run_dir is not None else ""
            raise distributed.PeerFailure(f"{failure}{hint}") from exc
        finally:
            self.writer.wait()
        self.extra_results["train_seconds"] = self.train_seconds
        return self.history

    def end_run(self, summary: dict[str, Any]) -> None:
        """Tell the callbacks that override :meth:`Callback.on_run_end` that the run is over and
        its folder complete (the runner calls it once ``summary.json`` and the plots are written)."""
        for cb in self.callbacks:
            if cb.overrides("on_run_end"):
                cb.on_run_end(self, summary)

    @property
    def train_seconds(self) -> float:
        """Seconds spent in :meth:`fit` over the whole run: the sessions before a resume (from
        the checkpoint) plus this one so far."""
        started = self._session_started
        return self.train_seconds_before + (time.perf_counter() - started if started is not None else 0.0)

    def prepare_runnable(self, loader: Any, generator: torch.Generator | None = None) -> Any:
        """The engine's runnable for training; the example batch an engine may need is the
        loader's first, drawn without changing the data order (the generator is restored)."""
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
        return self.engine.prepare(self._replicated(), example, train=True)

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

    def _steps_done(self) -> bool:
        return self.max_steps is not None and self.global_step >= self.max_steps

    def _run_epoch(self, loader, val_loader, generator, sampler) -> None:
        if self.batch_in_epoch == 0:
            if generator is not None:
                self.epoch_start_generator = generator.get_state()
            self._losses, self._sizes = [], []
            if not self.loss_parts:  # none yet (or an older checkpoint's plain epoch): look again this epoch
                self.loss_parts = None
            self.samples_in_epoch = 0
        else:  # resuming inside an epoch: same order, consumed batches skipped unread
            if generator is not None and self.epoch_start_generator is not None:
                generator.set_state(self.epoch_start_generator)
            batch_size = self._global_batch_size(loader)
            if self.samples_in_epoch is None:  # a checkpoint of a single process that counted batches only
                per_batch = getattr(getattr(loader, "batch_sampler", None), "batch_size", None) or 1
                self.samples_in_epoch = self.batch_in_epoch * per_batch
            if sampler is not None and hasattr(sampler, "skip_next"):
                sampler.skip_next(self.samples_in_epoch)
            self.batch_in_epoch = -(-self.samples_in_epoch // batch_size)  # in this run's batches
        self.epoch_finished = False
        set_epoch = getattr(getattr(loader, "dataset", None), "set_epoch", None)
        if callable(set_epoch):  # datasets with per-epoch randomness (audio crops, augmentation)
            set_epoch(self.epoch)
        for cb in self.callbacks:
            cb.on_epoch_start(self)
        self.train_mode(True)
        self._train_batches(loader)
        self.epoch_finished = True
        if self.world_size > 1:  # BatchNorm statistics drift apart per process: evaluate with rank 0's
            distributed.broadcast_buffers(self.model, what="sharing buffers after the epoch")
        row: dict[str, Any] = {"epoch": self.epoch + 1, "step": self.global_step, "train_loss": self._mean_loss()}
        row.update(self._mean_loss_parts())
        if self.guard_nonfinite:
            self.check_finite()  # before the epoch's losses are cleared (the epoch-end checkpoint follows)
        if val_loader is not None:
            with self.evaluation_weights():
                row.update(self.evaluate(val_loader, "val"))
        self._step_scheduler_epoch(row)
        self.history.append(row)
        self.epoch += 1
        self.batch_in_epoch = 0
        self.samples_in_epoch = 0
        if generator is not None:
            self.epoch_start_generator = generator.get_state()
        self._losses, self._sizes = [], []
        for cb in self.callbacks:
            cb.on_epoch_end(self, row)
        if self.should_stop and self.stop_reason:  # once, after the epoch's own line (the progress callback's)
            log.info("%s", self.stop_reason)

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

    @property
    def planned_steps(self) -> int:
        """The optimizer steps this run plans: ``max_steps``, else its epochs' steps (0 before :meth:`fit`)."""
        return self.max_steps or self.max_epochs * -(-(self.steps_per_epoch or 0) // self.accumulate)

    def _global_batch_size(self, loader: Any) -> int:
        """Samples of the epoch one step consumes: the loader's batch size × the processes
        its sampler shares the data with."""
        batch_sampler = getattr(loader, "batch_sampler", None)
        replicas = getattr(getattr(batch_sampler, "sampler", None), "num_replicas", 1)
        return int(getattr(batch_sampler, "batch_size", None) or 1) * int(replicas)

    def _train_batches(self, loader) -> None:
        micro = 0
        accumulate = self.accumulate
        remaining = len(loader) if hasattr(loader, "__len__") else self.steps_per_epoch - self.batch_in_epoch
        autocast = self._autocast_dtype is not None
        batch_size = self._global_batch_size(loader)
        for batch in loader:
            batch = self.prepare_batch(batch)
            # with several processes, gradients are averaged only on the micro-batch that steps
            if self.ddp is not None and (micro + 1) % accumulate and micro + 1 < remaining:
                with self.ddp.no_sync():
                    loss = self._step_and_backward(batch, autocast)
            else:  # no context manager per step when there is nothing to suspend
                loss = self._step_and_backward(batch, autocast)
            self.last_loss = loss.detach()
            self._losses.append(self._loss_entry())
            self._sizes.append(batch_size_of(batch) if isinstance(batch, dict) else 1)
            micro += 1
            self.batch_in_epoch += 1
            self.samples_in_epoch = (self.samples_in_epoch or 0) + batch_size
            if micro % accumulate and micro < remaining:
                continue
            for extension in self._before_step:
                extension.before_optimizer_step(self)
            self.optimizer_step()
            self.global_step += 1
            for extension in self._after_step:  # train.ema's update
                extension.after_optimizer_step(self)
            if self.scheduler is not None and self.scheduler_interval == "step":
                self.scheduler.step()
            if self.global_step % self.log_every == 0:
                self.last_logged_loss = float(loss.detach())
            for cb in self._step_callbacks:
                cb.on_step_end(self)
            if self.should_stop or self._steps_done():
                self.should_stop = True
                break

    def _loss_entry(self) -> torch.Tensor:
        """This batch's entry in the epoch's losses: the loss, or (loss, terms...) when the
        model names its loss terms (NaN terms: the step did not note them)."""
        parts, self._step_parts = self._step_parts, None
        if not self.loss_parts:
            return self.last_loss
        if parts is None:
            parts = torch.full((len(self.loss_parts),), math.nan, device=self.last_loss.device)
        return torch.cat([self.last_loss.float().reshape(1), parts.to(self.last_loss.device)])

    def _step_and_backward(self, batch: Any, autocast: bool) -> torch.Tensor:
        """One micro-batch: the training step (under autocast when casting) and its backward."""
        if autocast:
            with self._autocast():
                loss = self.training_step(batch)
        else:  # no context manager per step when there is nothing to cast
            loss = self.training_step(batch)
        self.backward(loss)
        return loss

    def _loss_total(self) -> torch.Tensor:
        """The epoch's sample-weighted loss sum so far (a few tensor ops, on the device): a
        scalar, or the vector (loss, terms...) when the model names its loss terms."""
        if not self._losses:
            return torch.zeros(1 + len(self.loss_parts)) if self.loss_parts else torch.zeros(())
        losses = torch.stack(self._losses).float()
        sizes = torch.tensor(self._sizes, dtype=losses.dtype, device=losses.device)
        return (losses * sizes.reshape(-1, *([1] * (losses.ndim - 1)))).sum(0)

    def _reduced_loss(self) -> tuple[torch.Tensor, int]:
        """The epoch's loss sum and sample count so far, over every process (reduced once
        per batch count: the epoch-end row, the NaN check and the checkpoint share it)."""
        if self.world_size < 2:
            return self._loss_total(), sum(self._sizes)
        key = (self.epoch, self.global_step, len(self._losses))
        if self._reduced is None or self._reduced[0] != key:
            total, count = self._loss_total(), sum(self._sizes)
            count_row = torch.tensor([float(count)], device=self.device).double()
            both = torch.cat([total.double().to(self.device).reshape(-1), count_row])
            both = distributed.all_reduce_sum(both, "the training loss")
            self._reduced = (key, both[:-1].reshape(total.shape), int(both[-1]))
        return self._reduced[1], self._reduced[2]

    def _mean_loss(self) -> float:
        total, count = self._reduced_loss()
        return float(total.reshape(-1)[0]) / count if count else float("nan")

    def _mean_loss_parts(self) -> dict[str, float]:
        """The epoch's mean of each named loss term (``train_cls_loss``...); terms some batch
        did not note are left out."""
        if not self.loss_parts:
            return {}
        total, count = self._reduced_loss()
        if not count or total.ndim == 0:
            return {}
        means = {f"train_{k}": float(v) / count for k, v in zip(self.loss_parts, total[1:].tolist(), strict=True)}
        return {k: v for k, v in means.items() if math.isfinite(v)}

    def _step_scheduler_epoch(self, row: dict[str, Any]) -> None:
        if self.scheduler is None or self.scheduler_interval != "epoch":
            return
        if isinstance(self.scheduler, torch.optim.lr_scheduler.ReduceLROnPlateau):
            monitor = self.scheduler_monitor or "train_loss"
            self.scheduler.step(row.get(monitor, row["train_loss"]))
        else:
            self.scheduler.step()

    # ------------------------------------------------------------- evaluation
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

    @property
    def rows_in_epoch(self) -> int:
        """Rows of the batches this process trained on so far this epoch (a resumed epoch's
        earlier ones included) — the real count, where ``samples_in_epoch`` counts whole
        batches of the nominal size (what a resume skips)."""
        return int(sum(self._sizes))

    # -------------------------------------------------------------- controls
    def add_callback(self, callback: Any) -> None:
        """Add ``callback`` after construction — a runner's own (a continual run's anytime
        evaluation) — in its ``order`` among the others, with a checkpoint key of its own."""
        kind = type(callback).__name__
        count = sum(1 for key in self._callback_keys.values() if key.startswith(f"{kind}."))
        self._callback_keys[id(callback)] = f"{kind}.{count}"
        if self.rank == 0 or not getattr(callback, "rank_zero_only", False):
            self.callbacks = sorted([*self.callbacks, callback], key=lambda cb: cb.order)
            self._step_callbacks = [cb for cb in self.callbacks if cb.overrides("on_step_end")]

    # -------------------------------------------------------------- controls
    def request_stop(self, reason: str) -> None:
        """Finish the current epoch, then stop (used by early stopping); ``reason`` is said once the
        epoch has ended, after its line."""
        self.should_stop, self.stop_reason = True, reason

    @property
    def is_last_epoch(self) -> bool:
        return self.should_stop or self.epoch >= self.max_epochs or self._steps_done()

    def direction(self, monitor: str) -> str:
        """ "max" or "min" for a monitored name like ``val_accuracy`` or ``train_loss``."""
        name = monitor.split("_", 1)[1] if "_" in monitor else monitor
        higher = self.directions.get(name, self.directions.get(monitor))
        if higher is None:  # a loss or a named loss term (cls_loss, loss_cross_entropy): lower is better
            higher = not (name.endswith("loss") or is_loss_term(name))
        return "max" if higher else "min"

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

    # ------------------------------------------------------------ checkpoints
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
