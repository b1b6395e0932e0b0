"""Shared fixtures: registries restored after each test, a CLI runner, file helpers."""

from __future__ import annotations

import os
import tempfile
import textwrap
from pathlib import Path

import pytest

from modforge.cli.main import main
from registry_state import registries_restored

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
