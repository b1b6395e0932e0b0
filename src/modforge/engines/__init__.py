"""Engines: how a built model is executed, saved and loaded (eager, TorchScript,
torch.compile, ONNX Runtime). See :mod:`.base` for the contract."""

from __future__ import annotations

from typing import Any

from .base import Capabilities, Engine, EngineError

__all__ = ["Capabilities", "Engine", "EngineError", "build_engine"]


def build_engine(spec: Any, *, path: str = "train.engine", **options: Any) -> Engine:
    """The engine a spec names (``"onnx"`` or ``{type: compile, args: {...}}``)."""
    from ..core.registries import ENGINES

    engine = ENGINES.build(spec if spec is not None else "eager", path=path, **options)
    if not isinstance(engine, Engine):
        raise EngineError(f"{path}: '{_name(spec)}' is registered as an engine but is not an Engine subclass")
    engine.registered_as = _name(spec)
    return engine


def _name(spec: Any) -> str:
    return spec if isinstance(spec, str) else (spec or {}).get("type", "eager")
