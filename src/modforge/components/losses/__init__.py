"""Built-in losses (imported on first use of the loss registry)."""

from . import classification, detection, margin  # noqa: F401 - registration
