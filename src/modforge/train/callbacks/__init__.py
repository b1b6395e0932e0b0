"""Built-in callbacks (imported on first use of the callback registry)."""

from . import (  # noqa: F401 - registration
    checkpoint,
    csv_logger,
    early_stopping,
    freeze,
    lookahead,
    lr_monitor,
    mlflow_logger,
    nan_guard,
    optuna_pruning,
    progress,
    tensorboard,
    wandb_logger,
    whitening_init,
)
from .base import Callback, improved

__all__ = ["Callback", "improved"]
