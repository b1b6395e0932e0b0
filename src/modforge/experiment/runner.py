"""From a validated config to a finished run folder: data, model, trainer, test, summary.

A run folder holds ``config.yaml`` (resolved), ``metrics.csv``, ``summary.json``,
``checkpoints/`` (``last.pt``, ``best.pt``, periodic files) and ``curves.png``.
"""

from __future__ import annotations

import dataclasses
import logging
import os
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import torch

from ..core.config import Config, display_path
from ..core.errors import ConfigError
from ..core.plugins import load_config_plugins
from ..core.references import stored_data_downloads
from ..core.registries import CALLBACKS, DATASETS, METRICS
from ..core.safe_files import check_folder, ensure_folder, write_atomic
from ..core.threads import choose_threads
from ..data.base import DataSplits
from ..data.loader import LoaderSettings, make_loader
from ..data.placement import resolve_data_device
from ..engines import build_engine
from ..model import build_model
from ..model.formats import inference_weights
from ..tasks.base import RunRoutines, Task, get_task, sectioned_tasks
from ..train import distributed
from ..train.checkpoint import CorruptCheckpointError, find_resumable, load_checkpoint, load_weights
from ..train.metrics import MeanLoss, Metric, is_loss_term
from ..train.optim_builder import build_optimizer, build_scheduler, plan_schedule
from ..train.rng import seed_everything
from ..train.trainer import Trainer
from .plots import plot_curves
from .run_plugins import check_signing_key, load_stored_plugins, snapshot_plugins
from .runs import RunFolderError, create_run_dir, write_json
from .settings import LOADER_KEYS, TrainSettings, held_destinations_message, keep_destinations_local, sweep_folder_of

__all__ = ["Experiment", "check_run_folder", "checkpoint_digest", "evaluate_checkpoint", "evaluation_stem",
           "require_a_loss", "run_folder_of", "start_run_folder", "train_run"]

log = logging.getLogger("modforge.experiment")


def _check_soft_targets(cfg: Config, splits: DataSplits, model: Any) -> None:
    """Mixed training batches (MixUp/CutMix) carry class probabilities as labels: every loss
    reading the labels must take them (``soft_targets = True``, e.g. ``cross_entropy``)."""
    if getattr(splits.train, "mixing", None) is None:
        return
    for info in getattr(model, "loss_info", []):
        fn = model.loss_fns[info.key]
        if info.target_key == "label" and not getattr(fn, "soft_targets", False):
            raise ConfigError(f"loss {info.type!r} takes class indices, but data.transforms.mix makes the training "
                              "labels class probabilities; use cross_entropy (or leave mix out)",
                              path="data.transforms.mix", source=cfg.where("data.transforms.mix"))  # fmt: skip


def build_splits(cfg: Config, seed: int) -> DataSplits:
    """The dataset ``data:`` names, built with the config's seed and its ``data.transforms``
    (handed to datasets that take them; for others, validation has refused them)."""
    data = {k: v for k, v in (cfg.data.get("data") or {}).items() if k not in LOADER_KEYS}
    context: dict[str, Any] = {"seed": seed}
    transforms = data.pop("transforms", None)
    if transforms is not None:
        context["transforms"] = transforms
    with stored_data_downloads(cfg.stored, cfg.where("data.args.download")):  # a stored config fetches nothing
        return DATASETS.build(
            data, path="data", origin_of=cfg.where, allowed_modules=cfg.plugins, base_dir=str(cfg.base_dir), **context
        )
_DEFAULT_CALLBACKS = ("csv_logger", "progress", "checkpoint", "nan_guard")


