"""The continual-learning run: tasks one after another, one trainer, one algorithm.

For task ``t`` the trainer continues to ``(t + 1) × epochs_per_task`` epochs on that task's
training data (each task's loader has its own seeded generator, so a run resumes
mid-task exactly as any run does); then the algorithm's end-of-task work runs, every task
seen so far is evaluated on its test set (class-IL and task-IL accuracy: a row of each
accuracy matrix), and a checkpoint is written. The task loop's progress lives in the
checkpoints, so a run killed anywhere — mid-task or between a task's last epoch and its
evaluation — resumes to the same final matrix.

Before the first task the untrained model is evaluated on every task, and at each boundary the
next task before it is trained, for forward transfer (``continual.forward_transfer``); with
``continual.eval_every`` the accuracy on the tasks seen so far is also measured every N steps
(anytime accuracy); ``continual.blurry`` mixes a share of each task's training samples into its
neighbours; ``continual.online`` is one pass over the stream.

The run folder gets ``summary.json`` (both matrices, average and learning accuracy, forgetting,
backward and forward transfer, the anytime records, the samples each task trained on),
``cl_matrix.png`` and, with anytime accuracy, ``cl_anytime.png``.
"""

from __future__ import annotations

import functools
import logging
from pathlib import Path
from typing import Any

import torch

from ...continual.algorithms.base import Algorithm
from ...continual.evaluation import (
    AccuracyMatrix,
    average_accuracy,
    backward_transfer,
    class_il_correct,
    forgetting,
    forward_transfer,
    learning_accuracy,
    task_il_correct,
)
from ...continual.trainer import ContinualTrainer
from ...core.config import Config
from ...core.errors import ConfigError, ModforgeError, UsageError
from ...core.registries import ALGORITHMS
from ...data.loader import make_loader
from ...train import distributed
from ..base import RunRoutines
from .settings import ContinualSettings, continual_settings

__all__ = ["continual_run", "evaluate_continual"]

log = logging.getLogger("modforge.experiment")


