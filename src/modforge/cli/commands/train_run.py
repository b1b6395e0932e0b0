"""``modforge train CONFIG [key=value ...] [--backbone NAME --<arg> V ...] [--run-dir DIR]
[--resume RUN_DIR|CHECKPOINT] [--nproc N]`` — train, test the best checkpoint, write the run folder.

Under ``torchrun`` (or with ``--nproc N``, which starts torchrun on this machine) every
process runs this command; they join one process group, rank 0 picks the run folder and
tells the others, and only rank 0 prints and writes."""

from __future__ import annotations

import argparse
import dataclasses
import logging
import os
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

import yaml

from ...core.arguments import signature_of
from ...core.child_process import safe_child_env, safe_module_command
from ...core.config import display_path
from ...core.errors import UsageError
from ...core.safe_files import write_atomic
from ..common import add_run_dir_option, printed_config
from ..output import console, print_table

HELP = "train a model from a config (Mammoth-style part flags work); writes a run folder"
log = logging.getLogger("modforge.cli")


def _own_options(parser: argparse.ArgumentParser) -> None:
    add_run_dir_option(parser)
    parser.add_argument(
        "--resume",
        metavar="RUN_DIR|CHECKPOINT",
        help="continue a run exactly where its last complete checkpoint left it",
    )
    parser.add_argument(
        "--nproc",
        type=int,
        metavar="N",
        help="train in N processes on this machine (starts torchrun; data.batch_size is per process)",
    )


def _nproc(argv: list[str]) -> tuple[list[str], int | None]:
    """``--nproc N`` taken out of the command line (the processes torchrun starts must not see it)."""
    for i, token in enumerate(argv):
        if token == "--nproc" or token.startswith("--nproc="):
            value = token.split("=", 1)[1] if "=" in token else (argv[i + 1] if i + 1 < len(argv) else "")
            rest = argv[:i] + argv[i + (1 if "=" in token else 2) :]
            try:
                count = int(value)
            except ValueError:
                raise UsageError(f"--nproc needs a number of processes, got {value!r}") from None
            if count < 1:
                raise UsageError(f"--nproc must be at least 1, got {count}")
            return rest, count
    return argv, None


def launch_command(argv: list[str], nproc: int) -> list[str]:
    """torchrun (standalone: one machine) running ``modforge train ARGV`` in ``nproc``
    processes; neither torchrun nor its workers import from the current directory (torchrun
    runs the workers' command as given, ``--no-python``: :func:`safe_module_command`), and
    torchrun's stores listen on 127.0.0.1 only
    (:func:`~modforge.train.distributed.torchrun_on_loopback`)."""
    from ...train.one_machine import one_machine_args

    return [*safe_module_command("modforge.train.distributed", unbuffered=True), *one_machine_args(nproc),
            "--no-python", *safe_module_command("modforge", unbuffered=True), "train", *argv]  # fmt: skip


def _launch(argv: list[str], nproc: int) -> int:
    """Run this command in ``nproc`` processes under torchrun (standalone: one machine)."""
    from ...train.one_machine import env_world_size, one_machine_env  # no torch: torchrun imports it

    if env_world_size() > 1:
        raise UsageError("--nproc starts torchrun itself; this process already runs under torchrun")
    _check_resume_target(argv)  # a folder to refuse is one line from here, not one per process
    command = launch_command(argv, nproc)
    env = safe_child_env(one_machine_env())  # gloo's and NCCL's sockets on the loopback interface
    log.info("starting %d processes: torchrun --standalone --nproc-per-node=%d modforge train ...", nproc, nproc)
    if os.name != "posix":
        return subprocess.call(command, env=env)
    # become torchrun (same process): what was given to this process — a sweep's lock, the parent-death
    # signal — is torchrun's, so killing the caller stops torchrun, which stops its workers; no orphan
    # launcher or agent goes on writing the run folder
    for handler in logging.getLogger().handlers:
        handler.flush()
    sys.stdout.flush()
    sys.stderr.flush()
    os.execve(sys.executable, command, env)
    return 0  # not reached


