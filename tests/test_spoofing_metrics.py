"""ASVspoof metrics: the interpolated EER against sklearn's ROC, DCF/Cllr/t-DCF by hand, PAV
against sklearn's isotonic regression, and the registered metric classes. (The challenge
scripts' EER, DCFs and t-DCF against transcriptions of the scripts: test_asvspoof_metrics.py.)"""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch
from sklearn.isotonic import IsotonicRegression
from sklearn.metrics import roc_curve

import modforge as mf
from modforge.tasks.spoofing import metrics as sm
from modforge.tasks.spoofing.detection import operating_points, pav

torch.set_num_threads(1)


def _random(seed: int, n: int = 300, ties: bool = False) -> tuple[np.ndarray, np.ndarray]:
    rng = np.random.default_rng(seed)
    labels = (rng.random(n) < 0.3).astype(np.int64)
    labels[:2] = [0, 1]
    scores = rng.normal(size=n) + 1.2 * labels
    return (np.round(scores, 1) if ties else scores), labels


def _eer_from_sklearn(scores, labels, drop_intermediate):
    """The same convention from sklearn's ROC: P_fa = fpr, P_miss = 1 - tpr at each
    threshold (accept score >= threshold), joined by straight lines; the crossing of
    P_miss = P_fa solved segment by segment as the intersection of two lines."""
    fpr, tpr, thr = roc_curve(labels, scores, drop_intermediate=drop_intermediate)
    fnr = 1.0 - tpr  # points go from reject-all (threshold inf) to accept-all
    for j in range(len(fpr) - 1):
        x0, y0, x1, y1 = fpr[j], fnr[j], fpr[j + 1], fnr[j + 1]
        g0, g1 = y0 - x0, y1 - x1  # >= 0 at reject-all, <= 0 at accept-all
        if g0 >= 0 >= g1 and g0 != g1:
            u = g0 / (g0 - g1)
            rate = x0 + u * (x1 - x0)
            threshold = thr[j] + u * (thr[j + 1] - thr[j]) if np.isfinite(thr[j]) else thr[j + 1]
            return rate, threshold
    raise AssertionError("no crossing")


@pytest.mark.parametrize("seed", range(6))
@pytest.mark.parametrize("ties", [False, True])
def test_interpolated_eer_matches_sklearns_roc(seed, ties):
    scores, labels = _random(seed, ties=ties)
    rate, threshold = sm.eer_interpolated(scores, labels)
    for drop in (False, True):  # dropping collinear points leaves the piecewise-linear ROC unchanged
        ref_rate, ref_threshold = _eer_from_sklearn(scores, labels, drop)
        assert abs(rate - ref_rate) < 1e-9
    ref_rate, ref_threshold = _eer_from_sklearn(scores, labels, False)
    assert abs(threshold - ref_threshold) < 1e-9


def test_interpolated_eer_extremes_and_ties():
    # threshold: the lowest bona fide score
    assert sm.eer_interpolated([0.1, 0.2, 0.8, 0.9], [0, 0, 1, 1]) == (0.0, 0.8)
    assert sm.eer_interpolated([0.1, 0.2, 0.8, 0.9], [1, 1, 0, 0])[0] == 1.0
    # all tied: one diagonal segment, crossed halfway
    assert sm.eer_interpolated([0.5] * 6, [1, 0, 1, 0, 0, 1])[0] == 0.5
    # crossing at a vertex: bona fide (1, 3), spoof (0, 2); (P_miss, P_fa) at t = 0, 1, 2, 3, inf:
    # (0, 1), (0, 1/2), (1/2, 1/2), (1/2, 0), (1, 0) -> P_miss = P_fa at t = 2, EER 1/2
    assert sm.eer_interpolated([1, 3, 0, 2], [1, 1, 0, 0]) == (0.5, 2.0)
    # a tie across classes: bona fide (2, 3), spoof (1, 2); at t = 1, 2, 3, inf: (0, 1), (0, 1/2),
    # (1/2, 0), (1, 0) -- the tied pair leaves together, one diagonal step (never split by input order);
    # d = P_miss - P_fa goes -1/2 -> 1/2 on it, crossed halfway: EER 1/4, threshold 2.5
    assert sm.eer_interpolated([2, 3, 1, 2], [1, 1, 0, 0]) == (0.25, 2.5)
    assert sm.eer_interpolated([2, 1, 3, 2], [0, 0, 1, 1]) == (0.25, 2.5)
    # a true interpolation: bona fide (2, 3, 4), spoof (1, 2.5): points at t = 1, 2, 2.5, 3, 4, inf
    # (P_miss, P_fa) = (0, 1), (0, 1/2), (1/3, 1/2), (1/3, 0), ... d = -1, -1/2, -1/6, 1/3
    # crossing on t 2.5 -> 3 with w = (1/6) / (1/2) = 1/3: EER = 1/2 - 1/3 · 1/2 = 1/3, t = 2.5 + 1/3 · 0.5
    rate, threshold = sm.eer_interpolated([2, 3, 4, 1, 2.5], [1, 1, 1, 0, 0])
    assert rate == pytest.approx(1 / 3, abs=1e-12) and threshold == pytest.approx(2.5 + 0.5 / 3, abs=1e-12)


