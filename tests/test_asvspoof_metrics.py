"""modforge's ASVspoof metrics equal the challenges' evaluation scripts.

The references below are numpy transcriptions of the scripts' algorithms, written out here
and sharing no code with modforge: ``compute_det_curve`` / ``compute_eer`` /
``obtain_asv_error_rates`` / 2019 ``compute_tDCF`` (ASVspoof 2019 ``eval_metrics.py``, the
same in ASVspoof 2021 ``eval-package/eval_metrics.py``) and ``compute_mindcf`` /
``compute_actDCF`` / ``calculate_CLLR`` (ASVspoof 5 ``evaluation-package/calculate_modules.py``).
Every comparison is to 1e-12, on random score sets with and without ties, tiny and
all-equal sets and hypothesis-generated ones.
"""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import modforge as mf
from modforge.tasks.spoofing import metrics as sm
from modforge.tasks.spoofing.challenge_metrics import asv_eer_threshold
from modforge.tasks.spoofing.scores import ScoreTable
from modforge.tasks.spoofing.task import detection_report

torch.set_num_threads(1)
TOL = 1e-12


# ----------------------------------------------------------------- reference formulas
def ref_det_curve(bona: np.ndarray, spoof: np.ndarray):
    """The scripts' DET curve: bona fide scores then spoof scores, stably sorted; point k
    rejects the first k sorted trials. Returns (frr, far, thresholds), N + 1 points."""
    pooled = np.concatenate((bona, spoof))
    is_bona = np.concatenate((np.ones(bona.size), np.zeros(spoof.size)))
    order = np.argsort(pooled, kind="mergesort")
    bona_rejected = np.cumsum(is_bona[order])
    spoof_accepted = spoof.size - (np.arange(1, pooled.size + 1) - bona_rejected)
    frr = np.concatenate((np.atleast_1d(0), bona_rejected / bona.size))
    far = np.concatenate((np.atleast_1d(1), spoof_accepted / spoof.size))
    thresholds = np.concatenate((np.atleast_1d(pooled[order[0]] - 0.001), pooled[order]))
    return frr, far, thresholds


def ref_eer(bona, spoof):
    """(EER, threshold): mean of FRR and FAR at the first point where |FRR - FAR| is least."""
    frr, far, thresholds = ref_det_curve(np.asarray(bona, float), np.asarray(spoof, float))
    best = np.argmin(np.abs(frr - far))
    return np.mean((frr[best], far[best])), thresholds[best]


def ref_min_dcf(bona, spoof, p_spoof=0.05, c_miss=1, c_fa=10):
    frr, far, _ = ref_det_curve(np.asarray(bona, float), np.asarray(spoof, float))
    p_target = 1 - p_spoof
    lowest = float("inf")
    for i in range(len(frr)):
        cost = c_miss * frr[i] * p_target + c_fa * far[i] * (1 - p_target)
        if cost < lowest:
            lowest = cost
    return lowest / min(c_miss * p_target, c_fa * (1 - p_target))


def ref_act_dcf(bona, spoof, p_spoof=0.05, c_miss=1, c_fa=10):
    bona, spoof = np.asarray(bona, float), np.asarray(spoof, float)
    beta = c_miss * (1 - p_spoof) / (c_fa * p_spoof)
    threshold = -np.log(beta)
    miss = np.sum(bona < threshold) / bona.size
    fa = np.sum(spoof >= threshold) / spoof.size
    cost = c_miss * (1 - p_spoof) * miss + c_fa * p_spoof * fa
    return cost / np.min([c_fa * p_spoof, c_miss * (1 - p_spoof)])


def ref_cllr(bona, spoof):
    bona, spoof = np.asarray(bona, float), np.asarray(spoof, float)
    return 0.5 * (np.mean(np.log1p(np.exp(-bona))) + np.mean(np.log1p(np.exp(spoof)))) / np.log(2)


PSPOOF = 0.05
COST_2019 = {
    "Pspoof": PSPOOF,
    "Ptar": (1 - PSPOOF) * 0.99,
    "Pnon": (1 - PSPOOF) * 0.01,
    "Cmiss_asv": 1,
    "Cfa_asv": 10,
    "Cmiss_cm": 1,
    "Cfa_cm": 10,
}


