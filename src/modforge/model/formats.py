"""The general checkpoint formats: modforge's own files and plain state dicts.

Family-specific formats (the official AASIST files, torchvision's ResNets, Hugging Face
wav2vec 2.0 folders) live beside their family, in the component files.
"""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import Any, Optional

from ..core.registries import register_checkpoint_format
from ..core.weight_formats import CheckpointFormat, WeightFormatError, tensors_of

__all__ = ["ModforgeCheckpoint", "StateDict", "inference_weights"]

MODFORGE_CHECKPOINT = "modforge.checkpoint/1"
MODFORGE_ARTIFACT = "modforge.artifact/1"


def inference_weights(payload: Mapping[str, Any]) -> Any:
    """The weights a modforge checkpoint is evaluated, exported, predicted and initialised with: the
    weights a run extension evaluated with — the entry ``evaluated_weights`` names (``ema``, a
    user's ``swa``; checkpoints from before it was recorded: ``ema``), when that entry holds an
    ``average`` and is not marked ``evaluate: false`` — else its trained weights (``model``)."""
    name = payload.get("evaluated_weights", "ema")
    entry = payload.get(name) if isinstance(name, str) else None
    if isinstance(entry, Mapping) and entry.get("evaluate", True) and entry.get("average") is not None:
        return entry["average"]
    return payload.get("model")


@register_checkpoint_format("modforge")
class ModforgeCheckpoint(CheckpointFormat):
    """A modforge checkpoint (``last.pt``, ``best.pt``, ``epochN-stepM.pt``) or a run folder
    (its ``best.pt``, else ``last.pt``): the model's weights, named as modforge names them.

    Args:
        checkpoint: which checkpoint of a run folder: 'best' (else last) or 'last'.
    """

    def __init__(self, checkpoint: str = "best"):
        if checkpoint not in ("best", "last"):
            raise ValueError(f"checkpoint must be 'best' or 'last', got {checkpoint!r}")
        self.checkpoint = checkpoint

    def locate(self, path: Path) -> Path:
        if not path.is_dir():
            return path
        folder = path / "checkpoints" if (path / "checkpoints").is_dir() else path
        names = [f"{self.checkpoint}.pt", "last.pt"]
        found = next((folder / n for n in names if (folder / n).is_file()), None)
        if found is None:
            raise WeightFormatError(f"{path} is a folder without {' or '.join(names)}: not a modforge run folder")
        return found

    @classmethod
    def recognises_folder(cls, path: Path) -> bool:
        return (path / "checkpoints").is_dir() or (path / "last.pt").is_file()

    @classmethod
    def recognises(cls, loaded: Any, path: Path) -> bool:
        return isinstance(loaded, dict) and loaded.get("format") == MODFORGE_CHECKPOINT

    def convert(self, loaded: Any, path: Path) -> dict[str, Any]:
        if not self.recognises(loaded, path):
            raise WeightFormatError(f"{path} is not a modforge checkpoint (expected format {MODFORGE_CHECKPOINT!r})")
        return tensors_of(inference_weights(loaded), what=f"the model of {path}")


@register_checkpoint_format("state_dict")
class StateDict(CheckpointFormat):
    """A plain ``state_dict`` written by any PyTorch code, with a key map of your own.

    ``format: {type: state_dict, args: {key_map: {"encoder.": "parts.backbone."}}}`` renames
    every key starting with ``encoder.`` (the longest matching prefix wins; ``""`` matches
    every key); keys no prefix matches keep their names. ``nested`` picks the state dict
    out of a wrapper (``{"model": {...}, "optimizer": ...}`` → ``nested: model``).

    Args:
        key_map: old prefix → new prefix.
        nested: key (dotted for deeper levels) under which the state dict sits.
    """

    def __init__(self, key_map: Optional[dict[str, str]] = None, nested: Optional[str] = None):
        self.key_map = dict(key_map or {})
        self.nested = nested

    def convert(self, loaded: Any, path: Path) -> dict[str, Any]:
        state = loaded
        for key in self.nested.split(".") if self.nested else []:
            if not isinstance(state, dict) or key not in state:
                found = ", ".join(map(str, state)) if isinstance(state, dict) else type(state).__name__
                raise WeightFormatError(f"{path} has no '{key}' entry for nested: {self.nested} (it holds: {found})")
            state = state[key]
        tensors = tensors_of(state, what=f"the state dict in {path}")
        prefixes = sorted(self.key_map, key=len, reverse=True)
        renamed: dict[str, Any] = {}
        for key, value in tensors.items():
            old = next((p for p in prefixes if key.startswith(p)), None)
            new = key if old is None else self.key_map[old] + key[len(old) :]
            if new in renamed:
                raise WeightFormatError(f"{path}: the key map sends two keys to '{new}' (one of them '{key}')")
            renamed[new] = value
        return renamed
