"""The revised t-DCF, a-DCF and t-EER equal the organisers' scripts; seeded bootstrap intervals.

Parity: ``tests/fixtures/spoofing_metrics_sasv.json`` holds seeded random score sets with many
ties and the values the organisers' own code gave on them (ASVspoof 2021 ``eval_metrics.py``,
ASVspoof 5 ``calculate_modules.py`` / ``a_dcf.py``, ``shimhz/a_DCF``; commits in the file),
recorded by ``tests/fixtures/record_spoofing_metrics.py``. modforge shares no code with them.
"""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
import torch

import modforge as mf
from modforge.tasks.spoofing import bootstrap as bs
from modforge.tasks.spoofing import sasv_metrics as sv
from modforge.tasks.spoofing.challenge_metrics import eer, min_dcf

FIXTURE = json.loads((Path(__file__).parent / "fixtures" / "spoofing_metrics_sasv.json").read_text())
CASES = FIXTURE["cases"]
TOL = 1e-12


TDCF_NAMES = {"p_target": "Ptar", "p_nontarget": "Pnon", "p_spoof": "Pspoof", "c_miss": "Cmiss", "c_fa": "Cfa",
              "c_fa_spoof": "Cfa_spoof"}  # fmt: skip
ADCF_NAMES = {"p_target": "Ptrg", "p_nontarget": "Pnontrg", "p_spoof": "Pspf", "c_miss": "Cmiss", "c_fa_asv": "Cfa_asv",
              "c_fa_cm": "Cfa_cm"}  # fmt: skip
"""Our keyword for each cost of a recorded cost model, by the name the reference implementation gives it."""


def _costs(model: dict, names: dict[str, str]) -> dict:
    """The recorded cost ``model`` as our keyword arguments."""
    return {ours: model[theirs] for ours, theirs in names.items()}


def _arrays(case: dict):
    keys = np.array(case["keys"])
    return keys, np.array(case["cm"]), np.array(case["asv"]), np.array(case["sasv"])


def test_fixture_names_its_sources():
    assert len(CASES) >= 20
    assert FIXTURE["sources"]["asvspoof-challenge/2021"]["commit"] == "9b33f5eca887bd3bf629e3fb79428cd9bb7ac972"
    assert FIXTURE["sources"]["asvspoof-challenge/asvspoof5"]["commit"] == "fe23d3053a0889b305d98c9e4cadf418c213d972"
    assert FIXTURE["sources"]["shimhz/a_DCF"]["commit"] == "0560623bb2ec15bba79a918fc6ef36afd9b4b02c"
    # most sets have ties (where trial-by-trial conventions matter); a few have none
    tied = sum(len(set(case["cm"])) < len(case["cm"]) for case in CASES)
    assert len(CASES) - 5 <= tied < len(CASES)


@pytest.mark.parametrize("index", range(len(CASES)))
@pytest.mark.parametrize("cost_tag", ["default", "alt"])
def test_revised_tdcf_equals_2021_and_asvspoof5_scripts(index, cost_tag):
    keys, cm, asv, _ = _arrays(CASES[index])
    reference = CASES[index]["reference"]
    costs = _costs(FIXTURE["costs"][f"tdcf_{cost_tag}"], TDCF_NAMES)
    for source in ("2021", "asv5"):
        expected = reference[f"min_tdcf_2021_{cost_tag}_{source}"]
        if expected == "error":
            with pytest.raises(ValueError):
                sv.min_tdcf_2021(cm, keys != "spoof", asv, keys, **costs)
        else:
            assert sv.min_tdcf_2021(cm, keys != "spoof", asv, keys, **costs) == pytest.approx(expected, abs=TOL, rel=0)