def ref_tdcf_weights(tar_asv, non_asv, spoof_asv, cost=COST_2019):
    """C1, C2 of the 2019 t-DCF with the ASV at its EER threshold (accepting score >= it)."""
    tar_asv, non_asv, spoof_asv = (np.asarray(a, float) for a in (tar_asv, non_asv, spoof_asv))
    _, asv_threshold = ref_eer(tar_asv, non_asv)
    pfa_asv = sum(non_asv >= asv_threshold) / non_asv.size
    pmiss_asv = sum(tar_asv < asv_threshold) / tar_asv.size
    pmiss_spoof_asv = np.sum(spoof_asv < asv_threshold) / spoof_asv.size
    c1 = cost["Ptar"] * (cost["Cmiss_cm"] - cost["Cmiss_asv"] * pmiss_asv) - cost["Pnon"] * cost["Cfa_asv"] * pfa_asv
    c2 = cost["Cfa_cm"] * cost["Pspoof"] * (1 - pmiss_spoof_asv)
    return c1, c2


def ref_min_tdcf(bona_cm, spoof_cm, tar_asv, non_asv, spoof_asv):
    c1, c2 = ref_tdcf_weights(tar_asv, non_asv, spoof_asv)
    pmiss_cm, pfa_cm, _ = ref_det_curve(np.asarray(bona_cm, float), np.asarray(spoof_cm, float))
    curve = (c1 * pmiss_cm + c2 * pfa_cm) / np.minimum(c1, c2)
    return curve[np.argmin(curve)]


# ------------------------------------------------------------------------ score sets
def _score_set(seed: int, kind: str):
    """(scores, labels) with labels 1 = bona fide, in shuffled order."""
    rng = np.random.default_rng(seed)
    if kind == "tiny":
        n = int(rng.integers(2, 7))
    else:
        n = int(rng.integers(20, 600))
    labels = (rng.random(n) < rng.uniform(0.05, 0.95)).astype(np.int64)
    labels[:2] = [0, 1]
    rng.shuffle(labels)
    scores = rng.normal(size=n) + rng.uniform(-1.0, 3.0) * labels
    if kind == "ties":
        scores = np.round(scores * rng.choice([0.5, 1.0, 2.0]))  # integers: heavy ties across classes
    elif kind == "tiny":
        scores = np.round(scores)
    elif kind == "all_equal":
        scores = np.full(n, float(rng.normal()))
    elif kind == "few_values":
        scores = rng.choice([-1.5, 0.0, 0.25, 3.0], size=n)
    return scores, labels


KINDS = ["continuous", "ties", "tiny", "all_equal", "few_values"]


def _split(scores, labels):
    scores, labels = np.asarray(scores, float), np.asarray(labels)
    return scores[labels == 1], scores[labels == 0]


@pytest.mark.parametrize("kind", KINDS)
def test_eer_and_dcfs_equal_the_scripts_on_random_sets(kind):
    for seed in range(60):
        scores, labels = _score_set(seed, kind)
        bona, spoof = _split(scores, labels)
        rate, threshold = sm.eer(scores, labels)
        ref_rate, ref_threshold = ref_eer(bona, spoof)
        assert abs(rate - ref_rate) <= TOL and threshold == ref_threshold, (kind, seed)
        assert abs(sm.min_dcf(scores, labels) - ref_min_dcf(bona, spoof)) <= TOL, (kind, seed)
        assert abs(sm.act_dcf(scores, labels) - ref_act_dcf(bona, spoof)) <= TOL, (kind, seed)
        for costs in [(0.5, 1.0, 1.0), (0.2, 3.0, 2.0)]:
            assert abs(sm.min_dcf(scores, labels, *costs) - ref_min_dcf(bona, spoof, *costs)) <= TOL
            assert abs(sm.act_dcf(scores, labels, *costs) - ref_act_dcf(bona, spoof, *costs)) <= TOL
        assert abs(sm.cllr(scores, labels) - ref_cllr(bona, spoof)) <= TOL


