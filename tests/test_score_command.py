"""``modforge score``: the organisers' metrics from score files — modforge's and the ASVspoof 2019
layout, ASV scores for the t-DCFs, SASV scores for a-DCF, paired scores for t-EER."""

from __future__ import annotations

import json

import numpy as np
import pytest

from modforge.tasks.spoofing import challenge_metrics, sasv_metrics
from modforge.tasks.spoofing.bootstrap import eer_mindcf_ci

RNG = np.random.default_rng(3)
LABELS = np.r_[np.ones(40, int), np.zeros(120, int)]
SCORES = np.round(np.where(LABELS == 1, 1.0, -0.5) + RNG.standard_normal(LABELS.size), 2)  # ties included
ATTACKS = ["-" if y else f"A0{1 + i % 3}" for i, y in enumerate(LABELS)]
ASV_CLASSES = np.array(["target"] * 50 + ["nontarget"] * 60 + ["spoof"] * 40, dtype=object)
ASV_SCORES = np.round(np.select([ASV_CLASSES == "target", ASV_CLASSES == "nontarget"], [2.0, -1.0], 0.8)
                      + RNG.standard_normal(ASV_CLASSES.size), 2)  # fmt: skip


def _write(path, lines):
    path.write_text("".join(line + "\n" for line in lines))
    return path


@pytest.fixture
def files(tmp_path):
    modforge = _write(tmp_path / "scores.txt", [f"utt{i} {s:.8g} {'bonafide' if y else 'spoof'} {a}"
                                                 for i, (s, y, a) in enumerate(zip(SCORES, LABELS, ATTACKS, strict=True))])  # fmt: skip
    organisers = _write(tmp_path / "cm_2019.txt", ["# organisers' layout: utt attack key score"]
                        + [f"LA_E_{i:07d} {a} {'bonafide' if y else 'spoof'} {s:.8g}"
                           for i, (s, y, a) in enumerate(zip(SCORES, LABELS, ATTACKS, strict=True))])  # fmt: skip
    asv = _write(tmp_path / "asv.txt", [f"LA_{i:04d} {c} {s:.8g}" for i, (c, s) in enumerate(zip(ASV_CLASSES, ASV_SCORES, strict=True))])
    tandem = _write(tmp_path / "tandem.txt", [f"t{i} {c:.8g} {a:.8g} {k}" for i, (c, a, k) in
                                              enumerate(zip(SCORES[:150], ASV_SCORES, ASV_CLASSES, strict=True))])  # fmt: skip
    return {"modforge": modforge, "organisers": organisers, "asv": asv, "tandem": tandem}


def test_every_metric_equals_the_functions_checked_against_the_scripts(cli, files, tmp_path):
    result = cli("score", str(files["modforge"]), "--asv", str(files["asv"]), "--sasv", str(files["asv"]),
                 "--tandem", str(files["tandem"]), "--json", "report.json")  # fmt: skip
    assert result.code == 0, result.err
    report = json.loads((tmp_path / "report.json").read_text())
    cm, tandem = report["cm"], report["tandem"]
    eer, threshold = challenge_metrics.eer(SCORES, LABELS)
    assert (cm["eer"], cm["eer_threshold"]) == (eer, threshold)
    assert cm["min_dcf"] == challenge_metrics.min_dcf(SCORES, LABELS)
    assert cm["act_dcf"] == challenge_metrics.act_dcf(SCORES, LABELS)
    intervals = eer_mindcf_ci(SCORES, LABELS, n=1000, seed=0)
    assert cm["eer_ci_low"] == intervals["eer_ci_low"] and cm["min_dcf_ci_high"] == intervals["min_dcf_ci_high"]
    assert cm["eer_ci_low"] <= cm["eer"] <= cm["eer_ci_high"]
    assert set(report["per_attack"]) == {"A01", "A02", "A03"} and report["per_attack"]["A01"]["files"] == 40
    assert tandem["min_tdcf"] == challenge_metrics.min_tdcf(SCORES, LABELS, ASV_SCORES, ASV_CLASSES)
    assert tandem["min_tdcf_2021"] == sasv_metrics.min_tdcf_2021(SCORES, LABELS, ASV_SCORES, ASV_CLASSES)
    assert (tandem["a_dcf"], tandem["a_dcf_threshold"]) == sasv_metrics.a_dcf(ASV_SCORES, ASV_CLASSES)
    assert tandem["t_eer"] == sasv_metrics.t_eer(SCORES[:150], ASV_SCORES, ASV_CLASSES)
    assert "eer" in result.out and "min_tdcf_2021" in result.out and "A02" in result.out


def test_the_organisers_layout_reads_as_modforge_s(cli, files):
    ours = cli("score", str(files["modforge"]), "--json", "-")
    theirs = cli("score", str(files["organisers"]), "--json", "-")
    assert ours.code == theirs.code == 0
    assert json.loads(ours.out) == json.loads(theirs.out)


def test_bootstrap_settings_change_only_the_intervals(cli, files):
    first = json.loads(cli("score", str(files["modforge"]), "--json", "-", "--bootstrap", "200", "--seed", "4").out)
    second = json.loads(cli("score", str(files["modforge"]), "--json", "-", "--bootstrap", "200", "--seed", "5").out)
    assert first["cm"]["eer"] == second["cm"]["eer"]
    assert first["cm"]["eer_ci_low"] != second["cm"]["eer_ci_low"] or first["cm"]["eer_ci_high"] != second["cm"]["eer_ci_high"]


@pytest.mark.parametrize(("args", "message"), [
    ([], "nothing to score"),
    (["--asv", "{asv}"], "give the CM score file too"),
    (["{bad}"], "bad.txt:2: expected 'utt_id score bonafide|spoof attack'"),
    (["{nan}"], "nan.txt:1: no finite score"),
    (["--tandem", "{bad_tandem}"], "bad_tandem.txt:1: expected 'trial cm_score asv_score"),
    (["{modforge}", "--asv", "{only_targets}"], "only.txt' has no nontarget, spoof trials (the t-DCF needs all three)"),
    (["--sasv", "{only_targets}"], "(a-DCF needs all three)"),
    (["missing.txt"], "score file not found: missing.txt"),
    (["{modforge}", "--bootstrap", "0"], "--bootstrap must be at least 1"),
])  # fmt: skip
def test_bad_input_gets_one_line_naming_the_file_and_line(cli, files, tmp_path, args, message):
    paths = {**{k: str(v) for k, v in files.items()},
             "bad": str(_write(tmp_path / "bad.txt", ["u1 0.5 bonafide -", "u2 0.1 maybe A01"])),
             "nan": str(_write(tmp_path / "nan.txt", ["u1 nan bonafide -"])),
             "bad_tandem": str(_write(tmp_path / "bad_tandem.txt", ["t1 0.1 0.2 impostor"])),
             "only_targets": str(_write(tmp_path / "only.txt", ["s1 target 1.0", "s2 target 2.0"]))}  # fmt: skip
    result = cli("score", *[a.format(**paths) for a in args])
    assert result.code == 2
    assert message in result.err and "Traceback" not in result.err
    assert len(result.err.strip().splitlines()) == 1
