"""What the run-folder trust tests share: a tiny config and one finished run made from it."""

from __future__ import annotations

from pathlib import Path

from modforge.cli.main import main
from registry_state import registries_restored

TINY = """\
seed: 1
data: {type: synthetic_classification, args: {num_samples: 60, num_features: 8, num_classes: 3}, batch_size: 30}
model:
  backbone: {type: mlp, args: {hidden_dims: [4]}}
  head: linear
  losses: [cross_entropy]
train:
  max_epochs: 1
  optimizer: {type: adam, args: {lr: 0.01}}
  metrics: [accuracy, loss]
  num_threads: 1
  progress: never
  async_checkpoints: false
"""


def train_tiny(base: Path) -> Path:
    """Train :data:`TINY` for one epoch into ``base/run`` (in this process) and return the run folder."""
    (base / "tiny.yaml").write_text(TINY)
    with registries_restored():
        assert main(["train", str(base / "tiny.yaml"), "--run-dir", str(base / "run")]) == 0
    return base / "run"