def _asv_set(seed: int, ties: bool):
    rng = np.random.default_rng(1000 + seed)
    tar = rng.normal(2.0, 1.0, size=int(rng.integers(2, 80)))
    non = rng.normal(-1.0, 1.5, size=int(rng.integers(2, 80)))
    spoof = rng.normal(1.0, 1.5, size=int(rng.integers(1, 80)))
    if ties:
        tar, non, spoof = np.round(tar), np.round(non), np.round(spoof)
    scores = np.concatenate((tar, non, spoof))
    classes = ["target"] * tar.size + ["nontarget"] * non.size + ["spoof"] * spoof.size
    order = rng.permutation(scores.size)
    return scores[order], [classes[i] for i in order], (tar, non, spoof)


@pytest.mark.parametrize("kind", KINDS)
@pytest.mark.parametrize("asv_ties", [False, True])
def test_min_tdcf_equals_the_2019_script_on_random_sets(kind, asv_ties):
    checked = 0
    for seed in range(40):
        scores, labels = _score_set(seed, kind)
        asv_scores, asv_classes, (tar, non, spf) = _asv_set(seed, asv_ties)
        c1, c2 = ref_tdcf_weights(tar, non, spf)
        if not (c1 > 0 and c2 > 0):  # the script divides by zero or refuses; modforge refuses
            with pytest.raises(ValueError, match="t-DCF weights must be positive"):
                sm.min_tdcf(scores, labels, asv_scores, asv_classes)
            continue
        value = sm.min_tdcf(scores, labels, asv_scores, asv_classes)
        assert abs(value - ref_min_tdcf(*_split(scores, labels), tar, non, spf)) <= TOL, (kind, seed)
        checked += 1
    assert checked >= 30


def test_per_attack_eer_and_the_test_report_equal_the_script():
    rng = np.random.default_rng(5)
    n = 400
    labels = (rng.random(n) < 0.3).astype(np.int64)
    attacks = np.where(labels == 1, "-", rng.choice(["A07", "A08", "A09"], size=n))
    scores = np.round(rng.normal(size=n) + 1.0 * labels + (attacks == "A08") * 0.8, 1)
    bona = scores[labels == 1]
    per_attack = sm.per_attack_eer(scores, labels, attacks)
    assert list(per_attack) == ["A07", "A08", "A09"]
    for attack, value in per_attack.items():
        assert abs(value - ref_eer(bona, scores[attacks == attack])[0]) <= TOL
    table = ScoreTable([f"u{i}" for i in range(n)], scores, labels, list(attacks))
    report = detection_report(table)  # what `modforge test` writes to summary.json
    ref_rate, ref_threshold = ref_eer(*_split(scores, labels))
    assert abs(report["overall"]["eer"] - ref_rate) <= TOL and report["overall"]["eer_threshold"] == ref_threshold
    assert abs(report["overall"]["min_dcf"] - ref_min_dcf(*_split(scores, labels))) <= TOL
    for attack, row in report["per_attack"].items():
        assert row["eer"] == per_attack[attack]


def test_registered_metrics_equal_the_scripts():
    scores, labels = _score_set(3, "ties")
    bona, spoof = _split(scores, labels)
    expected = {
        "eer": ref_eer(bona, spoof)[0],
        "min_dcf": ref_min_dcf(bona, spoof),
        "act_dcf": ref_act_dcf(bona, spoof),
        "eer_interpolated": sm.eer_interpolated(scores, labels)[0],
    }
    for name, value in expected.items():
        metric = mf.METRICS.build(name, num_classes=2)
        metric.update({"score": torch.tensor(scores, dtype=torch.float64), "label": torch.tensor(labels)})
        assert abs(metric.compute() - value) <= TOL, name
    assert expected["eer"] != expected["eer_interpolated"]  # ties: the two conventions part


# --------------------------------------------------------------------- hypothesis
_tied = st.integers(-3, 3).map(float)
_wide = st.floats(-1e6, 1e6, allow_nan=False, allow_infinity=False)
_near_threshold = st.sampled_from([-np.log(0.95 / 0.5), math.log(0.5 / 0.95), 0.0, -0.001, 1e-300])
_scores = st.one_of(_tied, _wide, _near_threshold)


