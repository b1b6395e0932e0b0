"""The spoofing (audio deepfake detection) task: ASVspoof metrics on per-file scores.

Training validates with the ``eer`` metric (on batch rows: in ``windows`` mode each window
counts as a trial there) and keeps the checkpoint with the lowest ``val_eer``. The test
scores every file of the split (a file's windows averaged), writes the score file first,
then the metrics over all files, per attack and — when the dataset says which attacks
training saw — over the seen and the unseen attacks, and a DET curve per attack. A split
without bona fide or without spoofed files still gets its score file; the metrics that
need both are NaN, with a warning.
"""

from __future__ import annotations

import logging
import math
from pathlib import Path
from typing import Any

import numpy as np

from ...core.registries import register_task
from ..base import Task
from . import metrics as detection
from .bootstrap import eer_mindcf_ci
from .scores import ScoreTable

__all__ = ["SpoofingTask", "detection_report", "seen_unseen_report"]

log = logging.getLogger("modforge.tasks")

BOOTSTRAP_RESAMPLES = 1000
"""Resamples of the 95 % bootstrap intervals of EER and minDCF in every report (seeded: the same
scores give the same interval; 1,000 resamples of 100,000 trials take about 3 s)."""


def detection_report(
    table: ScoreTable, *, resamples: int = BOOTSTRAP_RESAMPLES, seed: int = 0, level: float = 0.95
) -> dict[str, Any]:
    """Metrics of a score table: ``{"overall": {...}, "per_attack": {attack: {eer, files}}}``;
    ``overall`` holds ``level`` bootstrap intervals of EER and minDCF (``eer_ci_low``/``eer_ci_high``,
    ``min_dcf_ci_low``/``min_dcf_ci_high``: ``resamples`` resamples of the trials within each class,
    seeded by ``seed``)."""
    bona, spoof = int((table.labels == 1).sum()), int((table.labels == 0).sum())
    overall: dict[str, Any] = {"files": len(table), "bonafide_files": bona}
    counts: dict[str, int] = {}
    for attack, label in zip(table.attacks, table.labels, strict=True):
        if label == 0:
            counts[attack] = counts.get(attack, 0) + 1
    if not bona or not spoof:
        log.warning(
            "the split has %d bona fide and %d spoofed files: EER, DCF and Cllr need both (reported as NaN)", bona, spoof
        )
        nan = math.nan
        overall.update(eer=nan, eer_threshold=nan, min_dcf=nan, act_dcf=nan, cllr=nan, eer_ci_low=nan, eer_ci_high=nan,
                       min_dcf_ci_low=nan, min_dcf_ci_high=nan)  # fmt: skip
        return {"overall": overall, "per_attack": {a: {"eer": nan, "files": n} for a, n in sorted(counts.items())}}
    eer, threshold = detection.eer(table.scores, table.labels)
    overall.update(
        eer=eer,
        eer_threshold=threshold,
        min_dcf=detection.min_dcf(table.scores, table.labels),
        act_dcf=detection.act_dcf(table.scores, table.labels),
        cllr=detection.cllr(table.scores, table.labels),
    )
    intervals = eer_mindcf_ci(table.scores, table.labels, n=resamples, seed=seed, level=level)
    overall.update({key: intervals[key] for key in ("eer_ci_low", "eer_ci_high", "min_dcf_ci_low", "min_dcf_ci_high")})
    per_attack = detection.per_attack_eer(table.scores, table.labels, table.attacks)
    return {
        "overall": overall,
        "per_attack": {a: {"eer": per_attack[a], "files": n} for a, n in sorted(counts.items())},
    }


def seen_unseen_report(table: ScoreTable, seen: frozenset[str] | set[str]) -> dict[str, dict[str, Any]]:
    """EER and minDCF of every bona fide file against the spoofs of the attacks ``seen`` in
    training, and against the spoofs of the others (``{"seen": {...}, "unseen": {...}}``) —
    how papers report generalisation (ASVspoof 2019 LA: A07–A19 are unseen). Empty when the
    split holds no spoof of an unseen attack (the overall figures are then the seen ones)."""
    spoof = table.labels == 0
    attacks = np.array(table.attacks)
    unseen_spoof = spoof & ~np.isin(attacks, sorted(seen))
    if not unseen_spoof.any():
        return {}
    bona = table.labels == 1
    out: dict[str, dict[str, Any]] = {}
    for name, spoofs in (("seen", spoof & ~unseen_spoof), ("unseen", unseen_spoof)):
        keep = bona | spoofs
        figures: dict[str, Any] = {"files": int(keep.sum()), "spoofed_files": int(spoofs.sum())}
        if bona.any() and spoofs.any():
            figures["eer"] = detection.eer(table.scores[keep], table.labels[keep])[0]
            figures["min_dcf"] = detection.min_dcf(table.scores[keep], table.labels[keep])
        else:
            figures["eer"] = figures["min_dcf"] = math.nan
        out[name] = figures
    return out


