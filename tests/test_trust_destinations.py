"""Issue 25, hole 3 and deliverable 2: destinations are not data. A stored config — a run's
``config.yaml``, a checkpoint's payload — never chooses where data goes or what is connected to:
on ``train --resume`` its tracker entries are kept local inside the run folder (MLflow: a file
store in ``RUN/mlruns``; W&B: offline in ``RUN/wandb``; TensorBoard and the CSV log inside the
run; an Optuna study elsewhere: the callback is left out), with one warning naming what was not
re-activated and how to re-activate it (pass it again on the command line).

The acceptance test: a loopback HTTP server (127.0.0.1 only) standing in for an MLflow server
counts every request. ``--resume`` of a run whose stored config names it — with the user's
``MLFLOW_TRACKING_TOKEN`` in the environment — sends it nothing; passing the tracker again on
the command line does contact it, with the token (so the test can fail)."""

from __future__ import annotations

import http.server
import json
import os
import shutil
import sys
import threading
from pathlib import Path
from unittest import mock

import pytest
import yaml

from modforge.core.origins import CommandLineOrigin
from modforge.experiment.settings import keep_destinations_local
from tiny_run import train_tiny

pytestmark = pytest.mark.hostile

TOKEN = "the-users-own-secret-token"


class _Recorder(http.server.BaseHTTPRequestHandler):
    """Stands in for an MLflow server: records every request, refuses each one (400)."""

    requests: list[dict[str, str]]

    def _any(self) -> None:
        length = int(self.headers.get("Content-Length") or 0)
        body = self.rfile.read(length) if length else b""
        self.server.requests.append({"method": self.command, "path": self.path,  # type: ignore[attr-defined]
                                     "authorization": self.headers.get("Authorization", ""),
                                     "body": body.decode("utf-8", "replace")})  # fmt: skip
        reply = json.dumps({"error_code": "INVALID_PARAMETER_VALUE", "message": "loopback stand-in"}).encode()
        self.send_response(400)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(reply)))
        self.end_headers()
        self.wfile.write(reply)

    do_GET = do_POST = do_PUT = do_PATCH = do_DELETE = do_HEAD = _any

    def log_message(self, *args) -> None:  # quiet
        pass


@pytest.fixture
def server():
    """A tracker server on 127.0.0.1 (a free port) that counts what reaches it."""
    httpd = http.server.ThreadingHTTPServer(("127.0.0.1", 0), _Recorder)
    httpd.requests = []  # type: ignore[attr-defined]
    thread = threading.Thread(target=httpd.serve_forever, daemon=True)
    thread.start()
    httpd.url = f"http://127.0.0.1:{httpd.server_address[1]}"  # type: ignore[attr-defined]
    try:
        yield httpd
    finally:
        httpd.shutdown()
        httpd.server_close()


@pytest.fixture(autouse=True)
def tracker_env(tmp_path, monkeypatch):
    """The user's credentials in the environment; W&B and MLflow touch nothing outside tmp."""
    for key in [k for k in os.environ if k.startswith(("WANDB_", "MLFLOW_"))]:
        monkeypatch.delenv(key)
    home = tmp_path / "home"
    monkeypatch.setenv("HOME", str(home))
    monkeypatch.setenv("MLFLOW_TRACKING_TOKEN", TOKEN)
    monkeypatch.setenv("MLFLOW_HTTP_REQUEST_MAX_RETRIES", "0")
    monkeypatch.setenv("MLFLOW_HTTP_REQUEST_TIMEOUT", "10")
    for key, value in {"WANDB_SILENT": "true", "WANDB_CONFIG_DIR": home / "wandb-config", "WANDB_CACHE_DIR": home / "cache",
                       "WANDB_DATA_DIR": home / "data", "WANDB_DISABLE_GIT": "true", "WANDB_INIT_TIMEOUT": "20",
                       "WANDB_API_KEY": "x" * 40}.items():  # fmt: skip
        monkeypatch.setenv(key, str(value))
    with mock.patch.dict(os.environ):  # the mlflow callback may set MLFLOW_ALLOW_FILE_STORE
        yield
    if "wandb" in sys.modules:  # W&B's service outlives a run with the settings it started with
        sys.modules["wandb"].teardown()


