"""Where a downloaded model folder keeps its weights: shared by the checkpoint formats that take
a Hugging Face hub folder (``hf_wav2vec2`` in ``frontends/ssl.py``, ``timm`` in ``backbones/published_weights.py``).

A hub repository stores its tensors as ``model.safetensors`` or, in older ones,
``pytorch_model.bin``: :func:`hub_weights_file` picks the first of them, so a format accepts the
folder as well as the file itself.
"""

from __future__ import annotations

from pathlib import Path

from ..core.weight_formats import WeightFormatError

__all__ = ["HUB_WEIGHT_FILES", "hub_weights_file"]

HUB_WEIGHT_FILES = ("model.safetensors", "pytorch_model.bin")
"""A hub folder's weights files, preferred first."""


def hub_weights_file(path: Path, missing: str) -> Path:
    """``path`` itself unless it is a folder; in a folder, its first :data:`HUB_WEIGHT_FILES`.

    Raises:
        WeightFormatError: ``"{path} {missing}"`` when the folder holds none of them.
    """
    if not path.is_dir():
        return path
    found = next((path / name for name in HUB_WEIGHT_FILES if (path / name).is_file()), None)
    if found is None:
        raise WeightFormatError(f"{path} {missing}")
    return found
