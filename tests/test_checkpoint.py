"""Checkpoint files: safe loading, corruption fallback, atomic replacement under SIGKILL."""

from __future__ import annotations

import logging
import os
import pickle
import time
from pathlib import Path

import pytest
import torch

from modforge.train.checkpoint import (
    CHECKPOINT_FORMAT,
    CheckpointError,
    CorruptCheckpointError,
    UnsafeCheckpointError,
    atomic_save,
    find_resumable,
    load_checkpoint,
)
from train_processes import WarmModforge


def payload(step: int) -> dict:
    return {"format": CHECKPOINT_FORMAT, "global_step": step, "model": {"w": torch.full((4,), float(step))}}


class Evil:
    def __init__(self, marker: str):
        self.marker = marker

    def __reduce__(self):
        return (os.system, (f"touch {self.marker}",))


@pytest.mark.filterwarnings("ignore:Detected pickle protocol")
def test_a_checkpoint_that_would_run_code_is_refused_and_nothing_runs(tmp_path):
    marker = tmp_path / "pwned"
    path = tmp_path / "evil.pt"
    torch.save({"format": CHECKPOINT_FORMAT, "model": Evil(str(marker))}, path)
    with pytest.raises(UnsafeCheckpointError, match="refused to load .*posix.system|refused to load .*os.system|refused to load"):
        load_checkpoint(path)
    assert not marker.exists()
    raw = tmp_path / "raw.pt"
    raw.write_bytes(pickle.dumps(Evil(str(marker))))
    with pytest.raises(CheckpointError):
        load_checkpoint(raw)
    assert not marker.exists()
    (tmp_path / "checkpoints").mkdir()
    os.replace(path, tmp_path / "checkpoints" / "last.pt")
    with pytest.raises(UnsafeCheckpointError):  # never "falls back" past a malicious file silently
        find_resumable(tmp_path)
    assert not marker.exists()


def test_corrupt_last_falls_back_to_the_newest_valid_checkpoint(tmp_path, caplog):
    folder = tmp_path / "checkpoints"
    for step in (10, 20, 30):
        atomic_save(payload(step), folder / f"epoch0000-step{step:07d}.pt")
    os.link(folder / "epoch0000-step0000030.pt", folder / "last.pt")
    data = (folder / "last.pt").read_bytes()
    (folder / "last.pt").unlink()  # last.pt and the newest file are both damaged
    (folder / "last.pt").write_bytes(data[: len(data) // 2])
    (folder / "epoch0000-step0000030.pt").write_bytes(data[:100])
    with caplog.at_level(logging.WARNING, logger="modforge.train"):
        path, loaded = find_resumable(tmp_path)
    assert path.name == "epoch0000-step0000020.pt" and loaded["global_step"] == 20
    assert "truncated or damaged" in caplog.text and "resuming from" in caplog.text
    with pytest.raises(CorruptCheckpointError, match="truncated or damaged"):
        load_checkpoint(folder / "last.pt")


def test_nothing_usable_and_foreign_files(tmp_path):
    with pytest.raises(CheckpointError, match="nothing to resume"):
        find_resumable(tmp_path / "missing")
    (tmp_path / "checkpoints").mkdir()
    (tmp_path / "checkpoints" / "last.pt").write_bytes(b"garbage")
    with pytest.raises(CheckpointError, match="no usable checkpoint"):
        find_resumable(tmp_path)
    foreign = tmp_path / "foreign.pt"
    torch.save({"state_dict": {}}, foreign)
    with pytest.raises(CheckpointError, match="not a modforge checkpoint"):
        load_checkpoint(foreign)


WRITER = """
import sys, torch
from modforge.train.checkpoint import CHECKPOINT_FORMAT, atomic_save
path = sys.argv[1]
step = 0
while True:
    step += 1
    atomic_save({"format": CHECKPOINT_FORMAT, "global_step": step, "model": {"w": torch.full((2_000_000,), float(step))}}, path)
    print(step, flush=True)
"""


@pytest.mark.slow
@pytest.mark.parametrize("delay", [0.05, 0.13, 0.29])
def test_sigkill_during_saves_never_leaves_a_torn_file(tmp_path, delay):
    path = tmp_path / "last.pt"
    # ``python -c WRITER PATH`` in a warm child (a fork of the server that imported torch and modforge once)
    proc = WarmModforge([str(path)], tmp_path, keep_stdout=True, code=WRITER)
    try:
        deadline = time.monotonic() + 120
        while "\n" not in proc.stdout and proc.poll() is None:  # at least one complete save exists
            assert time.monotonic() < deadline, "no save in time"
            time.sleep(0.005)
        assert proc.poll() is None, proc.stderr
        time.sleep(delay)
    finally:
        proc.kill()
        proc.wait()
        proc.close()
    loaded = load_checkpoint(path)
    step = loaded["global_step"]
    assert step >= 1 and bool((loaded["model"]["w"] == float(step)).all())  # every value from one complete save
    leftovers = [p.name for p in Path(tmp_path).iterdir() if p.name != "last.pt"]
    assert all(name.startswith(".last.pt.tmp") for name in leftovers)  # only an abandoned temp file, never a torn last.pt