@dataclasses.dataclass
class _Resume:
    """What ``--resume TARGET`` continues.

    Attributes:
        argv: the command line with ``--resume`` taken out and the run's config as CONFIG.
        run_dir: the run folder (``None``: a checkpoint file outside one).
        payload: the checkpoint (``None``: a run folder without one, restarted from scratch).
        path: the checkpoint file (``None`` with no payload).
        temp: a temporary folder holding the config of a checkpoint outside a run folder
            (removed once the config is read).
    """

    argv: list[str]
    run_dir: Path | None = None
    payload: dict | None = None
    path: Path | None = None
    temp: Path | None = None


def _refuse_rewinding(run_dir: Path, path: Path | None, payload: dict) -> None:
    """Resuming an earlier checkpoint of a run in place would overwrite the run's later epochs
    (metrics.csv, best.pt, last.pt, summary.json): refuse, and say how to branch from it."""
    from ...train.checkpoint import CheckpointError, find_resumable

    try:
        _, newest = find_resumable(run_dir)
    except CheckpointError:
        return
    reached, here = int(newest.get("global_step", 0)), int(payload.get("global_step", 0))
    if reached > here:
        raise UsageError(
            f"--resume {display_path(path)}: that checkpoint (step {here}) is earlier than where "
            f"{display_path(run_dir)} got to (step {reached}); continuing it there would overwrite the later "
            "epochs — continue from it into another folder with --run-dir NEW, or resume the run folder itself"
        )


def _resume_target(argv: list[str]) -> tuple[int, str | None] | None:
    """Where ``--resume`` is in ``argv`` and its value (``None``: no value); ``None``: no ``--resume``."""
    i = next((i for i, a in enumerate(argv) if a == "--resume" or a.startswith("--resume=")), None)
    if i is None:
        return None
    return i, argv[i].split("=", 1)[1] if "=" in argv[i] else (argv[i + 1] if i + 1 < len(argv) else None)


def _check_resume_target(argv: list[str]) -> None:
    """The run folder ``--resume`` reuses is checked once, before anything in it is read
    (:func:`~modforge.core.run_folders.check_run_folder`)."""
    found = _resume_target(argv)
    if found is not None and found[1]:
        from ...core.run_folders import check_run_folder  # torch-free: --nproc then execs without torch

        check_run_folder(Path(found[1]))


def _resume_argv(argv: list[str]) -> _Resume:
    """With --resume, the run's own config becomes CONFIG (a CONFIG on the line is an error).
    A run folder that holds a config and no checkpoint at all (killed before its first one)
    is trained again from scratch, with a note."""
    found = _resume_target(argv)
    if found is None:
        return _Resume(argv)
    from ...experiment.runner import check_run_folder
    from ...train.checkpoint import CheckpointError, find_resumable

    i, target = found
    if not target:
        raise UsageError("--resume needs a run folder or a checkpoint file")
    check_run_folder(Path(target))  # before anything in it is read
    rest = argv[:i] + argv[i + (1 if "=" in argv[i] else 2) :]
    if any(a.endswith((".yaml", ".yml")) for a in rest if not a.startswith("-") and "=" not in a):
        raise UsageError(
            "--resume continues a run with its own saved config; give changes as key=value overrides, "
            "not another CONFIG file"
        )
    try:
        path, payload = find_resumable(target)
    except CheckpointError:
        folder = Path(target)
        if (folder / "config.yaml").is_file() and not _has_checkpoints(folder):
            log.warning("%s has a config but no checkpoint (the run stopped before its first one): "
                        "training it again from the start", display_path(folder))  # fmt: skip
            return _Resume([str(folder / "config.yaml"), *rest], run_dir=folder)
        raise
    run_dir = path.parent.parent if path.parent.name == "checkpoints" else None
    config_file = run_dir / "config.yaml" if run_dir is not None and (run_dir / "config.yaml").exists() else None
    temp = None
    if config_file is None:
        if not isinstance(payload.get("config"), dict):
            raise UsageError(f"--resume {display_path(path)}: the checkpoint holds no config (a modforge checkpoint "
                             "stores the config it was trained with) and is not inside a run folder with a config.yaml")
        temp = Path(tempfile.mkdtemp(prefix="modforge-resume-"))
        config_file = temp / "config.yaml"
        write_atomic(config_file, yaml.safe_dump(payload["config"], sort_keys=False))
    return _Resume([str(config_file), *rest], run_dir, payload, path, temp)