def test_operating_points_and_det_curve():
    thresholds, p_miss, p_fa = operating_points([0.3, 0.1, 0.3, 0.9], [1, 0, 0, 1])
    assert thresholds.tolist() == [0.1, 0.3, 0.9, math.inf]
    assert p_miss.tolist() == [0.0, 0.0, 0.5, 1.0]
    assert p_fa.tolist() == [1.0, 0.5, 0.0, 0.0]
    fa, miss = sm.det_curve([0.3, 0.1, 0.3, 0.9], [1, 0, 0, 1])
    assert fa.tolist() == p_fa.tolist() and miss.tolist() == p_miss.tolist()


def test_min_and_actual_dcf_by_hand():
    # ASVspoof 5 defaults: p_spoof 0.05, C_miss 1, C_fa 10 -> DCF = 0.95 P_miss + 0.5 P_fa, normaliser 0.5
    scores = np.array([-2.0, -0.5, 1.0, 3.0, -3.0, -1.0, 0.5])
    labels = np.array([1, 1, 1, 1, 0, 0, 0])
    # points (accept >= t): t=-3: (0, 1) -> 0.5/0.5 = 1; t=-2: (0, 2/3) -> 0.6667;
    # t=-1: (1/4, 2/3) -> (0.2375 + 0.3333)/0.5 = 1.1417; t=-0.5: (1/4, 1/3) -> (0.2375 + 0.1667)/0.5 = 0.8083;
    # t=0.5: (1/2, 1/3) -> 1.2833; t=1: (1/2, 0) -> 0.95; t=3: (3/4, 0) -> 1.425; inf: (1, 0) -> 1.9
    assert sm.min_dcf(scores, labels) == pytest.approx((0.5 * 2 / 3) / 0.5, abs=1e-12)
    # Bayes threshold ln(0.5 / 0.95) = -0.6419: bona fide -2 missed (1/4), spoof 0.5 accepted (1/3)
    assert sm.act_dcf(scores, labels) == pytest.approx((0.95 / 4 + 0.5 / 3) / 0.5, abs=1e-12)
    # p_spoof 0.5, C_miss = C_fa = 1: DCF / 0.5 = P_miss + P_fa, smallest at t = 1: 1/2 + 0
    assert sm.min_dcf(scores, labels, p_spoof=0.5, c_miss=1, c_fa=1) == pytest.approx(0.5 + 0.0, abs=1e-12)


def _brute_force_rates(scores, labels):
    """(P_miss, P_fa) at every distinct score and +inf, by direct comparison (no sorting tricks)."""
    scores, labels = np.asarray(scores, float), np.asarray(labels)
    for t in [*np.unique(scores), math.inf]:
        yield np.mean(scores[labels == 1] < t), np.mean(scores[labels == 0] >= t)


