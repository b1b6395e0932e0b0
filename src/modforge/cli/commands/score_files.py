"""``modforge score [CM_SCORES] [--asv F] [--sasv F] [--tandem F]`` — spoofing metrics of score files.

Computes the organisers' metrics from files another system (or a modforge run) wrote: EER,
minDCF, actDCF, Cllr with bootstrap intervals and EER per attack from CM scores; min t-DCF (2019
and the revised 2021 one) with ASV scores; a-DCF from SASV scores; t-EER from paired CM/ASV
scores. See :mod:`modforge.tasks.spoofing.score_report` for the file layouts.
"""

from __future__ import annotations

import json
import math
from pathlib import Path

from ..common import CommandParser
from ..output import print_table

HELP = "spoofing metrics of score files: EER, minDCF, t-DCF (2019, 2021), a-DCF, t-EER, bootstrap intervals"


def _parser() -> CommandParser:
    parser = CommandParser("score", description=HELP + ". Fractions in --json, percent for EERs on screen.")
    parser.add_argument("cm", nargs="?", metavar="CM_SCORES",
                        help="CM scores: modforge's scores.txt ('utt score label attack') or the ASVspoof 2019 "
                        "organisers' layout ('utt attack label score')")  # fmt: skip
    parser.add_argument("--asv", metavar="FILE", help="ASV scores 'speaker target|nontarget|spoof score': "
                        "min t-DCF of ASVspoof 2019 and the revised one of 2021/5")  # fmt: skip
    parser.add_argument("--sasv", metavar="FILE", help="SASV scores, same layout: a-DCF (SASV, ASVspoof 5)")
    parser.add_argument("--tandem", metavar="FILE", help="paired scores 'trial cm_score asv_score class': t-EER")
    parser.add_argument("--bootstrap", type=int, default=1000, metavar="N",
                        help="resamples of the EER/minDCF intervals (default 1000)")  # fmt: skip
    parser.add_argument("--level", type=float, default=0.95, metavar="P", help="interval level (default 0.95)")
    parser.add_argument("--seed", type=int, default=0, metavar="S", help="bootstrap seed (default 0)")
    parser.add_argument("--json", metavar="FILE", help="also write every value as JSON ('-': standard output only)")
    return parser


_PERCENT = {"eer", "eer_ci_low", "eer_ci_high", "t_eer"}


def _cell(name: str, value: object) -> str:
    if isinstance(value, float):
        if math.isnan(value):
            return "n/a"
        return f"{100 * value:.3f} %" if name in _PERCENT else f"{value:.4f}"
    return f"{value:,}" if isinstance(value, int) else str(value)


def run(argv: list[str]) -> int:
    from ...core.safe_files import atomic_open
    from ...tasks.spoofing.score_report import score_report

    ns = _parser().parse_args(argv)
    report = score_report(ns.cm, asv=ns.asv, sasv=ns.sasv, tandem=ns.tandem, resamples=ns.bootstrap,
                          seed=ns.seed, level=ns.level)  # fmt: skip
    if ns.json == "-":
        print(json.dumps(report, indent=2, allow_nan=True))
        return 0
    rows = [(section, name, _cell(name, value)) for section in ("cm", "tandem")
            for name, value in report.get(section, {}).items()]  # fmt: skip
    print_table(("", "metric", "value"), rows, title="scores — " + (Path(ns.cm).name if ns.cm else "tandem"))
    if report.get("per_attack"):
        attacks = [(a, v["files"], _cell("eer", v["eer"])) for a, v in report["per_attack"].items()]
        print_table(("attack", "spoofed files", "EER (against all bona fide)"), attacks)
    if ns.json:
        with atomic_open(Path(ns.json), "w") as handle:
            json.dump(report, handle, indent=2, allow_nan=True)
            handle.write("\n")
    return 0