def _best_beside(payload: dict, path: Path) -> None:
    """Where a checkpoint says its run's best weights lie is data (an absolute path, which a
    checkpoint from elsewhere may point anywhere): only the ``best.pt`` beside the checkpoint
    being resumed is used — also after the run folder was moved."""
    beside = Path(path).parent / "best.pt"
    for state in (payload.get("callbacks") or {}).values():
        if isinstance(state, dict) and "best_file" in state:
            state["best_file"] = str(beside.resolve()) if beside.is_file() and not beside.is_symlink() else None


def _max_epochs(config: dict | None) -> int:
    from ...experiment.settings import TrainSettings

    train = (config or {}).get("train") or {}
    default = next(a.default for a in signature_of(TrainSettings).args if a.name == "max_epochs")
    return int(train.get("max_epochs") or default)


def _finished(payload: dict, cfg, path: Path) -> str | None:
    """What ``--resume`` of a finished run does. A run that completed its epochs, or that early
    stopping ended, wrote its ``summary.json`` and is resumed without a larger
    ``train.max_epochs`` is finished: one line
    says so and how to train further, and nothing runs (None: there is training to do). Extending
    an early-stopped run starts early stopping's patience again (else it would stop after one
    epoch), with a note."""
    from ...experiment.runner import run_folder_of
    from ...experiment.schema import SECTIONS

    if any(key not in SECTIONS for key in cfg.data):
        return None  # a task with a section of its own (continual: epochs per task) counts its progress itself
    folder = run_folder_of(path)
    if folder is None or not (folder / "summary.json").is_file():
        return None  # killed after its last epoch, before its test: resuming tests it and writes the summary
    before, now = _max_epochs(payload.get("config")), _max_epochs(cfg.data)
    stopped = [s for s in (payload.get("callbacks") or {}).values() if isinstance(s, dict) and s.get("stopped_epoch")]
    done = payload["batch_in_epoch"] == 0 and payload["epoch"] >= now
    run = display_path(folder)
    further = f"to train further: modforge train --resume {run} train.max_epochs={max(now, payload['epoch']) + 10}"
    if stopped and now <= before:
        return (f"{run} is finished: early stopping ended it at epoch {stopped[0]['stopped_epoch']}; nothing was "
                f"trained ({further}, which also starts early stopping's patience again)")  # fmt: skip
    if done:
        return f"{run} is finished: it trained its {payload['epoch']} epoch(s); nothing was trained ({further})"
    for state in stopped:  # extended: early stopping's spent patience starts again
        log.warning("early stopping had ended this run at epoch %s; with train.max_epochs=%d its patience starts "
                    "again", state["stopped_epoch"], now)  # fmt: skip
        state["bad_evaluations"], state["stopped_epoch"] = 0, None
    return None


def _has_checkpoints(folder: Path) -> bool:
    """Whether a run folder holds any checkpoint file (usable or not): such a folder is never restarted."""
    directory = folder / "checkpoints"
    return directory.is_dir() and any(p.suffix == ".pt" for p in directory.iterdir())


def run(argv: list[str]) -> int:
    argv, nproc = _nproc(list(argv))
    if nproc is not None and nproc > 1:
        return _launch(argv, nproc)
    from ...train import distributed
    from ..stops import sigterm_interrupts

    finished = False
    try:
        with sigterm_interrupts():  # under torchrun, joining the group puts its own SIGTERM handler in place
            code = _train(argv)
        finished = True
        return code
    finally:
        distributed.shutdown(finished)


def _join_processes(cfg) -> bool:
    """Join torchrun's process group (when launched by it); True on rank 0 (or alone)."""
    from ...train import distributed

    train = cfg.data.get("train") or {}
    settings = distributed.DistributedSettings(**(train.get("distributed") or {}))
    if distributed.join_if_launched(settings, device=str(train.get("device", "auto"))):
        distributed.stop_on_sigterm()
        if not distributed.is_main_process():
            logging.getLogger("modforge").setLevel(logging.ERROR)  # rank 0 speaks for the run
    return distributed.is_main_process()


