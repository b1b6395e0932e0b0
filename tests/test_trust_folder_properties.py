"""Generated hostile run and sweep folders: links (to outside, inside, dangling, looping) and
FIFOs planted at random places — including the names modforge writes — and every command that
reads such a folder run on it. Whatever the mix: no byte outside the folder changes, the command
either works or refuses with exit status 2 and one line, and nothing escapes as "unexpected"."""

from __future__ import annotations

import hashlib
import os
import shutil
from collections.abc import Callable
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from modforge.cli.main import main
from registry_state import registries_restored

pytestmark = [pytest.mark.hostile, pytest.mark.slow]

# names modforge writes in a run folder (and their temporaries), and in a sweep folder
RUN_NAMES = ["config.yaml", "metrics.csv", "summary.json", "curves.png", "confusion_matrix.png", "evaluations",
             "evaluations/best-test.json", "checkpoints", "checkpoints/last.pt", "checkpoints/best.pt",
             ".summary.json.tmp", ".metrics.csv.tmp", "evaluations/.best-test.json.tmp", "plugins", "mlruns", "x"]  # fmt: skip
SWEEP_NAMES = ["sweep.yaml", "trials.csv", "results.md", "results.csv", "results.png", ".lock", "trials",
               "trials/t0", "trials/t0.log", "trials/t0/summary.json", ".results.md.tmp", ".results.csv.tmp",
               ".results.tmp.png", ".trials.csv.tmp", ".sweep.yaml.tmp", "optuna.db"]  # fmt: skip
TARGETS = ["victim_file", "victim_dir", "inside", "dangling", "loop", "relative_out", "fifo"]


def digest(folder: Path) -> dict[str, str]:
    """Every file under ``folder`` (links not followed) and its SHA-256 — what must not change."""
    out = {}
    for path in sorted(folder.rglob("*")):
        if path.is_symlink():
            out[str(path)] = "link:" + os.readlink(path)
        elif path.is_file():
            out[str(path)] = hashlib.sha256(path.read_bytes()).hexdigest()
        else:
            out[str(path)] = "dir"
    return out


@pytest.fixture(scope="module")
def templates(tmp_path_factory) -> dict[str, Path]:
    """One real finished run (digits, one epoch) and one real finished sweep of one trial, both made
    by ``modforge`` in this process (the sweep's trial is still its own process, as always): what is
    checked is what commands do with the folders, not how the folders were made."""
    root = tmp_path_factory.mktemp("templates")
    config = Path(__file__).resolve().parents[1] / "configs" / "digits.yaml"
    run = root / "run"
    sweep_file = root / "sweepdef" / "tiny.yaml"
    sweep_file.parent.mkdir()
    shutil.copy(config, sweep_file.parent / "digits.yaml")
    sweep_file.write_text("name: tiny\nconfig: digits.yaml\noverrides: {train.max_epochs: 1, train.callbacks: [],"
                          " data.batch_size: 256}\ngrid: {train.optimizer.args.lr: [0.003]}\n"
                          "collect: [test.accuracy]\n")  # fmt: skip
    sweep = root / "sweep"
    cwd = os.getcwd()
    os.chdir(root)
    try:
        with registries_restored():
            assert main(["train", str(config), "--run-dir", str(run), "train.max_epochs=1", "train.callbacks=[]",
                         "data.batch_size=256"]) == 0  # fmt: skip
        with registries_restored():
            assert main(["sweep", str(sweep_file), "--sweep-dir", str(sweep)]) == 0
    finally:
        os.chdir(cwd)
    return {"run": run, "sweep": sweep}


def plant(folder: Path, name: str, target: str, outside: Path) -> None:
    """Put a link (or a FIFO) of kind ``target`` at ``folder/name``, replacing what was there."""
    path = folder / name
    for parent in reversed(path.relative_to(folder).parents[:-1]):  # never plant *through* an earlier link
        if (folder / parent).is_symlink() or ((folder / parent).exists() and not (folder / parent).is_dir()):
            return
    path.parent.mkdir(parents=True, exist_ok=True)
    if path.is_symlink() or (path.exists() and not path.is_dir()):
        path.unlink()
    elif path.is_dir():
        shutil.rmtree(path)
    if target == "fifo":
        os.mkfifo(path)
        return
    destination = {
        "victim_file": outside / "victim.txt",
        "victim_dir": outside,
        "inside": folder,
        "dangling": folder / "no-such-file",
        "loop": path,
        "relative_out": Path(os.path.relpath(outside / "victim.txt", path.parent)),
    }[target]
    path.symlink_to(destination)


