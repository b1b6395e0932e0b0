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
    signature_of,
)
from .core.registries import *  # noqa: F403 - every registry (BACKBONES...) and its register_* decorator
from .core.registries import __all__ as _registry_names
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
    "build_model",  # noqa: F405 - imported on first use, by __getattr__
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
    "signature_of",
    *_registry_names,  # the registries and their decorators, as modforge.core.registries lists them
]