def continual_run(
    routines: RunRoutines,
    cfg: Config,
    run_dir: Path,
    *,
    resume: dict[str, Any] | None = None,
    splits: Any = None,
    restart: bool = False,
) -> dict[str, Any]:
    """Train the task sequence of ``cfg``'s dataset with its algorithm; return the summary
    (``run_dir`` is made once everything is built; ``restart``: a folder that never reached
    its first checkpoint, trained again from scratch; ``splits``: the data, when already
    loaded). ``routines``: the runner's. Under ``--nproc N`` every process trains its shard
    of each task (:mod:`~modforge.continual.processes`) and evaluates its shard of each test
    set; rank 0 writes the folder."""
    built = routines.built
    if built is not None and built.cfg is cfg and (splits is None or splits is built.splits):
        exp = built  # the runner's, for this very config
    else:
        exp = routines.build(cfg, splits, init_weights=resume is None)
    tasks = getattr(exp.splits, "tasks", None)
    if not tasks:
        raise ConfigError("a continual run needs a task-sequence dataset (seq, perm, rot over any classification "
                          "dataset; seq_digits, seq_mnist, seq_cifar10, … — modforge list dataset)",
                          path="data.type", source=cfg.where("data.type"))
    settings = continual_settings(cfg)
    # one starting point on every process, before a method copies the weights (GDumb's reset, a teacher)
    distributed.broadcast_module(exp.model, what="sharing the starting weights")
    algorithm = ALGORITHMS.build(settings.algorithm, path="continual.algorithm", origin_of=cfg.where,
                                 model=exp.model, num_classes=exp.splits.num_classes, seed=exp.seed)
    name = settings.algorithm["type"]
    if exp.splits.setting not in algorithm.settings:
        raise ConfigError(f"algorithm '{name}' works on {' or '.join(algorithm.settings)} sequences; "
                          f"data.type '{cfg.data['data']['type']}' is {exp.splits.setting}",
                          path="continual.algorithm", source=cfg.where("continual.algorithm"))
    swapping = next((e for e in exp.extensions if e.evaluated_as), None)  # evaluation with other weights
    if swapping is not None and algorithm.weight_average:
        key = f"train.{swapping.name}"
        raise ConfigError(f"algorithm '{name}' cannot be evaluated with {key}'s weights ({swapping.evaluated_as}): "
                          f"{algorithm.weight_average} (set {key}.{swapping.trained_weights_setting} to evaluate the "
                          "trained weights)", path=key, source=cfg.where(key))  # fmt: skip
    if distributed.is_distributed() and algorithm.distributed:
        raise ConfigError(f"algorithm '{name}' trains in one process only: {algorithm.distributed}; launch it "
                          "without --nproc/torchrun", path="continual.algorithm",
                          source=cfg.where("continual.algorithm"))  # fmt: skip
    main = distributed.is_main_process()
    _refuse_whole_run_stopping(cfg, exp)
    if exp.settings.trainer is not None:
        raise ConfigError("a continual run's training step is its algorithm's (continual.algorithm); "
                          "train.trainer applies to other runs", path="train.trainer",
                          source=cfg.where("train.trainer"))  # fmt: skip
    from ...continual.blurry import blurry_tasks
    from .monitors import AnytimeAccuracy, StreamCounter

    trains = blurry_tasks([task.train for task in tasks], settings.blurry, exp.seed)
    loaders = [_train_loader(exp, trains, i, cumulative=algorithm.cumulative) for i in range(len(tasks))]
    routines.require_a_loss(exp)
    trainer = exp.trainer(loaders[0], run_dir, trainer_class=ContinualTrainer, algorithm=algorithm)
    trainer.add_callback(StreamCounter())
    if settings.eval_every is not None:
        trainer.add_callback(AnytimeAccuracy(settings.eval_every, lambda tr, t: _evaluate_seen(tr, exp, tasks, t)))
    if main:
        routines.open_run_folder(cfg, run_dir, resumed=resume is not None, restart=restart)
    epochs = settings.epochs_per_task
    keep_last = next((cb.keep_last for cb in trainer.callbacks if hasattr(cb, "keep_last")), 3)
    first = 0
    if resume is not None:  # the task the checkpoint is in (or the one whose evaluation is missing)
        first = min(len(tasks) - 1, int(resume.get("continual", {}).get("tasks_done", 0)))
    elif settings.forward_transfer:  # b_j: every task's accuracy before any training (forward transfer)
        rows = _evaluate_tasks(trainer, exp, tasks, range(len(tasks)), logits=True)
        trainer.continual["initial"] = {"class_il": rows[0], "task_il": rows[1]}
    entered = None  # the task whose schedule, order and beginning are in place
    for t in range(first, len(tasks)):
        resuming = resume is not None and t == first
        if entered != t:
            begin = not resuming  # a resumed task has begun: the checkpoint holds that state
            if resuming and resume.get("algorithm") is not None and int(resume["algorithm"]["task"]) < t:
                algorithm.load_state_dict(resume["algorithm"])  # a boundary checkpoint of an older modforge,
                begin = True  # saved before the next task began: begin it on top of the saved state
            _enter_task(t, trainer, exp, tasks, loaders, epochs, begin=begin)
            if resuming and begin:  # what fit() restores must include that beginning (and its fresh schedule)
                resume = _with_task_begun(resume, trainer)
        val = make_loader(tasks[t].val, exp.loader, train=False) if tasks[t].val is not None else None
        trainer.fit(loaders[t], val, resume=resume if resuming else None)
        if trainer.should_stop:  # a callback asked to stop: later tasks would be evaluated untrained
            raise ModforgeError(
                f"training was stopped during task {t + 1} ({trainer.stop_reason or 'a callback asked'}); a continual "
                f"run trains every task for continual.epochs_per_task — remove the stopping callback and resume with "
                f"modforge train --resume {run_dir}"
            )
        if trainer.continual["tasks_done"] > t:
            continue  # resumed after this task's evaluation: nothing left to do for it
        algorithm.end_task(t, trainer, make_loader(loaders[t].dataset, exp.loader, train=False))
        class_row, task_row = _evaluate_seen(trainer, exp, tasks, t)
        trainer.continual["class_il"].append(class_row)
        trainer.continual["task_il"].append(task_row)
        if settings.forward_transfer and t + 1 < len(tasks) and "initial" in trainer.continual:
            ahead = _evaluate_tasks(trainer, exp, tasks, [t + 1])  # R[t][t+1]: the next task before it is trained
            before = trainer.continual.setdefault("before_task", {"class_il": [], "task_il": []})
            before["class_il"].append(ahead[0][0])
            before["task_il"].append(ahead[1][0])
        trainer.continual["tasks_done"] = t + 1
        if t + 1 < len(tasks):  # the boundary checkpoint resumes into the next task, already begun
            _enter_task(t + 1, trainer, exp, tasks, loaders, epochs, begin=True)
            entered = t + 1
        trainer.save_checkpoint(keep_last=keep_last)  # the boundary is part of the run's state
        log.info("task %d/%d: class-IL %s", t + 1, len(tasks), " ".join(f"{a:.3f}" for a in class_row))
    trainer.settle_checkpoints()  # the last boundary checkpoint on disk, abandoned temporary files swept
    trainer.extra_results["train_seconds"] = trainer.train_seconds  # the whole run's, resumed sessions included
    summary = _summary(cfg, exp, settings, trainer)
    if main:
        routines.write_json(run_dir / "summary.json", summary)
        from .plots import plot_accuracy_matrix

        plot_accuracy_matrix(summary["class_il"]["matrix"], run_dir / "cl_matrix.png", title=f"{cfg.name}: class-IL")
        if summary.get("anytime"):
            from .plots import plot_anytime

            plot_anytime(summary["anytime"], run_dir / "cl_anytime.png", title=f"{cfg.name}: anytime accuracy")
    trainer.end_run(summary)  # after the files: trackers keep them
    return summary


