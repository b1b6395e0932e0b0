"""Engines: how a built model is executed, saved and loaded (eager, TorchScript,
torch.compile, ONNX Runtime). See :mod:`.base` for the contract."""

from __future__ import annotations

from typing import Any

from .base import Capabilities, Engine, EngineError

__all__ = ["Capabilities", "Engine", "EngineError", "build_engine", "engine_for_suffix"]


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


def engine_for_suffix(suffix: str) -> str | None:
    """The one registered engine whose artifacts end in ``suffix`` (``.ts`` → torchscript, a
    plug-in engine's own suffix → that engine); ``None`` when none or several share it
    (``.pt``: eager and compile — the artifact's metadata then says which)."""
    from ..core.registries import ENGINES

    suffix = suffix.lower()
    owners = [
        entry.name
        for entry in ENGINES.entries()
        if isinstance(entry.obj, type)
        and issubclass(entry.obj, Engine)
        and isinstance(entry.obj.suffix, str)
        and entry.obj.suffix.lower() == suffix
    ]
    return owners[0] if suffix and len(owners) == 1 else None