@pytest.mark.parametrize("ties", [False, True])
def test_min_dcf_and_min_tdcf_equal_a_brute_force_search(ties):
    scores, labels = _random(13, n=200, ties=ties)
    rates = list(_brute_force_rates(scores, labels))
    assert sm.min_dcf(scores, labels) == pytest.approx(min(0.95 * m + 0.5 * f for m, f in rates) / 0.5, abs=1e-12)
    c1, c2 = 0.9405 * (1 - 0.25) - 0.0095 * 10 * 0.5, 10 * 0.05  # the ASV of test_min_tdcf_by_hand
    value = sm.min_tdcf(scores, labels, ASV_SCORES, ASV_LABELS)
    assert value == pytest.approx(min(c1 * m + c2 * f for m, f in rates) / min(c1, c2), abs=1e-12)


def test_min_dcf_never_exceeds_one_and_perfect_is_zero():
    scores, labels = _random(3)
    assert 0 < sm.min_dcf(scores, labels) <= 1.0
    assert sm.min_dcf([0.0, 1.0, 2.0, 3.0], [0, 0, 1, 1]) == 0.0
    assert sm.min_dcf([0.0, 1.0, 2.0, 3.0], [1, 1, 0, 0]) == 1.0


def test_cllr_by_hand_and_min_cllr():
    # llr 0 everywhere: 1 bit; bona fide llr ln 3, spoof llr -ln 3: log2(4/3) per trial
    assert sm.cllr([0.0, 0.0], [1, 0]) == pytest.approx(1.0)
    l3 = math.log(3.0)
    assert sm.cllr([l3, -l3], [1, 0]) == pytest.approx(math.log2(4 / 3))
    assert sm.cllr([800.0, -800.0], [1, 0]) == pytest.approx(0.0, abs=1e-12)  # no overflow
    assert sm.cllr([-800.0, 800.0], [1, 0]) == pytest.approx(800 / math.log(2))
    scores, labels = _random(1)
    best = sm.min_cllr(scores, labels)
    assert 0 < best < 1
    for a, b in [(1.0, 0.0), (2.0, -1.0), (0.5, 0.3), (3.0, 2.0)]:
        assert best <= sm.cllr(a * scores + b, labels) + 1e-12  # no monotone calibration does better
    assert sm.min_cllr([0.0, 1.0, 2.0, 3.0], [0, 0, 1, 1]) == 0.0
    assert sm.min_cllr([1.0, 1.0, 1.0, 1.0], [0, 1, 0, 1]) == pytest.approx(1.0)


@pytest.mark.parametrize("ties", [False, True])
def test_pav_matches_sklearn_isotonic_regression(ties):
    scores, labels = _random(5, ties=ties)
    reference = IsotonicRegression(out_of_bounds="clip").fit(scores, labels).predict(scores)
    assert np.abs(pav(scores, labels) - reference).max() < 1e-12


def test_min_cllr_is_cllr_of_the_pav_llrs():
    scores, labels = _random(7, ties=True)
    p = IsotonicRegression(out_of_bounds="clip").fit(scores, labels).predict(scores)
    prior = math.log(labels.sum() / (1 - labels).sum())
    with np.errstate(divide="ignore"):
        llr = np.log(p) - np.log1p(-p) - prior
    bona = np.mean(np.logaddexp(0, -llr[labels == 1]))
    spoof = np.mean(np.logaddexp(0, llr[labels == 0]))
    assert sm.min_cllr(scores, labels) == pytest.approx((bona + spoof) / (2 * math.log(2)), abs=1e-12)


def test_per_attack_eer():
    scores = [0.9, 0.8, 0.7, 0.6, 0.1, 0.95, 0.2, 0.65]
    labels = [1, 1, 1, 1, 0, 0, 0, 0]
    attacks = ["-", "-", "-", "-", "A01", "A02", "A01", "A02"]
    result = sm.per_attack_eer(scores, labels, attacks)
    assert list(result) == ["A01", "A02"]
    assert result["A01"] == sm.eer([0.9, 0.8, 0.7, 0.6, 0.1, 0.2], [1, 1, 1, 1, 0, 0])[0] == 0.0
    assert result["A02"] == sm.eer([0.9, 0.8, 0.7, 0.6, 0.95, 0.65], [1, 1, 1, 1, 0, 0])[0]
    with pytest.raises(ValueError, match="one id per trial"):
        sm.per_attack_eer(scores, labels, attacks[:-1])


