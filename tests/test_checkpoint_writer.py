"""The checkpoint writer and its commit helper process: order, links, pruning, errors,
and recovery when the helper dies."""

from __future__ import annotations

import logging
import os
import signal
import time

import pytest
import torch

import modforge.train.checkpoint as checkpoint_module
from modforge.train.checkpoint import (
    CHECKPOINT_FORMAT,
    CheckpointError,
    CheckpointWriter,
    load_checkpoint,
    remove_abandoned_temps,
    serialize,
)
from modforge.train.checkpoint_commit import commit
from modforge.train.commit_helper import HELPER, CommitHelper


def payload(step: int) -> bytes:
    return serialize({"format": CHECKPOINT_FORMAT, "global_step": step, "model": {"w": torch.full((4,), float(step))}})


def step_of(path) -> int:
    return load_checkpoint(path)["global_step"]


@pytest.fixture
def helper(monkeypatch):
    """A helper of the test's own, so killing it leaves the process-wide one alone."""
    own = CommitHelper()
    monkeypatch.setattr(checkpoint_module, "HELPER", own)
    yield own
    own.close()


def ckpt(folder, step: int):
    return folder / f"epoch0000-step{step:07d}.pt"


def forked_exit_code(child: int, timeout: float = 60) -> int:
    """The exit code of the forked ``child``. A child forked from this multi-threaded worker can hang
    on a lock another thread held at the fork (before any line of its own runs, in an at-fork
    handler): one still running after ``timeout`` is killed and fails the test instead of hanging it."""
    deadline = time.monotonic() + timeout
    while (done := os.waitpid(child, os.WNOHANG))[0] == 0:
        if time.monotonic() > deadline:
            os.kill(child, signal.SIGKILL)
            os.waitpid(child, 0)
            pytest.fail(f"the forked child did not finish in {timeout} s (killed)")
        time.sleep(0.02)
    return os.waitstatus_to_exitcode(done[1])


def test_writer_commits_in_order_with_links_and_pruning_through_the_helper(tmp_path, helper):
    writer, folder = CheckpointWriter(), tmp_path / "c"
    writer.submit(payload(1), ckpt(folder, 1), [folder / "last.pt"])
    assert helper.pid is not None  # handed over, not committed on this thread
    writer.submit(payload(2), ckpt(folder, 2), [folder / "last.pt", folder / "best.pt"], prune=[ckpt(folder, 1)])
    writer.submit(payload(3), ckpt(folder, 3), [folder / "last.pt"])
    writer.wait()
    assert writer.unanswered == 0
    assert (step_of(folder / "last.pt"), step_of(folder / "best.pt"), step_of(ckpt(folder, 3))) == (3, 2, 3)
    assert sorted(p.name for p in folder.iterdir()) == ["best.pt", ckpt(folder, 2).name, ckpt(folder, 3).name, "last.pt"]
    assert os.path.samefile(folder / "last.pt", ckpt(folder, 3))  # a link, not a second copy


def test_the_same_path_saved_twice_in_a_row_gets_both_versions_in_order(tmp_path, helper):
    writer = CheckpointWriter()
    os.kill(helper.ensure(), signal.SIGSTOP)  # both jobs wait in the pipe, their temp files side by side
    try:
        writer.submit(payload(1), ckpt(tmp_path, 1), [tmp_path / "last.pt"])
        writer.submit(payload(2), ckpt(tmp_path, 1), [tmp_path / "last.pt", tmp_path / "best.pt"])
    finally:
        os.kill(helper.pid, signal.SIGCONT)
    writer.wait()
    assert [step_of(tmp_path / n) for n in (ckpt(tmp_path, 1).name, "last.pt", "best.pt")] == [2, 2, 2]


def test_a_failed_commit_is_raised_at_wait_and_a_bad_folder_at_submit(tmp_path, helper):
    writer = CheckpointWriter()
    (tmp_path / "in_the_way").mkdir()
    (tmp_path / "in_the_way" / "x").write_text("a directory where last.pt should go")
    writer.submit(payload(1), ckpt(tmp_path, 1), [tmp_path / "in_the_way"])
    with pytest.raises(CheckpointError, match="writing a checkpoint failed"):
        writer.wait()
    writer.wait()  # reported once
    blocker = tmp_path / "file"
    blocker.write_text("not a directory")
    with pytest.raises(CheckpointError, match="writing a checkpoint failed.*exists and is not a folder"):
        writer.submit(payload(2), blocker / "x.pt")


def test_synchronous_writer_commits_before_returning(tmp_path, helper):
    writer = CheckpointWriter(asynchronous=False)
    writer.submit(payload(5), ckpt(tmp_path, 5), [tmp_path / "last.pt"])
    assert step_of(tmp_path / "last.pt") == 5 and helper.pid is None


def test_jobs_of_a_helper_that_dies_are_committed_here(tmp_path, helper, caplog):
    writer = CheckpointWriter()
    writer.submit(payload(1), ckpt(tmp_path, 1), [tmp_path / "last.pt"])
    writer.wait()
    os.kill(helper.pid, signal.SIGSTOP)  # the next jobs reach it but are never run...
    writer.submit(payload(2), ckpt(tmp_path, 2), [tmp_path / "last.pt"])
    writer.submit(payload(3), ckpt(tmp_path, 3), [tmp_path / "last.pt"], prune=[ckpt(tmp_path, 1)])
    assert writer.unanswered == 2
    os.kill(helper.pid, signal.SIGKILL)  # ...because it dies
    with caplog.at_level(logging.WARNING, logger="modforge.train"):
        writer.wait()
    assert "ended unexpectedly" in caplog.text
    assert step_of(tmp_path / "last.pt") == 3 and step_of(ckpt(tmp_path, 2)) == 2
    assert not ckpt(tmp_path, 1).exists() and not [p for p in tmp_path.iterdir() if ".tmp-" in p.name]
    writer.submit(payload(4), ckpt(tmp_path, 4), [tmp_path / "last.pt"])  # from now on: on this thread
    assert step_of(tmp_path / "last.pt") == 4 and helper.pid is None