@dataclasses.dataclass
class Experiment:
    """Everything built from one config (before training)."""

    cfg: Config
    settings: TrainSettings
    splits: DataSplits
    loader: LoaderSettings
    seed: int
    model: torch.nn.Module
    metrics: dict[str, Metric]
    task: Task
    _warned_destinations: bool = dataclasses.field(default=False, init=False, repr=False)

    @property
    def monitor(self) -> str:
        if self.settings.monitor:
            return self.settings.monitor
        if self.splits.val is None:
            return "train_loss"
        logged = {key for key, _ in self.metric_directions()}  # a family's figures count (coco_map → map)
        for name in self.task.monitor_preference:
            if name in logged:
                return f"val_{name}"
        return "train_loss"

    @classmethod
    def build(cls, cfg: Config, splits: DataSplits | None = None, *, init_weights: bool = True) -> Experiment:
        """Seed, load the data (unless ``splits`` is given), build the model and metrics.

        With ``init_weights`` the model starts from ``model.init``'s weights, and ``cfg``
        then records the files read (absolute path, format and SHA-256); without, the
        caller loads a checkpoint's weights over the model (testing, resuming)."""
        load_config_plugins(cfg.plugins, sources=cfg.plugin_sources, origin="the config's plugins:")
        settings = TrainSettings(**(cfg.data.get("train") or {}))
        # a pin as given (warned above the CPUs), else the machine's share
        torch.set_num_threads(choose_threads(settings.num_threads, cfg.where("train.num_threads")))
        seed = int(cfg.data.get("seed") or 0)
        seed_everything(seed)
        data = dict(cfg.data.get("data") or {})
        if not data:
            raise ConfigError("a training config needs a 'data:' section (e.g. data: {type: digits})", path="data")
        try:
            loader = LoaderSettings(**{k: data.pop(k) for k in LOADER_KEYS if k in data})
        except ValueError as exc:
            raise ConfigError(str(exc), path="data", source=cfg.where("data")) from None
        if splits is None:
            splits = build_splits(cfg, seed)
        task = _task(cfg, splits)
        model = build_model(
            cfg,
            in_dim=splits.in_dim,
            num_classes=splits.num_classes,
            layout=splits.layout,
            input_shape=splits.input_shape,
            sample_rate=splits.sample_rate,
            init_weights=init_weights,
            label_shape=_label_shape(splits),
            **task.model_options,
        )
        if model.init_records:
            _record_init(cfg, model.init_records)
        if settings.qat is not None:  # after model.init: QAT fine-tunes the loaded weights; a checkpoint fits after
            from ..model.qat import prepare_parts

            prepare_parts(model, settings.qat.parts, torch.zeros(2, *splits.input_shape))
        _check_soft_targets(cfg, splits, model)
        if distributed.rank() > 0:  # same weights everywhere (DDP starts from rank 0's), own randomness
            seed_everything(seed + distributed.rank())  # dropout masks, augmentation drawn from torch's RNG
        metric_specs = settings.metrics
        if metric_specs is None:
            metric_specs = [{"type": name, "args": {}} for name in task.default_metrics]
        metrics: dict[str, Metric] = {}
        for i, spec in enumerate(metric_specs):
            name, n = spec["type"], 2
            while name in metrics:
                name, n = f"{spec['type']}_{n}", n + 1
            metrics[name] = METRICS.build(
                spec, path=f"train.metrics.{i}", origin_of=cfg.where, num_classes=splits.num_classes,
                class_names=list(splits.class_names) or None,
            )
        return cls(cfg, settings, splits, loader, seed, model, metrics, task)

    @property
    def trainer_class(self) -> type[Trainer]:
        """The Trainer class ``train.trainer`` names (checked at validation), else :class:`Trainer`."""
        from ..train.trainers import resolve_trainer

        return resolve_trainer(self.settings.trainer, allowed_modules=self.cfg.plugins, base_dir=str(self.cfg.base_dir),
                               source=self.cfg.where("train.trainer"))  # fmt: skip

    def metric_directions(self) -> list[tuple[str, bool]]:
        """(logged name, higher is better) of every scalar figure the metrics log."""
        out = []
        for name, metric in self.metrics.items():
            if metric.logs:
                out += [(key, metric.higher_is_better) for key in metric.logs]
            elif metric.scalar:
                out.append((name, metric.higher_is_better))
        return out

    def _a_loss_term_column(self, name: str) -> bool:
        """``train_<term>`` or ``val_<term>`` (with the ``loss`` metric) of a named loss term
        (``cls_loss``, ``loss_cross_entropy``): the model's output decides which terms exist, so
        such a monitor is checked against the first epoch's row (one clear error if absent)."""
        split, _, term = name.partition("_")
        if not is_loss_term(term):
            return False
        return split == "train" or (split == "val" and self.splits.val is not None
                                    and any(isinstance(m, MeanLoss) for m in self.metrics.values()))  # fmt: skip

    def check_monitor(self) -> None:
        """Refuse a ``train.monitor`` no epoch will ever log, before any training."""
        logged = ["train_loss"]
        if self.splits.val is not None:
            logged += [f"val_{key}" for key, _ in self.metric_directions()]
        if self.monitor not in logged and not self._a_loss_term_column(self.monitor):
            import difflib

            close = difflib.get_close_matches(self.monitor, logged, n=1)
            hint = f"; did you mean '{close[0]}'?" if close else ""
            raise ConfigError(
                f"'{self.monitor}' is never logged{hint} (logged each epoch: {', '.join(logged)})",
                path="train.monitor",
                source=self.cfg.where("train.monitor"),
            )

    def callback_specs(self, run_dir: Path | None = None) -> list[tuple[int, dict[str, Any]]]:
        """``train.callbacks`` as they are built, with their positions. A stored config's (a
        run being resumed) keep every destination its file named local, inside the run
        folder — only this command line re-activates one
        (:func:`~modforge.experiment.settings.keep_destinations_local`); what was held back
        is one warning, given once."""
        if not self.cfg.stored:
            return list(enumerate(self.settings.callbacks))
        specs, held = keep_destinations_local(list(self.settings.callbacks), self.cfg.where, run_dir)
        sweep = sweep_folder_of(run_dir)
        if sweep is not None and any(spec["type"] == "optuna_pruning" for _, spec in specs):
            check_folder(sweep, "sweep folder")  # its study (optuna.db) is written: no link out of it
        if held and not self._warned_destinations:
            self._warned_destinations = True
            what = f"the stored config of {display_path(run_dir)}" if run_dir is not None else "the stored config"
            log.warning(held_destinations_message(held, what))
        return specs

    def callbacks(self, run_dir: Path | None = None) -> list:
        """The default callbacks (CSV, progress, checkpoint, NaN guard) and the configured ones
        (:meth:`callback_specs`); a configured callback of a default's type replaces it."""
        settings, monitor = self.settings, self.monitor
        specs = self.callback_specs(run_dir)
        user = [  # train.monitor is only a default: a callback's own args.monitor/mode win
            CALLBACKS.build(
                spec,
                path=f"train.callbacks.{i}",
                origin_of=self.cfg.where,
                **{k: v for k, v in (("monitor", monitor), ("mode", "auto")) if k not in spec["args"]},
            )
            for i, spec in specs
        ]
        user_types = {spec["type"] for _, spec in specs}
        defaults = []
        for name in _DEFAULT_CALLBACKS:
            if name in user_types or (name == "nan_guard" and not settings.nan_guard):
                continue
            args = {"progress": {"bar": settings.progress}, "checkpoint": dict(settings.checkpoint)}.get(name, {})
            defaults.append(
                CALLBACKS.build({"type": name, "args": args}, path=f"train.{name}", monitor=monitor, mode="auto")
            )
        return defaults + user

    def trainer(self, train_loader, run_dir: Path | None, *, trainer_class: type = Trainer,
                resume: dict[str, Any] | None = None, **extra: Any) -> Trainer:  # fmt: skip
        """The configured trainer (``trainer_class`` with ``extra`` arguments: a ContinualTrainer
        and its algorithm). ``resume``: the checkpoint the run continues from (a distilled run's
        teacher is checked against the one it recorded before the teacher is built)."""
        settings = self.settings
        optimizer = build_optimizer(settings.optimizer, self.model, origin_of=self.cfg.where)
        scheduler_spec = settings.scheduler or {}
        plan = plan_schedule(settings.scheduler, epochs=settings.max_epochs, max_steps=settings.max_steps,
                             steps_per_epoch=-(-len(train_loader) // settings.accumulate))  # fmt: skip
        interval = plan.interval
        scheduler = build_scheduler(settings.scheduler, optimizer, plan=plan, origin_of=self.cfg.where)
        self.check_monitor()
        try:
            trainer = self._trainer(optimizer, scheduler, interval, scheduler_spec, train_loader, run_dir,
                                    trainer_class, extra, resume)  # fmt: skip
        except ValueError as exc:
            raise ConfigError(str(exc), path="train", source=self.cfg.where("train")) from None
        self._check_data_device(trainer.device)
        return trainer

    def _check_data_device(self, model_device: torch.device) -> None:
        """``data.device`` must be where the model trains: batches cut on one device cannot feed
        a model on another (torch would only say "tensors on different devices" mid-step)."""
        if self.loader.device is None:
            return
        held = resolve_data_device(self.loader.device)
        if held.type != model_device.type or (held.index or 0) != (model_device.index or 0):
            raise ConfigError(f"the training batches are made on {held} (data.device: {self.loader.device}) but the "
                              f"model trains on {model_device} (train.device: {self.settings.device}); set both to "
                              "the same device, or leave data.device out", path="data.device",
                              source=self.cfg.where("data.device"))  # fmt: skip

    def _trainer(self, optimizer, scheduler, interval, scheduler_spec, train_loader, run_dir, cls, extra,
                 resume) -> Trainer:  # fmt: skip
        settings = self.settings
        if settings.distill is not None:
            cls, extra = self._distilling(cls, train_loader, extra, (resume or {}).get("distill_teacher"))
        return cls(
            self.model,
            optimizer,
            scheduler=scheduler,
            scheduler_interval=interval,
            scheduler_monitor=scheduler_spec.get("monitor"),
            metrics=self.metrics,
            directions=dict(self.metric_directions()),
            callbacks=self.callbacks(run_dir),
            max_epochs=settings.max_epochs,
            max_steps=settings.max_steps,
            grad_clip=settings.grad_clip,
            accumulate=settings.accumulate,
            precision=settings.precision,
            device=settings.device,
            log_every=settings.log_every,
            run_dir=run_dir,
            config=self.cfg.to_dict(),
            name=self.cfg.name,
            async_checkpoints=settings.async_checkpoints,
            engine=build_engine(settings.engine, origin_of=self.cfg.where),
            find_unused_parameters=settings.distributed.find_unused_parameters,
            ema=settings.ema,
            **extra,
        )

    def _distilling(self, cls: type, train_loader: Any, extra: dict[str, Any],
                    recorded_teacher: str | None) -> tuple[type, dict[str, Any]]:  # fmt: skip
        """The distillation trainer and its teacher (``train.distill``), for the standard run only;
        ``recorded_teacher``: the fingerprint a resumed checkpoint recorded (checked before the
        teacher is built)."""
        from ..data.base import collate
        from ..train.distill import DistillTrainer
        from .teacher import load_teacher

        if cls is not Trainer:
            raise ConfigError(f"train.distill trains a model against a teacher in the standard run; this run's "
                              f"trainer is {cls.__name__} (a continual run or train.trainer)", path="train.distill",
                              source=self.cfg.where("train.distill"))  # fmt: skip
        teacher, fingerprint, path = load_teacher(self.cfg, self.splits, expected=recorded_teacher)
        # the run's config.yaml names the teacher absolutely: a resumed run reads its config from its own folder
        self.cfg.data["train"]["distill"]["teacher"] = str(path)
        dataset = train_loader.dataset
        if len(dataset) == 0:
            raise ConfigError("the training split is empty: no batch to size the distillation with", path="data")
        first = [0, 1] if len(dataset) > 1 else [0]  # not through the sampler: no random draw
        getitems = getattr(dataset, "__getitems__", None)  # a dataset that collates its own batches (COCO)
        example = getitems(first) if callable(getitems) else collate([dataset[i] for i in first])
        return DistillTrainer, {**extra, "teacher": teacher, "distill": self.settings.distill, "example": example,
                                "teacher_fingerprint": fingerprint}  # fmt: skip

    def evaluator(self) -> Trainer:
        """A trainer of the run's own class for evaluating ``self.model`` as the run's final test
        did: its precision (bf16 autocast…) and, for an engine that needs no example batch, its
        runnable (``eager`` with ``memory_format: channels_last``), so ``modforge test`` of a
        checkpoint reports the figures the run's own test reported."""
        settings = self.settings
        trainer = self.trainer_class(
            self.model,
            torch.optim.SGD(self.model.parameters(), lr=0.0),
            metrics=self.metrics,
            precision=settings.precision,
            device=settings.device,
            engine=build_engine(settings.engine, origin_of=self.cfg.where),
        )
        if not trainer.engine.capabilities.needs_example_input:
            trainer.runnable = trainer.engine.prepare(trainer.model, None, train=False)
        return trainer

    def loaders(self):
        """Train, val and test loaders; with several processes, this process's shards
        (``data.batch_size`` is per process)."""
        generator = torch.Generator().manual_seed(self.seed)
        shard = {"num_replicas": distributed.world_size(), "rank": distributed.rank()}
        train = make_loader(self.splits.train, self.loader, train=True, generator=generator, **shard)
        shard["mask_aware"] = self.scores_padded_batches
        val = make_loader(self.splits.val, self.loader, train=False, **shard) if self.splits.val is not None else None
        test = make_loader(self.splits.test, self.loader, train=False, **shard) if self.splits.test is not None else None
        return train, val, test

    def scores_padded_batches(self) -> bool:
        """Whether padded batches of whole files score as the files alone: a mask-aware model
        run by an engine that keeps its parts (eager, compile) — what length-bucketed
        evaluation (``data.eval_max_samples``) needs."""
        spec = self.settings.engine
        name = spec if isinstance(spec, str) else (spec or {}).get("type", "eager") if isinstance(spec, dict) else ""
        return bool(getattr(self.model, "mask_aware", False)) and name in ("eager", "compile")


def _record_init(cfg: Config, records: list[dict[str, Any]]) -> None:
    """Write into ``cfg`` which files ``model.init`` read: absolute path, format, SHA-256 (the
    run's ``config.yaml`` then says exactly where its starting weights came from, and pins them)."""
    original = cfg.data["model"]["init"]
    entries = original if isinstance(original, list) else [original]
    resolved = []
    for entry, record in zip(entries, records, strict=True):
        entry = dict(entry) if isinstance(entry, dict) else {"path": entry}
        if entry.get("format", "auto") == "auto":
            entry["format"] = record["format"]
        resolved.append({**entry, "path": record["path"], "sha256": record["sha256"]})
    cfg.data["model"]["init"] = resolved if isinstance(original, list) else resolved[0]


def _label_shape(splits: DataSplits) -> tuple[int, ...]:
    """One training sample's label shape (``()`` for a class index; a mask's ``(H, W)``), when
    the split keeps its labels as one tensor; else ``()``."""
    labels = getattr(splits.train, "labels", None)
    return tuple(labels.shape[1:]) if isinstance(labels, torch.Tensor) and labels.ndim > 1 else ()


def configured_task(cfg: Config) -> Task | None:
    """The task a config chooses before any data is loaded: its ``task:``, else the task whose
    own section it has (``continual:``); None: the dataset decides (:func:`_task`).

    Raises:
        ConfigError: an unknown ``task:``.
    """
    name = cfg.data.get("task")
    if name is None:
        owner = next((cls for section, cls in sectioned_tasks().items() if cfg.data.get(section) is not None), None)
        return owner() if owner is not None else None
    try:
        return get_task(name)
    except ValueError as exc:
        raise ConfigError(str(exc), path="task", source=cfg.where("task")) from None


def _task(cfg: Config, splits: DataSplits) -> Task:
    """The config's task (:func:`configured_task`), else the dataset's."""
    task = configured_task(cfg)
    if task is not None:
        return task
    try:
        return get_task(splits.task)
    except ValueError as exc:
        raise ConfigError(str(exc), path="data.type", source=cfg.where("data.type")) from None


def require_a_loss(exp: Experiment, cfg: Config) -> None:
    """Refuse, before anything is written, a model that cannot produce a training loss: no
    ``model.losses`` and no ``dict_io`` stage that could write a loss key."""
    if not getattr(exp.model, "makes_loss", True):
        raise ConfigError("the model has no loss and no stage that writes a loss key: there is nothing to train "
                          "on; add one, e.g. losses: [cross_entropy]", path="model.losses",
                          source=cfg.where("model"))  # fmt: skip


def start_run_folder(cfg: Config, run_dir: Path, *, restart: bool = False) -> None:
    """Make the run folder (once data, model and trainer are built: a config that fails to
    build leaves nothing behind), say where it is, and write ``config.yaml`` and the plug-in
    copies. ``restart``: the folder is a run that never reached its first checkpoint,
    started again from scratch — its config is rewritten, its plug-in copies are kept."""
    check_signing_key(cfg.plugins)  # a key that cannot sign the copies: one error, no half-made run folder
    if restart:
        ensure_folder(run_dir, named=True)
    else:
        create_run_dir(run_dir)
        log.info("run folder: %s", display_path(run_dir))
    write_atomic(run_dir / "config.yaml", cfg.to_yaml())
    if not (restart and (run_dir / "plugins" / "manifest.json").exists()):
        snapshot_plugins(cfg.plugins, run_dir)


def continue_run_folder(cfg: Config, run_dir: Path) -> None:
    """The folder a resumed run continues in: its own, or (a checkpoint resumed with
    ``--run-dir``) a new one, made now and given the run's ``config.yaml``."""
    try:
        ensure_folder(run_dir, named=True)
        if not os.path.lexists(run_dir / "config.yaml"):
            write_atomic(run_dir / "config.yaml", cfg.to_yaml())
    except OSError as exc:
        raise RunFolderError(f"cannot use the run folder {display_path(run_dir)}: {exc.strerror or exc}") from None


def train_run(
    cfg: Config,
    run_dir: Path,
    *,
    resume: dict[str, Any] | None = None,
    splits: DataSplits | None = None,
    restart: bool = False,
) -> dict[str, Any]:
    """Train a run of the config's task into ``run_dir`` and return its summary: the task's
    :meth:`~modforge.tasks.base.Task.run` — for most tasks :func:`fit_and_test` (train, test
    the best checkpoint, write ``summary.json`` and ``curves.png``); the continual task trains
    its task sequence instead.

    ``run_dir`` is made (:func:`start_run_folder`) only once everything is built; it may
    exist if empty. ``restart``: it is a run folder without a checkpoint, trained again from scratch."""
    train_settings = cfg.data.get("train") or {}
    distributed.join_if_launched(
        distributed.DistributedSettings(**(train_settings.get("distributed") or {})),
        device=str(train_settings.get("device", "auto")),
    )  # under torchrun from Python: join before the data is sharded
    task = configured_task(cfg)
    if task is None:  # the dataset's task, known once its data is loaded: fit_and_test hands the run over if it owns one
        return fit_and_test(cfg, run_dir, resume=resume, splits=splits, restart=restart, dispatch=True)
    return task.run(ROUTINES, cfg, run_dir, resume=resume, splits=splits, restart=restart)


def fit_and_test(
    cfg: Config,
    run_dir: Path,
    *,
    resume: dict[str, Any] | None = None,
    splits: DataSplits | None = None,
    restart: bool = False,
    dispatch: bool = False,
) -> dict[str, Any]:
    """The standard run: build, train (or resume), test ``best.pt`` with the task's report,
    write ``summary.json`` and ``curves.png``; return the summary. With ``dispatch`` (only
    :func:`train_run`'s own call), a task chosen by the dataset that owns its run routine
    gets the run instead (:meth:`Task.run`) — once: the routine it may call back is this one
    without ``dispatch``."""
    exp = Experiment.build(cfg, splits, init_weights=resume is None)  # a resumed run's weights are its checkpoint's
    if dispatch and type(exp.task).run is not Task.run:
        return exp.task.run(ROUTINES, cfg, run_dir, resume=resume, splits=exp.splits, restart=restart)
    if len(exp.splits.train) == 0:
        raise ConfigError("the dataset's training split is empty: nothing to train on", path="data")
    train_loader, val_loader, test_loader = exp.loaders()
    if len(train_loader) == 0:
        raise ConfigError(f"data.batch_size ({exp.loader.batch_size}) with drop_last leaves no batch of the "
                          f"{len(exp.splits.train)} training samples", path="data.batch_size",
                          source=cfg.where("data.batch_size"))  # fmt: skip
    require_a_loss(exp, cfg)
    trainer = exp.trainer(train_loader, run_dir, trainer_class=exp.trainer_class, resume=resume)
    main = distributed.is_main_process()
    if main:
        if resume is None:
            start_run_folder(cfg, run_dir, restart=restart)
        else:
            continue_run_folder(cfg, run_dir)
    trainer.fit(train_loader, val_loader, resume=resume)
    summary: dict[str, Any] = {
        "config": cfg.name,
        "epochs": len(trainer.history),
        "steps": trainer.global_step,
        "params": sum(p.numel() for p in exp.model.parameters()),
        "monitor": exp.monitor,
        "stopped_early": bool(trainer.stop_reason),
        "stop_reason": trainer.stop_reason or None,
        "train_seconds": round(trainer.extra_results.get("train_seconds", 0.0), 3),
        "last": trainer.history[-1] if trainer.history else {},
    }
    best_path = run_dir / "checkpoints" / "best.pt"
    checkpoint_cb = next((cb for cb in trainer.callbacks if type(cb).__name__ == "Checkpoint"), None)
    earlier = getattr(checkpoint_cb, "best_file", None)
    if not best_path.exists() and earlier and Path(earlier).exists():  # resumed into a new folder, no better
        best_path = Path(earlier)  # epoch since: the best weights are the resumed run's best.pt
    if checkpoint_cb is not None and checkpoint_cb.best is not None:
        summary["best"] = {"epoch": checkpoint_cb.best_epoch, exp.monitor: checkpoint_cb.best}
    if test_loader is not None:
        evaluated = "final weights"
        # rank 0 reads best.pt and hands the weights to the other processes (which may not see its disk)
        best = _best_weights(best_path) if main else None
        best = distributed.broadcast_object(best, what="sharing best.pt for the test")
        if best is not None:
            exp.model.load_state_dict(best)
            evaluated = "checkpoints/best.pt" if best_path.parent.parent == run_dir else display_path(best_path)
        elif trainer.ema is not None and trainer.ema.settings.evaluate:  # the final weights: their average
            exp.model.load_state_dict(trainer.ema.average)
            evaluated = "final weights (their average)"
        out_dir = run_dir if main else None
        summary.update(exp.task.test(trainer, test_loader, exp.splits.test, split="test", out_dir=out_dir, stem=""))
        summary["evaluated"] = evaluated
    if distributed.is_distributed():
        summary["processes"] = distributed.world_size()
    if main:
        write_json(run_dir / "summary.json", summary)
        plot_curves(trainer.history, run_dir / "curves.png", title=cfg.name)
    trainer.end_run(summary)  # after the files: trackers keep them
    return summary


def _best_weights(path: Path) -> dict[str, Any] | None:
    """``best.pt``'s weights for the end-of-training test (its weight average with
    ``train.ema``); ``None`` (the final weights are tested, with a warning) when there is
    none or it is damaged."""
    if not path.exists():
        return None
    try:
        return inference_weights(load_checkpoint(path))
    except CorruptCheckpointError as exc:
        log.warning("%s; testing the final weights instead", exc)
        return None


def run_folder_of(target: Path) -> Path | None:
    """The run folder a command's target belongs to: the folder itself, or the one whose
    ``checkpoints/`` holds the checkpoint file; ``None`` for a checkpoint elsewhere."""
    target = Path(target)
    if target.is_dir():
        return target
    if target.parent.name == "checkpoints":
        return target.parent.parent
    return None


def check_run_folder(target: Path) -> Path | None:
    """Check, once and before anything in it is read or written, the run folder a command
    reuses (``test``, ``train --resume``, ``export``): a link in it that leads outside it
    (or dangles, or loops), or an entry that is neither a file nor a folder, is one
    :class:`~modforge.core.safe_files.UnsafePathError` naming it. Returns the run folder.

    A run folder may come from someone else; a link planted at a name modforge writes
    (``curves.png``, ``evaluations/``) would otherwise make it write through to any file."""
    folder = run_folder_of(target)
    if folder is not None and os.path.lexists(folder):
        check_folder(folder, "run folder")
    return folder


def load_trained(target: Path, which: str = "best", overrides: Sequence[str] = ()) -> tuple[Experiment, Path]:
    """The experiment a run folder or checkpoint was trained with, its model holding the
    checkpoint's weights, and the checkpoint's path (:func:`_load_trained`)."""
    exp, path, _ = _load_trained(target, which, overrides)
    return exp, path


def _load_trained(
    target: Path, which: str = "best", overrides: Sequence[str] = ()
) -> tuple[Experiment, Path, dict[str, Any]]:
    """The experiment (data and model) a run folder or checkpoint was trained with, the
    model holding the checkpoint's weights; the checkpoint's path and its whole content.

    ``target`` is a checkpoint file or a run folder (``{which}.pt``, else ``last.pt``, else
    the newest checkpoint that loads; a damaged file is skipped with a warning, never used).
    ``overrides`` (``key.path=value``) change the stored config before anything is built —
    e.g. another dataset to evaluate on: when they change
    ``data.type``, the stored dataset arguments the new dataset does not take are dropped
    (the others, such as ``audio:``, are kept).
    """
    path, payload = trained_checkpoint(target, which)
    cfg = trained_config(path, payload, overrides)
    return trained_experiment(cfg, path, payload), path, payload


def trained_checkpoint(target: Path, which: str = "best") -> tuple[Path, dict[str, Any]]:
    """The checkpoint a run folder or checkpoint file names (its folder checked first, see
    :func:`_load_trained`) and its content, read without executing anything."""
    path = Path(target)
    check_run_folder(path)
    if path.is_dir():
        return find_resumable(path, first=(f"{which}.pt", "last.pt"), using="evaluating")
    return path, load_checkpoint(path)


def trained_config(path: Path, payload: dict[str, Any], overrides: Sequence[str] = (), *,
                   own_copies: bool = True) -> Config:  # fmt: skip
    """The config stored in a checkpoint, validated, its plug-ins available: the run's own signed
    copies (``own_copies``), what the user loaded, installed entry points — never an import the
    config asks for by itself. ``own_copies=False`` (a run a stored config points at) imports no copy."""
    stored = payload.get("config")
    if not isinstance(stored, dict):
        raise ConfigError(f"{display_path(path)} holds no config (a modforge checkpoint stores the config it was "
                          "trained with); it cannot be rebuilt")  # fmt: skip
    cfg = Config(stored, {}, None)
    cfg.stored = True
    run_dir = path.parent.parent if path.parent.name == "checkpoints" and own_copies else None
    what = f"the config stored in {display_path(path)}"
    in_force = load_stored_plugins(cfg.data.get("plugins"), run_dir=run_dir, what=what)
    if in_force != cfg.plugins:
        cfg.data["plugins"] = in_force
    return _overridden(cfg, overrides) if overrides else _validated_stored(cfg, what)


def trained_experiment(cfg: Config, path: Path, payload: dict[str, Any], splits: DataSplits | None = None) -> Experiment:
    """The experiment of a stored config (on ``splits`` when given: no dataset is built), its model
    holding the checkpoint's weights (the weight average, when the run kept one)."""
    exp = Experiment.build(cfg, splits, init_weights=False)
    _load_weights(exp.model, inference_weights(payload), path)
    if exp.settings.qat is not None:  # evaluated and exported with the ranges it learned
        from ..model.qat import observing

        observing(exp.model, False)
    return exp


def _validated_stored(cfg: Config, what: str) -> Config:
    """A stored config checked like a config file (it is data from a file like any other)."""
    from .schema import validate_config

    try:
        return validate_config(cfg)
    except ConfigError as exc:
        raise ConfigError(f"{what} is not a valid config: {exc}") from None


def _load_weights(model: torch.nn.Module, state: Any, path: Path) -> None:
    """The checkpoint's weights into the model rebuilt from its config; a misfit is one message."""
    load_weights(model, state, display_path(path))


def _overridden(cfg: Config, overrides: Sequence[str]) -> Config:
    """``cfg`` with ``overrides`` applied (a switched dataset or part drops the old type's
    arguments: :mod:`modforge.core.retype`) and validated."""
    from .schema import apply_overrides, validate_config

    return validate_config(apply_overrides(cfg, overrides))


def checkpoint_digest(path: Path) -> str:
    """The SHA-256 of a checkpoint file's bytes (what an evaluation's record says it evaluated)."""
    import hashlib

    with open(path, "rb") as handle:
        return hashlib.file_digest(handle, "sha256").hexdigest()


def evaluation_stem(checkpoint: Path, split: str, overrides: Sequence[str], out_dir: Path | None = None) -> str:
    """``best-test-`` — the name prefix of an evaluation's files; with overrides (another
    dataset...), their digest too, so evaluations on other data never replace each other.

    An evaluation never replaces one of *other weights*: when ``out_dir`` already holds the
    record (``<stem>.json``) of an evaluation of a checkpoint with other content (``best.pt``
    has changed since), the stem also gets a digest of this checkpoint's content
    (``best-test-1a2b3c4d-``). Evaluating the same weights again replaces its own files."""
    import hashlib
    import json

    stem = f"{checkpoint.stem}-{split}-"
    if overrides:
        stem += hashlib.sha1("\n".join(overrides).encode()).hexdigest()[:8] + "-"
    record = out_dir / f"{stem.rstrip('-')}.json" if out_dir is not None else None
    if record is None or not record.exists():
        return stem
    digest = checkpoint_digest(checkpoint)
    try:
        earlier = json.loads(record.read_text()).get("checkpoint_sha256")
    except (OSError, ValueError, AttributeError, RecursionError):  # a damaged or crafted record: a new name
        earlier = None
    return stem if earlier == digest else f"{stem}{digest[:8]}-"


def evaluate_checkpoint(
    target: Path, *, split: str = "test", which: str = "best", overrides: Sequence[str] = ()
) -> tuple[dict[str, Any], Path]:
    """Rebuild data and model from a checkpoint's config, load its weights, evaluate ``split``
    with the run's task. Files the task writes (a spoofing run's score file and DET plot) go
    to the run's ``evaluations/`` folder, named by :func:`evaluation_stem`.

    Returns:
        ``({split: {metric: value}, ...}, checkpoint path)``.
    """
    exp, path, payload = _load_trained(target, which, overrides)
    out_dir = path.parent.parent / "evaluations" if path.parent.name == "checkpoints" else None
    stem = evaluation_stem(path, split, overrides, out_dir)
    return exp.task.evaluate(exp, payload, split, out_dir=out_dir, stem=stem, what=f"the dataset of {path}"), path


def evaluate_split(exp: Experiment, split: str, *, out_dir: Path | None, stem: str, what: str) -> dict[str, Any]:
    """Evaluate ``exp.model`` as it is (no checkpoint: a config's ``model.init`` weights) on one
    split with the task's report (metrics, and the files the task writes into ``out_dir``: a
    spoofing run's scores, per-attack table, DET plot).

    Raises:
        UsageError: the dataset has no such split (``what`` names the dataset's source).
    """
    return exp.task.evaluate(exp, {}, split, out_dir=out_dir, stem=stem, what=what)


ROUTINES = RunRoutines(
    fit_and_test=fit_and_test,
    build=Experiment.build,
    start_run_folder=start_run_folder,
    continue_run_folder=continue_run_folder,
    require_a_loss=require_a_loss,
    write_json=write_json,
)
"""What the runner lends a task's :meth:`~modforge.tasks.base.Task.run`."""
