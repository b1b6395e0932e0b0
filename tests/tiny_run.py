"""What the run-folder trust tests share: a tiny config and one finished run made from it."""

from __future__ import annotations

from pathlib import Path

from modforge.cli.main import main
from registry_state import registries_restored
from run_configs import ADAM, mlp, run_config, synthetic

TINY = run_config(synthetic(60, batch_size=30), mlp(4), seed=1, train=dict(
    max_epochs=1, optimizer=ADAM, metrics="[accuracy, loss]", num_threads=1, progress="never", async_checkpoints=False))


def train_tiny(base: Path) -> Path:
    """Train :data:`TINY` for one epoch into ``base/run`` (in this process) and return the run folder."""
    (base / "tiny.yaml").write_text(TINY)
    with registries_restored():
        assert main(["train", str(base / "tiny.yaml"), "--run-dir", str(base / "run")]) == 0
    return base / "run"
