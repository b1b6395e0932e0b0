"""Checks of an algorithm's hyper-parameters, said once: each check gives the problem with a value
(or None), and :func:`check` raises one ValueError naming every problem found.

Why here and not only in the annotations (``NonNegativeFloat``...): those are checked when a
config is read; an algorithm built directly in Python (tests, notebooks) is checked by these.
"""

from __future__ import annotations

__all__ = ["at_least_one", "check", "non_negative", "positive", "unit_interval"]


def check(*problems: str | None) -> None:
    """Raise one ValueError listing the ``problems`` (joined by "; "), if there are any."""
    found = [p for p in problems if p]
    if found:
        raise ValueError("; ".join(found))


def non_negative(name: str, value: float | None) -> str | None:
    """The problem with ``name`` when ``value`` is negative (None: the setting is off, no problem)."""
    return None if value is None or value >= 0 else f"{name} must not be negative, got {value}"


def positive(name: str, value: float | None) -> str | None:
    """The problem with ``name`` when ``value`` is not positive (None: no problem)."""
    return None if value is None or value > 0 else f"{name} must be positive, got {value}"


def at_least_one(name: str, value: int | None) -> str | None:
    """The problem with ``name`` when ``value`` is below 1 (None: the default, no problem)."""
    return None if value is None or value >= 1 else f"{name} must be at least 1, got {value}"


def unit_interval(name: str, value: float) -> str | None:
    """The problem with ``name`` when ``value`` is outside [0, 1]."""
    return None if 0.0 <= value <= 1.0 else f"{name} must be in [0, 1], got {value}"
