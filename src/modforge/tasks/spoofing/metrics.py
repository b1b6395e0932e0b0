"""ASVspoof metrics for spoofing countermeasures, as registered evaluation metrics:
``eer``, ``eer_interpolated``, ``min_dcf``, ``act_dcf``, ``cllr``, ``min_cllr`` and ``min_tdcf``.

Each reads the batch's detection ``score`` (a float ``[B]`` tensor, higher = more bona
fide) and ``label`` (1 = bona fide, 0 = spoof), keeps them on their device during the
pass (``update`` never synchronises with the host) and computes the metric once, in
``compute``, with float64 numpy functions (re-exported here). ``eer``, ``per_attack_eer``,
``min_dcf``, ``act_dcf`` and ``min_tdcf`` are the challenges' own values
(:mod:`.challenge_metrics`: ASVspoof 2019/2021 ``compute_eer`` and 2019 t-DCF, ASVspoof 5
minDCF/actDCF); ``eer_interpolated``, ``det_curve``, ``operating_points``, ``cllr`` and
``min_cllr`` come from :mod:`.detection`, where the threshold conventions are documented.
All are errors or costs: lower is better.
"""

from __future__ import annotations

import abc
from collections.abc import Callable
from typing import Any, ClassVar, Optional

import numpy as np
import torch

from ...core.registries import register_metric
from ...train.distributed import all_gather_objects
from ...train.metrics import Metric
from .challenge_metrics import act_dcf, challenge_det_curve, eer, min_dcf, min_tdcf, per_attack_eer
from .costs import dcf_weights
from .curves import operating_points
from .detection import cllr, det_curve, min_cllr
from .detection import eer as eer_interpolated
from .trials import read_asv_scores

__all__ = [
    "ActDCF",
    "Cllr",
    "CostMetric",
    "EqualErrorRate",
    "InterpolatedEqualErrorRate",
    "MinCllr",
    "MinDCF",
    "MinTDCF",
    "ScoreMetric",
    "TandemMetric",
    "act_dcf",
    "challenge_det_curve",
    "cllr",
    "det_curve",
    "eer",
    "eer_interpolated",
    "min_cllr",
    "min_dcf",
    "min_tdcf",
    "operating_points",
    "per_attack_eer",
    "read_asv_scores",
]


class ScoreMetric(Metric):
    """Base of the detection metrics: collects ``score`` and ``label`` per batch on their
    device; ``compute`` concatenates them once and calls :meth:`value` on float64 numpy
    arrays. A pass without both bona fide and spoof trials gives NaN (no error rate is
    defined). Rows of a file cut into windows (batches with ``file_windows``, rows sharing an
    ``index``) are averaged into the file's score first, so a trial is a file — as in the test.

    Args:
        num_classes: the data's number of classes (wired by the builder); must be 2
            (spoof, bona fide) when given.
    """

    higher_is_better: ClassVar[bool] = False
    name: ClassVar[str] = "metric"

    def __init__(self, num_classes: Optional[int] = None):
        if num_classes is not None and num_classes != 2:
            raise ValueError(
                f"{self.name} scores a two-class detector (0 = spoof, 1 = bona fide), but the data has "
                f"num_classes={num_classes}"
            )
        self.reset()

    def reset(self) -> None:
        self.scores: list[torch.Tensor] = []
        self.labels: list[torch.Tensor] = []
        self.indices: list[torch.Tensor] | None = []  # None once a batch came without 'index'

    def update(self, out: dict[str, Any]) -> None:
        if "score" not in out or "label" not in out:
            missing = " and ".join(k for k in ("score", "label") if k not in out)
            raise ValueError(
                f"{self.name} needs the batch's detection 'score' ([B] floats, higher = bona fide) and 'label'; "
                f"the model output has no {missing}"
            )
        score, label = out["score"], out["label"]
        if score.numel() != label.numel() or (score.dim() > 1 and score.shape[-1] != 1):
            raise ValueError(
                f"{self.name}: expected one score per label ({label.numel()}), got a score of shape "
                f"{tuple(score.shape)}"
            )
        self.scores.append(score.detach().reshape(-1))
        self.labels.append(label.detach().reshape(-1))
        index = out.get("index") if "file_windows" in out else None
        if self.indices is not None and isinstance(index, torch.Tensor) and index.numel() == label.numel():
            self.indices.append(index.detach().reshape(-1))
        else:
            self.indices = None  # not windows: every row is a trial

    def sync(self, what: str = "a metric") -> None:
        """Every process's scores and labels (the metric is then computed on all of them)."""
        indices = torch.cat(self.indices).cpu() if self.indices else None
        mine = (torch.cat(self.scores).cpu(), torch.cat(self.labels).cpu(), indices) if self.scores else None
        gathered = [part for part in all_gather_objects(mine, what) if part is not None]
        self.scores, self.labels = [s for s, _, _ in gathered], [label for _, label, _ in gathered]
        every = [i for _, _, i in gathered]
        self.indices = every if all(i is not None for i in every) else None

    def arrays(self) -> tuple[np.ndarray, np.ndarray]:
        """Everything since :meth:`reset`: ``(scores float64, labels int64)`` on the host."""
        if not self.scores:
            return np.zeros(0), np.zeros(0, dtype=np.int64)
        scores = torch.cat(self.scores).to(torch.float64).cpu().numpy()
        labels = torch.cat(self.labels).to(torch.int64).cpu().numpy()
        if self.indices:
            files, rows = np.unique(torch.cat(self.indices).cpu().numpy(), return_inverse=True)
            if len(files) < len(scores):  # windows: one mean score per file
                counts = np.bincount(rows)
                file_labels = np.zeros(len(files), dtype=np.int64)
                file_labels[rows] = labels
                return np.bincount(rows, weights=scores) / counts, file_labels
        return scores, labels

    def compute(self) -> float:
        scores, labels = self.arrays()
        if not ((labels == 1).any() and (labels == 0).any()):
            return float("nan")
        return float(self.value(scores, labels))

    @abc.abstractmethod
    def value(self, scores: np.ndarray, labels: np.ndarray) -> float:
        """The metric of the collected scores (both classes present)."""


