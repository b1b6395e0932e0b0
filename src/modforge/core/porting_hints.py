"""Hints for argument errors that code ported from other frameworks runs into.

A DeepFense backend takes ``input_dim``, a United Perception part ``in_planes``, a Mammoth
backbone's un-annotated ``__init__(self, config)`` reads everything as ``str``. The plain
errors ("required argument missing (expected int)", "expected str, got {…}") are true but
do not say what to change; these functions add the reason to the same one-line message.
"""

from __future__ import annotations

from typing import Any

__all__ = ["CLASS_COUNT_NAMES", "INPUT_SIZE_NAMES", "missing_hint", "unannotated_hint"]

INPUT_SIZE_NAMES = frozenset(
    {
        "input_dim", "in_planes", "inplanes", "in_channels", "input_channels", "in_chans", "in_ch",
        "input_size", "in_size", "feat_dim", "feature_dim", "in_features", "n_in", "num_inputs", "dim_in",
    }
)  # fmt: skip
"""Parameter names other frameworks give the previous part's output size (modforge: ``in_dim``)."""

CLASS_COUNT_NAMES = frozenset({"n_classes", "nclasses", "num_class", "n_class", "class_num", "nb_classes"})
"""Parameter names other frameworks give the class count (modforge: ``num_classes``)."""


def missing_hint(name: str, wired: tuple[str, ...]) -> str:
    """Why a required argument called ``name`` may be missing, or ``""``.

    Args:
        name: the parameter with no value.
        wired: the parameters the builder fills in for this kind of part (``in_dim``...).
    """
    lowered = name.lower()
    if lowered in INPUT_SIZE_NAMES and "in_dim" in wired:
        return (
            f"; the builder wires a part's input size into an argument named in_dim — rename '{name}' to "
            "in_dim (and leave it out of the config)"
        )
    if lowered in CLASS_COUNT_NAMES and "num_classes" in wired:
        return f"; the builder wires the number of classes into an argument named num_classes — rename '{name}'"
    return ""


def unannotated_hint(inferred: bool, default: Any, empty: Any) -> str:
    """``" (it has no type annotation, so it is read as str)"`` when that is why a value was refused.

    Args:
        inferred: the argument's type was not annotated but inferred.
        default: its default value, or ``empty`` when it has none.
        empty: the sentinel of "no default".
    """
    if not inferred:
        return ""
    if default is empty:
        return " (it has no type annotation, so it is read as str)"
    return f" (it has no type annotation, so it is read as the type of its default, {type(default).__name__})"
