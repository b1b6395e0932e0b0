"""The experiment-tracker callbacks ``wandb`` and ``mlflow``: a run of ``configs/digits.yaml``
read back through the libraries' own readers (wandb's reader of the offline ``.wandb``
transaction log, ``wandb leet inspect``; MLflow's ``MlflowClient`` on the file store) holds
the config, every epoch's metrics, the curves image and the summary. A resumed run continues
the same tracker run; a tracker added on resume receives the whole history; a missing
package, a bad tracking URI or a missing login is one line; unused trackers are never
imported. No network is used: W&B runs offline, MLflow on local files."""

from __future__ import annotations

import csv
import json
import os
import subprocess
import sys
from pathlib import Path
from unittest import mock

import pytest

from modforge.cli.main import main
from modforge.train.callbacks.tracker import flatten, summary_figures
from modforge.train.checkpoint import load_checkpoint
from registry_state import registries_restored
from run_configs import ADAM, mlp, run_config, synthetic
from train_processes import run_warm

ROOT = Path(__file__).resolve().parents[1]

TINY = run_config(synthetic(120, batch_size=40), mlp(8), seed=1, train=dict(
    max_epochs=1, optimizer=ADAM, metrics="[accuracy, loss]", num_threads=1, progress="never"))

BOTH = "train.callbacks=[wandb, mlflow]"
CONTINUAL = "continual: {algorithm: der, epochs_per_task: 1}\n"


def _tracker_env(home: Path) -> dict[str, str]:
    """An environment in which W&B and MLflow touch nothing outside ``home`` and no network."""
    env = {k: v for k, v in os.environ.items() if not k.startswith(("WANDB_", "MLFLOW_"))}
    env.update(WANDB_SILENT="true", WANDB_CONFIG_DIR=str(home / "wandb-config"), WANDB_CACHE_DIR=str(home / "cache"),
               WANDB_DATA_DIR=str(home / "data"), WANDB_DISABLE_GIT="true", HOME=str(home))  # fmt: skip
    return env


@pytest.fixture(autouse=True)
def tracker_env(tmp_path, monkeypatch):
    for key in [k for k in os.environ if k.startswith(("WANDB_", "MLFLOW_"))]:
        monkeypatch.delenv(key)
    for key, value in _tracker_env(tmp_path / "home").items():
        if os.environ.get(key) != value:
            monkeypatch.setenv(key, value)


def _train(*args: str) -> int:
    """``modforge train ARGS`` in this process; the environment the trackers change is restored."""
    with mock.patch.dict(os.environ):
        return main(["train", *args])


@pytest.fixture(scope="module")
def digits_run(tmp_path_factory) -> Path:
    """configs/digits.yaml for 3 epochs (narrow CNN) with both trackers, trained once."""
    base = tmp_path_factory.mktemp("digits")
    run = base / "run"
    with registries_restored(), mock.patch.dict(os.environ, _tracker_env(base / "home"), clear=True):
        code = main(["train", str(ROOT / "configs/digits.yaml"), "--run-dir", str(run), "train.max_epochs=3",
                     "model.backbone.args.channels=[4,8]", "train.progress=never",
                     "train.callbacks=[lr_monitor, wandb, mlflow]"])  # fmt: skip
    assert code == 0
    return run


def _epochs(run: Path) -> list[dict[str, float]]:
    """metrics.csv: each epoch's numeric figures."""
    rows = list(csv.DictReader((run / "metrics.csv").open()))
    return [{k: float(v) for k, v in row.items() if v not in ("", None)} for row in rows]


# ---------------------------------------------------------------- reading W&B back
def _wandb_files(run: Path) -> list[Path]:
    return sorted(run.glob("wandb/offline-run-*/run-*.wandb"))


def _inspect(wandb_file: Path, *flags: str) -> str:
    """wandb's own reader of a ``.wandb`` transaction log (``wandb leet inspect``)."""
    proc = subprocess.run([sys.executable, "-m", "wandb", "leet", "inspect", "--json", *flags, str(wandb_file)],
                          capture_output=True, text=True, timeout=120, env=os.environ.copy())  # fmt: skip
    assert proc.returncode == 0, proc.stderr
    return proc.stdout


def _wandb_records(wandb_file: Path) -> list[dict]:
    return [json.loads(line) for line in _inspect(wandb_file).splitlines() if line.strip()]


def _wandb_history(wandb_file: Path) -> dict[int, dict]:
    """step → the history row logged at it."""
    rows = [r["history"] for r in _wandb_records(wandb_file) if r["type"] == "history"]
    return {int(row["step"]["num"]): row["item"] for row in rows}


