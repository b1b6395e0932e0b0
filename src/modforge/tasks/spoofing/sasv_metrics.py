"""Tandem (CM + ASV) metrics of the later ASVspoof challenges, equal to the organisers' scripts.

* :func:`min_tdcf_2021` — the *revised* t-DCF of ASVspoof 2021 (``asvspoof-challenge/2021``
  ``eval-package/eval_metrics.py`` ``compute_tDCF``; ASVspoof 5 ``calculate_modules.py``
  carries the same function). Unlike the 2019 t-DCF (:func:`.challenge_metrics.min_tdcf`) its
  cost model charges the *tandem* system's errors (C_miss, C_fa, C_fa_spoof) rather than
  separate CM and ASV costs, and it keeps the cost of an error-free CM, C0, in the
  normalisation:

      ``C0 = p_tar C_miss P_miss_asv + p_non C_fa P_fa_asv``
      ``C1 = p_tar C_miss − C0``,  ``C2 = p_spoof C_fa_spoof P_fa_spoof_asv``
      ``t-DCF_norm(s) = (C0 + C1 P_miss_cm(s) + C2 P_fa_cm(s)) / (C0 + min(C1, C2))``

  minimised over the CM's trial-by-trial DET points (:func:`.challenge_metrics.challenge_det_curve`).
* :func:`a_dcf` — the architecture-agnostic DCF of SASV / ASVspoof 5 (Shim et al., Odyssey
  2024; ``shimhz/a_DCF`` and ASVspoof 5 ``evaluation-package/a_dcf.py``): one *SASV* score per
  trial, three classes, ``(C_miss p_tar P_miss + C_fa_asv p_non P_fa_non + C_fa_cm p_spoof
  P_fa_spoof) / min(C_fa_asv p_non + C_fa_cm p_spoof, C_miss p_tar)``, minimised over the
  trial-by-trial curve of the pooled, stably sorted scores.
* :func:`t_eer` — the concurrent tandem EER (Kinnunen et al., "t-EER: parameter-free tandem
  evaluation of countermeasures and biometric comparators", IEEE TPAMI 2023), as ASVspoof 5's
  ``compute_teer`` computes it from a CM and an ASV score per trial.

Conventions are those of :mod:`.challenge_metrics`: higher scores favour bona fide / target,
``score >= threshold`` accepts, ASV classes are ``"target"``, ``"nontarget"``, ``"spoof"``
(:data:`.trials.ASV_CLASSES`), and the arithmetic follows the scripts' operation order,
so values agree to the last bit (the tests compare to 1e-12 against recorded outputs of the
scripts themselves, ties included).
"""

from __future__ import annotations

from typing import Any, ClassVar, Optional

import numpy as np

from ...core.registries import register_metric
from .challenge_metrics import asv_eer_threshold
from .costs import check_priors, positive_costs
from .curves import asv_rates, challenge_det_curve, ranked_classes
from .metrics import TandemMetric
from .trials import asv_classes

__all__ = ["MinTDCF2021", "a_dcf", "asv_error_rates", "min_tdcf_2021", "normalised_min_tdcf", "t_eer", "tandem_curves",
           "tdcf_2021_costs"]


def asv_error_rates(asv_scores: Any, asv_labels: Any, asv_threshold: Optional[float] = None) -> dict[str, float]:
    """The ASV's error rates at ``asv_threshold`` (default: its ``compute_eer`` threshold on
    target vs nontarget, :func:`.challenge_metrics.asv_eer_threshold`), accepting
    ``score >= threshold`` as the scripts' ``obtain_asv_error_rates`` does:
    ``{"p_fa", "p_miss", "p_miss_spoof", "p_fa_spoof", "threshold"}``."""
    groups = asv_classes(asv_scores, asv_labels)
    if asv_threshold is None:
        asv_threshold = asv_eer_threshold(asv_scores, asv_labels)
    return asv_rates(groups, asv_threshold)


