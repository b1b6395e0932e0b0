"""The spoofing (audio deepfake detection) task: ASVspoof metrics on per-file scores.

Training validates with the ``eer`` metric (on batch rows: windows count separately in
``windows`` mode) and keeps the checkpoint with the lowest ``val_eer``. The test scores
every file of the split (a file's windows averaged), writes the score file, the metrics
over all files and per attack, and a DET curve per attack.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from ..base import Task
from . import metrics as detection
from .scores import ScoreTable

__all__ = ["SpoofingTask", "detection_report"]


def detection_report(table: ScoreTable) -> dict[str, Any]:
    """Metrics of a score table: ``{"overall": {...}, "per_attack": {attack: {eer, files}}}``."""
    eer, threshold = detection.eer(table.scores, table.labels)
    overall = {
        "eer": eer,
        "eer_threshold": threshold,
        "min_dcf": detection.min_dcf(table.scores, table.labels),
        "act_dcf": detection.act_dcf(table.scores, table.labels),
        "cllr": detection.cllr(table.scores, table.labels),
        "files": len(table),
        "bonafide_files": int((table.labels == 1).sum()),
    }
    per_attack = detection.per_attack_eer(table.scores, table.labels, table.attacks)
    counts: dict[str, int] = {}
    for attack in table.attacks:
        counts[attack] = counts.get(attack, 0) + 1
    return {
        "overall": overall,
        "per_attack": {attack: {"eer": value, "files": counts[attack]} for attack, value in sorted(per_attack.items())},
    }


class SpoofingTask(Task):
    """Bona fide (label 1) against spoofed (label 0) audio; scores higher = bona fide."""

    name = "spoofing"
    default_metrics = ("eer", "min_dcf", "accuracy", "loss")
    monitor_preference = ("eer", "loss")
    model_options = {"scores": True}

    def test(self, trainer: Any, loader: Any, dataset: Any, *, split: str, out_dir: Path | None, stem: str) -> dict:
        outputs = trainer.collect(loader, ("score", "index"))
        table = ScoreTable.from_outputs(outputs, dataset.utterances)
        report = detection_report(table)
        if out_dir is not None:
            table.write(out_dir / f"{stem}scores.txt")
            self._plot(table, out_dir / f"{stem}det.png", title=f"{split}: {len(table)} files")
        return {split: report["overall"], f"{split}_per_attack": report["per_attack"]}

    @staticmethod
    def _plot(table: ScoreTable, path: Path, title: str) -> None:
        from .det_plot import plot_det

        curves = {"all attacks": _curve(table.scores, table.labels)}
        bona = table.labels == 1
        for attack in sorted({a for a, label in zip(table.attacks, table.labels, strict=True) if label == 0}):
            keep = bona | (table.labels == 0) & (_attacks_equal(table.attacks, attack))
            curves[attack] = _curve(table.scores[keep], table.labels[keep])
        plot_det(curves, path, title=title)


def _attacks_equal(attacks: list[str], attack: str):
    import numpy as np

    return np.array([a == attack for a in attacks])


def _curve(scores, labels):
    p_fa, p_miss = detection.det_curve(scores, labels)
    return p_fa, p_miss, detection.eer(scores, labels)[0]
