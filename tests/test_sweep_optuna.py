"""``search: optuna``: the sweep file's section, the study in the sweep folder (ids, resume,
reproducible suggestions), the pruning callback, and real sweeps — a trial pruned by the
study, and a sweep killed mid-trial that continues the same study."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from modforge.sweep import SEARCHES, TrialResult, build_job, load_sweep
from modforge.sweep.spec import SweepSpecError
from sweep_helpers import SHIPPED_DIGITS, TIMEOUT_S, running_sweep, sweep_cli, tiny_beside, trial_rows, wait_for

optuna = pytest.importorskip("optuna")

DIGITS = SHIPPED_DIGITS  # each test's copy beside its sweep files, once its fixture `sweep_digits` ran
pytestmark = pytest.mark.usefixtures("sweep_digits")

SPACE = """
optuna:
  trials: 3
  metric: best.val_accuracy
  seed: 7
  space:
    train.optimizer.args.lr: {loguniform: [1.0e-4, 1.0e-1]}
    train.optimizer.args.weight_decay: {uniform: [0.0, 0.1]}
    model.backbone.args.channels: {choice: [[8, 16], [16, 32]]}
seeds: [3]
collect: [best.val_accuracy, test.accuracy]
"""


def _load(write, body: str, name: str = "o.yaml"):
    return load_sweep(write(name, f"config: {DIGITS}\n" + textwrap.dedent(body).lstrip("\n")))


def _study(sweep_dir: Path, name: str):
    return optuna.load_study(study_name=name, storage=f"sqlite:///{sweep_dir / 'optuna.db'}")


@pytest.mark.parametrize(
    ("body", "expected"),
    [
        ("search: optuna\ncollect: [x]\n", "optuna: required with search: optuna"),
        ("optuna: {trials: 2, metric: y, space: {a.b: {uniform: [0, 1]}}}\ncollect: [x]\n", "optuna.metric: expected"),
        ("optuna: {metric: x, space: {a.b: {uniform: [0, 1]}}}\ncollect: [x]\n", "optuna.trials: required"),
        ("optuna: {trials: 2, metric: x, space: {}}\ncollect: [x]\n", "optuna.space: expected at least one"),
        ("optuna: {trials: 2, metric: x, space: {a.b: {normal: [0, 1]}}}\ncollect: [x]\n", "optuna.space.a.b:"),
        ("optuna: {trials: 2, metric: x, sampler: cma, space: {a.b: {int: [0, 1]}}}\ncollect: [x]\n",
         "optuna.sampler: expected one of tpe, random"),
        ("optuna: {trials: 2, metric: x, pruner: hyperband, space: {a.b: {int: [0, 1]}}}\ncollect: [x]\n",
         "optuna.pruner: expected one of median, none"),
        ("optuna: {trials: 2, metric: x, space: {a.b: {int: [0, 1]}}}\nseeds: [0, 1]\ncollect: [x]\n",
         "search: optuna runs each trial with one seed"),
        ("optuna: {trials: 2, metric: x, space: {a.b: {int: [0, 1]}}}\ngrid: {c.d: [1]}\ncollect: [x]\n",
         "grid: search: optuna takes its values from optuna.space"),
        ("optuna: {trials: 2, metric: s, space: {a.b: {int: [0, 1]}}}\ncollect: [{name: s, goal: none}]\n",
         "optuna.goal: expected max or min"),
        ("search: grid\ngrid: {c.d: [1]}\noptuna: {trials: 2}\ncollect: [x]\n", "only used with search: optuna"),
        ("grid: {c.d: [1]}\nray: {cpus_per_trial: 0}\ncollect: [x]\n", "ray.cpus_per_trial: expected a number > 0"),
        ("grid: {c.d: [1]}\nray: {gpu: 1}\ncollect: [x]\n", "ray.gpu: unknown key"),
        ("grid: {c.d: [1]}\nray: {address: auto}\ncollect: [x]\n", "ray.address: a sweep file does not choose"),
        ("grid: {c.d: [1]}\nray: {max_retries: -1}\ncollect: [x]\n", "ray.max_retries: expected an integer ≥ 0"),
    ],
)  # fmt: skip
def test_a_bad_optuna_or_ray_section_is_one_error_naming_the_key(write, body, expected):
    with pytest.raises(SweepSpecError) as info:
        _load(write, body, "s.yaml")
    message = str(info.value)
    assert expected in message and "s.yaml" in message and "\n" not in message


def test_the_optuna_section_and_its_defaults(write):
    spec = _load(write, SPACE)
    o = spec.optuna
    assert spec.search == "optuna" and o.trials == 3 and o.goal == "max" and o.sampler == "tpe" and o.seed == 7
    assert (o.pruner, o.startup_trials, o.warmup_epochs, o.prune_on) == ("median", 5, 1, None)
    assert [p.key for p in o.params][0] == "train.optimizer.args.lr"
    ray = _load(write, "grid: {c.d: [1]}\nray: {gpus_per_trial: 1}\ncollect: [x]\n", "r.yaml").ray
    assert (ray.address, ray.cpus_per_trial, ray.gpus_per_trial, ray.max_retries) == (None, 1.0, 1.0, 2)


def test_trials_have_stable_ids_keep_the_users_callbacks_and_a_rerun_continues_the_study(write, tmp_path):
    spec = _load(write, SPACE + "overrides: {train.callbacks: [lr_monitor]}\n")
    sweep_dir = tmp_path / "sw"
    search = SEARCHES["optuna"](spec, sweep_dir)
    assert not sweep_dir.exists()  # nothing is created before the first ask (the CLI builds one to count)
    first, second = search.ask(), search.ask()
    assert first.id.startswith("t000-lr") and first.id.endswith("-seed3") and second.id.startswith("t001-")
    assert first.seed == 3 and first.params["model.backbone.args.channels"] in ([8, 16], [16, 32])
    callbacks = first.extra["train.callbacks"]
    assert callbacks[0] == "lr_monitor" and callbacks[1]["type"] == "optuna_pruning"
    assert callbacks[1]["args"]["trial"] == 0 and callbacks[1]["args"]["storage"].endswith("sw/optuna.db")
    job = build_job(spec, first, sweep_dir, threads=1)
    assert any(t.startswith("train.callbacks=") and "optuna_pruning" in t for t in job.fresh)
    assert "optuna_pruning" not in " ".join(job.fresh[: job.fresh.index("--seed")])  # not among the user's overrides
    run_dir = sweep_dir / "trials" / first.id
    search.tell(first, TrialResult("done", {"best.val_accuracy": 0.9}, {}, run_dir))

    again = SEARCHES["optuna"](spec, sweep_dir)  # the sweep died while trial 1 ran
    resumed = again.ask()
    assert (resumed.id, resumed.overrides, resumed.extra) == (second.id, second.overrides, second.extra)
    third = again.ask()
    assert third.id.startswith("t002-") and again.ask() is None  # trial 0 is not asked again; 3 in all
    again.tell(resumed, TrialResult("pruned", {}, {}, run_dir))
    again.tell(third, TrialResult("failed", {}, {}, run_dir))
    states = [(t.number, t.state.name, t.user_attrs["modforge_trial"]) for t in _study(sweep_dir, spec.name).trials]
    assert states == [(0, "COMPLETE", first.id), (1, "PRUNED", second.id), (2, "FAIL", third.id)]
    assert _study(sweep_dir, spec.name).trials[0].value == 0.9

    other = SEARCHES["optuna"](spec, tmp_path / "other")  # the same seed and history: the same suggestions
    assert [other.ask().overrides for _ in range(2)] == [first.overrides, second.overrides]


class _Trainer:
    """What the callback uses of a trainer."""

    def __init__(self, run_dir: Path | None):
        self.run_dir, self.stopped = run_dir, None

    def direction(self, monitor: str) -> str:
        return "min" if monitor.endswith("loss") else "max"

    def request_stop(self, reason: str) -> None:
        self.stopped = reason


def test_the_pruning_callback_reports_each_epoch_and_stops_a_trial_worse_than_the_median(tmp_path):
    from modforge.core.registries import CALLBACKS

    storage = f"sqlite:///{tmp_path / 'optuna.db'}"
    study = optuna.create_study(study_name="s", storage=storage, direction="maximize")
    for value in (0.9, 0.8):  # two finished trials: the median at epoch 1 is 0.85
        done = study.ask()
        done.report(value, 1)
        study.tell(done, value)
    number = study.ask().number
    args = {"storage": storage, "study": "s", "trial": number, "startup_trials": 1, "warmup_epochs": 0}
    callback = CALLBACKS.build({"type": "optuna_pruning", "args": args}, monitor="val_accuracy", mode="auto")
    trainer = _Trainer(tmp_path)
    callback.on_epoch_end(trainer, {"epoch": 1, "val_accuracy": 0.5, "val_loss": 1.0})
    assert trainer.stopped == f"optuna pruned trial {number} at epoch 1 (val_accuracy 0.5)"
    marker = json.loads((tmp_path / "pruned.json").read_text())
    assert marker == {"trial": number, "epoch": 1, "monitor": "val_accuracy", "value": 0.5}
    assert _study(tmp_path, "s").trials[number].intermediate_values == {1: 0.5}

    (tmp_path / "pruned.json").unlink()  # killed before its end, then resumed: it stops again
    resumed = CALLBACKS.build({"type": "optuna_pruning", "args": args}, monitor="val_accuracy", mode="auto")
    resumed.load_state_dict(callback.state_dict())
    again = _Trainer(tmp_path)
    resumed.on_fit_start(again)
    assert again.stopped == trainer.stopped and (tmp_path / "pruned.json").is_file()

    lower = CALLBACKS.build({"type": "optuna_pruning", "args": {**args, "trial": study.ask().number}},
                            monitor="val_loss", mode="auto")  # fmt: skip
    lower.on_epoch_end(_Trainer(None), {"epoch": 1, "val_accuracy": 0.95, "val_loss": 0.1})
    assert _study(tmp_path, "s").trials[-1].intermediate_values == {1: -0.1}  # in the study's direction

    unreachable = CALLBACKS.build({"type": "optuna_pruning", "args": {**args, "study": "nope"}},
                                  monitor="val_accuracy", mode="auto")  # fmt: skip
    quiet = _Trainer(None)
    unreachable.on_epoch_end(quiet, {"epoch": 1, "val_accuracy": 0.1})  # one warning; the run goes on
    assert quiet.stopped is None


def test_importing_modforge_and_the_sweep_command_does_not_import_optuna_or_ray():
    code = ("import sys, modforge, modforge.sweep, modforge.cli.commands.sweep_run, modforge.train.callbacks; "
            "print('optuna' in sys.modules, 'ray' in sys.modules)")  # fmt: skip
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True, timeout=120)
    assert out.stdout.strip() == "False False"


def test_a_missing_optuna_or_ray_is_one_error_naming_the_extra(write, tmp_path, monkeypatch):
    from modforge.core.errors import UsageError
    from modforge.sweep import EXECUTORS, ExecutorOptions

    monkeypatch.setitem(sys.modules, "optuna", None)  # as if not installed: importing it fails
    monkeypatch.setitem(sys.modules, "ray", None)
    with pytest.raises(UsageError, match=r'search: optuna needs the optuna package: pip install "modforge\[optuna\]"'):
        SEARCHES["optuna"](_load(write, SPACE), tmp_path)
    with pytest.raises(UsageError, match=r'--backend ray needs the ray package: pip install "modforge\[ray\]"'):
        EXECUTORS["ray"](ExecutorOptions(workers=1))


# ----------------------------------------------------------------- real sweeps
# Their trials train sweep_helpers.TINY_CONFIG (an MLP on the digits as vectors, 79 steps an epoch): the
# study's bookkeeping is tested, not the model.


@pytest.mark.slow
def test_a_trial_worse_than_the_studys_median_is_pruned_and_recorded(tmp_path):
    tiny_beside(tmp_path)
    sweep = tmp_path / "p.yaml"
    sweep.write_text("""
