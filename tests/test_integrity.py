"""Content checksums: every checkpoint and exported artifact is verified before it is used.

Each test damages a file the way bit rot does — one flipped bit inside a weight tensor's
bytes, which ``torch.load`` (and ``torch.jit.load``, ONNX Runtime) would read silently —
and checks that modforge refuses it with one clear error, or falls back to an intact file
with a warning.
"""

from __future__ import annotations

import json
import logging
import os
from pathlib import Path

import numpy as np
import pytest
import torch

from modforge.cli.main import main
from modforge.core.integrity import IntegrityError, checksum_trailer, verify_trailer, verify_zip
from modforge.train.checkpoint import (
    CHECKPOINT_FORMAT,
    CorruptCheckpointError,
    find_resumable,
    list_checkpoints,
    load_checkpoint,
    serialize,
)
from run_configs import ADAM, mlp, run_config

TINY = run_config("{type: digits, args: {as_image: false}, batch_size: 64}", mlp(32), train=dict(
    max_epochs=1, optimizer=ADAM, monitor="val_accuracy", checkpoint="{every_n_steps: 5, keep_last: 3}", num_threads=1,
    progress="never"))


def train_tiny(folder: Path) -> Path:
    """A 1-epoch digits run (periodic checkpoints every 5 steps, last.pt, best.pt) in ``folder/run``."""
    config = folder / "tiny.yaml"
    config.write_text(TINY)
    run = folder / "run"
    assert main(["train", str(config), "--run-dir", str(run)]) == 0
    return run