def min_tdcf_2021(
    cm_scores: Any,
    cm_labels: Any,
    asv_scores: Any,
    asv_labels: Any,
    *,
    p_target: float = 0.9405,
    p_nontarget: float = 0.0095,
    p_spoof: float = 0.05,
    c_miss: float = 1.0,
    c_fa: float = 10.0,
    c_fa_spoof: float = 10.0,
    asv_threshold: Optional[float] = None,
) -> float:
    """Normalised minimum revised t-DCF (ASVspoof 2021, also ASVspoof 5's secondary metric).

    The ASV works at ``asv_threshold`` (default: its EER threshold, as the 2021 package's
    ``compute_eer`` picks it); see the module docstring for C0, C1, C2 and the normalisation.
    The CM scores and the ASV scores need not be the same trials. Defaults are the 2021 /
    ASVspoof 5 cost model (p_spoof 0.05, p_target 0.95·0.99, p_nontarget 0.95·0.01, C_miss 1,
    C_fa 10, C_fa_spoof 10). ``(cm_scores, cm_labels)`` as in :mod:`.detection` (1 bona fide).

    Raises ``ValueError`` for bad inputs or where the script refuses: negative weights, or a
    zero normaliser (an error-free ASV that also rejects every spoof).
    """
    check_priors(p_target, p_nontarget, p_spoof)
    positive_costs(c_miss=c_miss, c_fa=c_fa, c_fa_spoof=c_fa_spoof)
    asv = asv_error_rates(asv_scores, asv_labels, asv_threshold)
    c0, c1, c2 = tdcf_2021_costs(asv["p_miss"], asv["p_fa"], asv["p_fa_spoof"], p_target=p_target,
                                 p_nontarget=p_nontarget, p_spoof=p_spoof, c_miss=c_miss, c_fa=c_fa,
                                 c_fa_spoof=c_fa_spoof)  # fmt: skip
    if c0 < 0 or c1 < 0 or c2 < 0 or not c0 + min(c1, c2) > 0:
        raise ValueError(
            f"the revised t-DCF needs C0, C1, C2 >= 0 and C0 + min(C1, C2) > 0; got C0 = {c0:.6g}, C1 = {c1:.6g}, "
            f"C2 = {c2:.6g} (ASV at threshold {asv['threshold']:.6g})"
        )
    return normalised_min_tdcf(cm_scores, cm_labels, c0, c1, c2)


def tdcf_2021_costs(p_miss_asv: float, p_fa_asv: float, p_fa_spoof_asv: float, *, p_target: float,
                    p_nontarget: float, p_spoof: float, c_miss: float, c_fa: float,
                    c_fa_spoof: float) -> tuple[float, float, float]:  # fmt: skip
    """``(C0, C1, C2)`` of the revised t-DCF from the ASV's error rates and the cost model,
    in the 2021 package's order of operations (its values to the last bit)."""
    c0 = p_target * c_miss * p_miss_asv + p_nontarget * c_fa * p_fa_asv
    c1 = p_target * c_miss - (p_target * c_miss * p_miss_asv + p_nontarget * c_fa * p_fa_asv)
    c2 = p_spoof * c_fa_spoof * p_fa_spoof_asv
    return float(c0), float(c1), float(c2)


def normalised_min_tdcf(cm_scores: Any, cm_labels: Any, c0: float, c1: float, c2: float) -> float:
    """``min over CM thresholds of (C0 + C1·Pmiss_cm + C2·Pfa_cm) / (C0 + min(C1, C2))``, unchecked
    (a zero normaliser gives inf or NaN, as the package's arithmetic does)."""
    _, p_miss_cm, p_fa_cm = challenge_det_curve(cm_scores, cm_labels)
    with np.errstate(divide="ignore", invalid="ignore"):
        return float(np.min((c0 + c1 * p_miss_cm + c2 * p_fa_cm) / (c0 + min(c1, c2))))


