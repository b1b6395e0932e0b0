"""Self-describing artifacts: what every saved runnable carries besides its weights.

The metadata is one JSON-able dict::

    {"format": "modforge.artifact/1", "engine": "onnx",
     "model": {...model section...}, "build": {"in_dim": 64, "num_classes": 10},
     "input": {"layout": "vector", "shape": [64], "dtype": "float32", "normalisation": {...}},
     "class_names": ["0", ..., "9"], "versions": {"modforge": ..., "torch": ...},
     "config": {...the resolved run config...}}

``input.shape`` is one sample's shape (the batch axis, and the time axis of audio, are
free); ``normalisation`` says what was done to raw inputs before training (the predictor
repeats it). Torch-based engines keep it inside their file; ONNX keeps it in the model's
``metadata_props``.

Every artifact carries a content checksum written when it is saved and verified before it
is loaded (see :mod:`modforge.core.integrity`): the zip records' CRC-32 in torch-based
files, a SHA-256 entry in ONNX files. A damaged file is an :class:`~.base.EngineError`
saying which part does not match; a file written without one loads with a warning.
"""

from __future__ import annotations

import logging
import os
import warnings
from collections.abc import Callable
from pathlib import Path
from typing import Any

from ..core.integrity import IntegrityError, torch_zip_checksums, verify_zip
from ..core.safe_files import write_via_temp
from ..core.weight_formats import WeightFormatError, read_torch_file
from .base import EngineError

__all__ = ["ARTIFACT_FORMAT", "PARITY_TOLERANCE", "check_zip_artifact", "make_metadata", "read_torch_artifact", "rebuild_model",
           "warn_unverified", "write_atomically", "write_torch_artifact"]

ARTIFACT_FORMAT = "modforge.artifact/1"
PARITY_TOLERANCE = 1e-5
"""How far an exported artifact's outputs may be from the eager model's, relative to the
outputs' scale (at least 1): ``modforge export`` removes an artifact beyond it."""
log = logging.getLogger("modforge.engines")


def make_metadata(
    *,
    engine: str,
    model: dict[str, Any],
    build: dict[str, Any],
    input_shape: list[int],
    input_layout: str,
    class_names: list[str] | None = None,
    normalisation: dict[str, Any] | None = None,
    config: dict[str, Any] | None = None,
    input_dtype: str = "float32",
) -> dict[str, Any]:
    """The metadata dict (see the module docstring)."""
    from .._version import __version__

    try:
        import torch

        torch_version = str(torch.__version__)
    except ImportError:  # pragma: no cover - the exporters always have torch
        torch_version = None
    return {
        "format": ARTIFACT_FORMAT,
        "engine": engine,
        "model": model,
        "build": build,
        "input": {"layout": input_layout, "shape": list(input_shape), "dtype": input_dtype,
                  "normalisation": normalisation or {}},
        "class_names": class_names,
        "versions": {"modforge": __version__, "torch": torch_version},
        "config": config or {},
    }


def write_atomically(path: str | os.PathLike, write: Callable[[str], None]) -> Path:
    """Call ``write(temporary_path)``, then rename the result over ``path`` (never a torn file;
    the temporary name is new and unique, so a link planted next to ``path`` is never written
    through — :func:`~modforge.core.safe_files.write_via_temp`)."""
    return write_via_temp(path, write)


def write_torch_artifact(payload: Any, path: str | os.PathLike, metadata: dict[str, Any]) -> Path:
    """``torch.save`` of ``{"format", "metadata", "payload"}`` (loadable with ``weights_only``)."""
    import torch

    record = {"format": ARTIFACT_FORMAT, "metadata": metadata, "payload": payload}

    def write(tmp: str) -> None:
        with torch_zip_checksums():
            torch.save(record, tmp)

    return write_atomically(path, write)


def read_torch_artifact(path: str | os.PathLike) -> tuple[Any, dict[str, Any]]:
    """What :func:`write_torch_artifact` wrote: ``(payload, metadata)``; never runs code from
    the file, and checks its checksums first (:func:`~modforge.core.weight_formats.read_torch_file`)."""
    path = Path(path)
    if not path.is_file():
        raise EngineError(f"artifact not found: {path}")
    try:
        with warnings.catch_warnings():  # torch's multi-line note on legacy pickles: our error says it better
            warnings.filterwarnings("ignore", message=".*pickle protocol", category=UserWarning)
            record = read_torch_file(path)
    except WeightFormatError as exc:
        raise EngineError(str(exc)) from None
    if not isinstance(record, dict) or record.get("format") != ARTIFACT_FORMAT:
        raise EngineError(f"{path} is not a modforge artifact (expected format {ARTIFACT_FORMAT!r})")
    return record["payload"], record["metadata"]


def check_zip_artifact(path: Path) -> bool:
    """Verify a zip-based artifact's checksums (:func:`~modforge.core.integrity.verify_zip`):
    True when they match, False when it has none; an :class:`EngineError` when it is damaged."""
    try:
        return verify_zip(path)
    except IntegrityError as exc:
        raise EngineError(f"{path} is {exc}") from None
    except OSError as exc:
        raise EngineError(f"{path} cannot be read ({type(exc).__name__}: {exc})") from None


def warn_unverified(path: Path) -> None:
    """Say that an artifact was loaded without a checksum to verify it by."""
    log.warning("%s carries no checksum (saved before modforge wrote one, or by another tool); "
                "its content was not verified", path)


def rebuild_model(metadata: dict[str, Any], path: str | os.PathLike = "the artifact") -> Any:
    """Build the (untrained) model an artifact's metadata describes.

    The metadata is data: the plug-ins its config names are imported only when installed as
    entry points or given with ``--plugins`` (one clear error otherwise)."""
    from ..core.plugins import require_plugins
    from ..model import build_model

    if not isinstance(metadata, dict):
        raise EngineError(f"{path}: its metadata is not a mapping; it cannot rebuild the model")
    config = metadata.get("config") if isinstance(metadata.get("config"), dict) else {}
    plugins = require_plugins(config.get("plugins") or [], what=f"the artifact {path}")
    spec, build = metadata.get("input", {}), metadata.get("build", {})
    if not isinstance(spec, dict) or not isinstance(build, dict) or not set(build) <= {"in_dim", "num_classes"}:
        raise EngineError(f"{path}: its metadata's 'input' or 'build' entry is malformed (build may hold only "
                          f"in_dim and num_classes); it cannot rebuild the model")  # fmt: skip
    if "model" not in metadata:
        raise EngineError(f"{path}: its metadata has no 'model' entry; it cannot rebuild the model")
    try:
        return build_model(metadata["model"], layout=spec.get("layout"), input_shape=spec.get("shape"),
                           plugins=plugins, **build)
    except (TypeError, ValueError, AttributeError) as exc:  # metadata of the wrong shape: data, not our bug
        raise EngineError(f"{path}: its metadata does not describe a model ({type(exc).__name__}: {exc})") from None
