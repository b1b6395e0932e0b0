"""``--backend ray`` against a real local Ray instance with 2 CPUs (one for the module, reached
by its address): the same sweep as the local pool, with the same metrics, and a Ray worker
SIGKILLed mid-trial — the task is retried and the trial resumes from its checkpoint, ending with
the metrics of an uninterrupted run. The trials train :data:`sweep_helpers.TINY_CONFIG` (an MLP
on the digits as vectors): what is tested is the backend, not the model."""

from __future__ import annotations

import os
import re
import signal
from pathlib import Path

import pytest

from sweep_helpers import SHIPPED_DIGITS, TIMEOUT_S, running_sweep, sweep_cli, tiny_beside, trial_rows, wait_for

ray = pytest.importorskip("ray")

from modforge.sweep.ray_executor import init_local_ray  # noqa: E402 - after the skip without ray

DIGITS = SHIPPED_DIGITS  # each test's copy beside its sweep files, once its fixture `sweep_digits` ran
pytestmark = pytest.mark.usefixtures("sweep_digits")
METRICS = ("test.accuracy", "test.loss", "best.val_accuracy")

# The trials of the first two tests: one epoch of 79 steps, a checkpoint every 10 (the second test kills its
# Ray worker at the first one, 69 steps before the trial's end). The same trial commands in both tests: one
# local sweep (the `local` fixture) is the reference of both.
SWEEP = """
config: tiny.yaml
overrides: {train.max_epochs: 1, train.num_threads: 1, train.checkpoint.every_n_steps: 10}
seeds: [0, 1]
collect: [test.accuracy, test.loss, best.val_accuracy]
"""


@pytest.fixture(scope="module")
def ray_address():
    """One local Ray instance (2 CPUs, no dashboard, on 127.0.0.1) for every test here; shut down after them.
    Started with SIGINT ignored, as a Ray started in the background (``&``, nohup) is: its
    workers inherit that, and a stopped sweep must still be able to cancel its tasks."""
    previous = signal.signal(signal.SIGINT, signal.SIG_IGN)
    try:
        init_local_ray(ray, num_cpus=2, include_dashboard=False, log_to_driver=False,
                       object_store_memory=100 * 1024**2)  # listening on 127.0.0.1 only, as a sweep's own  # fmt: skip
    finally:
        signal.signal(signal.SIGINT, previous)
    try:
        yield ray.get_runtime_context().gcs_address
    finally:
        ray.shutdown()


@pytest.fixture(scope="module")
def local(tmp_path_factory) -> Path:
    """:data:`SWEEP` run once on the local pool (two workers): the sweep folder the Ray sweeps are compared with."""
    folder = tmp_path_factory.mktemp("local")
    tiny_beside(folder)
    (folder / "s.yaml").write_text(SWEEP)
    res = sweep_cli(folder, "s.yaml", "--workers", "2", "--sweep-dir", "local")
    assert res.returncode == 0, res.stdout + res.stderr
    return folder / "local"


def _same_metrics(got: Path, expected: Path, trials: list[str] | None = None) -> None:
    """``got``'s trials (all of ``expected``'s, or the ``trials`` named) are done, with ``expected``'s metrics."""
    got_rows, expected_rows = trial_rows(got), trial_rows(expected)
    expected_rows = {t: expected_rows[t] for t in trials} if trials else expected_rows
    assert list(got_rows) == list(expected_rows)
    for trial_id, row in expected_rows.items():
        assert got_rows[trial_id]["status"] == row["status"] == "done"
        for metric in METRICS:
            assert got_rows[trial_id][metric] == row[metric], (trial_id, metric)


@pytest.mark.slow
def test_a_sweep_on_ray_gives_the_local_pools_metrics(tmp_path, ray_address, local):
    tiny_beside(tmp_path)
    sweep = tmp_path / "s.yaml"
    sweep.write_text(SWEEP)
    res = sweep_cli(tmp_path, str(sweep), "--backend", "ray", "--ray-address", ray_address, "--sweep-dir", "viaray")
    assert res.returncode == 0, res.stdout + res.stderr
    assert f"on Ray ({ray_address})" in res.stdout and "done seed1" in res.stdout
    _same_metrics(tmp_path / "viaray", local)
    for seed in (0, 1):
        log = (tmp_path / "viaray" / "trials" / f"seed{seed}.log").read_text()
        assert re.match(r"# \S+ \[ray worker \d+ on ", log) and log.count("\n# ") == 0  # one attempt
    assert "n" in (tmp_path / "viaray" / "results.md").read_text()


