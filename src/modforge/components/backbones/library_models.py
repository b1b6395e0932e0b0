"""What the ``timm`` and ``torchvision`` backbones share: importing the library only when a part is
built, refusing unknown model names with the closest ones, and moving a library state dict's
tensors under modforge's keys with its classifier sent to a ``linear`` head or left out."""

from __future__ import annotations

import difflib
import importlib
from collections.abc import Iterable, Mapping
from typing import Any, Optional

import torch

__all__ = ["first_line", "import_library", "split_classifier", "unknown_name"]


def import_library(module: str, part: str) -> Any:
    """``import module``, or an ImportError naming the part and how to install the library."""
    try:
        return importlib.import_module(module)
    except ImportError:
        raise ImportError(f"the '{part}' backbone needs the {module} library: pip install 'modforge[vision]' "
                          f"(or pip install {module})") from None  # fmt: skip


def first_line(exc: BaseException) -> str:
    """The first non-empty line of an exception's message (at most 300 characters)."""
    return next((line.strip() for line in str(exc).splitlines() if line.strip()), type(exc).__name__)[:300]


def unknown_name(library: str, name: str, known: list[str], listing: str) -> ValueError:
    """One error for a model name ``library`` does not have: the closest names it has, and how
    to list them all."""
    close = difflib.get_close_matches(name, known, n=6, cutoff=0.6)
    close += [m for m in known if name and name in m and m not in close][: max(0, 6 - len(close))]
    hint = f"; did you mean {', '.join(close)}?" if close else ""
    return ValueError(f"unknown {library} model '{name}' ({len(known)} models){hint} List them with: {listing}")


def split_classifier(
    state: Mapping[str, torch.Tensor],
    classifier: Iterable[str],
    *,
    backbone_prefix: str,
    head_prefix: Optional[str],
) -> tuple[dict[str, torch.Tensor], list[str]]:
    """``(converted, left out)``: every tensor under ``backbone_prefix + key``, except those of
    the ``classifier`` modules, which go to the ``linear`` head (``head_prefix + "fc.weight"`` /
    ``"fc.bias"``) when ``head_prefix`` is given, else are left out (their keys returned).

    Raises:
        ValueError: a head was asked for and the classifier is not exactly one linear layer.
    """
    chosen = list(dict.fromkeys(classifier))
    if head_prefix is not None:
        weight = state.get(f"{chosen[0]}.weight") if len(chosen) == 1 else None
        if weight is None or weight.dim() != 2:
            found = ", ".join(chosen) or "none"
            raise ValueError(f"head: needs the file's classifier to be one linear layer, found {found} "
                             "(name it with classifier:, or leave head unset to leave the classifier out)")  # fmt: skip
    out: dict[str, torch.Tensor] = {}
    left: list[str] = []
    for key, value in state.items():
        module, _, param = key.rpartition(".")
        if module in chosen:
            if head_prefix is not None:
                out[f"{head_prefix}fc.{param}"] = value
            else:
                left.append(key)
            continue
        out[backbone_prefix + key] = value
    return out, left


def modules_of(state: Mapping[str, Any]) -> set[str]:
    """The module names a state dict holds parameters of (``layer1.0.conv1`` for ``layer1.0.conv1.weight``)."""
    return {k.rpartition(".")[0] for k in state}