def flip_bit_in(path: Path, tensor_bytes: bytes, *, separate: bool = False) -> None:
    """Flip one bit in the middle of ``tensor_bytes`` where they lie in ``path`` — in place
    (every hard link to the file sees it), or, with ``separate``, in a new file under that
    name (the other names keep the intact bytes)."""
    data = bytearray(path.read_bytes())
    offset = data.find(tensor_bytes)
    assert offset >= 0 and data.find(tensor_bytes, offset + 1) < 0, "the tensor's bytes are not in the file once"
    data[offset + len(tensor_bytes) // 2] ^= 0x08
    if separate:
        path.unlink()
        path.write_bytes(bytes(data))
    else:
        with open(path, "r+b") as file:
            file.write(data)


def largest_tensor(state: dict) -> bytes:
    tensor = max((t for t in state.values() if isinstance(t, torch.Tensor)), key=torch.Tensor.numel)
    return tensor.contiguous().numpy().tobytes()


def one_line(text: str) -> str:
    lines = [line for line in text.splitlines() if line.strip()]
    assert len(lines) == 1, text
    return lines[0]


# ------------------------------------------------------------------------- checkpoints
def test_a_flipped_bit_in_a_checkpoint_tensor_is_caught_and_resume_falls_back(tmp_path, caplog, monkeypatch):
    run = train_tiny(tmp_path)
    monkeypatch.setattr(logging.getLogger("modforge"), "propagate", True)  # the command line turned it off
    folder = run / "checkpoints"
    last, periodic = folder / "last.pt", list_checkpoints(folder)
    assert len(periodic) >= 2 and os.path.samefile(last, periodic[0])  # last.pt is the newest file, linked
    weights = largest_tensor(load_checkpoint(last)["model"])
    assert torch.load(last, weights_only=True)  # PyTorch itself reads the damaged file silently (below)
    flip_bit_in(last, weights)
    torch.load(last, weights_only=True)
    with pytest.raises(CorruptCheckpointError) as caught:
        load_checkpoint(last)
    message = str(caught.value)
    assert str(last) in message and "damaged" in message and "checksum mismatch in record 'archive/data/" in message
    with caplog.at_level(logging.WARNING, logger="modforge.train"):
        path, payload = find_resumable(run)
    assert path == periodic[1] and payload["format"] == CHECKPOINT_FORMAT  # the newest intact one
    assert "checksum mismatch" in caplog.text and "resuming from" in caplog.text and str(periodic[1]) in caplog.text


def test_test_command_falls_back_from_a_damaged_best_to_last_then_to_a_periodic_checkpoint(tmp_path, cli):
    run = train_tiny(tmp_path)
    folder = run / "checkpoints"
    weights = largest_tensor(load_checkpoint(folder / "best.pt")["model"])
    flip_bit_in(folder / "best.pt", weights, separate=True)  # a damaged copy; last.pt keeps its own bytes

    res = cli("test", str(run))
    assert res.code == 0, res.err
    assert "best.pt is damaged: checksum mismatch in record" in res.err and "evaluating" in res.err
    assert json.loads((run / "evaluations" / "last-test.json").read_text())["checkpoint"] == str(folder / "last.pt")
    assert not (run / "evaluations" / "best-test.json").exists()

    weights = largest_tensor(load_checkpoint(folder / "last.pt")["model"])
    flip_bit_in(folder / "last.pt", weights, separate=True)
    res = cli("test", str(run))
    newest = list_checkpoints(folder)[0]
    assert res.code == 0, res.err
    assert "last.pt is damaged" in res.err and f"evaluating {newest}" in res.err
    assert (run / "evaluations" / f"{newest.stem}-test.json").exists()

    for path in list_checkpoints(folder):
        flip_bit_in(path, largest_tensor(load_checkpoint(path)["model"]), separate=True)
    res = cli("test", str(run))
    assert res.code == 2
    error = one_line(res.err)
    assert "no usable checkpoint" in error and error.count("is damaged: checksum mismatch") == 2 + len(
        list_checkpoints(folder))
    res = cli("test", str(folder / "best.pt"))  # a file named on the command line: no fallback
    assert res.code == 2 and "best.pt is damaged: checksum mismatch" in one_line(res.err)


def test_checkpoints_carry_checksums_even_when_pytorch_is_told_not_to_write_them(tmp_path):
    getter = getattr(torch.serialization, "get_crc32_options", None)
    if getter is None:
        pytest.skip("this PyTorch always writes the checksums")
    torch.serialization.set_crc32_options(False)
    try:
        data = serialize({"format": CHECKPOINT_FORMAT, "model": {"w": torch.arange(1000.0)}})
        assert getter() is False  # the user's setting is restored
    finally:
        torch.serialization.set_crc32_options(True)
    path = tmp_path / "c.pt"
    path.write_bytes(data)
    assert verify_zip(path) is True
    flip_bit_in(path, torch.arange(1000.0).numpy().tobytes())
    with pytest.raises(IntegrityError, match="checksum mismatch in record 'archive/data/0'"):
        verify_zip(path)


def test_a_checkpoint_saved_without_checksums_loads_with_a_warning(tmp_path, caplog):
    if getattr(torch.serialization, "get_crc32_options", None) is None:
        pytest.skip("this PyTorch always writes the checksums")
    path = tmp_path / "old.pt"
    torch.serialization.set_crc32_options(False)
    try:
        torch.save({"format": CHECKPOINT_FORMAT, "model": {"w": torch.ones(3)}}, path)
    finally:
        torch.serialization.set_crc32_options(True)
    with caplog.at_level(logging.WARNING, logger="modforge.train"):
        assert load_checkpoint(path)["model"]["w"].sum() == 3
    assert "carries no checksums" in caplog.text


# -------------------------------------------------------------------------- artifacts
@pytest.fixture(scope="module")
def trained(tmp_path_factory) -> tuple[Path, Path]:
    """A trained run and an input file for ``modforge predict``."""
    folder = tmp_path_factory.mktemp("integrity")
    run = train_tiny(folder)
    from sklearn.datasets import load_digits

    np.save(folder / "three.npy", (load_digits().data[:3] / 16).astype("float32"))
    return run, folder / "three.npy"


def artifact_tensor(path: Path, run: Path) -> bytes:
    """The bytes of a weight tensor as they lie in the artifact."""
    if path.suffix == ".onnx":
        import onnx
        from onnx import numpy_helper

        model = onnx.load(str(path))
        return max((numpy_helper.to_array(t) for t in model.graph.initializer), key=np.size).tobytes()
    return largest_tensor(load_checkpoint(run / "checkpoints" / "best.pt")["model"])


@pytest.mark.parametrize("engine", ["eager", "torchscript", "onnx"])
def test_a_damaged_artifact_is_refused_by_predict_and_an_intact_one_works(trained, engine, tmp_path, capsys):
    from modforge.experiment.export import export_run

    run, inputs = trained
    artifact = export_run(run, engine, tmp_path / "model").path
    capsys.readouterr()
    assert main(["predict", str(artifact), str(inputs)]) == 0
    assert "three.npy[2]" in capsys.readouterr().out

    damaged = artifact.with_name(f"damaged{artifact.suffix}")
    damaged.write_bytes(artifact.read_bytes())
    flip_bit_in(damaged, artifact_tensor(artifact, run))
    assert main(["predict", str(damaged), str(inputs)]) == 2
    captured = capsys.readouterr()
    error = one_line(captured.err)
    assert str(damaged) in error and "is damaged: checksum mismatch" in error and not captured.out


def test_an_onnx_artifact_without_a_checksum_loads_with_a_warning(trained, tmp_path, capsys):
    from modforge.experiment.export import export_run

    run, inputs = trained
    artifact = export_run(run, "onnx", tmp_path / "model").path
    data = artifact.read_bytes()
    assert verify_trailer(data) is True
    old = tmp_path / "old.onnx"  # as exported before the checksum: the same model without its last entry
    old.write_bytes(data[: -len(checksum_trailer(b""))])
    assert verify_trailer(old.read_bytes()) is False
    capsys.readouterr()
    assert main(["predict", str(old), str(inputs)]) == 0
    captured = capsys.readouterr()
    assert "three.npy[2]" in captured.out and "carries no checksum" in captured.err


def test_a_damaged_onnx_checksum_entry_is_refused():
    body = b"\x08\x07" + bytes(range(200))
    sealed = body + checksum_trailer(body)
    assert verify_trailer(sealed) is True
    for position in (5, len(body) + 3, len(sealed) - 1):  # the model, the entry's header, the digest
        damaged = bytearray(sealed)
        damaged[position] ^= 0x01
        with pytest.raises(IntegrityError, match="damaged"):
            verify_trailer(bytes(damaged))


def test_the_end_of_training_test_uses_the_final_weights_when_best_is_damaged(tmp_path, caplog):
    from modforge.experiment.runner import _best_weights
    from modforge.train.checkpoint import atomic_save

    path = tmp_path / "best.pt"
    state = {"format": "modforge.checkpoint/1", "model": {"w": torch.arange(1000.0)}}
    atomic_save(state, path)
    assert torch.equal(_best_weights(path)["w"], state["model"]["w"])
    flip_bit_in(path, torch.arange(1000.0).numpy().tobytes(), separate=True)
    with caplog.at_level("WARNING"):
        assert _best_weights(path) is None
    assert "testing the final weights instead" in caplog.text and "best.pt" in caplog.text
    assert _best_weights(tmp_path / "missing.pt") is None