# ------------------------------------------------------------------------------ t-DCF
ASV_SCORES = [3, 5, 6, 7, 1, 2, 4, 8, 5, 6, 9, 5.5]
ASV_LABELS = ["target"] * 4 + ["nontarget"] * 4 + ["spoof"] * 4
CM_SCORES = [0.2, 0.6, 0.9, 0.1, 0.3, 0.4, 0.7]
CM_LABELS = [1, 1, 1, 0, 0, 0, 0]


def test_min_tdcf_by_hand():
    # ASV EER on targets (3, 5, 6, 7) vs nontargets (1, 2, 4, 8), the scripts' way: sorted
    # 1n 2n 3t 4n 5t 6t 7t 8n, (P_miss, P_fa) after rejecting 4 trials (1/4, 1/4) -> EER 1/4 at the
    # 4th sorted score, 4. The ASV then accepts score >= 4 (as the 2019 script does): P_miss_asv = 1/4
    # (3), P_fa_asv = 2/4 (4, 8); spoofs (5, 6, 9, 5.5) all accepted: P_miss_spoof_asv = 0.
    # C1 = 0.9405 (1 - 1 · 0.25) - 0.0095 · 10 · 0.5 = 0.705375 - 0.0475 = 0.657875
    # C2 = 10 · 0.05 · (1 - 0) = 0.5;  normaliser min(C1, C2) = 0.5
    # CM bona fide (0.2, 0.6, 0.9), spoof (0.1, 0.3, 0.4, 0.7); (P_miss, P_fa) -> (C1 P_miss + C2 P_fa) / 0.5:
    #   t=0.1 (0, 1) 1 | t=0.2 (0, 3/4) 0.75 | t=0.3 (1/3, 3/4) 1.1886 | t=0.4 (1/3, 1/2) 0.93858
    #   t=0.6 (1/3, 1/4) 0.68858 | t=0.7 (2/3, 1/4) 1.1272 | t=0.9 (2/3, 0) 0.87717 | inf (1, 0) 1.3158
    c1 = 0.9405 * (1 - 0.25) - 0.0095 * 10 * 0.5
    c2 = 10 * 0.05 * 1.0
    expected = (c1 / 3 + c2 / 4) / min(c1, c2)
    assert expected == pytest.approx(0.688583333, abs=1e-8)
    assert sm.min_tdcf(CM_SCORES, CM_LABELS, ASV_SCORES, ASV_LABELS) == pytest.approx(expected, abs=1e-12)
    assert sm.eer(ASV_SCORES[:8], [1] * 4 + [0] * 4) == (0.25, 4.0)
    assert sm.eer_interpolated(ASV_SCORES[:8], [1] * 4 + [0] * 4) == (0.25, 5.0)


def test_min_tdcf_with_an_explicit_asv_threshold():
    # threshold 5.75: targets 3, 5 rejected (1/2); nontarget 8 accepted (1/4); spoofs 5, 5.5 rejected (1/2)
    # C1 = 0.9405 · 0.5 - 0.0095 · 10 · 0.25 = 0.446500; C2 = 0.5 · 0.5 = 0.25 (the normaliser)
    # CM points: t=0.2 gives C2 · 3/4 / C2 = 0.75; t=0.6 gives (C1/3 + 0.0625) / 0.25 = 0.84533 -> 0.75
    c1, c2 = 0.9405 * 0.5 - 0.0095 * 10 * 0.25, 10 * 0.05 * 0.5
    value = sm.min_tdcf(CM_SCORES, CM_LABELS, ASV_SCORES, ASV_LABELS, asv_threshold=5.75)
    assert value == pytest.approx(min(1.0, 0.75, (c1 / 3 + c2 / 4) / min(c1, c2)), abs=1e-12)
    assert value == pytest.approx(0.75, abs=1e-12)