@pytest.mark.parametrize("index", range(len(CASES)))
@pytest.mark.parametrize("cost_tag", ["asv5", "paper"])
def test_a_dcf_equals_asvspoof5_and_authors_code(index, cost_tag):
    keys, _, _, sasv = _arrays(CASES[index])
    value, threshold = sv.a_dcf(sasv, keys, **_costs(FIXTURE["costs"][f"adcf_{cost_tag}"], ADCF_NAMES))
    for source in ("asv5", "shimhz"):
        ref_value, ref_threshold = CASES[index]["reference"][f"a_dcf_{cost_tag}_{source}"]
        assert value == pytest.approx(ref_value, abs=TOL, rel=0)
        assert threshold == ref_threshold


@pytest.mark.parametrize("index", range(len(CASES)))
def test_t_eer_equals_asvspoof5_compute_teer(index):
    keys, cm, asv, _ = _arrays(CASES[index])
    expected = CASES[index]["reference"]["t_eer_percent_asv5"]
    if expected == "error":
        with pytest.raises(ValueError):
            sv.t_eer(cm, asv, keys)
        return
    value = sv.t_eer(cm, asv, keys)
    assert value * 100 == pytest.approx(expected, abs=TOL, rel=0)
    # the block size only splits the search
    assert sv.t_eer(cm, asv, keys, chunk_cells=1) == value


def test_revised_tdcf_defaults_are_the_2021_cost_model():
    keys, cm, asv, _ = _arrays(CASES[1])
    assert sv.min_tdcf_2021(cm, keys != "spoof", asv, keys) == pytest.approx(
        CASES[1]["reference"]["min_tdcf_2021_default_2021"], abs=TOL
    )
    keys, _, _, sasv = _arrays(CASES[1])
    assert sv.a_dcf(sasv, keys)[0] == pytest.approx(CASES[1]["reference"]["a_dcf_asv5_asv5"][0], abs=TOL)


def test_new_metric_errors():
    keys, cm, asv, sasv = _arrays(CASES[0])
    with pytest.raises(ValueError, match="bona fide"):
        sv.min_tdcf_2021(cm, np.zeros(cm.size), asv, keys)
    with pytest.raises(ValueError, match="sum to 1"):
        sv.min_tdcf_2021(cm, keys != "spoof", asv, keys, p_spoof=0.5)
    with pytest.raises(ValueError, match="spoof"):
        sv.a_dcf(sasv[keys != "spoof"], keys[keys != "spoof"])
    with pytest.raises(ValueError, match="one CM score per ASV trial"):
        sv.t_eer(cm[:-1], asv, keys)
    with pytest.raises(ValueError, match="C0 \\+ min"):  # an ASV that accepts no spoof and errs nowhere
        sv.min_tdcf_2021(cm, keys != "spoof", [2.0, -2.0, -3.0], ["target", "nontarget", "spoof"], asv_threshold=0.0)


def test_min_tdcf_2021_metric_is_registered(tmp_path):
    keys, cm, asv, _ = _arrays(CASES[2])
    path = tmp_path / "asv.txt"
    path.write_text("".join(f"u{i} {k} {s!r}\n" for i, (k, s) in enumerate(zip(keys, asv.tolist(), strict=True))))
    metric = mf.METRICS.build({"type": "min_tdcf_2021", "args": {"asv_scores": str(path)}}, num_classes=2)
    assert not metric.higher_is_better
    labels = (keys != "spoof").astype(np.int64)
    metric.update({"score": torch.tensor(cm), "label": torch.tensor(labels)})
    assert metric.compute() == pytest.approx(CASES[2]["reference"]["min_tdcf_2021_default_2021"], abs=TOL)


# ------------------------------------------------------------------------- bootstrap
def _data(n_trials: int, seed: int = 1, levels: int = 20):
    rng = np.random.default_rng(seed)
    labels = rng.random(n_trials) < 0.3
    scores = np.round((rng.normal(size=n_trials) + 1.5 * labels) * levels) / levels  # ties
    return scores, labels


