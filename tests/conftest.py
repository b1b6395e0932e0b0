"""Shared fixtures: registries restored after each test, a CLI runner, file helpers, the sweep tests' digits
config; the long files ordered first for the two workers."""

from __future__ import annotations

import os
import sys
import tempfile
import textwrap
from pathlib import Path

import pytest

# Before torch is first imported (just below; the OpenMP runtime reads this once, at load), and for
# every child process a test starts: OpenMP threads wait for work asleep, not spinning. Two test
# workers keep both cores busy, so a run on two torch threads (a config's ``num_threads: 2``, a
# child's default of one thread per core) spins one thread while the other waits for a core:
# every parallel op then costs a scheduler time slice — measured 47x slower per op with one core
# busy, ``benchmarks/gpu.py --smoke`` 143 s instead of 38 s. Results are the same either way.
os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")

from loopback_http import direct_and_quick  # noqa: E402
from modforge.cli.main import main  # noqa: E402
from registry_state import registries_restored  # noqa: E402
from sweep_helpers import digits_beside  # noqa: E402

# run folders sign their plug-in manifests with the user's key: tests use a key of their own
os.environ.setdefault("MODFORGE_HOME", tempfile.mkdtemp(prefix="modforge-home-"))


@pytest.fixture(autouse=True)
def one_torch_thread():
    """Each test starts on one torch thread. Two test workers share two cores, and a config run
    in-process with ``train.num_threads: 2`` would otherwise leave its worker on two threads for
    every later test — both workers oversubscribed, the suite about a third slower."""
    import torch

    torch.set_num_threads(1)
    yield


@pytest.fixture(autouse=True)
def restore_registries():
    """Every test may register parts; none leaks them into the next test."""
    with registries_restored():
        yield


@pytest.fixture
def write(tmp_path: Path):
    """``write("name.yaml", text)`` → path of a dedented file in the test's tmp dir."""

    def _write(name: str, text: str) -> Path:
        path = tmp_path / name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(textwrap.dedent(text).lstrip("\n"))
        return path

    return _write


@pytest.fixture
def sweep_digits(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, request: pytest.FixtureRequest) -> Path:
    """A copy of ``configs/digits.yaml`` in the test's tmp dir, also set as its module's ``DIGITS``: the
    sweep tests' files lie in tmp_path and name that copy (a sweep file may only name configs beside it).
    The sweep test modules use it for every test (``pytestmark = pytest.mark.usefixtures("sweep_digits")``)."""
    copy = digits_beside(tmp_path)
    monkeypatch.setattr(request.module, "DIGITS", copy)
    return copy


@pytest.fixture
def no_proxy_no_wait(monkeypatch: pytest.MonkeyPatch) -> None:
    """Requests to a loopback server skip the environment's proxies, and download retries do not sleep
    (:func:`loopback_http.direct_and_quick`)."""
    direct_and_quick(monkeypatch)


class CliResult:
    def __init__(self, code: int, out: str, err: str):
        self.code, self.out, self.err = code, out, err

    def __repr__(self) -> str:
        return f"CliResult(code={self.code}, out={self.out!r}, err={self.err!r})"


@pytest.fixture
def cli(capsys, monkeypatch, tmp_path):
    """Run ``modforge`` in-process with the test's tmp dir as cwd."""
    monkeypatch.chdir(tmp_path)

    def _run(*args: str) -> CliResult:
        code = main(list(args))
        captured = capsys.readouterr()
        return CliResult(code, captured.out, captured.err)

    return _run


# The files whose tests add up to 7 s or more (``--durations`` summed per file, a whole run on 2 idle
# workers), longest first. ``--dist loadfile`` hands out whole files in collection order, and a worker
# that runs out of files waits: started first, these long files end early and the small files fill in
# at the end (a long file started late can be the last thing running while the other worker sits idle).
# Only the order changes; a file missing from the list, or a stale list, costs balance, never a test.
LONG_FILES_FIRST = (
    "test_distributed_runs.py", "test_detection_resume.py", "test_sweep_ray.py", "test_sweep_optuna.py",
    "test_sweep_run.py", "test_conformance.py", "test_docs.py", "test_continual_processes.py", "test_continual_run.py",
    "test_engines.py", "test_image_datasets.py", "test_experiment.py", "test_audio_zoo.py", "test_trust.py",
    "test_trust_sockets.py", "test_gpu_readiness.py", "test_trackers.py", "test_trust_sweeps.py", "test_backbone_timm.py",
    "test_trust_run_folders.py", "test_distributed.py", "test_detection_export.py", "test_trust_references.py",
    "test_quantize.py", "test_spoofing_task.py", "test_backbone_aasist.py", "test_trust_folder_properties.py",
    "test_continual_methods_replay.py", "test_reader_properties.py", "test_backbone_torchvision.py",
    "test_aasist_reference.py", "test_trust_hf_folders.py", "test_run_stops.py", "test_run_lifecycle.py",
    "test_backbone_nes2net.py", "test_first_hour.py", "test_distill.py", "test_cli.py", "test_part_door.py",
)  # fmt: skip


def pytest_configure(config):
    # xdist would otherwise hand the files out by their number of tests, most first: the long files of a
    # few multi-process tests then start last and finish long after the other worker ran out of files
    if hasattr(config.option, "loadscopereorder"):
        config.option.loadscopereorder = False


@pytest.hookimpl(wrapper=True)
def pytest_collection(session):
    """Collection writes its byte-code caches, the test modules' assert-rewritten code above all
    (``tests/__pycache__/*-pytest-*.pyc``), even under ``PYTHONDONTWRITEBYTECODE``: pytest reads such
    a cache whatever that says, but only writes it where bytecode may be written — so every worker
    of every run rewrote every test module's asserts again (about 6 CPU-seconds a worker, half of
    collecting the suite). The cache is pytest's own: keyed by the source's mtime and size, rewritten
    when a test file changes. Only while collecting: what the tests run is left as the environment
    says, and child processes get the environment as it is."""
    before = sys.dont_write_bytecode
    sys.dont_write_bytecode = False
    try:
        return (yield)
    finally:
        sys.dont_write_bytecode = before


def pytest_collection_modifyitems(config, items):
    rank = {name: i for i, name in enumerate(LONG_FILES_FIRST)}
    items.sort(key=lambda item: rank.get(item.path.name, len(rank)))  # stable: each file's tests keep their order