@register_task("spoofing")
class SpoofingTask(Task):
    """Bona fide (label 1) against spoofed (label 0) audio; scores higher = bona fide."""

    name = "spoofing"
    default_metrics = ("eer", "min_dcf", "accuracy", "loss")
    monitor_preference = ("eer", "loss")
    model_options = {"scores": True}

    def test(self, trainer: Any, loader: Any, dataset: Any, *, split: str, out_dir: Path | None, stem: str) -> dict:
        outputs = trainer.collect(loader, ("score", "index"))
        entries, outputs["index"] = _entries(dataset, outputs["index"])
        table = ScoreTable.from_outputs(outputs, entries)
        if out_dir is not None:
            table.write(out_dir / f"{stem}scores.txt")  # first: nothing below can lose the scores
        report = detection_report(table)
        if out_dir is not None and report["overall"]["bonafide_files"] and not math.isnan(report["overall"]["eer"]):
            self._plot(table, out_dir / f"{stem}det.png", title=f"{split}: {len(table)} files")
        results = {split: report["overall"], f"{split}_per_attack": report["per_attack"]}
        seen = getattr(dataset, "seen_attacks", None)
        if seen is not None:
            results.update({f"{split}_{k}": v for k, v in seen_unseen_report(table, seen).items()})
        track = getattr(dataset, "condition_track", None)
        if track is not None and table.conditions:  # ASVspoof 2021: the organisers' per-condition tables
            results[f"{split}_conditions"] = _condition_tables(table, track, dataset, out_dir, stem)
        return results

    @staticmethod
    def _plot(table: ScoreTable, path: Path, title: str) -> None:
        from .det_plot import plot_det

        curves = {"all attacks": _curve(table.scores, table.labels)}
        bona = table.labels == 1
        attacks = np.array(table.attacks)
        for attack in sorted(set(attacks[table.labels == 0])):
            keep = bona | ((table.labels == 0) & (attacks == attack))
            curves[attack] = _curve(table.scores[keep], table.labels[keep])
        plot_det(curves, path, title=title)


def _condition_tables(table: ScoreTable, track: str, dataset: Any, out_dir: Path | None, stem: str) -> dict:
    """:func:`.conditions.condition_report` of the table, also written as ``conditions.txt``."""
    from ...core.safe_files import atomic_open
    from .conditions import condition_report, format_report

    report = condition_report(table.scores, table.labels, table.conditions, track,
                              asv=getattr(dataset, "asv_trials", None))  # fmt: skip
    if out_dir is not None:
        with atomic_open(Path(out_dir) / f"{stem}conditions.txt", "w") as handle:
            handle.write(format_report(report))
    return report


def _entries(dataset: Any, index: Any) -> tuple[list[Any], Any]:
    """The split's files and each batch row's position among them. An audio dataset's rows
    carry positions already; any other dataset's rows carry sample ids, and each sample
    becomes an entry named by its id, its attack ``-``/``spoof`` from its label."""
    utterances = getattr(dataset, "utterances", None)
    if utterances is not None:
        return utterances, index
    from types import SimpleNamespace

    import torch

    labels = [int(v) for v in dataset.labels]
    ids = [int(v) for v in getattr(dataset, "ids", range(len(labels)))]
    position = {sample_id: i for i, sample_id in enumerate(ids)}
    entries = [
        SimpleNamespace(utt_id=str(i), label=label, attack="-" if label == 1 else "spoof")
        for i, label in zip(ids, labels, strict=True)
    ]
    return entries, torch.tensor([position[int(i)] for i in index], dtype=torch.long)


def _curve(scores, labels):
    p_fa, p_miss = detection.det_curve(scores, labels)
    return p_fa, p_miss, detection.eer(scores, labels)[0]