def _train(argv: list[str]) -> int:
    from ...experiment.runner import train_run
    from ...experiment.runs import plan_run_dir
    from ...train import distributed

    resume = _resume_argv(list(argv))
    try:
        cfg, ns = _resolved(resume)
    finally:
        if resume.temp is not None:
            shutil.rmtree(resume.temp, ignore_errors=True)  # the config is read: leave no temporary folder
    if printed_config(cfg, ns):
        return 0
    main = _join_processes(cfg)
    payload = resume.payload
    if payload is not None:
        _best_beside(payload, resume.path)
    restart = resume.run_dir is not None and payload is None
    if payload is not None or restart:
        run_dir = Path(ns.run_dir) if ns.run_dir else resume.run_dir
        if run_dir is None:
            raise UsageError(
                f"{display_path(resume.path)} is not inside a run folder; say where to continue with --run-dir"
            )
        if ns.run_dir and os.path.lexists(ns.run_dir):  # an existing folder to continue in is reused too
            from ...experiment.runner import check_run_folder

            check_run_folder(run_dir)
        if payload is not None and not ns.run_dir and resume.run_dir is not None:
            _refuse_rewinding(resume.run_dir, resume.path, payload)
        if payload is not None:
            log.info(
                "resuming %s from %s (epoch %d, batch %d, step %d)",
                display_path(run_dir),
                display_path(resume.path),
                payload["epoch"] + 1,
                payload["batch_in_epoch"],
                payload["global_step"],
            )
        finished = _finished(payload, cfg, resume.path) if payload is not None and not ns.run_dir else None
        if finished:
            if main:
                console().print(finished, markup=False, highlight=False)
            return 0
    else:  # the folder is chosen and checked now, and made once data, model and trainer are built
        run_dir = plan_run_dir(cfg, ns.run_dir) if main else None
        run_dir = Path(distributed.broadcast_object(str(run_dir) if main else None, what="choosing the run folder"))
    try:
        summary = train_run(cfg, run_dir, resume=payload, restart=restart)
    except KeyboardInterrupt as exc:  # Ctrl-C, SIGTERM: say what was kept and how to continue
        if not main:
            raise
        from ..stops import stopped

        raise stopped(exc, run_dir, distributed.world_size()) from None
    if main:
        _print_summary(summary, run_dir)
    return 0


def _resolved(resume: _Resume):
    """The config (the run's own when resuming, its plug-ins from the run's copies or
    --plugins) with the command's flags applied and validated; and the parsed options."""
    from ..config_args import StoredConfig, resolve_config_from_cli  # imports torch (the model's parts)

    stored = None
    if resume.run_dir is not None or resume.payload is not None:  # the run's own config is data
        stored = StoredConfig(resume.run_dir, f"the config of {display_path(resume.run_dir or resume.path)}")
    resolved = resolve_config_from_cli("train", resume.argv, description=HELP, add_arguments=_own_options,
                                       stored=stored)  # fmt: skip
    cfg, ns = resolved.config, resolved.args
    if resume.payload is not None and resume.payload.get("name"):
        cfg.name = resume.payload["name"]
    return cfg, ns  # --epochs/--lr/--batch-size: applied and validated by resolve_config_from_cli


def _print_summary(summary: dict, run_dir: Path) -> None:
    """The summary's figures as a table, whatever the task: every section of numbers (``test``,
    ``best``, a continual run's ``class_il``/``task_il``...), then the run's size and time."""
    rows = []
    for section, values in summary.items():
        if not isinstance(values, dict) or section in ("last", "init", "algorithm"):
            continue
        label = section.replace("_il", "-IL").replace("_", " ")
        for key, value in values.items():
            if isinstance(value, float):
                rows.append((label, key, f"{value:.4f}"))
            elif section == "best" and isinstance(value, int):
                rows.append((label, key, value))
    facts = (("epochs", "epochs"), ("params", "parameters"), ("train_seconds", "train seconds"))
    rows += [("run", label, f"{summary[key]:,}" if key == "params" else summary[key])
             for key, label in facts if key in summary]
    print_table(("", "metric", "value"), rows, title=f"{summary.get('config', run_dir.name)} — {display_path(run_dir)}")