@pytest.mark.slow
def test_a_ray_worker_killed_mid_trial_is_retried_and_the_trial_resumes_from_its_checkpoint(tmp_path, ray_address,
                                                                                           local):  # fmt: skip
    tiny_beside(tmp_path)
    sweep = tmp_path / "k.yaml"
    sweep.write_text(SWEEP.replace("seeds: [0, 1]", "seeds: [0]") + "ray: {max_retries: 2}\n")
    sweep_dir, trials = tmp_path / "killed", tmp_path / "killed" / "trials"
    # only --backend ray switches Ray on (the sweep file's ray: section holds its resource settings)
    log = trials / "seed0.log"
    command = [str(sweep), "--backend", "ray", "--ray-address", ray_address, "--sweep-dir", str(sweep_dir)]
    with running_sweep(tmp_path, *command) as process:
        wait_for(lambda: any((trials / "seed0" / "checkpoints").glob("*.pt")) and log.exists(), process,
                 "the trial's first checkpoint")  # fmt: skip
        worker = int(re.match(r"# \S+ \[ray worker (\d+) on ", log.read_text()).group(1))  # type: ignore[union-attr]
        assert not (trials / "seed0" / "summary.json").exists(), "the trial finished before the kill"
        os.kill(worker, signal.SIGKILL)
        out, _ = process.communicate(timeout=TIMEOUT_S)
    assert process.returncode == 0, out
    text = log.read_text()
    headers = [line for line in text.splitlines() if line.startswith("# ")]
    assert len(headers) == 2, text  # the first attempt, and the retry on another worker
    assert "--run-dir" in headers[0] and "--resume" not in headers[0]
    assert f"--resume {trials / 'seed0'}" in headers[1] and f"[ray worker {worker} " not in headers[1]
    assert "resuming" in text

    _same_metrics(sweep_dir, local, ["seed0"])  # the same trial, run uninterrupted on the local pool


@pytest.mark.slow
def test_a_stopped_ray_sweep_stops_its_trials_and_records_them_as_interrupted(tmp_path, ray_address):
    import fcntl

    tiny_beside(tmp_path)
    sweep = tmp_path / "t.yaml"
    sweep.write_text("config: tiny.yaml\noverrides: {train.max_epochs: 200, train.num_threads: 1}\nseeds: [0]\n"
                     "collect: [test.accuracy]\n")  # fmt: skip
    trials = tmp_path / "sw" / "trials"
    command = [str(sweep), "--backend", "ray", "--ray-address", ray_address, "--sweep-dir", "sw"]
    with running_sweep(tmp_path, *command) as process:
        wait_for(lambda: any((trials / "seed0" / "checkpoints").glob("*.pt")), process, "the trial's first checkpoint",
                 poll_s=0.05)  # fmt: skip
        process.send_signal(signal.SIGTERM)
        out, _ = process.communicate(timeout=120)  # cancelled at once: not after the trial's 200 epochs
    assert process.returncode == 130, out
    assert trial_rows(tmp_path / "sw")["seed0"]["status"] == "interrupted"
    assert not (trials / "seed0" / "summary.json").exists()
    fd = os.open(trials / ".seed0.lock", os.O_RDWR)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)  # free: the trial's process has ended
    finally:
        os.close(fd)


def test_ray_flags_need_the_ray_backend_and_sensible_amounts(cli, write):
    path = write("s.yaml", f"config: {DIGITS}\nseeds: [0]\ncollect: [test.accuracy]\n")
    res = cli("sweep", str(path), "--backend", "local", "--ray-address", "auto")
    assert res.code == 2 and "--ray-address, --cpus-per-trial and --gpus-per-trial need --backend ray" in res.err
    res = cli("sweep", str(path), "--backend", "ray", "--cpus-per-trial", "0", "--dry-run")
    assert res.code == 2 and "--cpus-per-trial must be more than 0, got 0" in res.err
    res = cli("sweep", str(path), "--backend", "ray", "--cpus-per-trial", "3", "--dry-run")
    assert res.code == 0 and "train.num_threads=3" in re.sub(r"\s+", "", res.out)  # the table may wrap it