def _enter_task(t: int, trainer: ContinualTrainer, exp: Any, tasks: list, loaders: list, epochs: int, *,
                begin: bool) -> None:
    """Make task ``t`` the current one: its epoch budget, a learning-rate schedule of its own
    (``train.scheduler`` restarts every task, planned for ``epochs_per_task``, as Mammoth does),
    its loader's order from the start; with ``begin``, the algorithm's ``begin_task``. A
    resumed task has begun already (the checkpoint holds that state); the schedule object is
    rebuilt anyway and the checkpoint's state is loaded into it."""
    from ...train.optim_builder import build_scheduler, plan_schedule

    trainer.max_epochs = (t + 1) * epochs
    trainer.epoch_label = functools.partial(_task_epoch_label, t, len(tasks), epochs)  # what progress lines say
    spec = exp.settings.scheduler
    if spec:
        for group in trainer.optimizer.param_groups:  # from the configured rate (chainable schedules start from lr;
            group.setdefault("initial_lr", group["lr"])  # ReduceLROnPlateau records none: the first task does)
            group["lr"] = group["initial_lr"]
        plan = plan_schedule(spec, epochs=epochs, steps_per_epoch=-(-len(loaders[t]) // exp.settings.accumulate))
        trainer.scheduler = build_scheduler(spec, trainer.optimizer, plan=plan, origin_of=exp.cfg.where)
        trainer.scheduler_interval = plan.interval
    if begin:
        trainer.algorithm.begin_task(t, trainer, tasks[t].classes)
        trainer.epoch_start_generator = loaders[t].generator.get_state()


def _task_epoch_label(t: int, count: int, epochs: int, number: int) -> str:
    """``task 5/5 · epoch 1/1`` for the run's epoch ``number`` (from 1) in task ``t`` (from 0) of
    ``count``, ``epochs`` each: the trainer counts epochs over the whole sequence."""
    return f"task {t + 1}/{count} · epoch {number - t * epochs}/{epochs}"


def _with_task_begun(resume: dict[str, Any], trainer: ContinualTrainer) -> dict[str, Any]:
    """An older boundary checkpoint (saved before the next task began) with that task begun
    on top: the algorithm's state, the loader's order and a fresh schedule at the configured rate."""
    import copy

    optimizer = copy.deepcopy(resume["optimizer"])
    for saved, group in zip(optimizer["param_groups"], trainer.optimizer.param_groups, strict=True):
        saved["lr"] = group["lr"]
    scheduler = trainer.scheduler.state_dict() if trainer.scheduler is not None else resume.get("scheduler")
    return {**resume, "algorithm": trainer.algorithm.state_dict(), "loader_generator": trainer.epoch_start_generator,
            "optimizer": optimizer, "scheduler": scheduler}


def _refuse_whole_run_stopping(cfg: Config, exp: Any) -> None:
    """Early stopping and ``max_steps`` count over the whole run: in a task sequence they would
    silently leave later tasks untrained."""
    for i, spec in enumerate(exp.settings.callbacks):
        if spec.get("type") == "early_stopping":
            raise ConfigError("early stopping would end the whole task sequence, leaving later tasks untrained; "
                              "a continual run trains every task for continual.epochs_per_task",
                              path=f"train.callbacks.{i}", source=cfg.where(f"train.callbacks.{i}"))
    if exp.settings.max_steps is not None:
        raise ConfigError("train.max_steps counts over the whole task sequence; a continual run trains every task "
                          "for continual.epochs_per_task", path="train.max_steps", source=cfg.where("train.max_steps"))


def evaluate_continual(exp: Any, payload: dict[str, Any], split: str = "test") -> dict[str, float]:
    """What ``modforge test`` reports for a continual run: the checkpoint's model (with its
    algorithm's state — iCaRL classifies by its stored exemplar means) on every task trained
    so far — class-IL and task-IL accuracy per task and their averages."""
    settings = continual_settings(exp.cfg)
    algorithm = ALGORITHMS.build(settings.algorithm, path="continual.algorithm", origin_of=exp.cfg.where,
                                 model=exp.model, num_classes=exp.splits.num_classes, seed=exp.seed)
    if payload.get("algorithm") is not None:
        algorithm.load_state_dict(payload["algorithm"])
    trainer = ContinualTrainer(exp.model, torch.optim.SGD(exp.model.parameters(), lr=0.0), algorithm=algorithm,
                               device=exp.settings.device)
    tasks = exp.splits.tasks
    # tasks with any training: all those finished, and the current one once an epoch of it has begun
    begun = int(payload["epoch"]) + (1 if payload.get("batch_in_epoch") else 0)
    done = int((payload.get("continual") or {}).get("tasks_done", 0))
    trained = max(0, min(len(tasks), max(done, -(-begun // settings.epochs_per_task))) - 1)
    if trained >= done and hasattr(algorithm, "update_class_means") and not algorithm.memory.is_empty:
        algorithm.update_class_means(trainer)  # mid-task: the exemplar means of the weights as they are now
    class_row, task_row = _evaluate_seen(trainer, exp, tasks, trained, split)
    results = {"tasks": trained + 1, "class_il_accuracy": sum(class_row) / len(class_row),
               "task_il_accuracy": sum(task_row) / len(task_row)}
    for i, (c, t) in enumerate(zip(class_row, task_row, strict=True)):
        results[f"class_il_task{i + 1}"], results[f"task_il_task{i + 1}"] = c, t
    return results


def _train_loader(exp: Any, trains: list, index: int, *, cumulative: bool):
    """Task ``index``'s training loader (its own seeded order) over ``trains[index]``; with
    ``cumulative``, over the data of tasks 0..index (JOINT). Its pictures reach a CUDA device as
    a plain run's do (uint8 from the workers, normalised there: ``Experiment.finish_device``)."""
    from ...continual.benchmarks import concat_splits

    data = concat_splits(trains[: index + 1]) if cumulative else trains[index]
    generator = torch.Generator().manual_seed((exp.seed * 1_000_003 + index) % (1 << 63))
    return make_loader(data, exp.loader, train=True, generator=generator, **_shard(), finish_on=exp.finish_device())


def _shard() -> dict[str, int]:
    """This process's shard of a loader (all of it with one process)."""
    return {"num_replicas": distributed.world_size(), "rank": distributed.rank()}


def _evaluate_seen(
    trainer: ContinualTrainer, exp: Any, tasks: list, t: int, split_name: str = "test"
) -> tuple[list[float], list[float]]:
    """Class-IL and task-IL accuracy on the ``split_name`` set (test: else val) of every task 0..t."""
    return _evaluate_tasks(trainer, exp, tasks, range(t + 1), split_name, seen_through=t)


def _evaluate_tasks(
    trainer: ContinualTrainer, exp: Any, tasks: list, which: Any, split_name: str = "test", *,
    seen_through: int | None = None, logits: bool = False,
) -> tuple[list[float], list[float]]:
    """Class-IL and task-IL accuracy on the ``split_name`` set (test: else val) of the tasks
    ``which``. Class-IL predicts among the classes of tasks ``0..seen_through`` (None: through
    each evaluated task itself — a task not trained yet, as Mammoth evaluates it for forward
    transfer); ``logits``: the model's logits, not the algorithm's own scores (before any task
    has begun, when a method such as iCaRL has nothing to classify with)."""
    class_il = exp.splits.setting == "class-il"
    per_task = len(tasks[0].classes)
    scores = Algorithm.class_scores if logits else type(trainer.algorithm).class_scores
    class_row, task_row = [], []
    for j in which:
        task = tasks[j]
        split = getattr(task, split_name)
        if split is None and split_name == "test":
            split = task.val
        if split is None or len(split) == 0:
            raise UsageError(f"task {j} of {exp.cfg.name} has no {split_name} split")
        with trainer.evaluation_weights():  # the weight average with train.ema (as modforge test evaluates it)
            out = scores(trainer.algorithm, trainer, make_loader(split, exp.loader, train=False, **_shard()))
        n = len(out["label"])
        seen = (1 + (j if seen_through is None else seen_through)) * per_task if class_il else exp.splits.num_classes
        class_row.append(class_il_correct(out["scores"], out["label"], seen) / n)
        task_row.append(task_il_correct(out["scores"], out["label"], task.classes) / n)
    return class_row, task_row


def _summary(cfg: Config, exp: Any, settings: ContinualSettings, trainer: ContinualTrainer) -> dict:
    matrices = {name: AccuracyMatrix(trainer.continual[name]) for name in ("class_il", "task_il")}
    summary: dict[str, Any] = {
        "config": cfg.name,
        "algorithm": settings.algorithm,
        "setting": exp.splits.setting,
        "tasks": len(exp.splits.tasks),
        "epochs_per_task": settings.epochs_per_task,
        "online": settings.online,
        "blurry": settings.blurry,
        "samples_seen": list(trainer.continual.get("samples_seen", [])),
        "params": sum(p.numel() for p in exp.model.parameters()),
        "train_seconds": round(trainer.extra_results.get("train_seconds", 0.0), 3),
    }
    if trainer.world_size > 1:
        summary["processes"] = trainer.world_size
    initial = trainer.continual.get("initial") or {}
    before = trainer.continual.get("before_task") or {}
    for name, matrix in matrices.items():
        summary[name] = {
            "average_accuracy": average_accuracy(matrix),
            "learning_accuracy": learning_accuracy(matrix),
            "forgetting": forgetting(matrix),
            "backward_transfer": backward_transfer(matrix),
            "forward_transfer": forward_transfer(before.get(name, []), initial.get(name, [])),
            "matrix": matrix.as_lists(),
            "initial": list(initial.get(name, [])),  # b_j: each task before any training
            "before_task": list(before.get(name, [])),  # R[j-1][j]: task j after task j-1, before its own
        }
    if trainer.continual.get("anytime"):
        summary["anytime"] = list(trainer.continual["anytime"])
    return summary
