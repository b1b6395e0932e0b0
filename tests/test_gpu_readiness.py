"""What a GPU run relies on, checked on the CPU: mixed precision (fp16 with a GradScaler, bf16)
resumes exactly with the scaler's state in the checkpoint, channels_last trains, and
``benchmarks/gpu.py`` runs (``--smoke``)."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import torch

import modforge as mf
from modforge.experiment.runner import train_run
from modforge.experiment.schema import validate_config
from modforge.train.checkpoint import load_checkpoint
from run_configs import cnn, run_config

ROOT = Path(__file__).resolve().parents[1]

# a fifth of the digits trains (val_fraction 0.5, test_fraction 0.3: 359 pictures, 6 steps of at most 64 an epoch):
# fp16 has no fast CPU kernels (its backward costs ~0.14 s a picture at ResNet size), and what is checked —
# the scaler's state in the checkpoint, an exact resume — does not depend on how many pictures there are.
# A checkpoint every 2 steps: the second (step 4) lies inside epoch 1, and the resumed run crosses into epoch 2.
CONFIG = run_config("{type: digits, args: {as_image: true, val_fraction: 0.5, test_fraction: 0.3}, batch_size: 64}",
                    cnn(8, 16), neck="global_avg_pool", seed=2,
                    train=dict(max_epochs=2, precision='"PRECISION"', engine="{type: eager, args: {memory_format: MEMORY}}",
                               optimizer="{type: sgd, args: {lr: 0.05, momentum: 0.9}}",
                               checkpoint="{every_n_steps: 2, keep_last: 100}", num_threads=1, progress="never"))  # fmt: skip


@pytest.mark.slow
@pytest.mark.parametrize(("precision", "memory"), [("16", "contiguous"), ("bf16", "channels_last")])
def test_mixed_precision_runs_resume_exactly_from_a_mid_epoch_checkpoint(write, tmp_path, precision, memory):
    cfg = write("amp.yaml", CONFIG.replace("PRECISION", precision).replace("MEMORY", memory))
    full = tmp_path / "full"
    full.mkdir()
    train_run(validate_config(mf.load_config(cfg)), full)
    last = load_checkpoint(full / "checkpoints" / "last.pt")
    if precision == "16":  # the scaler's state travels with the checkpoint
        scaler = last["scaler"]
        assert scaler is not None and scaler["scale"] > 0
    middle = sorted((full / "checkpoints").glob("epoch*-step*.pt"))[1]
    assert middle.name.startswith("epoch0000-"), middle.name  # no epoch finished yet: the resume crosses into epoch 2
    run = tmp_path / "resumed"
    (run / "checkpoints").mkdir(parents=True)
    shutil.copy(middle, run / "checkpoints" / middle.name)
    train_run(validate_config(mf.load_config(cfg)), run, resume=load_checkpoint(middle))
    assert (run / "metrics.csv").read_text() == (full / "metrics.csv").read_text()
    resumed = load_checkpoint(run / "checkpoints" / "last.pt")["model"]
    assert all(torch.equal(resumed[k], last["model"][k]) for k in last["model"])


@pytest.mark.slow
def test_the_gpu_benchmark_runs_as_a_smoke_test_on_the_cpu():
    # one torch thread: the other test worker has the other core (the smoke figures are no measurement)
    proc = subprocess.run([sys.executable, str(ROOT / "benchmarks" / "gpu.py"), "--smoke", "--runs", "1"],
                          capture_output=True, text=True, timeout=900, env={**os.environ, "OMP_NUM_THREADS": "1"})  # fmt: skip
    assert proc.returncode == 0, proc.stderr
    assert "AMP fp16 + GradScaler" in proc.stdout and "AASIST training steps/s" in proc.stdout


def test_the_gpu_benchmark_refuses_to_measure_without_a_gpu(monkeypatch, capsys):
    """The script as ``python benchmarks/gpu.py`` runs it (``__main__``, no arguments), in this
    process: what it decides needs no fresh interpreter (the smoke test above starts one)."""
    if torch.cuda.is_available():
        pytest.skip("this machine has a GPU: the benchmark measures")
    import runpy

    monkeypatch.setattr(sys, "argv", [str(ROOT / "benchmarks" / "gpu.py")])
    monkeypatch.setattr(sys, "path", list(sys.path))  # the script puts benchmarks/ on it
    with pytest.raises(SystemExit) as exit_:
        runpy.run_path(str(ROOT / "benchmarks" / "gpu.py"), run_name="__main__")
    assert exit_.value.code == 2 and "--smoke" in capsys.readouterr().out