@pytest.fixture(scope="module")
def trained(tmp_path_factory) -> Path:
    """One tiny finished run without any tracker, copied by each test."""
    return train_tiny(tmp_path_factory.mktemp("trained"))


@pytest.fixture
def run(trained, tmp_path) -> Path:
    shutil.copytree(trained, tmp_path / "run", symlinks=True)
    return tmp_path / "run"


def _plant(run: Path, callbacks: list) -> None:
    """What someone who hands you a run folder can do: name trackers in its config.yaml."""
    config = yaml.safe_load((run / "config.yaml").read_text())
    config["train"]["callbacks"] = callbacks
    (run / "config.yaml").write_text(yaml.safe_dump(config, sort_keys=False))


def _held_warnings(err: str) -> list[str]:
    return [line for line in err.splitlines() if line.startswith("warning:") and "not re-activated" in line]


# ------------------------------------------------------------------ the loopback acceptance test
def test_resume_sends_nothing_to_a_tracker_server_the_stored_config_names(cli, run, server):
    _plant(run, [{"type": "mlflow", "args": {"tracking_uri": server.url}}])
    res = cli("train", "--resume", "run", "train.max_epochs=2")
    assert res.code == 0, res.err
    assert server.requests == []  # not one request: no config, no metric, no token
    (warning,) = _held_warnings(res.err)
    assert f"mlflow tracking_uri '{server.url}'" in warning
    assert "train.callbacks.0.args.tracking_uri=" in warning  # how to re-activate it
    assert (run / "mlruns").is_dir()  # the tracker logged locally, inside the run folder
    assert json.loads((run / "summary.json").read_text())["epochs"] == 2

    # the user passes the tracker again on the command line: now it is contacted, with the token
    res = cli("train", "--resume", "run", "train.max_epochs=3", f"train.callbacks.0.args.tracking_uri={server.url}")
    assert server.requests, "the tracker the user passed again was never contacted"
    assert {r["authorization"] for r in server.requests} == {f"Bearer {TOKEN}"}
    assert res.code == 2 and "could not start its run" in res.err.strip().splitlines()[-1]  # the stand-in refuses
    assert not _held_warnings(res.err)


def test_a_run_folder_or_base_file_named_like_an_override_chooses_no_destination(cli, run, server, tmp_path):
    """Whether a value was typed on this command line is not read from its origin's text: a
    run folder named ``override x`` is still a stored config, and a stored config's ``_base_``
    (which would let it read any file) is refused."""
    _plant(run, [{"type": "mlflow", "args": {"tracking_uri": server.url}}])
    disguised = tmp_path / "override 'x=1'"
    run.rename(disguised)
    res = cli("train", "--resume", str(disguised), "train.max_epochs=2")
    assert res.code == 0, res.err
    assert server.requests == [] and _held_warnings(res.err)
    config = yaml.safe_load((disguised / "config.yaml").read_text())
    (tmp_path / "override base.yaml").write_text(yaml.safe_dump({"train": config["train"]}))
    config["_base_"] = str(tmp_path / "override base.yaml")
    (disguised / "config.yaml").write_text(yaml.safe_dump(config, sort_keys=False))
    res = cli("train", "--resume", str(disguised), "train.max_epochs=3")
    assert res.code == 2 and "_base_" in res.err and len(res.err.strip().splitlines()) == 1, res.err
    assert server.requests == []


