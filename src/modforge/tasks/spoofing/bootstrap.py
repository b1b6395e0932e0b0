"""Seeded bootstrap confidence intervals of spoofing metrics (EER, minDCF, or any statistic).

Why: a test-set EER is one draw; its spread over resampled test sets says which differences
between systems mean something. The resampling is over *trials*, with replacement and
stratified by class — each resample keeps the original number of bona fide and of spoof
trials, so every resample has both classes and the metric is always defined. The interval
is the percentile interval: the ``(1 − level)/2`` and ``(1 + level)/2`` quantiles (numpy's
default linear interpolation) of the ``n`` resampled values.

Resample r draws, from one ``numpy.random.Generator(PCG64(seed))`` in order r = 0, 1, …, the
bona fide picks then the spoof picks (:func:`resample_indices`), so the result depends only
on ``(scores, labels, n, seed, level)`` — not on block sizes or on which statistic is asked.

For ``"eer"`` and ``"min_dcf"`` (the challenge definitions, :mod:`.challenge_metrics`) the
statistic is computed without sorting each resample: the trials are sorted once (score,
ties bona fide first); a resample is the sorted sequence with trial i repeated ``count_i``
times, which is already in the scripts' order, so one ``np.repeat`` + ``cumsum`` gives its
trial-by-trial DET curve. Cost: O(N log N) once plus O(n · N) for the resamples, in blocks of
about ``2**22`` cells; 1000 resamples of 100k trials take a few seconds on one core. Any other
statistic is a callable ``f(scores, labels) -> float`` called once per resample (O(n · cost of f)).
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from typing import Any, Union

import numpy as np

from .challenge_metrics import eer, min_dcf
from .costs import dcf_weights
from .trials import scores_labels

__all__ = ["bootstrap_ci", "bootstrap_values", "eer_mindcf_ci", "resample_indices"]

Statistic = Union[str, Callable[[np.ndarray, np.ndarray], float]]
FAST = ("eer", "min_dcf")
BLOCK_CELLS = 2**22


def _check(n: int, level: float) -> None:
    if int(n) != n or n < 1:
        raise ValueError(f"the number of bootstrap resamples n must be a positive integer, got {n!r}")
    if not 0.0 < float(level) < 1.0:
        raise ValueError(f"the confidence level must be strictly between 0 and 1, got {level!r}")


def resample_indices(labels: np.ndarray, n: int, seed: int) -> Iterator[np.ndarray]:
    """The ``n`` stratified resamples of :mod:`this module <.bootstrap>`: per resample, the
    indices of its trials (bona fide picks first, then spoof picks), drawn from
    ``np.random.default_rng(seed)``. ``labels``: bool, True = bona fide."""
    rng = np.random.default_rng(seed)
    bona, spoof = np.flatnonzero(labels), np.flatnonzero(~labels)
    for _ in range(int(n)):
        yield np.concatenate(
            (bona[rng.integers(0, bona.size, bona.size)], spoof[rng.integers(0, spoof.size, spoof.size)])
        )


def _fast_values(s: np.ndarray, y: np.ndarray, n: int, seed: int, costs: dict[str, float]) -> dict[str, np.ndarray]:
    """EER and minDCF of every resample, via counts over the once-sorted trials."""
    dcf_weights(costs["p_spoof"], costs["c_miss"], costs["c_fa"])  # validates the cost model
    p_bona = 1.0 - costs["p_spoof"]
    c_miss, c_fa = costs["c_miss"], costs["c_fa"]
    normaliser = min(c_miss * p_bona, c_fa * (1.0 - p_bona))  # challenge_metrics.min_dcf's, to the bit
    order = np.lexsort((~y, s))  # the scripts' order: by score, ties bona fide first
    rank = np.empty(s.size, np.int64)
    rank[order] = np.arange(s.size)
    y_sorted = y[order]
    n_bona, n_spoof, size = int(y.sum()), int((~y).sum()), s.size
    eers, dcfs = np.empty(n), np.empty(n)
    block = max(1, BLOCK_CELLS // size)
    draws = resample_indices(y, n, seed)
    steps = np.arange(1, size + 1)
    for start in range(0, n, block):
        rows = min(block, n - start)
        counts = np.zeros((rows, size), np.int64)
        for r in range(rows):
            counts[r] = np.bincount(rank[next(draws)], minlength=size)
        labels = np.repeat(np.broadcast_to(y_sorted, (rows, size)).ravel(), counts.ravel()).reshape(rows, size)
        bona_rejected = np.cumsum(labels, axis=1)
        p_miss = np.concatenate((np.zeros((rows, 1)), bona_rejected / n_bona), axis=1)
        p_fa = np.concatenate((np.ones((rows, 1)), (n_spoof - (steps - bona_rejected)) / n_spoof), axis=1)
        k = np.argmin(np.abs(p_miss - p_fa), axis=1)[:, None]
        eers[start : start + rows] = ((np.take_along_axis(p_miss, k, 1) + np.take_along_axis(p_fa, k, 1)) / 2)[:, 0]
        cost = c_miss * p_miss * p_bona + c_fa * p_fa * (1.0 - p_bona)
        dcfs[start : start + rows] = cost.min(axis=1) / normaliser
    return {"eer": eers, "min_dcf": dcfs}


def bootstrap_values(
    scores: Any, labels: Any, statistic: Statistic, *, n: int = 1000, seed: int = 0, **costs: float
) -> np.ndarray:
    """The statistic on each of the ``n`` stratified resamples (float64 ``[n]``).

    ``statistic``: ``"eer"`` or ``"min_dcf"`` (challenge definitions, vectorised; ``min_dcf``
    takes ``p_spoof``, ``c_miss``, ``c_fa`` keywords, ASVspoof 5 defaults) or a callable
    ``f(scores, labels) -> float`` on float64 scores and bool labels (True = bona fide).
    """
    s, y = scores_labels(scores, labels)
    _check(n, 0.5)
    if isinstance(statistic, str):
        if statistic not in FAST:
            raise ValueError(f"statistic must be a callable or one of {', '.join(FAST)}, got {statistic!r}")
        model = {"p_spoof": 0.05, "c_miss": 1.0, "c_fa": 10.0, **costs}
        return _fast_values(s, y, int(n), seed, model)[statistic]
    if costs:
        raise ValueError("cost keywords apply to the named statistics only; bind them into the callable instead")
    return np.array([float(statistic(s[idx], y[idx])) for idx in resample_indices(y, n, seed)])


def _interval(values: np.ndarray, level: float) -> tuple[float, float]:
    low, high = np.quantile(values, [(1.0 - level) / 2.0, (1.0 + level) / 2.0])
    return float(low), float(high)


def bootstrap_ci(
    scores: Any, labels: Any, statistic: Statistic, *, n: int = 1000, seed: int = 0, level: float = 0.95
) -> tuple[float, float]:
    """Percentile bootstrap interval ``(low, high)`` of ``statistic`` at ``level`` (see the
    module docstring): ``n`` seeded resamples of the trials, stratified by class.

    Example: ``bootstrap_ci(scores, labels, "eer", n=1000, seed=0)`` → ``(0.071, 0.093)``.
    Raises ``ValueError`` without both bona fide and spoof trials, or for a bad n / level.
    """
    _check(n, level)
    return _interval(bootstrap_values(scores, labels, statistic, n=n, seed=seed), level)


def eer_mindcf_ci(scores: Any, labels: Any, *, n: int = 1000, seed: int = 0, level: float = 0.95) -> dict[str, float]:
    """Bootstrap intervals of the challenge EER and minDCF (ASVspoof 5 costs) from the same
    ``n`` resamples, for a report: ``{"eer", "eer_ci_low", "eer_ci_high", "min_dcf",
    "min_dcf_ci_low", "min_dcf_ci_high"}`` (the first of each trio the full-set value)."""
    _check(n, level)
    s, y = scores_labels(scores, labels)
    values = _fast_values(s, y, int(n), seed, {"p_spoof": 0.05, "c_miss": 1.0, "c_fa": 10.0})
    eer_low, eer_high = _interval(values["eer"], level)
    dcf_low, dcf_high = _interval(values["min_dcf"], level)
    return {
        "eer": eer(s, y)[0],
        "eer_ci_low": eer_low,
        "eer_ci_high": eer_high,
        "min_dcf": min_dcf(s, y),
        "min_dcf_ci_low": dcf_low,
        "min_dcf_ci_high": dcf_high,
    }
