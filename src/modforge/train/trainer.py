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

Run extensions (:mod:`modforge.train.extension`: EMA, QAT, distillation, a user's own) are
called at their hooks — after the model is set up, in the step's loss, around the optimizer step,
around evaluation, in every checkpoint — the loop knows none of them by name.

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

import logging
import time
from collections.abc import Iterable
from pathlib import Path
from typing import Any

import torch
import torch.nn as nn

from ..core.errors import ConfigError
from ..engines import Engine
from ..engines.eager import Eager
from . import distributed
from .callbacks.base import Callback
from .checkpoint import CheckpointWriter
from .epoch_losses import EpochLosses, loss_of, loss_terms
from .extension import RunContext, RunExtension, refusal, registered_name
from .metrics import Metric, batch_size_of, is_loss_term
from .precision import PRECISIONS, set_up_precision
from .trainer_checkpoints import NonFiniteLossError, TrainerCheckpoints
from .trainer_evaluation import TrainerEvaluation
from .trainer_execution import TrainerExecution

__all__ = ["NonFiniteLossError", "Trainer", "loss_of", "loss_terms"]

log = logging.getLogger("modforge.train")


class Trainer(TrainerExecution, EpochLosses, TrainerEvaluation, TrainerCheckpoints):
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
        precision: ``"32"``, ``"bf16"`` (autocast; works on CPU), ``"16"`` (with a grad scaler), or
            ``"bf16-true"``/``"16-true"``: the weights themselves in 16 bits (:mod:`.precision`).
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
        self._runnable_parts: list[Any] | None = None  # what it was prepared from (prepare_runnable)
        self.scaler, self._autocast_dtype = set_up_precision(self.model, optimizer, precision, self.device)
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
        for extension in self.extensions:  # built directly (not from a config): its registered name
            extension.name = extension.name or registered_name(extension)
        if self.extensions:
            refused = refusal(self.extensions, engine=self.engine.name, trainer_class=type(self), precision=self.precision)
            if refused is not None:
                raise ConfigError(refused[0], path=refused[1])
        hooks = {hook: [e for e in self.extensions if getattr(type(e), hook) is not getattr(RunExtension, hook)]
                 for hook in ("loss", "before_optimizer_step", "after_optimizer_step", "set_training",
                              "on_train_epoch_end")}  # fmt: skip
        self._loss_extensions, self._set_training = hooks["loss"], hooks["set_training"]
        self._before_step, self._after_step = hooks["before_optimizer_step"], hooks["after_optimizer_step"]
        self._epoch_trained = hooks["on_train_epoch_end"]
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

    training_step.standard = True  # a subclass's own step has not: the run extensions' loss hooks need this one
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
            self.settle_checkpoints()
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
        for extension in self._epoch_trained:  # before validation (a user's SWA takes the epoch's weights)
            extension.on_train_epoch_end(self)
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

    def _step_and_backward(self, batch: Any, autocast: bool) -> torch.Tensor:
        """One micro-batch: the training step (under autocast when casting) and its backward."""
        if autocast:
            with self._autocast():
                loss = self.training_step(batch)
        else:  # no context manager per step when there is nothing to cast
            loss = self.training_step(batch)
        self.backward(loss)
        return loss

    def _step_scheduler_epoch(self, row: dict[str, Any]) -> None:
        if self.scheduler is None or self.scheduler_interval != "epoch":
            return
        if isinstance(self.scheduler, torch.optim.lr_scheduler.ReduceLROnPlateau):
            monitor = self.scheduler_monitor or "train_loss"
            self.scheduler.step(row.get(monitor, row["train_loss"]))
        else:
            self.scheduler.step()

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
