"""Detection metrics of spoofing countermeasures (CMs): EER, DCF, Cllr, t-DCF, DET points.

Pure numpy, float64. Conventions, shared by every function here:

* ``labels``: 1 = bona fide (the *target* class of the CM), 0 = spoof.
* ``scores``: higher = more bona fide. A threshold t *accepts* a trial as bona fide when
  ``score >= t`` (the convention of ``sklearn.metrics.roc_curve`` and of the ASVspoof
  evaluation scripts' ``obtain_asv_error_rates``/``compute_actDCF``).
* Error rates at t: ``P_miss(t) = #{bona fide with score < t} / #bona fide`` (bona fide
  rejected) and ``P_fa(t) = #{spoof with score >= t} / #spoof`` (spoofs accepted).
* The operating points (ROC/DET vertices) are the rates at every distinct score taken as
  the threshold, in increasing order, followed by "reject everything" (t = +inf,
  P_miss = 1, P_fa = 0); the first point (t = the lowest score) accepts everything
  (P_miss = 0, P_fa = 1). Tied scores give one point, never an order-dependent split
  of a tie (the ASVspoof scripts step through a tie one trial at a time).

These are the *interpolated* definitions, kept as ``eer_interpolated``. The numbers papers
report — the registered ``eer``, ``min_dcf``, ``act_dcf`` and ``min_tdcf`` — follow the
challenge scripts trial by trial, ties included: :mod:`.challenge_metrics`.

References: ASVspoof 5 evaluation plan and ``evaluation-package/calculate_modules.py``
(minDCF, actDCF, Cllr); Kinnunen et al., "t-DCF: a Detection Cost Function for the Tandem
Assessment of Spoofing Countermeasures and Automatic Speaker Verification", Odyssey 2018,
as used by ASVspoof 2019 ``eval_metrics.py`` (min t-DCF); Brümmer & du Preez,
"Application-independent evaluation of speaker detection", CSL 2006 (Cllr, minCllr).
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any, Optional

import numpy as np

from .costs import check_priors, dcf_weights, positive_costs
from .curves import asv_rates, operating_points
from .trials import ASV_CLASSES, asv_classes, per_attack, scores_labels, target_vs_nontarget

__all__ = [
    "ASV_CLASSES",
    "act_dcf",
    "cllr",
    "det_curve",
    "eer",
    "min_cllr",
    "min_dcf",
    "min_tdcf",
    "operating_points",
    "per_attack_eer",
    "pav",
]


def det_curve(scores: Any, labels: Any) -> tuple[np.ndarray, np.ndarray]:
    """``(P_fa, P_miss)`` at every operating point (:func:`.curves.operating_points`), ordered
    by increasing threshold (so P_fa falls from 1 to 0 while P_miss rises from 0 to 1) — the
    points of a DET plot, which draws them on normal-deviate axes (``scipy.stats.norm.ppf``;
    that transform, and clipping the 0/1 end points, is the plotting side's job)."""
    _, p_miss, p_fa = operating_points(scores, labels)
    return p_fa, p_miss


# ------------------------------------------------------------------------------- EER
def eer(scores: Any, labels: Any) -> tuple[float, float]:
    """Equal error rate and its threshold: ``(EER, threshold)``.

    The operating points (see :func:`operating_points`) are joined by straight lines —
    the ROC, whose segments are reachable by randomising between two neighbouring
    thresholds — and the EER is where that line crosses ``P_miss = P_fa``. Along the
    points ``d = P_miss − P_fa`` rises from −1 to +1; with i the first point where
    ``d_i >= 0``:

    * ``d_i = 0``: the EER is ``P_miss_i`` and the threshold ``t_i``;
    * otherwise, on the segment (i−1, i) with ``w = −d_{i−1} / (d_i − d_{i−1})``:
      ``EER = P_fa_{i−1} + w (P_fa_i − P_fa_{i−1})`` (= the same in P_miss), and the
      threshold is interpolated with the same weight, ``t_{i−1} + w (t_i − t_{i−1})``
      (``t_{i−1}`` when ``t_i`` is the final +inf).

    So perfectly separated scores give ``(0.0, lowest bona fide score)``, perfectly
    reversed ones 1.0, and scores that are all equal 0.5. This is *not* the number the
    ASVspoof scripts report: they average P_miss and P_fa at the sorted trial where the two
    are closest, stepping through tied scores one trial at a time (bona fide first), so
    with ties the two can differ by several points; that convention is
    :func:`.challenge_metrics.eer` (the registered ``eer``).
    """
    thresholds, p_miss, p_fa = operating_points(scores, labels)
    d = p_miss - p_fa
    i = int(np.argmax(d >= 0))  # d[-1] == 1, so one exists; d[0] == -1, so i >= 1
    if d[i] == 0:
        return float(p_miss[i]), float(thresholds[i])
    w = -d[i - 1] / (d[i] - d[i - 1])
    rate = p_fa[i - 1] + w * (p_fa[i] - p_fa[i - 1])
    low, high = thresholds[i - 1], thresholds[i]
    threshold = low + w * (high - low) if np.isfinite(high) else low
    return float(rate), float(threshold)


def per_attack_eer(scores: Any, labels: Any, attacks: Sequence[Any] | np.ndarray) -> dict[str, float]:
    """EER of each attack: that attack's spoofs against *all* bona fide trials.

    Args:
        scores, labels: as for :func:`eer`.
        attacks: one attack id per trial (e.g. ``"A07"``); the ids of bona fide trials
            are ignored (``"-"``, ``"bonafide"``, anything).

    Returns:
        ``{attack id (as str): EER}``, sorted by attack id.
    """
    return per_attack(scores, labels, attacks, eer)


# ------------------------------------------------------------------------------- DCF
def min_dcf(scores: Any, labels: Any, p_spoof: float = 0.05, c_miss: float = 1.0, c_fa: float = 10.0) -> float:
    """Minimum normalised detection cost (ASVspoof 5's primary metric).

    ``DCF(t) = C_miss (1 − p_spoof) P_miss(t) + C_fa p_spoof P_fa(t)``, normalised by
    ``min(C_miss (1 − p_spoof), C_fa p_spoof)`` — the cost of the better of the two
    trivial systems (reject everything / accept everything), so a useless CM scores 1 —
    and minimised over every operating point (a linear cost is minimal at a vertex, so
    the segments between them need not be searched). Bona fide is the target class, with
    prior ``1 − p_spoof``. ASVspoof 5 defaults: p_spoof 0.05, C_miss 1, C_fa 10, i.e.
    ``(0.95 P_miss + 0.5 P_fa) / 0.5``.
    """
    w_miss, w_fa = dcf_weights(p_spoof, c_miss, c_fa)
    _, p_miss, p_fa = operating_points(scores, labels)
    return float(np.min(w_miss * p_miss + w_fa * p_fa) / min(w_miss, w_fa))


def act_dcf(scores: Any, labels: Any, p_spoof: float = 0.05, c_miss: float = 1.0, c_fa: float = 10.0) -> float:
    """Actual normalised detection cost: the DCF of :func:`min_dcf` at the Bayes
    threshold for scores taken as natural-log likelihood ratios (bona fide vs spoof),
    ``t = ln(C_fa p_spoof / (C_miss (1 − p_spoof)))`` (= −ln β of the ASVspoof 5 plan;
    −0.642 with the defaults), accepting ``score >= t``. It exceeds the minimum by the
    cost of miscalibration."""
    w_miss, w_fa = dcf_weights(p_spoof, c_miss, c_fa)
    s, y = scores_labels(scores, labels)
    threshold = math.log(w_fa / w_miss)
    p_miss = float(np.mean(s[y] < threshold))
    p_fa = float(np.mean(s[~y] >= threshold))
    return (w_miss * p_miss + w_fa * p_fa) / min(w_miss, w_fa)


# ------------------------------------------------------------------------------ Cllr
def cllr(scores: Any, labels: Any) -> float:
    """Log-likelihood-ratio cost, in bits, of scores taken as natural-log LRs:

    ``Cllr = 1/(2 ln 2) · [mean_bona ln(1 + e^{−s}) + mean_spoof ln(1 + e^{s})]``

    0 for perfect, confident LLRs; 1 for the uninformative ``s = 0``; unbounded for
    confident wrong ones (computed with ``logaddexp``, so large scores do not overflow).
    """
    s, y = scores_labels(scores, labels)
    bona = np.mean(np.logaddexp(0.0, -s[y]))
    spoof = np.mean(np.logaddexp(0.0, s[~y]))
    return float((bona + spoof) / (2.0 * math.log(2.0)))


def pav(scores: Any, labels: Any) -> np.ndarray:
    """Pool-adjacent-violators: the non-decreasing function of the score that best fits
    the 0/1 labels in least squares, i.e. the maximum-likelihood monotone posterior
    ``P(bona fide | score)``, one value per trial. Tied scores are pooled into one block
    first (they must get the same value)."""
    s, y = scores_labels(scores, labels, need_both=False)
    unique, inverse = np.unique(s, return_inverse=True)
    weight = np.bincount(inverse, minlength=unique.size).astype(np.float64)
    total = np.bincount(inverse, weights=y.astype(np.float64), minlength=unique.size)
    # stack of blocks: (sum of labels, count, number of unique scores merged)
    sums: list[float] = []
    counts: list[float] = []
    widths: list[int] = []
    for value, n in zip(total, weight, strict=True):
        sums.append(value)
        counts.append(n)
        widths.append(1)
        while len(sums) > 1 and sums[-2] * counts[-1] >= sums[-1] * counts[-2]:  # mean[-2] >= mean[-1]
            last_sum, last_count, last_width = sums.pop(), counts.pop(), widths.pop()
            sums[-1] += last_sum
            counts[-1] += last_count
            widths[-1] += last_width
    means = np.repeat(np.array(sums) / np.array(counts), widths)
    return means[inverse]


def min_cllr(scores: Any, labels: Any) -> float:
    """Cllr after the best monotone calibration (Brümmer & du Preez, 2006): the PAV
    posteriors (:func:`pav`) turned into LLRs by removing the data's prior log-odds,
    ``llr = logit(p) − ln(N_bona / N_spoof)``, then :func:`cllr`. It measures
    discrimination only; ``cllr − min_cllr`` is the calibration loss. Blocks with p = 0
    or 1 hold only spoofs or only bona fide trials, whose terms are then exactly 0."""
    s, y = scores_labels(scores, labels)
    p = pav(s, y)
    odds = y.sum() / (~y).sum()  # prior odds bona fide : spoof in the data
    pb, ps = p[y], p[~y]  # pb > 0 (its block holds a bona fide trial), ps < 1 likewise
    bona = np.mean(np.log1p((1.0 - pb) / pb * odds))  # ln(1 + e^{-llr})
    spoof = np.mean(np.log1p(ps / (1.0 - ps) / odds))  # ln(1 + e^{llr})
    return float((bona + spoof) / (2.0 * math.log(2.0)))


# ----------------------------------------------------------------------------- t-DCF
def min_tdcf(
    cm_scores: Any,
    cm_labels: Any,
    asv_scores: Any,
    asv_labels: Any,
    *,
    p_target: float = 0.9405,
    p_nontarget: float = 0.0095,
    p_spoof: float = 0.05,
    c_miss_asv: float = 1.0,
    c_fa_asv: float = 10.0,
    c_miss_cm: float = 1.0,
    c_fa_cm: float = 10.0,
    asv_threshold: Optional[float] = None,
) -> float:
    """Normalised minimum tandem detection cost (t-DCF) of a CM in front of a fixed ASV
    system, in the formulation of the ASVspoof 2019 challenge (Kinnunen et al., 2018;
    ASVspoof 2019 ``eval_metrics.py``, called "legacy" by later packages).

    The ASV works at ``asv_threshold`` — by default the threshold of its EER on target vs
    nontarget trials (:func:`eer`) — accepting ``asv score >= threshold``, giving
    ``P_miss_asv`` (targets rejected), ``P_fa_asv`` (nontargets accepted) and
    ``P_miss_spoof_asv`` (spoofs rejected). Then, over the CM's operating points s,

        ``C1 = p_target (C_miss_cm − C_miss_asv P_miss_asv) − p_nontarget C_fa_asv P_fa_asv``
        ``C2 = C_fa_cm p_spoof (1 − P_miss_spoof_asv)``
        ``t-DCF_norm(s) = (C1 P_miss_cm(s) + C2 P_fa_cm(s)) / min(C1, C2)``

    and the result is its minimum (≤ 1: a CM that passes or blocks everything scores 1).
    Given the same ASV threshold this equals the ASVspoof 2019 script's value; its own
    choice of threshold (a sorted ASV score next to the EER point) can set the ASV one
    trial apart from the interpolated EER threshold used here — pass ``asv_threshold``
    to reproduce a given operating point.

    Args:
        cm_scores, cm_labels: CM scores and labels (1 bona fide, 0 spoof).
        asv_scores: ASV scores (higher = more likely the claimed speaker).
        asv_labels: ``"target"``, ``"nontarget"`` or ``"spoof"`` per ASV trial.
        p_target, p_nontarget, p_spoof: priors (sum to 1); defaults 0.95·0.99, 0.95·0.01, 0.05.
        c_miss_asv, c_fa_asv, c_miss_cm, c_fa_cm: costs (1, 10, 1, 10).
        asv_threshold: ASV operating point; None = its EER threshold.
    """
    check_priors(p_target, p_nontarget, p_spoof)
    positive_costs(c_miss_asv=c_miss_asv, c_fa_asv=c_fa_asv, c_miss_cm=c_miss_cm, c_fa_cm=c_fa_cm)
    groups = asv_classes(asv_scores, asv_labels)
    if asv_threshold is None:
        asv_threshold = eer(*target_vs_nontarget(groups))[1]
    asv = asv_rates(groups, asv_threshold)
    p_miss_asv, p_fa_asv, p_miss_spoof_asv = asv["p_miss"], asv["p_fa"], asv["p_miss_spoof"]
    c1 = p_target * (c_miss_cm - c_miss_asv * p_miss_asv) - p_nontarget * c_fa_asv * p_fa_asv
    c2 = c_fa_cm * p_spoof * (1.0 - p_miss_spoof_asv)
    if not (c1 > 0 and c2 > 0):
        raise ValueError(
            f"the t-DCF weights must be positive, got C1 = {c1:.6g} and C2 = {c2:.6g} (ASV at threshold "
            f"{asv_threshold:.6g}: P_miss {p_miss_asv:.4g}, P_fa {p_fa_asv:.4g}, spoofs rejected {p_miss_spoof_asv:.4g}); "
            "C2 = 0 means the ASV already rejects every spoof, C1 <= 0 an ASV worse than useless"
        )
    _, p_miss_cm, p_fa_cm = operating_points(cm_scores, cm_labels)
    return float(np.min(c1 * p_miss_cm + c2 * p_fa_cm) / min(c1, c2))