def test_bootstrap_is_seeded_and_stratified():
    scores, labels = _data(500)
    first = bs.bootstrap_ci(scores, labels, "eer", n=200, seed=7)
    assert bs.bootstrap_ci(scores, labels, "eer", n=200, seed=7) == first
    assert bs.bootstrap_ci(scores, labels, "eer", n=200, seed=8) != first
    for idx in bs.resample_indices(labels, 5, seed=3):
        assert labels[idx].sum() == labels.sum() and (~labels[idx]).sum() == (~labels).sum()
    low, high = first
    assert low <= eer(scores, labels)[0] <= high


@pytest.mark.parametrize("statistic", ["eer", "min_dcf"])
def test_vectorised_bootstrap_equals_the_metric_on_each_resample(statistic, monkeypatch):
    scores, labels = _data(700, seed=2, levels=4)
    reference = {"eer": lambda s, y: eer(s, y)[0], "min_dcf": min_dcf}[statistic]
    slow = bs.bootstrap_values(scores, labels, reference, n=40, seed=5)
    assert np.array_equal(bs.bootstrap_values(scores, labels, statistic, n=40, seed=5), slow)
    monkeypatch.setattr(bs, "BLOCK_CELLS", 1500)  # several blocks: same values
    assert np.array_equal(bs.bootstrap_values(scores, labels, statistic, n=40, seed=5), slow)


def test_eer_mindcf_ci_for_reports():
    scores, labels = _data(2000)
    ci = bs.eer_mindcf_ci(scores, labels, n=300, seed=0)
    assert set(ci) == {"eer", "eer_ci_low", "eer_ci_high", "min_dcf", "min_dcf_ci_low", "min_dcf_ci_high"}
    assert (ci["eer_ci_low"], ci["eer_ci_high"]) == bs.bootstrap_ci(scores, labels, "eer", n=300, seed=0)
    assert (ci["min_dcf_ci_low"], ci["min_dcf_ci_high"]) == bs.bootstrap_ci(scores, labels, "min_dcf", n=300, seed=0)
    assert ci["eer_ci_low"] <= ci["eer"] <= ci["eer_ci_high"]
    assert ci["min_dcf_ci_low"] <= ci["min_dcf"] <= ci["min_dcf_ci_high"]
    narrow = bs.bootstrap_ci(scores, labels, "eer", n=300, seed=0, level=0.5)
    assert ci["eer_ci_low"] <= narrow[0] <= narrow[1] <= ci["eer_ci_high"]


def test_bootstrap_errors():
    scores, labels = _data(50)
    with pytest.raises(ValueError, match="bona fide"):
        bs.bootstrap_ci(scores, np.zeros(50), "eer")
    with pytest.raises(ValueError, match="resamples"):
        bs.bootstrap_ci(scores, labels, "eer", n=0)
    with pytest.raises(ValueError, match="level"):
        bs.eer_mindcf_ci(scores, labels, n=10, level=95)
    with pytest.raises(ValueError, match="statistic"):
        bs.bootstrap_ci(scores, labels, "auc")


def test_every_spoofing_report_carries_seeded_bootstrap_intervals():
    from modforge.tasks.spoofing.scores import ScoreTable
    from modforge.tasks.spoofing.task import detection_report

    rng = np.random.default_rng(3)
    labels = np.r_[np.ones(300, dtype=int), np.zeros(300, dtype=int)]
    scores = np.r_[rng.normal(1.0, 1.0, 300), rng.normal(-1.0, 1.0, 300)]
    table = ScoreTable([f"u{i}" for i in range(600)], scores, labels, ["-"] * 300 + ["A01"] * 300)
    overall = detection_report(table)["overall"]
    assert overall["eer_ci_low"] <= overall["eer"] <= overall["eer_ci_high"]
    assert overall["min_dcf_ci_low"] <= overall["min_dcf"] <= overall["min_dcf_ci_high"]
    assert overall["eer_ci_high"] - overall["eer_ci_low"] > 0.01  # 600 trials: a real interval
    assert detection_report(table)["overall"] == overall  # seeded
