"""Spoofing metrics of score files: what ``modforge score`` computes from another system's output.

Why: papers are compared on numbers computed from score files — the CM's, and for the tandem
metrics an ASV system's — and a researcher porting results from another toolkit should get the
organisers' values without writing glue. Inputs (whitespace-separated, ``#`` comments skipped):

* **CM scores** (:func:`.scores.read_score_file`): modforge's ``scores.txt`` (``utt score label
  attack``) or the ASVspoof 2019 organisers' CM file (``utt attack label score``) → EER (with its
  threshold), minDCF, actDCF, Cllr, bootstrap intervals of EER and minDCF, EER per attack.
* **ASV scores** (``--asv``; :func:`.trials.read_asv_scores`: ``speaker class score``, class
  target / nontarget / spoof, the 2019 package's file) → with the CM scores, min t-DCF of ASVspoof
  2019 and the revised min t-DCF of ASVspoof 2021 / 5 (the ASV at its EER threshold; CM and ASV
  trials need not match).
* **SASV scores** (``--sasv``; same layout: one single-system score per trial) → a-DCF (SASV /
  ASVspoof 5) and its threshold.
* **Paired CM and ASV scores** (``--tandem``: ``trial cm_score asv_score class`` per trial) →
  concurrent t-EER (ASVspoof 5's ``compute_teer``).

Every value is the organisers' own (the functions behind them are checked against their scripts:
:mod:`.challenge_metrics`, :mod:`.sasv_metrics`). Fractions, not percent.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any, Optional

import numpy as np

from ...core.errors import UsageError
from ...core.safe_files import data_lines
from ...core.text_safety import quoted
from . import challenge_metrics, sasv_metrics
from .scores import read_score_file
from .task import BOOTSTRAP_RESAMPLES, detection_report
from .trials import read_asv_scores

__all__ = ["read_tandem_scores", "score_report"]


def _asv_file(path: Path, metric: str) -> tuple[np.ndarray, np.ndarray]:
    try:
        return read_asv_scores(str(path))
    except ValueError as exc:  # names the file (and line) already
        raise UsageError(str(exc).replace("the t-DCF needs", f"{metric} needs")) from None


def read_tandem_scores(path: str | Path) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """``(cm_scores, asv_scores, classes)`` of a ``trial cm_score asv_score class`` file."""
    path = Path(path)
    cm, asv, classes = [], [], []
    for number, line in data_lines(path, what="tandem score file"):
        fields = line.split()
        if len(fields) != 4 or fields[3].lower() not in ("target", "nontarget", "spoof"):
            raise UsageError(f"{path}:{number}: expected 'trial cm_score asv_score target|nontarget|spoof', "
                             f"got {quoted(line.strip())}")  # fmt: skip
        try:
            values = float(fields[1]), float(fields[2])
        except ValueError:
            raise UsageError(f"{path}:{number}: scores {quoted(fields[1])} and {quoted(fields[2])} must be "
                             "numbers") from None  # fmt: skip
        if not all(np.isfinite(values)):
            raise UsageError(f"{path}:{number}: scores must be finite, got {quoted(line.strip())}")
        cm.append(values[0])
        asv.append(values[1])
        classes.append(fields[3].lower())
    if not cm:
        raise UsageError(f"{path}: no trials in the file")
    return np.array(cm), np.array(asv), np.array(classes, dtype=object)


def _metric(what: str, compute: Any) -> Any:
    try:
        return compute()
    except ValueError as exc:  # the scripts' own refusals (a class missing, a zero normaliser)
        raise UsageError(f"{what}: {exc}") from None


def score_report(
    cm: Optional[str | Path] = None,
    *,
    asv: Optional[str | Path] = None,
    sasv: Optional[str | Path] = None,
    tandem: Optional[str | Path] = None,
    resamples: int = BOOTSTRAP_RESAMPLES,
    seed: int = 0,
    level: float = 0.95,
) -> dict[str, Any]:
    """The metrics the given files allow: ``{"cm": {...}, "per_attack": {...}, "tandem": {...}}``.

    Args:
        cm: a CM score file (modforge's or the ASVspoof 2019 organisers' layout).
        asv: an ASV score file (``speaker class score``): adds ``min_tdcf`` (2019) and
            ``min_tdcf_2021`` to ``tandem`` (needs ``cm``).
        sasv: a SASV score file (same layout): adds ``a_dcf`` and ``a_dcf_threshold``.
        tandem: paired ``trial cm_score asv_score class`` scores: adds ``t_eer``.
        resamples, seed, level: the bootstrap intervals of EER and minDCF.

    Raises:
        UsageError: no input, an unreadable or malformed file, or a metric the scores cannot give.
    """
    if asv is not None and cm is None:
        raise UsageError("--asv gives the t-DCF of a CM: give the CM score file too")
    if cm is None and sasv is None and tandem is None:
        raise UsageError("nothing to score: give a CM score file, --sasv or --tandem")
    if resamples < 1 or not 0.0 < level < 1.0:
        raise UsageError(f"--bootstrap must be at least 1 and --level in (0, 1), got {resamples} and {level}")
    out: dict[str, Any] = {}
    tandem_values: dict[str, float] = {}
    if cm is not None:
        table = read_score_file(cm)
        report = detection_report(table, resamples=resamples, seed=seed, level=level)
        out["cm"], out["per_attack"] = report["overall"], report["per_attack"]
        if asv is not None:
            asv_scores, asv_classes = _asv_file(Path(asv), "the t-DCF")
            tandem_values["min_tdcf"] = _metric("min t-DCF (2019)", lambda: challenge_metrics.min_tdcf(
                table.scores, table.labels, asv_scores, asv_classes))  # fmt: skip
            tandem_values["min_tdcf_2021"] = _metric("revised min t-DCF (2021)", lambda: sasv_metrics.min_tdcf_2021(
                table.scores, table.labels, asv_scores, asv_classes))  # fmt: skip
    if sasv is not None:
        scores, classes = _asv_file(Path(sasv), "a-DCF")
        value, threshold = _metric("a-DCF", lambda: sasv_metrics.a_dcf(scores, classes))
        tandem_values.update(a_dcf=value, a_dcf_threshold=threshold)
    if tandem is not None:
        cm_scores, asv_scores, classes = read_tandem_scores(tandem)
        tandem_values["t_eer"] = _metric("t-EER", lambda: sasv_metrics.t_eer(cm_scores, asv_scores, classes))
    if tandem_values:
        out["tandem"] = {k: float(v) for k, v in tandem_values.items()}
    return out