def test_a_checkpoint_payload_naming_a_tracker_server_sends_it_nothing(cli, run, server, tmp_path):
    """A checkpoint outside a run folder: its own stored config is the one resumed."""
    from modforge.train.checkpoint import atomic_save, load_checkpoint

    payload = load_checkpoint(run / "checkpoints" / "last.pt")
    payload["config"]["train"]["callbacks"] = [{"type": "mlflow", "args": {"tracking_uri": server.url}}]
    atomic_save(payload, tmp_path / "lone.pt")
    res = cli("train", "--resume", "lone.pt", "--run-dir", "continued", "train.max_epochs=2")
    assert res.code == 0, res.err
    assert server.requests == []
    assert len(_held_warnings(res.err)) == 1
    assert (tmp_path / "continued" / "mlruns").is_dir()


# ------------------------------------------------------------------ stores anywhere, other trackers
def test_stored_stores_elsewhere_are_not_created_and_wandb_stays_offline(cli, run, server, tmp_path, monkeypatch):
    """A stored ``file:`` MLflow store, an Optuna study in a SQLite file, TensorBoard's and the
    CSV log's folders: all outside the run, none created; a stored W&B ``mode: online,
    entity: someone-else`` (with W&B's server being the loopback one) stays offline in the run."""
    monkeypatch.setenv("WANDB_BASE_URL", server.url)
    elsewhere = tmp_path / "elsewhere"
    _plant(run, [
        {"type": "mlflow", "args": {"tracking_uri": (elsewhere / "mlruns").as_uri()}},
        {"type": "wandb", "args": {"mode": "online", "entity": "someone-else", "project": "theirs"}},
        {"type": "tensorboard", "args": {"subdir": str(elsewhere / "tb")}},
        {"type": "csv_logger", "args": {"filename": str(elsewhere / "metrics.csv")}},
        {"type": "optuna_pruning", "args": {"storage": f"sqlite:///{elsewhere}/optuna.db", "study": "s", "trial": 0}},
    ])  # fmt: skip
    res = cli("train", "--resume", "run", "train.max_epochs=2")
    assert res.code == 0, res.err
    assert not elsewhere.exists()
    assert server.requests == []
    (warning,) = _held_warnings(res.err)
    for named in ("mlflow tracking_uri", "wandb entity 'someone-else'", "wandb mode 'online'", "tensorboard subdir",
                  "csv_logger filename", "optuna_pruning storage"):  # fmt: skip
        assert named in warning, named
    assert list(run.glob("wandb/offline-run-*/run-*.wandb"))  # offline, inside the run folder
    assert list(run.glob("events.out.tfevents.*")) and (run / "mlruns").is_dir()
    assert len((run / "metrics.csv").read_text().splitlines()) == 3  # header and both epochs, in the run
    assert not [p for p in run.rglob("*") if p.is_symlink()]  # W&B's links out were not left behind


def test_wandb_auto_mode_in_a_stored_config_does_not_follow_wandb_mode_online(cli, run, server, monkeypatch):
    monkeypatch.setenv("WANDB_BASE_URL", server.url)
    monkeypatch.setenv("WANDB_MODE", "online")
    _plant(run, ["wandb"])
    res = cli("train", "--resume", "run", "train.max_epochs=2")
    assert res.code == 0, res.err
    assert server.requests == []
    (warning,) = _held_warnings(res.err)
    assert "wandb mode 'auto'" in warning
    assert list(run.glob("wandb/offline-run-*/run-*.wandb"))


# ------------------------------------------------------------------ the rule itself
def _origins(stored: str, user: dict[str, str]):
    """``Config.where`` of a resumed config: ``user`` paths typed on the command line."""

    def where(path: str) -> str | None:
        probe = path
        while probe:
            if probe in user:
                return user[probe]
            probe = probe.rpartition(".")[0]
        return stored

    return where