def test_commit_replaces_existing_names_and_keeps_them_complete(tmp_path):
    for step in (1, 2):
        tmp = tmp_path / f".new{step}"
        tmp.write_bytes(payload(step))
        commit(str(tmp), str(tmp_path / "same.pt"), [str(tmp_path / "last.pt")])
    assert step_of(tmp_path / "same.pt") == 2 and step_of(tmp_path / "last.pt") == 2
    assert sorted(p.name for p in tmp_path.iterdir()) == ["last.pt", "same.pt"]


@pytest.mark.skipif(not os.path.isdir("/dev/shm"), reason="needs a second file system")
def test_a_link_on_another_file_system_is_a_synced_copy(tmp_path):
    import tempfile

    if os.stat("/dev/shm").st_dev == os.stat(tmp_path).st_dev:
        pytest.skip("/dev/shm is on the same file system here")
    with tempfile.TemporaryDirectory(dir="/dev/shm") as other:
        for step in (1, 2):
            tmp = tmp_path / f".new{step}"
            tmp.write_bytes(payload(step))
            commit(str(tmp), str(ckpt(tmp_path, step)), [os.path.join(other, "best.pt"), os.path.join(other, "last.pt")])
        assert step_of(os.path.join(other, "last.pt")) == 2 and step_of(os.path.join(other, "best.pt")) == 2
        assert sorted(os.listdir(other)) == ["best.pt", "last.pt"] and len(list(tmp_path.iterdir())) == 2


@pytest.mark.skipif(not hasattr(os, "fork"), reason="needs fork")
def test_a_child_forked_while_jobs_are_pending_saves_and_waits_on_its_own(tmp_path, helper):
    writer = CheckpointWriter()
    os.kill(helper.ensure(), signal.SIGSTOP)
    try:
        writer.submit(payload(1), ckpt(tmp_path, 1), [tmp_path / "last.pt"])  # pending in the parent
        child = os.fork()
        if child == 0:  # pragma: no cover - runs in the child
            signal.alarm(30)  # a hang fails the test instead of blocking it
            helper._after_fork()  # what os.register_at_fork runs for the process-wide helper
            writer.submit(payload(7), tmp_path / "child" / "x.pt")
            writer.wait()
            os._exit(0 if step_of(tmp_path / "child" / "x.pt") == 7 and writer.unanswered == 0 else 1)
        code = forked_exit_code(child)
    finally:
        os.kill(helper.pid, signal.SIGCONT)
    assert code == 0
    writer.wait()
    assert step_of(tmp_path / "last.pt") == 1


@pytest.mark.skipif(not hasattr(os, "fork"), reason="needs fork")
def test_a_forked_child_does_not_use_its_parents_helper(tmp_path):
    writer = CheckpointWriter()
    writer.submit(payload(1), ckpt(tmp_path, 1))
    writer.wait()
    assert HELPER.pid is not None
    child = os.fork()
    if child == 0:  # pragma: no cover - runs in the child
        os._exit(0 if HELPER.pid is None else 1)
    assert forked_exit_code(child) == 0


@pytest.mark.skipif(os.name != "posix", reason="process liveness via signal 0")
def test_temp_files_of_killed_processes_are_removed_but_not_those_of_live_ones(tmp_path):
    import subprocess
    import sys

    gone = subprocess.run([sys.executable, "-c", "import os; print(os.getpid())"], capture_output=True, text=True)
    dead_pid = int(gone.stdout)
    abandoned = [
        tmp_path / f".epoch0001-step0000010.pt.tmp-{dead_pid}-7",
        tmp_path / f".epoch0001-step0000010.pt.tmp-{dead_pid}+{dead_pid}-8",
        tmp_path / f".last.pt.link-{dead_pid}",
    ]
    kept = [
        tmp_path / f".last.pt.tmp-{os.getpid()}-1",
        tmp_path / f".last.pt.tmp-{os.getppid()}-1",
        tmp_path / f".last.pt.tmp-{dead_pid}+{os.getppid()}-2",  # its trainer died, its helper still commits
        tmp_path / "last.pt",
    ]
    for path in abandoned + kept:
        path.write_bytes(b"x")
    assert sorted(remove_abandoned_temps(tmp_path)) == sorted(abandoned)
    assert sorted(tmp_path.iterdir()) == sorted(kept)


@pytest.mark.skipif(not os.path.isdir("/proc/self"), reason="zombies are told apart through /proc")
def test_a_temp_file_whose_owner_is_a_zombie_is_removed(tmp_path):
    """A commit helper orphaned by a killed trainer stays a zombie where nothing reaps orphans (a
    container without an init); signal 0 still reaches a zombie, yet it commits nothing any more."""
    import subprocess

    unreaped = subprocess.Popen(["true"])  # ends at once; not waited for (until the end), so a zombie
    state = ""
    deadline = time.monotonic() + 60
    while state != "Z" and time.monotonic() < deadline:
        stat = open(f"/proc/{unreaped.pid}/stat").read()
        state = stat[stat.rfind(")") + 2]
        time.sleep(0.01)
    try:
        assert state == "Z"
        temp = tmp_path / f".epoch0002-step0000010.pt.tmp-{unreaped.pid}-4"
        temp.write_bytes(b"x")
        assert remove_abandoned_temps(tmp_path) == [temp]
    finally:
        unreaped.wait()
