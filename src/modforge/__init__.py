"""modforge: deep-learning models from registered, swappable parts.

The public surface::

    import modforge as mf

    @mf.register_backbone("mine")
    class Mine(torch.nn.Module): ...

    mf.BACKBONES.list("res*"); "mine" in mf.BACKBONES; mf.BACKBONES.get("mine")
    cfg = mf.load_config("configs/x.yaml", ["model.backbone.args.width=64"])
"""

from ._version import __version__
from .core import (
    ALGORITHMS,
    AUGMENTATIONS,
    BACKBONES,
    CALLBACKS,
    CHECKPOINT_FORMATS,
    DATASETS,
    ENGINES,
    FRONTENDS,
    HEADS,
    LOSSES,
    METRICS,
    MODELS,
    NECKS,
    OPTIMIZERS,
    REGISTRIES,
    SCHEDULERS,
    TASKS,
    TRAINERS,
    ArgSpec,
    BuildError,
    Config,
    ConfigError,
    DuplicateComponentError,
    ModforgeError,
    PluginError,
    Registry,
    UnknownComponentError,
    UsageError,
    load_config,
    load_plugins,
    register_algorithm,
    register_augmentation,
    register_backbone,
    register_callback,
    register_checkpoint_format,
    register_dataset,
    register_engine,
    register_frontend,
    register_head,
    register_loss,
    register_metric,
    register_model,
    register_neck,
    register_optimizer,
    register_scheduler,
    register_task,
    register_trainer,
    registry_for,
    signature_of,
)
from .providers import wire_providers as _wire_providers

_wire_providers()


def __getattr__(name: str):
    """``build_model`` is imported on first use: ``import modforge`` does not import torch
    (``modforge predict model.onnx`` runs where only onnxruntime is installed)."""
    if name == "build_model":
        from .model import build_model

        return build_model
    raise AttributeError(f"module 'modforge' has no attribute {name!r}")

__all__ = [
    "__version__",
    "build_model",
    "ALGORITHMS",
    "AUGMENTATIONS",
    "CHECKPOINT_FORMATS",
    "BACKBONES",
    "CALLBACKS",
    "DATASETS",
    "ENGINES",
    "FRONTENDS",
    "HEADS",
    "LOSSES",
    "METRICS",
    "MODELS",
    "NECKS",
    "OPTIMIZERS",
    "REGISTRIES",
    "SCHEDULERS",
    "TASKS",
    "TRAINERS",
    "ArgSpec",
    "BuildError",
    "Config",
    "ConfigError",
    "DuplicateComponentError",
    "ModforgeError",
    "PluginError",
    "Registry",
    "UnknownComponentError",
    "UsageError",
    "load_config",
    "load_plugins",
    "register_algorithm",
    "register_augmentation",
    "register_checkpoint_format",
    "register_backbone",
    "register_callback",
    "register_dataset",
    "register_engine",
    "register_frontend",
    "register_head",
    "register_loss",
    "register_metric",
    "register_model",
    "register_neck",
    "register_optimizer",
    "register_scheduler",
    "register_task",
    "register_trainer",
    "registry_for",
    "signature_of",
]