@st.composite
def _trials(draw, score=_scores):
    bona = draw(st.lists(score, min_size=1, max_size=25))
    spoof = draw(st.lists(score, min_size=1, max_size=25))
    scores = bona + spoof
    labels = [1] * len(bona) + [0] * len(spoof)
    order = draw(st.permutations(range(len(scores))))
    return [scores[i] for i in order], [labels[i] for i in order]


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(_trials())
def test_hypothesis_eer_min_dcf_act_dcf(trials):
    scores, labels = trials
    bona, spoof = _split(scores, labels)
    rate, threshold = sm.eer(scores, labels)
    ref_rate, ref_threshold = ref_eer(bona, spoof)
    assert abs(rate - ref_rate) <= TOL and threshold == ref_threshold
    assert abs(sm.min_dcf(scores, labels) - ref_min_dcf(bona, spoof)) <= TOL
    assert abs(sm.act_dcf(scores, labels) - ref_act_dcf(bona, spoof)) <= TOL


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(_trials(), _trials(score=_tied), st.lists(_tied, min_size=1, max_size=10))
def test_hypothesis_min_tdcf(cm, asv, asv_spoof):
    cm_scores, cm_labels = cm
    tar, non = _split(*asv)
    asv_scores = list(tar) + list(non) + asv_spoof
    asv_classes = ["target"] * len(tar) + ["nontarget"] * len(non) + ["spoof"] * len(asv_spoof)
    c1, c2 = ref_tdcf_weights(tar, non, asv_spoof)
    if c1 > 0 and c2 > 0:
        value = sm.min_tdcf(cm_scores, cm_labels, asv_scores, asv_classes)
        assert abs(value - ref_min_tdcf(*_split(cm_scores, cm_labels), tar, non, asv_spoof)) <= TOL
    else:
        with pytest.raises(ValueError, match="t-DCF weights must be positive"):
            sm.min_tdcf(cm_scores, cm_labels, asv_scores, asv_classes)


@settings(max_examples=150, deadline=None)
@given(_trials(score=st.floats(-30, 30, allow_nan=False)))
def test_hypothesis_cllr(trials):
    scores, labels = trials
    assert abs(sm.cllr(scores, labels) - ref_cllr(*_split(scores, labels))) <= TOL


# ----------------------------------------------------------------------- by hand
def test_eer_by_hand():
    # spoofs (0.1, 0.2), bona fide (0.8, 0.9): sorted s s b b; (FRR, FAR) after rejecting
    # 0, 1, 2 trials: (0, 1), (0, 1/2), (0, 0) -> EER 0 at the 2nd sorted score, 0.2
    assert sm.eer([0.1, 0.2, 0.8, 0.9], [0, 0, 1, 1]) == (0.0, 0.2)
    assert sm.eer([0.1, 0.2, 0.8, 0.9], [1, 1, 0, 0])[0] == 1.0
    # all tied: the three bona fide trials go first; after 3: (1, 1) -> EER 1 (interpolated: 0.5)
    assert sm.eer([0.5] * 6, [1, 0, 1, 0, 0, 1]) == (1.0, 0.5)
    assert sm.eer_interpolated([0.5] * 6, [1, 0, 1, 0, 0, 1])[0] == 0.5
    # bona fide (2, 3), spoof (1, 2): sorted 1s 2b 2s 3b -> (0, 1), (0, 1/2), (1/2, 1/2): EER 1/2 at 2
    # (the interpolated ROC crossing is 1/4: the tie is one diagonal step there)
    assert sm.eer([2, 3, 1, 2], [1, 1, 0, 0]) == (0.5, 2.0)
    assert sm.eer([2, 1, 3, 2], [0, 0, 1, 1]) == (0.5, 2.0)
    assert sm.eer_interpolated([2, 3, 1, 2], [1, 1, 0, 0])[0] == 0.25
    # bona fide (2, 3, 4), spoof (1, 2.5): sorted 1s 2b 2.5s 3b 4b; |FRR - FAR| at k = 0..5:
    # 1, 1/2, |1/3 - 1/2| = 1/6, |1/3 - 0| = 1/3, ... -> k = 2: (1/3 + 1/2) / 2 = 5/12 at threshold 2
    rate, threshold = sm.eer([2, 3, 4, 1, 2.5], [1, 1, 1, 0, 0])
    assert rate == pytest.approx(5 / 12, abs=TOL) and threshold == 2.0
    # one trial each, tied: sorted b s -> (0, 1), (1, 1), (1, 0): |d| = 1, 0, 1 -> EER 1 at the tied score
    thresholds, p_miss, p_fa = sm.challenge_det_curve([7.0, 7.0], [0, 1])
    assert thresholds.tolist() == [6.999, 7.0, 7.0] and p_miss.tolist() == [0, 1, 1] and p_fa.tolist() == [1, 1, 0]
    assert sm.eer([7.0, 7.0], [0, 1]) == (1.0, 7.0)


