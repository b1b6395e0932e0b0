"""Built-in continual-learning algorithms (imported on first use of the algorithm registry)."""

from . import bic, distillation, er_ace, finetune, gdumb, gem, icarl, layers, lucir, regularization, replay, si, xder  # noqa: F401 - registration
