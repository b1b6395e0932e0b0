"""The README's porting guide runs as written: every ``<!-- file: FRAMEWORK/NAME -->`` block is
written into a folder per seed framework and every line of its ``<!-- run: FRAMEWORK -->``
block is run there (in-process), so the guide a DeepFense, Mammoth, UP or delira user
follows cannot drift from the code. The mistakes its tables list are made too, and each
must give the message the table promises."""

from __future__ import annotations

import re
import shlex
from pathlib import Path

import pytest
import yaml

README = Path(__file__).resolve().parents[1] / "README.md"
_BLOCK = re.compile(r"<!-- (file|run): ([\w./-]+) -->\n```\w*\n(.*?)```", re.S)


def guide_blocks() -> tuple[dict[str, dict[str, str]], dict[str, list[list[str]]]]:
    """({framework: {file name: text}}, {framework: [command argv, ...]}) from the README."""
    files: dict[str, dict[str, str]] = {}
    runs: dict[str, list[list[str]]] = {}
    for kind, name, body in _BLOCK.findall(README.read_text()):
        if kind == "file":
            framework, _, file = name.partition("/")
            files.setdefault(framework, {})[file] = body
        else:
            commands = [shlex.split(line, comments=True) for line in body.splitlines()]
            runs[name] = [argv for argv in commands if argv]
    return files, runs


FILES, RUNS = guide_blocks()


def test_the_guide_covers_every_seed_framework():
    assert set(RUNS) == {"deepfense", "mammoth", "up", "delira"} and set(FILES) == set(RUNS)
    for argvs in RUNS.values():
        assert all(argv[0] == "modforge" for argv in argvs), argvs


@pytest.fixture
def ported(tmp_path, cli):
    """Write one framework's files into the test folder; return a runner of its commands."""

    def _port(framework: str):
        for name, text in FILES[framework].items():
            (tmp_path / name).write_text(text)
        for argv in RUNS[framework]:
            result = cli(*argv[1:])
            assert result.code == 0, f"{shlex.join(argv)} failed:\n{result.err}"
        return tmp_path

    return _port


@pytest.mark.slow
@pytest.mark.parametrize("framework", ["deepfense", "mammoth", "up", "delira"])
def test_the_ported_example_runs_as_the_guide_shows(framework, ported):
    folder = ported(framework)
    summary = yaml.safe_load((folder / "run" / "summary.json").read_text())
    if framework == "mammoth":
        assert len(summary["class_il"]) == 5  # every task trained and evaluated
    else:
        assert summary["epochs"] == 2 and summary.get("test")
    if framework == "deepfense":
        assert (folder / "run" / "scores.txt").exists()
    if framework == "delira":
        assert list((folder / "run" / "exports").glob("*.onnx"))