def test_min_tdcf_errors():
    with pytest.raises(ValueError, match="sum to 1"):
        sm.min_tdcf(CM_SCORES, CM_LABELS, ASV_SCORES, ASV_LABELS, p_spoof=0.1)
    with pytest.raises(ValueError, match="none for spoof"):
        sm.min_tdcf(CM_SCORES, CM_LABELS, ASV_SCORES[:8], ASV_LABELS[:8])
    with pytest.raises(ValueError, match="one of target, nontarget, spoof"):
        sm.min_tdcf(CM_SCORES, CM_LABELS, ASV_SCORES, ASV_LABELS[:-1] + ["bonafide"])
    with pytest.raises(ValueError, match="C2 = 0"):  # an ASV that rejects every spoof leaves the CM nothing to do
        sm.min_tdcf(CM_SCORES, CM_LABELS, ASV_SCORES, ASV_LABELS, asv_threshold=100.0)


# ------------------------------------------------------------------------- input errors
@pytest.mark.parametrize(
    ("scores", "labels", "words"),
    [
        ([0.1, 0.2], [1, 0, 1], "same length"),
        ([0.1, float("nan")], [1, 0], "finite"),
        ([0.1, 0.2], [1, 2], "1 \\(bona fide\\) or 0"),
        ([0.1, 0.2], [1, 1], "no spoof"),
        ([0.1, 0.2], [0, 0], "no bona fide"),
    ],
)
def test_bad_inputs_are_one_clear_error(scores, labels, words):
    functions = (sm.eer, sm.eer_interpolated, sm.min_dcf, sm.act_dcf, sm.cllr, sm.min_cllr, sm.det_curve)
    for fn in (*functions, sm.challenge_det_curve):
        with pytest.raises(ValueError, match=words):
            fn(scores, labels)


def test_bad_cost_models_are_errors():
    with pytest.raises(ValueError, match="p_spoof"):
        sm.min_dcf([0, 1], [0, 1], p_spoof=1.0)
    with pytest.raises(ValueError, match="c_fa"):
        sm.act_dcf([0, 1], [0, 1], c_fa=0)


# ------------------------------------------------------------------- registered metrics
def _feed(metric, scores, labels, batch=7):
    metric.reset()
    for i in range(0, len(scores), batch):
        metric.update(
            {
                "score": torch.tensor(scores[i : i + batch], dtype=torch.float32),
                "label": torch.tensor(labels[i : i + batch]),
            }
        )
    return metric.compute()


def test_registered_metrics_equal_the_functions():
    scores, labels = _random(11, n=100)
    scores = scores.astype(np.float32).astype(np.float64)  # what a float32 score tensor holds
    expected = {
        "eer": sm.eer(scores, labels)[0],
        "eer_interpolated": sm.eer_interpolated(scores, labels)[0],
        "min_dcf": sm.min_dcf(scores, labels),
        "act_dcf": sm.act_dcf(scores, labels),
        "cllr": sm.cllr(scores, labels),
        "min_cllr": sm.min_cllr(scores, labels),
    }
    for name, value in expected.items():
        metric = mf.METRICS.build(name, num_classes=2)
        assert not metric.higher_is_better and metric.scalar
        assert _feed(metric, scores, labels) == pytest.approx(value, abs=1e-12), name
    custom = mf.METRICS.build({"type": "min_dcf", "args": {"p_spoof": 0.5, "c_fa": 1.0}})
    assert _feed(custom, scores, labels) == pytest.approx(sm.min_dcf(scores, labels, 0.5, 1.0, 1.0), abs=1e-12)


def test_metric_update_keeps_tensors_on_their_device_and_resets():
    metric = mf.METRICS.build("eer")
    metric.update({"score": torch.tensor([0.1, 0.9]), "label": torch.tensor([0, 1]), "logits": torch.zeros(2, 2)})
    assert isinstance(metric.scores[0], torch.Tensor)  # nothing moved to the host yet
    assert metric.compute() == 0.0
    metric.reset()
    assert math.isnan(metric.compute())
    metric.update({"score": torch.tensor([0.1, 0.9]), "label": torch.tensor([1, 1])})
    assert math.isnan(metric.compute())  # one class only: no error rate


def test_metric_errors():
    with pytest.raises(ValueError, match="num_classes=5"):
        mf.METRICS.get("eer")(num_classes=5)
    metric = mf.METRICS.build("eer")
    with pytest.raises(ValueError, match="no score"):
        metric.update({"logits": torch.zeros(2, 2), "label": torch.tensor([0, 1])})
    with pytest.raises(ValueError, match="one score per label"):
        metric.update({"score": torch.zeros(2, 2), "label": torch.tensor([0, 1])})
    with pytest.raises(ValueError, match="p_spoof"):
        mf.METRICS.get("min_dcf")(p_spoof=0.0)