@register_metric("eer")
class EqualErrorRate(ScoreMetric):
    """Equal error rate as the ASVspoof 2019 / 2021 / 5 scripts compute it
    (:func:`.challenge_metrics.eer`: the mean of P_miss and P_fa where they are closest on
    the trial-by-trial DET curve, ties stepped bona fide first), as a fraction (0.05 = 5 %)
    — the number papers report.

    Args:
        num_classes: wired by the builder; must be 2 when given.
    """

    name = "eer"

    def value(self, scores: np.ndarray, labels: np.ndarray) -> float:
        return eer(scores, labels)[0]


@register_metric("eer_interpolated")
class InterpolatedEqualErrorRate(ScoreMetric):
    """Equal error rate where the piecewise-linear ROC crosses ``P_miss = P_fa``
    (:func:`.detection.eer`): independent of how tied scores are ordered, but *not* the
    challenges' number: it differs from ``eer`` by up to about one trial's share of the
    smaller class when no scores tie, and by much more when many do.

    Args:
        num_classes: wired by the builder; must be 2 when given.
    """

    name = "eer_interpolated"

    def value(self, scores: np.ndarray, labels: np.ndarray) -> float:
        return eer_interpolated(scores, labels)[0]


class CostMetric(ScoreMetric):
    """Base of the DCF metrics: a CM cost model, checked when the metric is built (not at the
    first evaluation), and ``cost``, the function ``(scores, labels, p_spoof, c_miss, c_fa) ->
    float`` it evaluates."""

    cost: ClassVar[Callable[..., float]]

    def __init__(
        self, num_classes: Optional[int] = None, p_spoof: float = 0.05, c_miss: float = 1.0, c_fa: float = 10.0
    ):
        """A metric of this cost model, checked now (:func:`.costs.dcf_weights`).

        Args:
            num_classes: wired by the builder; must be 2 when given.
            p_spoof: prior of a spoof (bona fide: 1 − p_spoof).
            c_miss: cost of rejecting bona fide speech.
            c_fa: cost of accepting a spoof.
        """
        super().__init__(num_classes)
        dcf_weights(p_spoof, c_miss, c_fa)
        self.p_spoof, self.c_miss, self.c_fa = p_spoof, c_miss, c_fa

    def value(self, scores: np.ndarray, labels: np.ndarray) -> float:
        return type(self).cost(scores, labels, self.p_spoof, self.c_miss, self.c_fa)


@register_metric("min_dcf")
class MinDCF(CostMetric):
    """Minimum normalised detection cost, ASVspoof 5's primary metric and its value
    (:func:`.challenge_metrics.min_dcf`, ``compute_mindcf``): ``min_t [C_miss (1−p_spoof)
    P_miss(t) + C_fa p_spoof P_fa(t)] / min(C_miss (1−p_spoof), C_fa p_spoof)``."""

    name = "min_dcf"
    cost = staticmethod(min_dcf)


