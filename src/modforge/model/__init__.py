"""Model assembly: parts wired into one module, dictionary flow, ``returnt``, losses."""

from .adapters import ADAPTERS, Adapter
from .builder import build_model, fit_layout
from .errors import ModelBuildError, ModelOutputError, StageError
from .modular import RETURNT, LossInfo, ModularModel, StageInfo
from .spec import RESERVED_KEYS, is_loss_key, parse_model_section

__all__ = [
    "ADAPTERS",
    "RESERVED_KEYS",
    "RETURNT",
    "Adapter",
    "LossInfo",
    "ModelBuildError",
    "ModelOutputError",
    "ModularModel",
    "StageError",
    "StageInfo",
    "build_model",
    "fit_layout",
    "is_loss_key",
    "parse_model_section",
]