def test_only_values_typed_on_this_command_line_choose_a_destination(tmp_path):
    specs = [
        {"type": "mlflow", "args": {"tracking_uri": "http://their-host", "experiment": "kept"}},
        {"type": "mlflow", "args": {"tracking_uri": "http://my-host"}},
        {"type": "wandb", "args": {"mode": "offline", "entity": "someone-else", "project": "p"}},
        {"type": "tensorboard", "args": {"subdir": "tb/inside"}},
        {"type": "optuna_pruning", "args": {"storage": f"sqlite:///{tmp_path}/run/optuna.db", "study": "s", "trial": 1}},
        {"type": "early_stopping", "args": {"patience": 2}},
    ]
    user = {"train.callbacks.1.args.tracking_uri":
            CommandLineOrigin("override 'train.callbacks.1.args.tracking_uri=http://my-host'")}  # fmt: skip
    # a file's origin is its shown name: one named like an override is still a file's value
    kept, held = keep_destinations_local(specs, _origins("override x/config.yaml:12", user), tmp_path / "run")
    by_index = dict(kept)
    assert by_index[0]["args"] == {"tracking_uri": None, "experiment": "kept"}
    assert by_index[1]["args"] == {"tracking_uri": "http://my-host"}  # the user's own, typed again
    assert by_index[2]["args"] == {"mode": "offline", "entity": None, "project": "p"}
    assert by_index[3]["args"] == {"subdir": "tb/inside"}  # inside the run folder: fine
    assert by_index[4]["args"]["storage"].endswith("/run/optuna.db")  # a study inside the run folder: kept
    assert by_index[5] == specs[5]
    assert [(h.index, h.arg) for h in held] == [(0, "tracking_uri"), (2, "entity")]
    assert specs[0]["args"]["tracking_uri"] == "http://their-host"  # the config itself is not changed


def test_an_mlflow_store_planted_in_the_run_folder_cannot_send_artifacts_elsewhere(cli, run, tmp_path):
    """The default store is the run folder's ``mlruns/``: someone may have made it with an
    artifact location anywhere. The tracker refuses it (one line) before writing anything there."""
    from mlflow.tracking import MlflowClient

    elsewhere = tmp_path / "elsewhere"
    with mock.patch.dict(os.environ, {"MLFLOW_ALLOW_FILE_STORE": "true"}):
        MlflowClient(tracking_uri=(run / "mlruns").resolve().as_uri()).create_experiment(
            "tiny", artifact_location=elsewhere.as_uri())
    res = cli("train", "--resume", "run", "train.max_epochs=2", "train.callbacks=[mlflow]")  # the user's own tracker
    assert res.code == 2, res.err
    lines = res.err.strip().splitlines()
    assert lines[-1].startswith("error: train.callbacks: the mlflow store in ") and "outside the run folder" in lines[-1]
    assert not elsewhere.exists()


def test_a_sweep_trial_keeps_the_study_in_its_own_sweep_folder_only(tmp_path):
    sweep = tmp_path / "sweep"
    (sweep / "trials" / "t001").mkdir(parents=True)
    (sweep / "sweep.yaml").write_text("config: x.yaml\n")
    pruning = {"type": "optuna_pruning", "args": {"storage": f"sqlite:///{sweep}/optuna.db", "study": "s", "trial": 1}}
    elsewhere = {"type": "optuna_pruning", "args": {"storage": f"sqlite:///{tmp_path}/optuna.db", "study": "s", "trial": 1}}
    kept, held = keep_destinations_local([pruning], _origins("config.yaml:3", {}), sweep / "trials" / "t001")
    assert kept == [(0, pruning)] and held == []
    kept, held = keep_destinations_local([elsewhere], _origins("config.yaml:3", {}), sweep / "trials" / "t001")
    assert kept == [] and [(h.type, h.arg) for h in held] == [("optuna_pruning", "storage")]
    (sweep / "sweep.yaml").unlink()  # no sweep folder around the run: its study is elsewhere
    kept, held = keep_destinations_local([pruning], _origins("config.yaml:3", {}), sweep / "trials" / "t001")
    assert kept == [] and len(held) == 1