def test_min_tdcf_by_hand():
    # ASV targets (3, 5, 6, 7), nontargets (1, 2, 4, 8), spoofs (5, 6, 9, 5.5).
    # compute_eer: sorted 1n 2n 3t 4n 5t 6t 7t 8n; (FRR, FAR) after 0..4 rejected: (0, 1), (0, 3/4),
    # (0, 1/2), (1/4, 1/2), (1/4, 1/4) -> EER point k = 4, threshold = the 4th sorted score, 4.
    # Accepting ASV score >= 4: P_miss_asv = 1/4 (3), P_fa_asv = 2/4 (4 and 8), spoofs rejected 0.
    # C1 = 0.9405 (1 - 1/4) - 0.0095 · 10 · 1/2 = 0.705375 - 0.0475 = 0.657875; C2 = 10 · 0.05 = 0.5.
    # CM bona fide (0.2, 0.6, 0.9), spoof (0.1, 0.3, 0.4, 0.7); best point: accept >= 0.6,
    # (P_miss, P_fa) = (1/3, 1/4): (0.657875/3 + 0.125) / 0.5 = 0.6885833…
    asv_scores = [3, 5, 6, 7, 1, 2, 4, 8, 5, 6, 9, 5.5]
    asv_labels = ["target"] * 4 + ["nontarget"] * 4 + ["spoof"] * 4
    assert asv_eer_threshold(asv_scores, asv_labels) == 4.0
    c1 = 0.9405 * 0.75 - 0.0095 * 10 * 0.5
    expected = (c1 / 3 + 0.5 / 4) / 0.5
    assert expected == pytest.approx(0.68858333333, abs=1e-10)
    value = sm.min_tdcf([0.2, 0.6, 0.9, 0.1, 0.3, 0.4, 0.7], [1, 1, 1, 0, 0, 0, 0], asv_scores, asv_labels)
    assert value == pytest.approx(expected, abs=TOL)


def test_min_dcf_and_act_dcf_by_hand():
    # ASVspoof 5 costs: (0.95 P_miss + 0.5 P_fa) / 0.5. Bona fide (-2, -0.5, 1, 3), spoof (-3, -1, 0.5):
    # best at accept >= -2: (0, 2/3) -> 2/3. Bayes threshold -ln(0.95 / 0.5) = -0.6419:
    # bona fide -2 missed (1/4), spoof 0.5 accepted (1/3) -> (0.95/4 + 0.5/3) / 0.5
    scores = [-2.0, -0.5, 1.0, 3.0, -3.0, -1.0, 0.5]
    labels = [1, 1, 1, 1, 0, 0, 0]
    assert sm.min_dcf(scores, labels) == pytest.approx(2 / 3, abs=TOL)
    assert sm.act_dcf(scores, labels) == pytest.approx((0.95 / 4 + 0.5 / 3) / 0.5, abs=TOL)
    # a bona fide score exactly at the script's threshold is accepted; one ulp below it is missed
    at = float(-np.log(0.95 / 0.5))
    assert sm.act_dcf([at, -5.0], [1, 0]) == 0.0
    assert sm.act_dcf([np.nextafter(at, -1.0), -5.0], [1, 0]) == pytest.approx(0.95 / 0.5, abs=TOL)