def a_dcf(
    sasv_scores: Any,
    asv_labels: Any,
    *,
    p_target: float = 0.9405,
    p_nontarget: float = 0.0095,
    p_spoof: float = 0.05,
    c_miss: float = 1.0,
    c_fa_asv: float = 10.0,
    c_fa_cm: float = 10.0,
) -> tuple[float, float]:
    """Normalised minimum a-DCF of SASV scores: ``(a-DCF, threshold)``.

    ``sasv_scores``: one score per trial (higher = accept as the genuine target speaker);
    ``asv_labels``: ``"target"``, ``"nontarget"`` or ``"spoof"`` per trial. Point k of the
    curve rejects the first k trials of the pooled scores sorted stably (ties: targets, then
    nontargets, then spoofs, as the reference concatenates them), its threshold the k-th
    sorted score (k = 0: the lowest score − 1e-8). Defaults are ASVspoof 5's cost model
    (``calculate_metrics.py``: p_target 0.9405, p_nontarget 0.0095, p_spoof 0.05, C_miss 1,
    C_fa_asv 10, C_fa_cm 10); the SASV paper's own defaults are 0.9, 0.05, 0.05, 1, 10, 20.
    """
    check_priors(p_target, p_nontarget, p_spoof)
    positive_costs(c_miss=c_miss, c_fa_asv=c_fa_asv, c_fa_cm=c_fa_cm)
    groups = asv_classes(sasv_scores, asv_labels)
    tar, non, spf = groups["target"], groups["nontarget"], groups["spoof"]
    pooled, order, ranked = ranked_classes(groups)
    zero = np.zeros(1, np.int64)
    misses = np.concatenate((zero, np.cumsum(ranked == 0)))
    fa_non = non.size - np.concatenate((zero, np.cumsum(ranked == 1)))
    fa_spf = spf.size - np.concatenate((zero, np.cumsum(ranked == 2)))
    costs = (c_miss * p_target) * (misses / tar.size) + (c_fa_asv * p_nontarget) * (fa_non / non.size)
    costs = costs + (c_fa_cm * p_spoof) * (fa_spf / spf.size)
    normed = costs / min(c_fa_asv * p_nontarget + c_fa_cm * p_spoof, c_miss * p_target)
    thresholds = np.concatenate(([float(np.min(pooled)) - 1e-8], pooled[order]))
    best = int(np.argmin(normed))
    return float(normed[best]), float(thresholds[best])


def tandem_curves(
    cm_scores: Any, asv_scores: Any, asv_labels: Any
) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """The t-EER's inputs, as ASVspoof 5's ``calculate_metrics.py`` builds them:
    ``(p_miss_cm, p_fa_cm, p_miss_asv, p_fa_non_asv, p_fa_spoof_asv)``.

    The CM curve is :func:`.challenge_metrics.challenge_det_curve` of the CM scores with
    target and nontarget trials as bona fide; the ASV curves step through the pooled ASV
    scores sorted stably (targets, nontargets, spoofs), point k rejecting the first k.
    """
    classes = np.array([str(k).strip().lower() for k in np.asarray(asv_labels, dtype=object).reshape(-1)])
    groups = asv_classes(asv_scores, classes)  # validates the ASV side
    cm = np.asarray(cm_scores, dtype=np.float64).reshape(-1)
    if cm.size != classes.size:
        raise ValueError(f"t-EER needs one CM score per ASV trial; got {cm.size} CM and {classes.size} ASV scores")
    cm_tar, cm_non, cm_spf = (cm[classes == name] for name in ("target", "nontarget", "spoof"))
    cm_pooled = np.concatenate((cm_tar, cm_non, cm_spf))
    is_bona = np.concatenate((np.ones(cm_tar.size + cm_non.size, bool), np.zeros(cm_spf.size, bool)))
    _, p_miss_cm, p_fa_cm = challenge_det_curve(cm_pooled, is_bona)
    tar, non, spf = groups["target"], groups["nontarget"], groups["spoof"]
    ranked = ranked_classes(groups)[2]
    zero = np.zeros(1)
    p_miss_asv = np.concatenate((zero, np.cumsum(ranked == 0) / tar.size))
    p_fa_non_asv = np.concatenate((zero + 1, 1 - np.cumsum(ranked == 1) / non.size))
    p_fa_spoof_asv = np.concatenate((zero + 1, 1 - np.cumsum(ranked == 2) / spf.size))
    return p_miss_cm, p_fa_cm, p_miss_asv, p_fa_non_asv, p_fa_spoof_asv


