"""Ctrl-C and SIGTERM stop a run with what it kept and the exact command that continues it.

One real ``modforge train`` child gets a real SIGINT once its first checkpoint exists; the
message must name that checkpoint (as it lies on disk after the stop) and the ``--resume``
command. SIGTERM is raised as :class:`~modforge.cli.stops.Terminated` (checked in this process
with a real signal); a run folder with no checkpoint, or none at all, says so.
"""

from __future__ import annotations

import os
import signal
import time
from pathlib import Path

import pytest

from modforge.cli.stops import RunStopped, Terminated, kept_lines, sigterm_interrupts, stopped
from modforge.train.checkpoint import load_checkpoint
from run_configs import cnn, run_config
from train_processes import WarmModforge

CONFIG = run_config("{type: digits, args: {as_image: true}, batch_size: 128}", cnn(4, 8), neck="global_avg_pool",
                    train=dict(max_epochs=10000, optimizer="{type: adamw, args: {lr: 1.0e-3}}", metrics="[accuracy]",
                               progress="never"))


@pytest.mark.slow
def test_ctrl_c_names_the_last_checkpoint_and_the_resume_command(tmp_path: Path) -> None:
    (tmp_path / "c.yaml").write_text(CONFIG)
    # a warm child (train_processes.WarmModforge: a fork of a server that imported torch and modforge, without
    # a fresh interpreter's seconds of imports) running `python -m modforge train`, its SIGINT as a terminal's
    # would be — Python's KeyboardInterrupt handler, as a fresh interpreter sets it (a test worker may run with
    # SIGINT ignored, which a child started the usual way would inherit, and Python then never turns Ctrl-C
    # into KeyboardInterrupt)
    env = {**os.environ, "PYTHONSAFEPATH": "1", "OMP_NUM_THREADS": "1"}
    child = WarmModforge(["train", "c.yaml", "--run-dir", "run"], tmp_path, env=env)
    last = tmp_path / "run" / "checkpoints" / "last.pt"
    try:
        deadline = time.monotonic() + 120
        while not last.exists() and child.poll() is None and time.monotonic() < deadline:
            time.sleep(0.05)
        assert last.exists(), "the run wrote no checkpoint in time"
        os.kill(child.pid, signal.SIGINT)
        child.wait(timeout=120)
        err = child.stderr
    finally:
        if child.poll() is None:
            child.kill()
            child.wait()
        child.close()
    assert child.returncode == 130, err
    payload = load_checkpoint(last)  # what the stop left on disk is what the message must name
    assert "error: interrupted (Ctrl-C)\n" in err
    epoch, batch, step = payload["epoch"], payload["batch_in_epoch"], payload["global_step"]
    where = f"end of epoch {epoch}" if batch == 0 else f"epoch {epoch + 1}, batch {batch}"
    assert f"kept: {os.path.join('run', 'checkpoints', 'last.pt')} ({where}, step {step})" in err, err
    assert err.rstrip().endswith("to continue: modforge train --resume run"), err


def test_sigterm_raises_terminated_and_puts_the_handler_back() -> None:
    before = signal.getsignal(signal.SIGTERM)
    with pytest.raises(Terminated), sigterm_interrupts():
        os.kill(os.getpid(), signal.SIGTERM)
        time.sleep(5)  # the handler raises at the next bytecode; never reached
    assert signal.getsignal(signal.SIGTERM) is before


def test_sigterm_reports_its_own_signal_and_exit_status(tmp_path: Path) -> None:
    report = stopped(Terminated(), None)
    assert isinstance(report, RunStopped)
    assert (str(report), report.exit_code) == ("stopped by SIGTERM", 143)
    assert report.details == ["nothing was kept: the run stopped before its run folder was made"]


def test_a_folder_without_a_checkpoint_says_so(tmp_path: Path) -> None:
    run = tmp_path / "run"
    (run / "checkpoints").mkdir(parents=True)
    (run / "config.yaml").write_text(CONFIG)
    [line] = kept_lines(run, processes=2)
    assert "holds no checkpoint yet (the run stopped before its first one)" in line
    assert line.endswith(f"to train it again from the start: modforge train --resume {run} --nproc 2")
    assert kept_lines(tmp_path / "never-made") == ["nothing was kept: the run stopped before its run folder was made"]


def test_a_handler_put_in_place_inside_stays() -> None:
    """torchrun's processes replace the handler when they join their group (a peer's failure is
    their message): leaving the block must not take that away while torchrun may signal again."""
    before = signal.getsignal(signal.SIGTERM)

    def inside(signum, frame):  # never called
        raise AssertionError

    try:
        with sigterm_interrupts():
            signal.signal(signal.SIGTERM, inside)
        assert signal.getsignal(signal.SIGTERM) is inside
    finally:
        signal.signal(signal.SIGTERM, before)
