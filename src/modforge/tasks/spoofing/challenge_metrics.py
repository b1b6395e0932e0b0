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
from .costs import dcf_weights
from .curves import challenge_det_curve
from .trials import asv_classes, per_attack, scores_labels, target_vs_nontarget

__all__ = ["act_dcf", "asv_eer_threshold", "challenge_det_curve", "eer", "min_dcf", "min_tdcf", "per_attack_eer"]


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
    return per_attack(scores, labels, attacks, eer)


def min_dcf(scores: Any, labels: Any, p_spoof: float = 0.05, c_miss: float = 1.0, c_fa: float = 10.0) -> float:
    """Minimum normalised DCF, ASVspoof 5's primary metric (``compute_mindcf`` on
    ``compute_det_curve``): with ``p_bona = 1 − p_spoof``,

    ``min_k [C_miss P_miss_k p_bona + C_fa P_fa_k (1 − p_bona)] / min(C_miss p_bona, C_fa (1 − p_bona))``

    over the points of :func:`challenge_det_curve`. (Split ties never lower a linear cost
    below that of the tie's two ends, so this is also the minimum over thresholds:
    :func:`.detection.min_dcf` agrees to rounding.) Defaults are ASVspoof 5's:
    ``(0.95 P_miss + 0.5 P_fa) / 0.5``.
    """
    dcf_weights(p_spoof, c_miss, c_fa)  # validates the cost model
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
    w_miss, w_fa = dcf_weights(p_spoof, c_miss, c_fa)
    s, y = scores_labels(scores, labels)
    threshold = -np.log(w_miss / w_fa)  # the script's −ln β, to the last bit
    rate_miss = np.sum(s[y] < threshold) / int(y.sum())
    rate_fa = np.sum(s[~y] >= threshold) / int((~y).sum())
    return float((w_miss * rate_miss + w_fa * rate_fa) / min(w_fa, w_miss))


def asv_eer_threshold(asv_scores: Any, asv_labels: Any) -> float:
    """The ASV operating point of the ASVspoof 2019 t-DCF: the :func:`eer` threshold of the
    target vs nontarget ASV scores (``compute_eer(tar_asv, non_asv)``). The script then
    accepts ``asv score >= threshold``, so the trial at the threshold — the last one the
    EER point rejects — counts as accepted; :func:`min_tdcf` does the same."""
    return eer(*target_vs_nontarget(asv_classes(asv_scores, asv_labels)))[1]


def min_tdcf(
    cm_scores: Any, cm_labels: Any, asv_scores: Any, asv_labels: Any, *, asv_threshold: Optional[float] = None,
    **costs: float,
) -> float:  # fmt: skip
    """Normalised minimum t-DCF of the ASVspoof 2019 challenge (``evaluate_tDCF_asvspoof19.py``;
    the "legacy" t-DCF of later packages), equal to the script's value.

    The ASV works at :func:`asv_eer_threshold` (unless ``asv_threshold`` is given), accepting
    ``asv score >= threshold`` (``obtain_asv_error_rates``); then, with the cost model and
    formula of :func:`.detection.min_tdcf` (``C1 = p_target (C_miss_cm − C_miss_asv
    P_miss_asv) − p_nontarget C_fa_asv P_fa_asv``, ``C2 = C_fa_cm p_spoof (1 −
    P_miss_spoof_asv)``), the minimum over the CM's operating points of ``(C1 P_miss_cm +
    C2 P_fa_cm) / min(C1, C2)`` — the same minimum as over the script's trial-by-trial
    curve, whose split ties are never cheaper than the tie's ends. ``costs`` are that
    function's keywords, defaults the 2019 cost model: ``p_target`` 0.9405 (0.95·0.99),
    ``p_nontarget`` 0.0095 (0.95·0.01), ``p_spoof`` 0.05, ``c_miss_asv`` 1, ``c_fa_asv`` 10,
    ``c_miss_cm`` 1, ``c_fa_cm`` 10. Raises ``ValueError`` where the script would divide by a
    zero weight (an ASV that rejects every spoof) or refuse a negative one, ``TypeError`` for
    an unknown cost keyword.
    """
    if asv_threshold is None:
        asv_threshold = asv_eer_threshold(asv_scores, asv_labels)
    return detection.min_tdcf(cm_scores, cm_labels, asv_scores, asv_labels, asv_threshold=asv_threshold, **costs)
