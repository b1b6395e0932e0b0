"""Reading a finished trial's values out of its ``summary.json``."""

from __future__ import annotations

import json
import math
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from .spec import Collect

__all__ = ["collect_metrics", "lookup", "read_summary"]


def read_summary(run_dir: Path) -> dict[str, Any]:
    """The run's ``summary.json`` (empty when it is missing or unreadable)."""
    try:
        data = json.loads((run_dir / "summary.json").read_text())
    except (OSError, ValueError):
        return {}
    return data if isinstance(data, dict) else {}


def _flatten(node: Any, prefix: str, out: dict[str, Any]) -> None:
    if isinstance(node, Mapping):
        for key, value in node.items():
            _flatten(value, f"{prefix}.{key}" if prefix else str(key), out)
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