def _wandb_saved(wandb_file: Path) -> set[str]:
    return {f["path"] for r in _wandb_records(wandb_file) if r["type"] == "files" for f in r["files"]["files"]}


def test_a_wandb_offline_run_holds_config_every_epoch_curves_and_summary(digits_run):
    (wandb_file,) = _wandb_files(digits_run)
    state = json.loads(_inspect(wandb_file, "--summary"))
    assert state["state"] == "finished" and state["project"] == "digits" and state["name"] == "run"
    config = state["config"]
    assert config["model.backbone.type"] == "cnn" and config["model.backbone.args.channels"] == [4, 8]
    assert config["train.max_epochs"] == 3 and config["model.losses.0.type"] == "cross_entropy"
    assert config["train.callbacks.2.type"] == "mlflow"

    history, epochs = _wandb_history(wandb_file), _epochs(digits_run)
    assert sorted(history) == [1, 2, 3]
    for row in epochs:
        logged = history[int(row["epoch"])]
        for key, value in row.items():
            if key != "epoch":
                assert logged[key] == pytest.approx(value, rel=1e-6), (row["epoch"], key)

    summary = json.loads((digits_run / "summary.json").read_text())
    assert state["summary"]["test.accuracy"] == pytest.approx(summary["test"]["accuracy"])
    assert {"curves.png", "summary.json", "config.yaml"} <= _wandb_saved(wandb_file)
    files = wandb_file.parent / "files"
    assert (files / "curves.png").read_bytes() == (digits_run / "curves.png").read_bytes()
    assert json.loads((files / "summary.json").read_text()) == summary

    (state_of,) = [s for k, s in load_checkpoint(digits_run / "checkpoints/last.pt")["callbacks"].items()
                   if k.startswith("WandbLogger.")]  # fmt: skip
    assert state_of == {"run_id": state["run_id"], "logged_epochs": 3}


# ---------------------------------------------------------------- reading MLflow back
def _mlflow(run: Path, monkeypatch):
    """(client, experiment, the experiment's one run) in the run folder's file store."""
    from mlflow.tracking import MlflowClient

    monkeypatch.setenv("MLFLOW_ALLOW_FILE_STORE", "true")  # MLflow 3 asks it of a file store's readers too
    client = MlflowClient(tracking_uri=(run / "mlruns").as_uri())
    experiments = client.search_experiments()
    (experiment,) = [e for e in experiments if e.name != "Default"]
    (found,) = client.search_runs([experiment.experiment_id])
    return client, experiment, found


def test_an_mlflow_file_store_run_holds_config_every_epoch_curves_and_summary(digits_run, monkeypatch):
    client, experiment, run = _mlflow(digits_run, monkeypatch)
    assert experiment.name == "digits" and run.info.run_name == "run" and run.info.status == "FINISHED"
    assert run.data.tags["modforge.run_dir"] == str(digits_run.resolve())
    params = run.data.params
    assert params["model.backbone.type"] == "cnn" and params["model.backbone.args.channels"] == "[4, 8]"
    assert params["train.max_epochs"] == "3" and params["data.args.as_image"] == "true"

    epochs = _epochs(digits_run)
    for key in epochs[0]:
        if key == "epoch":
            continue
        history = client.get_metric_history(run.info.run_id, key)
        assert [m.step for m in history] == [1, 2, 3], key
        assert [m.value for m in history] == pytest.approx([row[key] for row in epochs], rel=1e-6), key

    summary = json.loads((digits_run / "summary.json").read_text())
    assert run.data.metrics["test.accuracy"] == pytest.approx(summary["test"]["accuracy"])
    artifacts = {a.path for a in client.list_artifacts(run.info.run_id)}
    assert {"curves.png", "summary.json", "config.yaml"} <= artifacts
    local = Path(client.download_artifacts(run.info.run_id, "curves.png", str(digits_run.parent)))
    assert local.read_bytes() == (digits_run / "curves.png").read_bytes()


