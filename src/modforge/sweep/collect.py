"""Reading a finished trial's values out of its ``summary.json``, in its folder of the sweep (:func:`trial_folder`)."""

from __future__ import annotations

import json
import math
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from ..core.config import display_path
from ..core.safe_files import inside, open_regular
from .spec import Collect

__all__ = ["MAX_SUMMARY_BYTES", "collect_metrics", "lookup", "read_summary", "trial_folder"]

MAX_SUMMARY_BYTES = 16 * 1024**2
"""A larger ``summary.json`` is not a run's summary: it is read as missing."""


def read_summary(run_dir: Path) -> dict[str, Any]:
    """The run's ``summary.json`` (empty when it is missing, too large or unreadable).

    Raises:
        UnsafePathError: ``summary.json`` is a link, a FIFO or a device (never followed or read).
    """
    path = run_dir / "summary.json"
    if not path.exists() and not path.is_symlink():
        return {}
    try:
        with open_regular(path, "rb") as fh:
            raw = fh.read(MAX_SUMMARY_BYTES + 1)
        if len(raw) > MAX_SUMMARY_BYTES:
            return {}
        data = json.loads(raw)
    except (OSError, ValueError, RecursionError):
        return {}
    return data if isinstance(data, dict) else {}


def _flatten(node: Any, prefix: str, out: dict[str, Any], depth: int = 0) -> None:
    if isinstance(node, Mapping):
        if depth > 64:  # no summary nests this deep: a crafted file is not walked further
            return
        for key, value in node.items():
            _flatten(value, f"{prefix}.{key}" if prefix else str(key), out, depth + 1)
    else:
        out[prefix] = node


def lookup(summary: Mapping[str, Any], name: str) -> Any:
    """The value at dotted ``name`` in ``summary``; ``test_accuracy`` also finds
    ``test.accuracy`` (``.`` and ``_`` are interchangeable when the exact path is absent)."""
    flat: dict[str, Any] = {}
    _flatten(summary, "", flat)
    if name in flat:
        return flat[name]
    wanted = name.replace(".", "_")
    matches = [v for k, v in flat.items() if k.replace(".", "_") == wanted]
    return matches[0] if len(matches) == 1 else None


def _number(value: Any) -> float | None:
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        return None
    return float(value) if math.isfinite(value) else None


def collect_metrics(collect: tuple[Collect, ...], summary: Mapping[str, Any], seconds: float | None
                    ) -> dict[str, float | None]:  # fmt: skip
    """Each collected value of a trial (``None`` where the summary lacks it or it is not a number)."""
    return {c.name: seconds if c.name == "seconds" else _number(lookup(summary, c.name)) for c in collect}


def trial_folder(sweep_dir: Path, trial_id: str) -> Path:
    """``sweep_dir/trials/<trial_id>`` for an id read from ``trials.csv``: a plain name inside
    the trials folder (no ``..``, no absolute path, no link leading out).

    Raises:
        UnsafePathError: naming the id and the file it came from.
    """
    return inside(sweep_dir / "trials", trial_id, what=f"trial id in {display_path(sweep_dir / 'trials.csv')}:")