def t_eer(cm_scores: Any, asv_scores: Any, asv_labels: Any, *, chunk_cells: int = 2**16) -> float:
    """Concurrent t-EER (a fraction, not the script's percent) of a CM and an ASV scoring the
    same trials: ``cm_scores[i]`` and ``asv_scores[i]`` are trial i's, ``asv_labels[i]`` its
    class (``"target"``, ``"nontarget"``, ``"spoof"``).

    For every ASV operating point j (the ASV curve of :func:`tandem_curves`) the tandem
    rates are ``P_miss = P_miss_cm + (1 − P_miss_cm) P_miss_asv_j`` and ``P_fa = 0.5 (1 −
    P_miss_cm) P_fa_non_asv_j + 0.5 P_fa_cm P_fa_spoof_asv_j``; the CM point k_j is the
    first where ``|P_miss − P_fa|`` is least. Among the ASV points with ``P_miss_asv_j <
    0.5 P_fa_non_asv_j + 0.5 P_fa_spoof_asv_j`` the one where ``|P_fa_non_asv_j /
    P_fa_spoof_asv_j − P_fa_cm_k / (1 − P_miss_cm_k)|`` is least (first of equals) is the
    concurrent point, and the t-EER is ``P_fa_spoof_asv_j P_fa_cm_k`` there — the full
    search of ASVspoof 5's ``compute_teer``. (``compute_teer_accelerated``, which the
    package calls, searches a decimated grid first when both curves have ≥ 3000 points and
    may then differ; below that it is this full search.)

    Cost: O(N_allowed · N_cm) time (N_allowed ≤ N_asv: the ASV points inside the region),
    in cache-sized blocks of ``chunk_cells`` cells; on one core about 0.1 s for 10k trials,
    1.2 s for 30k, 11 s for 100k (the script's accelerated search is faster there but
    approximate).

    Raises ``ValueError`` where no concurrent point exists (the script fails then too).
    """
    p_miss_cm, p_fa_cm, p_miss_asv, p_fa_non, p_fa_spf = tandem_curves(cm_scores, asv_scores, asv_labels)
    rho = 0.5
    allowed = np.flatnonzero(p_miss_asv < (1 - rho) * p_fa_non + rho * p_fa_spf)
    cm_bona_kept = 1 - p_miss_cm
    cm_fa_term = rho * p_fa_cm
    non_term = (1 - rho) * cm_bona_kept
    with np.errstate(divide="ignore", invalid="ignore"):
        rhs_all = p_fa_cm / cm_bona_kept
        lhs_all = p_fa_non / p_fa_spf
    block = max(1, chunk_cells // max(1, p_miss_cm.size))
    best_crit, best_value = np.inf, None
    for start in range(0, allowed.size, block):
        j = allowed[start : start + block]
        miss = p_miss_cm[None, :] + cm_bona_kept[None, :] * p_miss_asv[j, None]
        fa = non_term[None, :] * p_fa_non[j, None] + cm_fa_term[None, :] * p_fa_spf[j, None]
        k = np.argmin(np.abs(miss - fa), axis=1)
        with np.errstate(invalid="ignore"):
            crit = np.abs(lhs_all[j] - rhs_all[k])
        valid = np.flatnonzero(crit < np.inf)  # NaN and inf never beat the running best
        if valid.size == 0:
            continue
        i = valid[int(np.argmin(crit[valid]))]
        if crit[i] < best_crit:
            best_crit, best_value = crit[i], p_fa_spf[j[i]] * p_fa_cm[k[i]]
    if best_value is None:
        raise ValueError("no concurrent t-EER point: no ASV operating point gives a finite crossing criterion")
    return float(best_value)


@register_metric("min_tdcf_2021")
class MinTDCF2021(TandemMetric):
    """Normalised minimum revised (ASVspoof 2021) t-DCF of the CM in tandem with a fixed ASV
    system (:func:`min_tdcf_2021`). The ASV scores come from a file read once, when the
    metric is built (:func:`.trials.read_asv_scores`); only the ASV's error rates at its EER
    threshold enter, so ASV and CM trials need not match.

    Args:
        asv_scores: path of the ASV score file.
        num_classes: wired by the builder; must be 2 when given.
        p_target, p_nontarget, p_spoof: priors (sum to 1).
        c_miss, c_fa, c_fa_spoof: tandem costs of rejecting a target, accepting a nontarget,
            accepting a spoof.
    """

    name: ClassVar[str] = "min_tdcf_2021"
    tandem_cost = staticmethod(min_tdcf_2021)

    def __init__(
        self,
        asv_scores: str,
        num_classes: Optional[int] = None,
        p_target: float = 0.9405,
        p_nontarget: float = 0.0095,
        p_spoof: float = 0.05,
        c_miss: float = 1.0,
        c_fa: float = 10.0,
        c_fa_spoof: float = 10.0,
    ):
        super().__init__(num_classes)
        self._use_asv(asv_scores, dict(p_target=p_target, p_nontarget=p_nontarget, p_spoof=p_spoof, c_miss=c_miss,
                                       c_fa=c_fa, c_fa_spoof=c_fa_spoof))  # fmt: skip
