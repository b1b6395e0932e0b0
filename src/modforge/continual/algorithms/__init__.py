"""Built-in continual-learning algorithms (imported on first use of the algorithm registry)."""

from . import finetune, replay  # noqa: F401 - registration
