"""Built-in continual-learning algorithms (imported on first use of the algorithm registry)."""

from . import distillation, finetune, icarl, layers, regularization, replay  # noqa: F401 - registration
