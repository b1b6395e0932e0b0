"""Issue 25, hole 2: a run folder someone gave you, reused by ``modforge test RUN``,
``train --resume RUN`` (or a checkpoint inside it) and ``export RUN``, is checked once before
anything in it is read or written. A link planted in it that leads outside it — at a name
modforge writes (``evaluations/.best-test.json.tmp``, ``curves.png``, ``.summary.json.tmp``,
``.metrics.csv.tmp``, ``config.yaml``), as ``evaluations/`` itself, or anywhere else — is one
error line naming the link (exit 2): the victim outside stays byte-identical and the run folder
is left as it was. Links that stay inside the folder are fine.

Hole 6, ``--nproc``: torchrun and its workers never import a module lying in the cwd."""

from __future__ import annotations

import json
import os
import random
import shutil
import signal
import sys
from pathlib import Path

import pytest

from tiny_run import TINY, train_tiny

pytestmark = pytest.mark.hostile


VICTIM = b"the user's own file: nothing from modforge may land here\n"


@pytest.fixture(scope="module")
def trained(tmp_path_factory) -> Path:
    """One tiny finished run (with an ``evaluations/`` folder), copied by each test."""
    run = train_tiny(tmp_path_factory.mktemp("trained"))
    (run / "evaluations").mkdir()
    return run


@pytest.fixture(autouse=True)
def no_launch(monkeypatch):
    """In this process, ``--nproc`` must be refused before torchrun would replace it."""
    from modforge.cli.commands import train_run

    def refuse(*args, **kwargs):
        raise AssertionError("torchrun was started: the run folder was not refused first")

    monkeypatch.setattr(train_run.os, "execve", refuse)
    monkeypatch.setattr(train_run.subprocess, "call", refuse)


@pytest.fixture
def run(trained, tmp_path) -> Path:
    shutil.copytree(trained, tmp_path / "run", symlinks=True)
    return tmp_path / "run"


@pytest.fixture
def outside(tmp_path) -> Path:
    """A folder outside the run holding the victim file."""
    folder = tmp_path / "outside"
    folder.mkdir()
    (folder / "victim.txt").write_bytes(VICTIM)
    return folder


def _snapshot(root: Path) -> dict[str, tuple[str, bytes]]:
    """Every entry under ``root`` (links not followed): its kind and its bytes or target."""
    out = {}
    for current, folders, files in os.walk(root, followlinks=False):
        for name in folders + files:
            path = Path(current) / name
            rel = str(path.relative_to(root))
            if path.is_symlink():
                out[rel] = ("link", os.readlink(path).encode())
            elif path.is_dir():
                out[rel] = ("dir", b"")
            elif path.is_file():
                out[rel] = ("file", path.read_bytes())
            else:
                out[rel] = ("special", b"")
    return out


COMMANDS = {
    "test": ("test", "run"),
    "test-checkpoint": ("test", "run/checkpoints/best.pt"),
    "resume": ("train", "--resume", "run", "train.max_epochs=2"),
    "resume-checkpoint": ("train", "--resume", "run/checkpoints/last.pt", "train.max_epochs=2"),
    "resume-nproc": ("train", "--resume", "run", "--nproc", "2"),  # refused before torchrun starts
    "export": ("export", "run", "--engine", "eager"),
}


def _refused(cli, command: str, run: Path, outside: Path, link: str) -> None:
    """``command`` exits 2 with one line naming ``link``; nothing inside or outside changed."""
    before_run, before_outside = _snapshot(run), _snapshot(outside)
    res = cli(*COMMANDS[command])
    lines = res.err.strip().splitlines()
    assert res.code == 2, res
    assert len(lines) == 1, res.err
    assert lines[0].startswith("error: run folder ") and f"run/{link}" in lines[0], lines[0]
    assert "Traceback" not in res.err and "unexpected" not in res.err
    assert (outside / "victim.txt").read_bytes() == VICTIM
    assert _snapshot(outside) == before_outside
    assert _snapshot(run) == before_run


# ------------------------------------------------------------ links at the names modforge writes
@pytest.mark.parametrize(
    ("command", "link"),
    [
        ("test", "evaluations/.best-test.json.tmp"),
        ("test-checkpoint", "evaluations/best-test.json"),
        ("resume", "curves.png"),
        ("resume", ".summary.json.tmp"),
        ("resume", ".metrics.csv.tmp"),
        ("resume-checkpoint", "summary.json"),
        ("resume-nproc", "metrics.csv"),
        ("export", "exports"),
    ],
)
def test_a_link_to_the_users_file_at_a_name_modforge_writes_is_refused(cli, run, outside, command, link):
    target = run / link
    if target.exists() and not target.is_dir():
        target.unlink()
    target.parent.mkdir(exist_ok=True)
    target.symlink_to(outside / "victim.txt")
    _refused(cli, command, run, outside, link)


@pytest.mark.parametrize("command", ["resume", "test"])
def test_a_config_yaml_that_is_a_link_out_is_refused_before_it_is_read(cli, run, outside, command):
    (outside / "victim.txt").write_bytes(VICTIM)
    (run / "config.yaml").unlink()
    (run / "config.yaml").symlink_to(outside / "victim.txt")
    _refused(cli, command, run, outside, "config.yaml")


@pytest.mark.parametrize("command", ["test", "resume", "export"])
def test_an_evaluations_folder_that_is_a_link_to_a_folder_outside_is_refused(cli, run, outside, command):
    (run / "evaluations").rmdir()
    (run / "evaluations").symlink_to(outside, target_is_directory=True)
    _refused(cli, command, run, outside, "evaluations")