def run_commands(commands: list[list[str]], cwd: Path, capsys) -> list[tuple[int, str]]:
    results = []
    old = os.getcwd()
    os.chdir(cwd)
    try:
        for args in commands:
            code = main(args)
            err = capsys.readouterr().err
            results.append((code, err))
    finally:
        os.chdir(old)
    return results


def check(results: list[tuple[int, str]], before: dict, outside: Path) -> None:
    assert digest(outside) == before, "a byte outside the folder changed"
    for code, err in results:
        assert "unexpected" not in err.lower(), err
        assert code in (0, 2), err
        if code == 2:
            assert len([line for line in err.splitlines() if line.startswith("error")]) == 1, err


plantings = st.lists(st.tuples(st.integers(0, 10**6), st.sampled_from(TARGETS)), min_size=1, max_size=3)


def hostile_copy(template: Path, base: Path, names: list[str], planted: list[tuple[int, str]]) -> tuple[Path, Path]:
    """A copy of ``template`` in ``base`` with ``planted`` entries at names from ``names``, and the
    folder outside it holding the victim file."""
    folder, outside = base / template.name, base / "outside"
    shutil.copytree(template, folder, symlinks=True)
    outside.mkdir()
    (outside / "victim.txt").write_text("precious\n")
    for index, target in planted:
        plant(folder, names[index % len(names)], target, outside)
    return folder, outside


def check_commands_on_a_hostile_copy(template: Path, base: Path, names: list[str], planted: list[tuple[int, str]],
                                     capsys: pytest.CaptureFixture, commands: Callable[[Path], list[list[str]]]) -> None:
    """``commands(copy)`` run on a :func:`hostile_copy` of ``template``: each ends cleanly and no byte
    outside the copy changes (:func:`check`)."""
    folder, outside = hostile_copy(template, base, names, planted)
    before = digest(outside)
    check(run_commands(commands(folder), base, capsys), before, outside)


@settings(max_examples=20, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(planted=plantings)
def test_generated_run_folders(templates, tmp_path_factory, capsys, planted):
    base = tmp_path_factory.mktemp("case")
    check_commands_on_a_hostile_copy(templates["run"], base, RUN_NAMES, planted, capsys, lambda run: [
        ["test", str(run)], ["export", str(run), "--engine", "torchscript", "--out", str(base / "model.ts")],
        ["train", "--resume", str(run)]])  # fmt: skip


@settings(max_examples=20, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(planted=plantings)
def test_generated_sweep_folders(templates, tmp_path_factory, capsys, planted):
    base = tmp_path_factory.mktemp("case")
    check_commands_on_a_hostile_copy(templates["sweep"], base, SWEEP_NAMES, planted, capsys,
                                     lambda sweep: [["sweep-report", str(sweep)]])  # fmt: skip


def test_untouched_folders_work_and_inside_links_are_fine(templates, tmp_path, capsys):
    """The control: the same commands on the unmodified folders (and with a link that stays
    inside) succeed — so the refusals above are the planted entries' doing."""
    run, sweep, outside = tmp_path / "run", tmp_path / "sweep", tmp_path / "outside"
    shutil.copytree(templates["run"], run, symlinks=True)
    shutil.copytree(templates["sweep"], sweep, symlinks=True)
    outside.mkdir()
    plant(run, "x", "inside", outside)
    results = run_commands([["test", str(run)], ["export", str(run), "--engine", "torchscript", "--out",
                                                 str(tmp_path / "model.ts")], ["sweep-report", str(sweep)]],
                           tmp_path, capsys)  # fmt: skip
    assert [code for code, _ in results] == [0, 0, 0], results
