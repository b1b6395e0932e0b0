"""Shared fixtures: registries restored after each test, a CLI runner, file helpers."""

from __future__ import annotations

import os
import sys
import tempfile
import textwrap
from pathlib import Path

import pytest

import modforge as mf
from modforge.cli.main import main
from modforge.core import plugins as plugin_state
from modforge.core.plugins import PLUGIN_MODULE_PREFIX

# run folders sign their plug-in manifests with the user's key: tests use a key of their own
os.environ.setdefault("MODFORGE_HOME", tempfile.mkdtemp(prefix="modforge-home-"))


@pytest.fixture(autouse=True)
def restore_registries():
    """Every test may register parts; none leaks them into the next test."""
    for registry in mf.REGISTRIES.values():
        registry._ensure_loaded()
    saved = {kind: dict(r._entries) for kind, r in mf.REGISTRIES.items()}
    modules = set(sys.modules)
    vouched, folders = dict(plugin_state._LOADED), list(plugin_state._TRUSTED_FOLDERS)
    yield
    plugin_state._LOADED.clear()
    plugin_state._LOADED.update(vouched)
    plugin_state._TRUSTED_FOLDERS[:] = folders
    for kind, registry in mf.REGISTRIES.items():
        registry._entries.clear()
        registry._entries.update(saved[kind])
    for name in set(sys.modules) - modules:
        if name.startswith(PLUGIN_MODULE_PREFIX) or name.startswith("mf_test_"):
            del sys.modules[name]


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