def _asv_file(tmp_path, lines):
    path = tmp_path / "asv.txt"
    path.write_text("\n".join(lines) + "\n")
    return path


def test_min_tdcf_metric_reads_the_asv_score_file(tmp_path):
    lines = ["# speaker class score", ""] + [
        f"LA_{i:04d} {key} {score}" for i, (key, score) in enumerate(zip(ASV_LABELS, ASV_SCORES, strict=True))
    ]
    metric = mf.METRICS.build(
        {"type": "min_tdcf", "args": {"asv_scores": str(_asv_file(tmp_path, lines))}}, num_classes=2
    )
    assert not metric.higher_is_better
    expected = sm.min_tdcf(CM_SCORES, CM_LABELS, ASV_SCORES, ASV_LABELS)
    assert _feed(metric, CM_SCORES, CM_LABELS, batch=3) == pytest.approx(expected, abs=1e-6)
    # the 6-column layout of the later t-DCF package reads too (class and score are the last two fields)
    wide = [
        f"LA_{i:04d} x y z {key} {score}" for i, (key, score) in enumerate(zip(ASV_LABELS, ASV_SCORES, strict=True))
    ]
    scores, classes = sm.read_asv_scores(str(_asv_file(tmp_path, wide)))
    assert scores.tolist() == [float(s) for s in ASV_SCORES] and classes.tolist() == ASV_LABELS


def test_asv_score_file_errors(tmp_path):
    with pytest.raises(ValueError, match="ASV score file not found"):
        sm.read_asv_scores(str(tmp_path / "missing.txt"))
    with pytest.raises(ValueError, match=r"asv.txt:2: class must be one of"):
        sm.read_asv_scores(str(_asv_file(tmp_path, ["a target 1.0", "b bonafide 2.0"])))
    with pytest.raises(ValueError, match=r"asv.txt:1: the score 'x' is not a number"):
        sm.read_asv_scores(str(_asv_file(tmp_path, ["a target x"])))
    with pytest.raises(ValueError, match=r"asv.txt:1: expected"):
        sm.read_asv_scores(str(_asv_file(tmp_path, ["a 1.0"])))
    with pytest.raises(ValueError, match="no nontarget, spoof trials"):
        sm.read_asv_scores(str(_asv_file(tmp_path, ["a target 1.0"])))


def test_windows_of_one_file_are_one_trial():
    """In 'windows' evaluation a file gives several rows with its index; the metric averages them,
    so val_eer counts files — as the test's score file does."""
    eer_of = sm.eer

    metric = mf.METRICS.build("eer", path="eer", num_classes=2)
    # file 0 (bona fide) windows 3, -2 → 0.5; file 1 (spoof) → 1.0; file 2 (bona fide) → 2.0; file 3 (spoof) → −1
    rows = {"score": torch.tensor([3.0, -2.0, 1.0, 2.0, 2.0, -1.0]), "label": torch.tensor([1, 1, 0, 1, 1, 0]),
            "index": torch.tensor([0, 0, 1, 2, 2, 3]), "file_windows": torch.tensor([2, 2, 1, 2, 2, 1])}
    metric.update({k: v[:3] for k, v in rows.items()})  # a file's windows may span batches
    metric.update({k: v[3:] for k, v in rows.items()})
    files = (np.array([0.5, 1.0, 2.0, -1.0]), np.array([1, 0, 1, 0]))
    assert metric.compute() == pytest.approx(eer_of(*files)[0])
    assert metric.compute() != pytest.approx(eer_of(rows["score"].numpy(), rows["label"].numpy())[0])
    plain = mf.METRICS.build("eer", path="eer", num_classes=2)  # not windows (ids may repeat after a concat):
    plain.update({"score": rows["score"], "label": rows["label"], "index": rows["index"]})  # every row is a trial
    assert plain.compute() == pytest.approx(eer_of(rows["score"].numpy().astype(float), rows["label"].numpy())[0])
