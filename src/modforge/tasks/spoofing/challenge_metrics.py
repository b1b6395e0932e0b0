"""ASVspoof metrics computed exactly as the challenges' evaluation scripts compute them.

The numbers papers report come from the organisers' scripts, which do not use the
threshold-by-threshold operating points of :mod:`.detection`: they walk through the trials
one at a time. Matched references (same values on any score set, ties included):

* ASVspoof 2019 ``eval_metrics.py`` / ``evaluate_tDCF_asvspoof19.py`` (as carried by
  ``clovaai/aasist`` ``evaluation.py``): ``compute_det_curve``, ``compute_eer``,
  ``obtain_asv_error_rates`` and the 2019 ``compute_tDCF``;
* ASVspoof 2021 ``asvspoof-challenge/2021`` ``eval-package/eval_metrics.py``: the same
  ``compute_det_curve`` / ``compute_eer`` (its t-DCF is the revised one, not provided here);
* ASVspoof 5 ``asvspoof-challenge/asvspoof5`` ``evaluation-package/calculate_modules.py``:
  ``compute_mindcf`` and ``compute_actDCF`` (track 1, with ``calculate_metrics.py``'s costs
  p_spoof 0.05, C_miss 1, C_fa 10).

**The trial-by-trial DET curve** (:func:`challenge_det_curve`). The trials are sorted by
score, increasing, with ties ordered bona fide first — what a stable sort
(``kind='mergesort'``) of the bona fide scores followed by the spoof scores gives. Point
k = 0 … N rejects the first k sorted trials: ``P_miss_k`` = bona fide among them / N_bona,
``P_fa_k`` = spoofs not among them / N_spoof. Its threshold is the k-th sorted score (the
last rejected trial's), and for k = 0 the lowest score − 0.001. Inside a group of tied
scores the curve therefore steps through the bona fide trials first: ties are resolved
*against* the detector (all-equal scores give an EER of 1, not 0.5).

**EER** (:func:`eer`): the first k where ``|P_miss_k − P_fa_k|`` is smallest; the EER is
``(P_miss_k + P_fa_k) / 2`` there and the threshold is point k's. No interpolation; the
interpolated ROC crossing stays available as :func:`.detection.eer` (metric
``eer_interpolated``).

Scores are higher for bona fide; labels 1 = bona fide, 0 = spoof (validated as in
:mod:`.detection`). The arithmetic follows the scripts' operation order, so the values are
the scripts' to the last bit, not merely to rounding.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, Optional

import numpy as np

from . import detection
from .detection import _asv_classes, _dcf_weights, _scores_labels

__all__ = ["act_dcf", "asv_eer_threshold", "challenge_det_curve", "eer", "min_dcf", "min_tdcf", "per_attack_eer"]


def challenge_det_curve(scores: Any, labels: Any) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """The ASVspoof scripts' DET curve (``compute_det_curve``): ``(thresholds, p_miss,
    p_fa)``, N + 1 points, point k rejecting the first k trials sorted by score with ties
    bona fide first (see the module docstring)."""
    s, y = _scores_labels(scores, labels)
    order = np.lexsort((~y, s))  # by score; at equal scores bona fide (~y False) first
    bona_rejected = np.cumsum(y[order])  # int64, after rejecting 1, 2, … N trials
    n_bona, n_spoof = int(y.sum()), int((~y).sum())
    spoof_accepted = n_spoof - (np.arange(1, s.size + 1) - bona_rejected)
    p_miss = np.concatenate(([0.0], bona_rejected / n_bona))
    p_fa = np.concatenate(([1.0], spoof_accepted / n_spoof))
    ranked = s[order]
    thresholds = np.concatenate(([ranked[0] - 0.001], ranked))
    return thresholds, p_miss, p_fa


def _eer_point(p_miss: np.ndarray, p_fa: np.ndarray) -> tuple[int, float]:
    k = int(np.argmin(np.abs(p_miss - p_fa)))  # the first of equal minima
    return k, float((p_miss[k] + p_fa[k]) / 2)


def eer(scores: Any, labels: Any) -> tuple[float, float]:
    """Equal error rate as the ASVspoof 2019 / 2021 / 5 scripts compute it (``compute_eer``):
    ``(EER, threshold)``.

    On :func:`challenge_det_curve`, the point where ``|P_miss − P_fa|`` is smallest (the
    first such point), the EER being the mean of the two rates there and the threshold
    that point's sorted score. Tied scores are stepped through bona fide first, so ties
    count against the system. Examples: spoofs (0.1, 0.2) and bona fide (0.8, 0.9) give
    ``(0.0, 0.2)``; all-equal scores give an EER of 1.0.
    """
    thresholds, p_miss, p_fa = challenge_det_curve(scores, labels)
    k, rate = _eer_point(p_miss, p_fa)
    return rate, float(thresholds[k])


def per_attack_eer(scores: Any, labels: Any, attacks: Sequence[Any] | np.ndarray) -> dict[str, float]:
    """:func:`eer` of each attack: that attack's spoofs against *all* bona fide trials (the
    scripts' per-attack breakdown). ``attacks``: one id per trial (those of bona fide trials
    are ignored). Returns ``{attack id (str): EER}`` sorted by id."""
    s, y = _scores_labels(scores, labels)
    ids = np.asarray(attacks, dtype=object).reshape(-1)
    if ids.size != s.size:
        raise ValueError(f"attacks must have one id per trial ({s.size}), got {ids.size}")
    names = np.array([str(a) for a in ids], dtype=object)
    result = {}
    for attack in sorted(set(names[~y])):
        keep = y | (names == attack)
        result[attack] = eer(s[keep], y[keep])[0]
    return result


def min_dcf(scores: Any, labels: Any, p_spoof: float = 0.05, c_miss: float = 1.0, c_fa: float = 10.0) -> float:
    """Minimum normalised DCF, ASVspoof 5's primary metric (``compute_mindcf`` on
    ``compute_det_curve``): with ``p_bona = 1 − p_spoof``,

    ``min_k [C_miss P_miss_k p_bona + C_fa P_fa_k (1 − p_bona)] / min(C_miss p_bona, C_fa (1 − p_bona))``

    over the points of :func:`challenge_det_curve`. (Split ties never lower a linear cost
    below that of the tie's two ends, so this is also the minimum over thresholds:
    :func:`.detection.min_dcf` agrees to rounding.) Defaults are ASVspoof 5's:
    ``(0.95 P_miss + 0.5 P_fa) / 0.5``.
    """
    _dcf_weights(p_spoof, c_miss, c_fa)  # validates the cost model
    _, p_miss, p_fa = challenge_det_curve(scores, labels)
    p_bona = 1.0 - p_spoof
    cost = c_miss * p_miss * p_bona + c_fa * p_fa * (1.0 - p_bona)
    return float(cost.min() / min(c_miss * p_bona, c_fa * (1.0 - p_bona)))


def act_dcf(scores: Any, labels: Any, p_spoof: float = 0.05, c_miss: float = 1.0, c_fa: float = 10.0) -> float:
    """Actual normalised DCF as ASVspoof 5's ``compute_actDCF``: scores read as natural-log
    likelihood ratios, threshold ``−ln β`` with ``β = C_miss (1 − p_spoof) / (C_fa p_spoof)``
    (−0.6419 with the defaults), bona fide accepted when ``score >= threshold``;
    ``(C_miss (1 − p_spoof) P_miss + C_fa p_spoof P_fa) / min(C_fa p_spoof, C_miss (1 − p_spoof))``.
    """
    w_miss, w_fa = _dcf_weights(p_spoof, c_miss, c_fa)
    s, y = _scores_labels(scores, labels)
    threshold = -np.log(w_miss / w_fa)  # the script's −ln β, to the last bit
    rate_miss = np.sum(s[y] < threshold) / int(y.sum())
    rate_fa = np.sum(s[~y] >= threshold) / int((~y).sum())
    return float((w_miss * rate_miss + w_fa * rate_fa) / min(w_fa, w_miss))


def asv_eer_threshold(asv_scores: Any, asv_labels: Any) -> float:
    """The ASV operating point of the ASVspoof 2019 t-DCF: the :func:`eer` threshold of the
    target vs nontarget ASV scores (``compute_eer(tar_asv, non_asv)``). The script then
    accepts ``asv score >= threshold``, so the trial at the threshold — the last one the
    EER point rejects — counts as accepted; :func:`min_tdcf` does the same."""
    groups = _asv_classes(asv_scores, asv_labels)
    both = np.concatenate((groups["target"], groups["nontarget"]))
    is_target = np.concatenate((np.ones(groups["target"].size, bool), np.zeros(groups["nontarget"].size, bool)))
    return eer(both, is_target)[1]


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
    """Normalised minimum t-DCF of the ASVspoof 2019 challenge (``evaluate_tDCF_asvspoof19.py``;
    the "legacy" t-DCF of later packages), equal to the script's value.

    The ASV works at :func:`asv_eer_threshold` (unless ``asv_threshold`` is given), accepting
    ``asv score >= threshold`` (``obtain_asv_error_rates``); then, with the cost model and
    formula of :func:`.detection.min_tdcf` (``C1 = p_target (C_miss_cm − C_miss_asv
    P_miss_asv) − p_nontarget C_fa_asv P_fa_asv``, ``C2 = C_fa_cm p_spoof (1 −
    P_miss_spoof_asv)``), the minimum over the CM's operating points of ``(C1 P_miss_cm +
    C2 P_fa_cm) / min(C1, C2)`` — the same minimum as over the script's trial-by-trial
    curve, whose split ties are never cheaper than the tie's ends. The defaults are the
    2019 cost model (p_spoof 0.05, p_target 0.95·0.99, p_nontarget 0.95·0.01, costs 1, 10,
    1, 10). Raises ``ValueError`` where the script would divide by a zero weight (an ASV
    that rejects every spoof) or refuse a negative one.
    """
    if asv_threshold is None:
        asv_threshold = asv_eer_threshold(asv_scores, asv_labels)
    return detection.min_tdcf(
        cm_scores,
        cm_labels,
        asv_scores,
        asv_labels,
        p_target=p_target,
        p_nontarget=p_nontarget,
        p_spoof=p_spoof,
        c_miss_asv=c_miss_asv,
        c_fa_asv=c_fa_asv,
        c_miss_cm=c_miss_cm,
        c_fa_cm=c_fa_cm,
        asv_threshold=asv_threshold,
    )
