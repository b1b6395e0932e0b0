"""Thread counts fit the machine: the CPUs this process may use, shared among the processes
started beside it; a pin is kept, warned about when it exceeds the CPUs; timings state the load."""

from __future__ import annotations

import logging
from pathlib import Path

import pytest
import torch

from modforge.core import threads

ROOT = Path(__file__).resolve().parents[1]


@pytest.fixture
def machine(monkeypatch):
    """A simulated machine: ``machine(cores, **env)`` sets this process's affinity to ``cores`` CPUs
    and the sharing variables to ``env`` (all others unset)."""

    def _machine(cores: int, **env: str) -> None:
        monkeypatch.setattr(threads.os, "sched_getaffinity", lambda _pid: set(range(cores)), raising=False)
        for name in ("OMP_NUM_THREADS", "LOCAL_WORLD_SIZE", "PYTEST_XDIST_WORKER_COUNT"):
            monkeypatch.delenv(name, raising=False)
        for name, value in env.items():
            monkeypatch.setenv(name, value)
        monkeypatch.setattr(threads, "_warned", set())

    return _machine


@pytest.mark.parametrize(
    ("cores", "env", "expected"),
    [
        (1, {}, 1),  # one core: one thread
        (16, {}, 16),  # a laptop's cores, all of them
        (2, {"PYTEST_XDIST_WORKER_COUNT": "2"}, 1),  # two test workers on two cores: one thread each
        (16, {"LOCAL_WORLD_SIZE": "4"}, 4),  # torchrun's 4 processes on this machine
        (8, {"LOCAL_WORLD_SIZE": "2", "PYTEST_XDIST_WORKER_COUNT": "4"}, 2),  # the larger count of sharers
        (1, {"PYTEST_XDIST_WORKER_COUNT": "2"}, 1),  # never fewer than one
        (8, {"LOCAL_WORLD_SIZE": "junk"}, 8),  # a malformed count is ignored
        (8, {"OMP_NUM_THREADS": "3", "LOCAL_WORLD_SIZE": "2"}, 3),  # the user's (or torchrun's) explicit choice
    ],
)
def test_the_default_is_the_cpus_shared_among_the_processes(machine, cores, env, expected) -> None:
    machine(cores, **env)
    assert threads.default_threads() == expected


def test_a_config_without_a_pin_gets_the_machines_share(machine, monkeypatch) -> None:
    """Experiment.build sets torch's threads from the affinity: on 1 core, 1 thread (from 2 before)."""
    from modforge.core.config import load_config
    from modforge.experiment.runner import Experiment
    from modforge.experiment.schema import validate_config

    cfg = load_config(ROOT / "configs/digits.yaml")
    assert "num_threads" not in cfg.data["train"], "the demo config pins no thread count"
    validate_config(cfg)
    machine(1)
    torch.set_num_threads(2)
    Experiment.build(cfg)
    assert torch.get_num_threads() == 1


def test_a_pin_is_kept_and_one_above_the_cpus_is_warned_once(machine, caplog) -> None:
    machine(2)
    with caplog.at_level(logging.WARNING, logger="modforge.threads"):
        assert threads.choose_threads(2, "c.yaml:9") == 2
        assert not caplog.records  # a pin within the CPUs is the user's business
        assert threads.choose_threads(8, "c.yaml:9") == 8
        assert threads.choose_threads(8, "c.yaml:9") == 8
    assert len(caplog.records) == 1
    message = caplog.records[0].getMessage()
    assert "train.num_threads is 8 (set in c.yaml:9)" in message and "2 CPU(s)" in message


@pytest.mark.parametrize(
    ("load", "cpus", "busy"),
    [(0.9, 2, False), (1.2, 2, False), (2.1, 2, True), (2.5, 1, True), (2.0, 16, False), (9.0, 16, True)],
)
def test_the_load_note_says_when_others_keep_the_machine_busy(load, cpus, busy) -> None:
    note, is_busy = threads.load_note(load, cpus)
    assert is_busy is busy
    assert f"machine load {load:.2f}" in note and f"on {cpus} CPU(s)" in note
    assert ("slower and noisier" in note) is busy


def test_profile_states_the_load(cli, monkeypatch, capsys) -> None:
    """``modforge profile`` prints the load beside its latencies: a warning when busy, a note when not."""
    monkeypatch.setattr(threads, "machine_load", lambda: 9.0)
    monkeypatch.setattr(threads, "available_cpus", lambda: 2)
    config = str(ROOT / "configs/digits.yaml")
    busy = cli("profile", config, "--input-shape", "1,8,8", "--engines", "eager", "--repeats", "1")
    assert busy.code == 0, busy.err
    assert "latencies timed on a busy machine: machine load 9.00" in busy.err
    from modforge.cli.commands.profile_model import _say_load

    monkeypatch.setattr(threads, "machine_load", lambda: 0.5)
    _say_load()
    idle = capsys.readouterr()
    assert "(machine load 0.50 (1-min average) on 2 CPU(s))" in idle.out and "busy" not in idle.err


def test_the_benchmark_report_states_the_load(monkeypatch, capsys) -> None:
    """benchmarks/_report.py: the README's "last run" line and the printed table carry the load."""
    import importlib.util

    spec = importlib.util.spec_from_file_location("bench_report", ROOT / "benchmarks" / "_report.py")
    report = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(report)
    monkeypatch.setattr(threads, "machine_load", lambda: 5.0)
    monkeypatch.setattr(threads, "available_cpus", lambda: 2)
    assert "machine load 5.00 (1-min average) on 2 CPU(s)" in report.machine()
    assert report.publish("demo", "| a | b |", write=False) == 0
    out = capsys.readouterr().out
    assert out.startswith("| a | b |\ncaution — machine load 5.00") and "slower and noisier" in out