name: p
config: tiny.yaml
overrides: {train.max_epochs: 3, data.batch_size: 64, train.num_threads: 1}
optuna:
  trials: 2
  metric: best.val_accuracy
  startup_trials: 1
  warmup_epochs: 0
  space: {train.optimizer.args.lr: {loguniform: [1.0e-3, 1.0e-2]}}
collect: [best.val_accuracy, epochs]
""")
    sweep_dir = tmp_path / "sw"
    sweep_dir.mkdir()
    study = optuna.create_study(study_name="p", storage=f"sqlite:///{sweep_dir / 'optuna.db'}", direction="maximize")
    lr = optuna.distributions.FloatDistribution(1e-3, 1e-2, log=True)
    study.add_trial(optuna.trial.create_trial(  # an earlier trial no run can beat: trial 1 must be pruned
        params={"train.optimizer.args.lr": 3e-3}, distributions={"train.optimizer.args.lr": lr}, value=1.0,
        intermediate_values={1: 1.0, 2: 1.0, 3: 1.0}))  # fmt: skip
    res = sweep_cli(tmp_path, str(sweep), "--sweep-dir", str(sweep_dir))
    assert res.returncode == 0, res.stdout + res.stderr
    ((trial_id, row),) = trial_rows(sweep_dir).items()
    assert trial_id.startswith("t001-lr") and row["status"] == "pruned" and f"pruned {trial_id}" in res.stdout
    run = sweep_dir / "trials" / trial_id
    summary = json.loads((run / "summary.json").read_text())
    assert summary["epochs"] == 1 and summary["stop_reason"].startswith("optuna pruned trial 1 at epoch 1")
    assert json.loads((run / "pruned.json").read_text())["epoch"] == 1
    assert [t.state.name for t in _study(sweep_dir, "p").trials] == ["COMPLETE", "PRUNED"]
    assert "| 0 (1 pruned) | – | – |" in (sweep_dir / "results.md").read_text()


@pytest.mark.slow
def test_an_optuna_sweep_killed_mid_trial_continues_the_same_study(tmp_path):
    tiny_beside(tmp_path)
    sweep = tmp_path / "k.yaml"
    # killed at its first checkpoint (step 10), the trial has 69 of its 79 steps to go
    sweep.write_text("""
