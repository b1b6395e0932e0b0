"""Checkpoint formats: how a weights file written elsewhere becomes a modforge state dict.

A format is a registered class (``@register_checkpoint_format("name")``, registry
``CHECKPOINT_FORMATS``) — one per source: modforge's own checkpoints and run folders, a
plain ``state_dict`` with a key map, the official AASIST files, torchvision's ResNets,
Hugging Face wav2vec 2.0 folders. Its constructor takes the format's options (validated
like any part's arguments); it says whether it :meth:`~CheckpointFormat.recognises` a
loaded file (``format: auto``) and :meth:`~CheckpointFormat.convert`\\ s it into tensors
named as the *whole* modforge model names them (``parts.backbone.conv.weight``).

The format never loads anything into a model and never drops a key silently: keys it
cannot place raise :class:`WeightFormatError` (or are returned for the loader to report).
Reading is :func:`read_torch_file` — ``torch.load(weights_only=True)``, checksums first.
"""

from __future__ import annotations

import logging
import os
import pickle
import re
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from .errors import UsageError
from .integrity import IntegrityError, verify_zip

__all__ = ["CheckpointFormat", "DamagedFileError", "UnsafeFileError", "WeightFormatError", "read_torch_file",
           "tensors_of"]


class WeightFormatError(UsageError):
    """A weights file that cannot be read or converted (the message says which and why)."""


class DamagedFileError(WeightFormatError):
    """A file whose checksums do not match its bytes, or that cannot be parsed at all."""


class UnsafeFileError(WeightFormatError):
    """A pickle that would import and call something to load; refused, nothing run."""


log = logging.getLogger("modforge")


def read_torch_file(path: str | os.PathLike, *, map_location: str = "cpu") -> Any:
    """``torch.load(path, weights_only=True)`` — the one place modforge unpickles a file —
    after every zip record's CRC-32 is checked against its bytes (a file without checksums
    loads with a warning), with one clear error per way it can fail. A ``.safetensors``
    file is read with safetensors.

    Raises:
        WeightFormatError: missing; :class:`DamagedFileError`: damaged, truncated, not a
            torch file; :class:`UnsafeFileError`: unpickling would run code (nothing ran).
    """
    import torch

    path = Path(path)
    if not path.is_file():
        raise WeightFormatError(f"file not found: {path}")
    if path.suffix == ".safetensors":
        try:
            from safetensors.torch import load_file
        except ImportError:
            raise WeightFormatError(f"{path} is a safetensors file: pip install safetensors to read it") from None
        try:
            return load_file(str(path), device=map_location)
        except Exception as exc:  # noqa: BLE001 - any failure of the reader is "not readable"
            raise DamagedFileError(f"{path} is not a readable safetensors file ({_short(exc)})") from None
    try:
        verified = verify_zip(path)
    except IntegrityError as exc:
        raise DamagedFileError(f"{path} is {exc}") from None
    except OSError as exc:
        raise DamagedFileError(f"{path} cannot be read ({type(exc).__name__}: {exc})") from None
    try:
        content = torch.load(path, map_location=map_location, weights_only=True)
    except pickle.UnpicklingError as exc:
        found = re.search(r"(?:Unsupported global: GLOBAL|unsupported GLOBAL) ([\w.]+)", str(exc))
        if found:  # the file asks to import and call something: exactly what weights_only exists to stop
            raise UnsafeFileError(
                f"refused to load {path}: it references {found.group(1)}, and unpickling that could run code; "
                "nothing in it was executed"
            ) from None
        raise DamagedFileError(f"{path} is not a readable file (damaged, or not written by torch.save)") from None
    except (EOFError, RuntimeError, ValueError, OSError, KeyError, IndexError) as exc:
        raise DamagedFileError(f"{path} is truncated or damaged ({_short(exc)})") from None
    if not verified:
        log.warning("%s carries no checksums (written with PyTorch's CRC-32 off, by another tool, or in its legacy "
                    "format); its content was not verified", path)
    return content


def _short(exc: BaseException) -> str:
    return (" ".join(str(exc).split()) or type(exc).__name__)[:200]


def tensors_of(state: Any, *, what: str) -> dict[str, Any]:
    """The tensors of a state dict, refusing anything that is not one (a nested dict, a list)."""
    import torch

    if not isinstance(state, Mapping):
        raise WeightFormatError(f"{what} is not a state dict (a mapping of names to tensors): got {type(state).__name__}")
    others = [str(k) for k, v in state.items() if not isinstance(v, torch.Tensor)]
    if others:
        raise WeightFormatError(f"{what} holds entries that are not tensors: {', '.join(others[:8])}"
                                f"{' …' if len(others) > 8 else ''}")  # fmt: skip
    return dict(state)


class CheckpointFormat:
    """A source of weights. Subclasses override :meth:`convert`, usually :meth:`recognises`,
    and :meth:`locate`/:meth:`recognises_folder` when the source can be a folder."""

    published: str | None = None
    """Where the published files this format reads come from (named when ``model.init.path`` is missing)."""

    def locate(self, path: Path) -> Path:
        """The file to read for ``path`` (a folder's weights file, for formats that take folders)."""
        if path.is_dir():
            raise WeightFormatError(f"{path} is a folder; this checkpoint format reads a single file")
        return path

    @classmethod
    def recognises_folder(cls, path: Path) -> bool:
        """Whether folder ``path`` looks like this format's (for ``format: auto``)."""
        return False

    def read(self, path: Path, map_location: str = "cpu") -> Any:
        """The file's content, loaded without running code."""
        return read_torch_file(path, map_location=map_location)

    @classmethod
    def recognises(cls, loaded: Any, path: Path) -> bool:
        """Whether ``loaded`` (what :meth:`read` returned for ``path``) is in this format,
        for ``format: auto``. Must be certain: two formats recognising one file is an error."""
        return False

    def check_model(self, model: Any, loaded: Any, path: Path) -> None:
        """Raise :class:`WeightFormatError` when ``model`` cannot compute what the file's network
        computes for reasons the tensors' shapes do not show (strides, attention heads, norm
        placement…). Called before loading; most formats have nothing to add to the shape checks."""

    def convert(self, loaded: Any, path: Path) -> dict[str, Any]:  # pragma: no cover - abstract
        """Tensors named as the whole modforge model names its state (``parts.<stage>.<key>``)."""
        raise TypeError(f"{type(self).__name__} does not define convert()")