@register_metric("act_dcf")
class ActDCF(CostMetric):
    """Actual normalised detection cost, ASVspoof 5's value
    (:func:`.challenge_metrics.act_dcf`, ``compute_actDCF``): the cost of ``min_dcf`` at
    the Bayes threshold ``−ln(C_miss (1 − p_spoof) / (C_fa p_spoof))``, for scores that
    are natural-log likelihood ratios."""

    name = "act_dcf"
    cost = staticmethod(act_dcf)


@register_metric("cllr")
class Cllr(ScoreMetric):
    """Log-likelihood-ratio cost in bits (:func:`.detection.cllr`), for scores that are
    natural-log likelihood ratios: ASVspoof 5's ``calculate_CLLR`` to rounding (1e-12),
    and finite where that script's ``exp`` overflows to inf (a bona fide score below about
    −709 or a spoof score above 709).

    Args:
        num_classes: wired by the builder; must be 2 when given.
    """

    name = "cllr"

    def value(self, scores: np.ndarray, labels: np.ndarray) -> float:
        return cllr(scores, labels)


@register_metric("min_cllr")
class MinCllr(ScoreMetric):
    """Cllr after the best monotone calibration (PAV; :func:`.detection.min_cllr`): the
    discrimination part of Cllr, in bits (Brümmer & du Preez; not an ASVspoof 5 metric).

    Args:
        num_classes: wired by the builder; must be 2 when given.
    """

    name = "min_cllr"

    def value(self, scores: np.ndarray, labels: np.ndarray) -> float:
        return min_cllr(scores, labels)


class TandemMetric(ScoreMetric):
    """Base of the t-DCF metrics: a CM in tandem with a fixed ASV system whose scores come from
    a file read once, when the metric is built (:func:`read_asv_scores`); ``tandem_cost`` is the
    function ``(scores, labels, asv_scores, asv_labels, **costs) -> float``. The cost model and
    the ASV operating point are checked at build time, not at the first evaluation."""

    tandem_cost: ClassVar[Callable[..., float]]

    def _use_asv(self, asv_scores: str, costs: dict[str, float]) -> None:
        self.asv_path = str(asv_scores)
        self.asv_scores, self.asv_labels = read_asv_scores(self.asv_path)
        self.costs = costs
        type(self).tandem_cost([0.0, 1.0], [0, 1], self.asv_scores, self.asv_labels, **self.costs)

    def value(self, scores: np.ndarray, labels: np.ndarray) -> float:
        return type(self).tandem_cost(scores, labels, self.asv_scores, self.asv_labels, **self.costs)


@register_metric("min_tdcf")
class MinTDCF(TandemMetric):
    """Normalised minimum t-DCF of the CM in tandem with a fixed ASV system: the ASVspoof
    2019 script's value (:func:`.challenge_metrics.min_tdcf`; the ASV at its ``compute_eer``
    threshold, accepting ``score >= threshold``). The ASV
    scores come from a file read once, when the metric is built (see
    :func:`read_asv_scores`: lines ``speaker_or_utterance class score``); the ASV and CM
    trials need not be the same (only the ASV's error rates enter the t-DCF).

    Args:
        asv_scores: path of the ASV score file (relative paths: to the working directory).
        num_classes: wired by the builder; must be 2 when given.
        p_target: prior of a target trial.
        p_nontarget: prior of a zero-effort impostor.
        p_spoof: prior of a spoof (the three priors sum to 1).
        c_miss_asv: cost of the ASV rejecting a target.
        c_fa_asv: cost of the ASV accepting a nontarget.
        c_miss_cm: cost of the CM rejecting bona fide speech.
        c_fa_cm: cost of the CM accepting a spoof.
    """

    name = "min_tdcf"
    tandem_cost = staticmethod(min_tdcf)

    def __init__(
        self,
        asv_scores: str,
        num_classes: Optional[int] = None,
        p_target: float = 0.9405,
        p_nontarget: float = 0.0095,
        p_spoof: float = 0.05,
        c_miss_asv: float = 1.0,
        c_fa_asv: float = 10.0,
        c_miss_cm: float = 1.0,
        c_fa_cm: float = 10.0,
    ):
        super().__init__(num_classes)
        self._use_asv(asv_scores, dict(p_target=p_target, p_nontarget=p_nontarget, p_spoof=p_spoof,
                                       c_miss_asv=c_miss_asv, c_fa_asv=c_fa_asv, c_miss_cm=c_miss_cm,
                                       c_fa_cm=c_fa_cm))  # fmt: skip