# ---------------------------------------------------------------- resume
def test_a_resumed_run_continues_the_same_tracker_runs(write, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    config = write("tiny.yaml", TINY)
    assert _train(str(config), "--run-dir", "run", BOTH) == 0
    run = tmp_path / "run"
    (first,) = _wandb_files(run)
    assert _train("--resume", "run", "train.max_epochs=2") == 0

    client, _, mlflow_run = _mlflow(run, monkeypatch)  # one MLflow run, both epochs, the first session's params kept
    assert [m.step for m in client.get_metric_history(mlflow_run.info.run_id, "train_loss")] == [1, 2]
    assert mlflow_run.info.status == "FINISHED" and mlflow_run.data.params["train.max_epochs"] == "1"

    sessions = _wandb_files(run)  # offline: the resumed session is a second file of the same run
    assert len(sessions) == 2 and first in sessions
    ids = {json.loads(_inspect(f, "--summary"))["run_id"] for f in sessions}
    assert len(ids) == 1
    second = next(f for f in sessions if f != first)
    assert sorted(_wandb_history(first)) == [1] and sorted(_wandb_history(second)) == [2]
    assert "curves.png" in _wandb_saved(second)


def test_a_tracker_added_on_resume_receives_the_whole_history(write, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    config = write("tiny.yaml", TINY)
    assert _train(str(config), "--run-dir", "run") == 0
    assert not (tmp_path / "run/mlruns").exists()
    assert _train("--resume", "run", "train.max_epochs=2", BOTH) == 0
    client, _, mlflow_run = _mlflow(tmp_path / "run", monkeypatch)
    assert [m.step for m in client.get_metric_history(mlflow_run.info.run_id, "val_accuracy")] == [1, 2]
    (wandb_file,) = _wandb_files(tmp_path / "run")
    assert sorted(_wandb_history(wandb_file)) == [1, 2]


def test_a_continual_run_is_one_tracker_run_across_its_tasks(write, tmp_path, monkeypatch):
    """fit() runs once per task: the tracker run stays one, gets every epoch and the matrix plot."""
    monkeypatch.chdir(tmp_path)
    text = TINY.replace("synthetic_classification, args: {num_samples: 120, num_features: 8, num_classes: 3}",
                        "seq_digits, args: {as_image: false}")  # fmt: skip
    assert _train(str(write("seq.yaml", text + CONTINUAL)), "--run-dir", "run", BOTH) == 0
    run = tmp_path / "run"
    client, _, mlflow_run = _mlflow(run, monkeypatch)
    assert [m.step for m in client.get_metric_history(mlflow_run.info.run_id, "train_loss")] == [1, 2, 3, 4, 5]
    assert mlflow_run.info.status == "FINISHED"
    assert {"cl_matrix.png", "summary.json"} <= {a.path for a in client.list_artifacts(mlflow_run.info.run_id)}
    (wandb_file,) = _wandb_files(run)
    assert sorted(_wandb_history(wandb_file)) == [1, 2, 3, 4, 5] and "cl_matrix.png" in _wandb_saved(wandb_file)


# ---------------------------------------------------------------- failures
@pytest.mark.parametrize("package", ["wandb", "mlflow"])
def test_a_missing_tracker_package_is_one_line_naming_the_extra(cli, write, tmp_path, monkeypatch, package):
    monkeypatch.setitem(sys.modules, package, None)  # what a missing package looks like to import
    res = cli("train", str(write("tiny.yaml", TINY)), "--run-dir", "run", f"train.callbacks=[{package}]")
    assert res.code == 2
    assert res.err.strip().splitlines()[-1] == (
        f'error: the {package} callback needs the {package} package: pip install "modforge[{package}]"'
    )
    assert not (tmp_path / "run").exists()


def test_a_bad_tracking_uri_is_one_error_at_fit_start_and_loses_nothing(cli, write, tmp_path):
    tiny = write("tiny.yaml", TINY)
    assert cli("train", str(tiny), "--run-dir", "run").code == 0
    last = tmp_path / "run/checkpoints/last.pt"
    before = last.read_bytes()
    bad = "train.callbacks=[{type: mlflow, args: {tracking_uri: 'nosuch://host/x'}}]"
    res = cli("train", "--resume", "run", "train.max_epochs=2", bad)
    assert res.code == 2 and "Traceback" not in res.err
    line = res.err.strip().splitlines()[-1]
    assert line.startswith("error: train.callbacks: the mlflow callback could not start its run (tracking URI "
                           "nosuch://host/x, experiment named after the config): ")  # fmt: skip
    assert last.read_bytes() == before and load_checkpoint(last)["epoch"] == 1


def test_a_tracker_failing_mid_run_warns_once_and_a_resume_sends_the_missing_epochs(write, tmp_path, monkeypatch,
                                                                                   capsys):  # fmt: skip
    from mlflow.tracking import MlflowClient

    monkeypatch.chdir(tmp_path)
    real = MlflowClient.log_batch

    def flaky(self, run_id, metrics=(), **kwargs):
        if any(m.step == 2 for m in metrics):
            raise ConnectionError("the server went away")
        return real(self, run_id, metrics=metrics, **kwargs)

    monkeypatch.setattr(MlflowClient, "log_batch", flaky)
    config = write("tiny.yaml", TINY)
    assert _train(str(config), "--run-dir", "run", "train.max_epochs=3", "train.callbacks=[mlflow]") == 0
    warnings = [line for line in capsys.readouterr().err.splitlines() if "mlflow callback failed" in line]
    assert warnings == ["warning: the mlflow callback failed logging epoch 2 (tracking URI "
                        f"{(tmp_path / 'run/mlruns').resolve().as_uri()}, experiment named after the config): the "
                        "server went away; it logs nothing more in this session"]  # fmt: skip
    assert (tmp_path / "run/summary.json").exists()  # training went on
    client, _, mlflow_run = _mlflow(tmp_path / "run", monkeypatch)
    assert [m.step for m in client.get_metric_history(mlflow_run.info.run_id, "train_loss")] == [1]

    monkeypatch.setattr(MlflowClient, "log_batch", real)
    assert _train("--resume", "run", "train.max_epochs=4") == 0
    client, _, mlflow_run = _mlflow(tmp_path / "run", monkeypatch)
    assert [m.step for m in client.get_metric_history(mlflow_run.info.run_id, "train_loss")] == [1, 2, 3, 4]


def test_wandb_online_without_a_login_is_one_error_before_any_epoch(cli, write, tmp_path):
    res = cli("train", str(write("tiny.yaml", TINY)), "--run-dir", "run",
              "train.callbacks=[{type: wandb, args: {mode: online, project: p}}]")  # fmt: skip
    assert res.code == 2
    line = res.err.strip().splitlines()[-1]
    assert line.startswith("error: train.callbacks: the wandb callback could not start its run (mode online, "
                           "project p): ") and "wandb login" in line  # fmt: skip
    assert not (tmp_path / "run/checkpoints").exists()


def test_a_database_store_without_sqlalchemy_names_the_package(cli, write, tmp_path, monkeypatch):
    import importlib.util

    real = importlib.util.find_spec
    monkeypatch.setattr(importlib.util, "find_spec", lambda name, *a: None if name == "sqlalchemy" else real(name, *a))
    res = cli("train", str(write("tiny.yaml", TINY)), "--run-dir", "run",
              "train.callbacks=[{type: mlflow, args: {tracking_uri: 'sqlite:///runs.db'}}]")  # fmt: skip
    assert res.code == 2
    assert "pip install mlflow (mlflow-skinny lacks them)" in res.err.strip().splitlines()[-1]


# ---------------------------------------------------------------- cost when unused
PROBE = """
import json, sys
from modforge.cli.main import main
code = main(sys.argv[1:])
print("\\n__MODULES__" + json.dumps(sorted(m for m in sys.modules)))
sys.exit(code)
"""


@pytest.mark.slow
def test_trackers_are_not_imported_when_unused(write, tmp_path):
    config = write("tiny.yaml", TINY)
    env = _tracker_env(tmp_path / "home")
    # the run in a warm child (train_processes.run_warm): forked from a server that imported torch and modforge's
    # built-in parts — the loggers' modules among them, as the run itself would — and neither tracker library
    proc = run_warm("train", str(config), "--run-dir", str(tmp_path / "run"), code=PROBE, cwd=tmp_path, env=env,
                    timeout=300)  # fmt: skip
    assert proc.returncode == 0, proc.stderr
    modules = json.loads(proc.stdout.rsplit("__MODULES__", 1)[1])
    assert not [m for m in modules if m.split(".")[0] in ("wandb", "mlflow")]
    # the logger's module is loaded (here by the server's registration of the built-in parts, as a cold run's own
    # registration loads it): registering the trackers' callbacks is what must not import their libraries
    assert "modforge.train.callbacks.wandb_logger" in modules


# ---------------------------------------------------------------- the shared pieces
def test_the_config_is_flattened_to_dotted_keys():
    cfg = {"model": {"backbone": {"type": "cnn", "args": {"channels": [4, 8]}}, "neck": {"args": {}}},
           "train": {"callbacks": [{"type": "wandb", "args": {"tags": ["a"]}}]}, "seed": 0}  # fmt: skip
    assert flatten(cfg) == {
        "model.backbone.type": "cnn", "model.backbone.args.channels": [4, 8], "model.neck.args": {},
        "train.callbacks.0.type": "wandb", "train.callbacks.0.args.tags": ["a"], "seed": 0,
    }  # fmt: skip


def test_the_summary_figures_are_its_finite_numbers_but_the_last_row():
    summary = {"epochs": 3, "stopped_early": False, "monitor": "val_accuracy", "last": {"train_loss": 0.5},
               "test": {"accuracy": 0.9, "loss": float("nan")}, "best": {"epoch": 2}}  # fmt: skip
    assert summary_figures(summary) == {"epochs": 3.0, "test.accuracy": 0.9, "best.epoch": 2.0}
