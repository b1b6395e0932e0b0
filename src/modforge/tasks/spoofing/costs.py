"""Checks of the cost models every spoofing metric takes: priors, costs and the two DCF weights.

One place for them, so the t-DCF (2019 and 2021), the a-DCF and the DCFs refuse a bad cost
model with the same words, before any score is read.
"""

from __future__ import annotations

import math

__all__ = ["check_priors", "dcf_weights", "positive", "positive_costs", "probability"]


def positive(name: str, value: float) -> float:
    """``value`` as a float, or ``ValueError`` naming ``name`` unless it is finite and > 0."""
    value = float(value)
    if not value > 0 or not math.isfinite(value):
        raise ValueError(f"{name} must be a positive number, got {value!r}")
    return value


def positive_costs(**costs: float) -> None:
    """:func:`positive` for each named cost, in the order given (the first bad one is named)."""
    for name, cost in costs.items():
        positive(name, cost)


def probability(name: str, value: float) -> float:
    """``value`` as a float, or ``ValueError`` naming ``name`` unless 0 < value < 1."""
    value = float(value)
    if not 0.0 < value < 1.0:
        raise ValueError(f"{name} must be a probability strictly between 0 and 1, got {value!r}")
    return value


def check_priors(p_target: float, p_nontarget: float, p_spoof: float) -> None:
    """The three priors of a tandem cost model: non-negative, summing to 1 (within 1e-10)."""
    priors = (p_target, p_nontarget, p_spoof)
    if any(not p >= 0 for p in priors) or abs(sum(priors) - 1.0) > 1e-10:
        raise ValueError(f"p_target, p_nontarget, p_spoof must be non-negative and sum to 1, got {priors}")


def dcf_weights(p_spoof: float, c_miss: float, c_fa: float) -> tuple[float, float]:
    """``(C_miss (1 − p_spoof), C_fa p_spoof)``: the weights of P_miss and P_fa in a CM's DCF,
    after checking the cost model."""
    p_spoof = probability("p_spoof", p_spoof)
    return positive("c_miss", c_miss) * (1.0 - p_spoof), positive("c_fa", c_fa) * p_spoof
