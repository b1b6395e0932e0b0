"""Built-in callbacks (imported on first use of the callback registry)."""

from . import checkpoint, csv_logger, early_stopping, lr_monitor, nan_guard, progress, tensorboard  # noqa: F401 - registration
from .base import Callback, improved

__all__ = ["Callback", "improved"]