name: k
config: tiny.yaml
overrides: {train.max_epochs: 1, train.num_threads: 1, train.checkpoint.every_n_steps: 10}
optuna:
  trials: 2
  metric: test.accuracy
  pruner: none
  space: {train.optimizer.args.lr: {loguniform: [1.0e-3, 1.0e-2]}}
seeds: [0]
collect: [test.accuracy, best.val_accuracy]
""")
    sweep_dir, trials = tmp_path / "sw", tmp_path / "sw" / "trials"
    with running_sweep(tmp_path, str(sweep), "--sweep-dir", str(sweep_dir)) as process:
        wait_for(lambda: any(trials.glob("t000-*/checkpoints/*.pt")), process, "the first checkpoint")
        os.kill(process.pid, signal.SIGKILL)
        process.wait(timeout=TIMEOUT_S)
    (first,) = [p for p in trials.iterdir() if p.is_dir()]
    assert not (first / "summary.json").exists(), "the trial finished before the kill"
    assert [t.state.name for t in _study(sweep_dir, "k").trials] == ["RUNNING"]

    again = sweep_cli(tmp_path, str(sweep), "--sweep-dir", str(sweep_dir))
    assert again.returncode == 0, again.stdout + again.stderr
    rows = trial_rows(sweep_dir)
    assert list(rows)[0] == first.name and [r["status"] for r in rows.values()] == ["done", "done"]
    assert "resuming" in (trials / f"{first.name}.log").read_text()  # the same trial, from its checkpoint
    study = _study(sweep_dir, "k")
    assert [(t.state.name, t.user_attrs["modforge_trial"]) for t in study.trials][0] == ("COMPLETE", first.name)
    assert len(study.trials) == 2 and study.trials[0].value == float(rows[first.name]["test.accuracy"])