@pytest.mark.parametrize("seed", range(6))
def test_a_link_out_planted_at_a_random_place_is_refused_by_every_command(cli, run, outside, seed):
    """A random folder of the run, a random name, a random kind of link out: to the victim, to
    the folder outside, dangling, or looping."""
    rng = random.Random(seed)
    folders = sorted(p for p in [run, *run.rglob("*")] if p.is_dir() and not p.is_symlink())
    where = rng.choice(folders)
    name = rng.choice(["x.png", ".hidden", "best.pt", "summary.json", "notes", "z" * rng.randint(1, 30)])
    link = where / f"{name}-{seed}"
    kind = rng.choice(["victim", "folder", "dangling", "loop"])
    target = {"victim": outside / "victim.txt", "folder": outside, "dangling": outside / "missing",
              "loop": link}[kind]  # fmt: skip
    link.symlink_to(target)
    command = rng.choice(sorted(COMMANDS))
    _refused(cli, command, run, outside, str(link.relative_to(run)))


def test_a_fifo_in_the_run_folder_is_refused(cli, run, outside):
    os.mkfifo(run / "evaluations" / "best-test.json")

    def hung(*_):
        raise TimeoutError("the FIFO was opened (a read from it waits forever)")

    previous = signal.signal(signal.SIGALRM, hung)
    signal.alarm(60)
    try:
        _refused(cli, "test", run, outside, "evaluations/best-test.json")
    finally:
        signal.alarm(0)
        signal.signal(signal.SIGALRM, previous)


def test_an_existing_folder_to_continue_in_is_checked_too(cli, run, outside):
    other = run.parent / "other"
    other.mkdir()
    (other / "curves.png").symlink_to(outside / "victim.txt")
    res = cli("train", "--resume", "run/checkpoints/last.pt", "--run-dir", "other", "train.max_epochs=2")
    assert res.code == 2 and len(res.err.strip().splitlines()) == 1
    assert "other/curves.png is a symbolic link" in res.err
    assert (outside / "victim.txt").read_bytes() == VICTIM and not (run.parent / "other" / "checkpoints").exists()


def test_links_that_stay_inside_the_run_folder_are_fine(cli, run):
    (run / "alias.png").symlink_to("curves.png")
    (run / "evaluations" / "checkpoints").symlink_to("../checkpoints", target_is_directory=True)
    res = cli("test", "run")
    assert res.code == 0, res.err
    assert (run / "evaluations" / "best-test.json").is_file()


# ------------------------------------------------------------ --nproc never imports from the cwd
# (a real two-process run with modules planted in its cwd: test_trust_sockets' --nproc run, which
# watches its sockets too — one launch for both)


def test_the_nproc_command_line_starts_no_process_that_imports_from_the_cwd():
    """What ``--nproc`` execs: torchrun and its workers' command both without the cwd on
    ``sys.path`` (``-P`` on Python 3.11+, a bootstrap dropping it on 3.10), workers run as
    given (``--no-python``), and every child gets ``PYTHONSAFEPATH=1``."""
    from modforge.cli.commands.train_run import launch_command
    from modforge.core.child_process import safe_child_env

    command = launch_command(["tiny.yaml"], 2)
    no_python = command.index("--no-python")
    launcher, worker = command[: command.index("--standalone")], command[no_python + 1 :]
    assert "-m" not in command[command.index("--standalone") : no_python]
    for part in (launcher, worker):
        assert part[0] == sys.executable
        assert ("-P" in part) if sys.version_info >= (3, 11) else ("-c" in part and "-m" not in part)
    assert worker[-2:] == ["train", "tiny.yaml"]
    assert safe_child_env()["PYTHONSAFEPATH"] == "1"


# ------------------------------------------------------------ paths a checkpoint or a config holds
def test_a_checkpoints_best_file_is_only_ever_the_best_pt_beside_it(cli, run, tmp_path):
    """A checkpoint records where its run's best weights lie (an absolute path, data): a lone
    checkpoint resumed elsewhere never reads the file it names, only a best.pt beside itself."""
    import torch

    lone = tmp_path / "given"
    lone.mkdir()
    shutil.copy(run / "checkpoints" / "last.pt", lone / "last.pt")
    payload = torch.load(lone / "last.pt", weights_only=True)
    named = [state["best_file"] for state in payload["callbacks"].values() if "best_file" in state]
    assert named and Path(named[0]).is_file()  # the checkpoint does name the original run's best.pt
    res = cli("train", "--resume", str(lone / "last.pt"), "--run-dir", str(tmp_path / "new"))
    assert res.code == 0, res
    summary = json.loads((tmp_path / "new" / "summary.json").read_text())
    assert summary["evaluated"] == "final weights", summary  # not the file the checkpoint named


@pytest.mark.parametrize("filename", ["../outside.csv", "/tmp/anywhere.csv"])
def test_a_csv_logger_filename_outside_the_run_folder_is_refused_before_any_folder(cli, tmp_path, filename):
    (tmp_path / "tiny.yaml").write_text(TINY + f"  callbacks: [{{type: csv_logger, args: {{filename: '{filename}'}}}}]\n")
    res = cli("train", str(tmp_path / "tiny.yaml"), "--run-dir", str(tmp_path / "r"))
    assert res.code == 2 and "filename" in res.err and len(res.err.strip().splitlines()) == 1, res
    assert not (tmp_path / "r").exists() and not (tmp_path.parent / "outside.csv").exists()


def test_a_run_folder_named_through_a_link_is_used_like_the_folder(cli, run, tmp_path):
    """``runs/latest -> runs/<stamp>``: the folder the user names may itself be a link."""
    (tmp_path / "latest").symlink_to(run)
    assert cli("test", "latest").code == 0
    res = cli("train", "--resume", "latest", "train.max_epochs=2")
    assert res.code == 0, res.err
    assert json.loads((run / "summary.json").read_text())["epochs"] == 2
