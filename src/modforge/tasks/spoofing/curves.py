"""The operating points every spoofing metric reads its error rates from.

* :func:`operating_points` — a CM's ROC/DET vertices, one per distinct score taken as the
  threshold (ties never split): the *interpolated* metrics of :mod:`.detection`.
* :func:`challenge_det_curve` — the ASVspoof scripts' trial-by-trial DET curve (ties stepped
  bona fide first): the challenges' own values in :mod:`.challenge_metrics`,
  :mod:`.sasv_metrics` and :mod:`.conditions`.
* :func:`ranked_classes` — the pooled ASV (or SASV) trials sorted stably, the trial-by-trial
  curve of the three-class metrics (a-DCF, t-EER).
* :func:`asv_rates` — the ASV's error rates at one threshold, its operating point in a t-DCF.

Conventions (see :mod:`.detection`): higher scores favour bona fide / target, a threshold
accepts ``score >= threshold``; the arithmetic is the scripts', so values match to the bit.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from .trials import scores_labels

__all__ = ["asv_rates", "challenge_det_curve", "operating_points", "ranked_classes"]


def operating_points(scores: Any, labels: Any) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Every operating point of a detector: ``(thresholds, p_miss, p_fa)``.

    ``thresholds`` are the distinct scores in increasing order followed by ``+inf``;
    ``p_miss[i]`` / ``p_fa[i]`` are the miss and false-alarm rates when trials with
    ``score >= thresholds[i]`` are accepted as bona fide (see :mod:`.detection`).
    ``p_miss`` rises from 0 to 1 and ``p_fa`` falls from 1 to 0.
    """
    s, y = scores_labels(scores, labels)
    unique, inverse = np.unique(s, return_inverse=True)
    bona = np.bincount(inverse, weights=y.astype(np.float64), minlength=unique.size)
    spoof = np.bincount(inverse, weights=(~y).astype(np.float64), minlength=unique.size)
    n_bona, n_spoof = bona.sum(), spoof.sum()
    # bona fide strictly below each threshold; spoofs at or above it
    below = np.concatenate(([0.0], np.cumsum(bona)))
    at_or_above = np.concatenate((np.cumsum(spoof[::-1])[::-1], [0.0]))
    thresholds = np.concatenate((unique, [np.inf]))
    return thresholds, below / n_bona, at_or_above / n_spoof


def challenge_det_curve(scores: Any, labels: Any) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """The ASVspoof scripts' DET curve (``compute_det_curve``): ``(thresholds, p_miss,
    p_fa)``, N + 1 points, point k rejecting the first k trials sorted by score with ties
    bona fide first (see :mod:`.challenge_metrics`)."""
    s, y = scores_labels(scores, labels)
    order = np.lexsort((~y, s))  # by score; at equal scores bona fide (~y False) first
    bona_rejected = np.cumsum(y[order])  # int64, after rejecting 1, 2, … N trials
    n_bona, n_spoof = int(y.sum()), int((~y).sum())
    spoof_accepted = n_spoof - (np.arange(1, s.size + 1) - bona_rejected)
    p_miss = np.concatenate(([0.0], bona_rejected / n_bona))
    p_fa = np.concatenate(([1.0], spoof_accepted / n_spoof))
    ranked = s[order]
    thresholds = np.concatenate(([ranked[0] - 0.001], ranked))
    return thresholds, p_miss, p_fa


def ranked_classes(groups: dict[str, np.ndarray]) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """The trials of :func:`.trials.asv_classes` pooled (targets, nontargets, spoofs, as the
    references concatenate them) and sorted stably by score: ``(pooled scores, order, class
    of each sorted trial)`` with classes 0 target, 1 nontarget, 2 spoof (int8)."""
    tar, non, spf = groups["target"], groups["nontarget"], groups["spoof"]
    pooled = np.concatenate((tar, non, spf))
    cls = np.concatenate((np.zeros(tar.size, np.int8), np.ones(non.size, np.int8), np.full(spf.size, 2, np.int8)))
    order = np.argsort(pooled, kind="mergesort")
    return pooled, order, cls[order]


def asv_rates(groups: dict[str, np.ndarray], threshold: float) -> dict[str, float]:
    """The ASV's error rates at ``threshold``, accepting ``score >= threshold`` as the scripts'
    ``obtain_asv_error_rates`` does: ``{"p_fa", "p_miss", "p_miss_spoof", "p_fa_spoof",
    "threshold"}`` (nontargets accepted, targets rejected, spoofs rejected, spoofs accepted)."""
    tar, non, spf = groups["target"], groups["nontarget"], groups["spoof"]
    return {
        "p_fa": float(np.sum(non >= threshold) / non.size),
        "p_miss": float(np.sum(tar < threshold) / tar.size),
        "p_miss_spoof": float(np.sum(spf < threshold) / spf.size),
        "p_fa_spoof": float(np.sum(spf >= threshold) / spf.size),
        "threshold": float(threshold),
    }
