"""Margin losses that own their classifier: ``am_softmax``, ``oc_softmax``, ``a_softmax``.

These read the backbone's embedding (``input_key = "embedding"``) rather than a head's
logits: each holds its own class weights (or, for OC-softmax, one centre) and scores an
embedding by the cosine of the angle between it and each class weight. The margin makes
the training target harder than the decision rule, which compacts each class on the
hypersphere. All three are standard in audio deepfake detection (ASVspoof systems):

* AM-softmax — Wang, Cheng, Liu & Liu, "Additive Margin Softmax for Face Verification",
  IEEE SPL 2018: ``s · (cos θ_y − m)`` for the true class, ``s · cos θ_j`` for the others.
* OC-softmax — Zhang, Jiang & Li, "One-class Learning Towards Synthetic Voice Spoofing
  Detection", IEEE SPL 2021: one centre for bona fide speech; bona fide embeddings are
  pulled within cosine ``m_real`` of it, spoofs pushed below ``m_fake``.
* A-softmax — Liu, Wen, Yu, Li, Raj & Song, "SphereFace: Deep Hypersphere Embedding for
  Face Recognition", CVPR 2017: a multiplicative angular margin ``cos θ_y → ψ(θ_y)``
  blended in with the λ annealing of the reference implementation.

Besides ``forward(embedding, label) -> scalar loss`` each provides ``logits(embedding)``
(scores whose argmax is the predicted class) and ``score(embedding)`` (a detection score,
higher = more bona fide), so a model trained with one of them can predict and be scored.
What they share — the checks, the class weights, the normalised cosine logits, ``logits``,
``score`` and ``forward`` — is :class:`~.cosine_margin.CosineMarginLoss`; each loss here is its
arguments and its ``margin_loss`` (TorchScript: see that base's note).
"""

from __future__ import annotations

import math
from typing import Optional

import torch
import torch.nn as nn
import torch.nn.functional as F

from ...core.constraints import FiniteFloat, NonNegativeFloat, PositiveFloat, PositiveInt
from ...core.registries import register_loss
from .cosine_margin import CosineMarginLoss

__all__ = ["ASoftmax", "AMSoftmax", "OCSoftmax"]


@register_loss("am_softmax")
class AMSoftmax(CosineMarginLoss):
    """Additive margin softmax (Wang et al., 2018): cross-entropy over
    ``s · (cos θ_j − m · [j = y])``, where θ_j is the angle between the embedding and the
    weight of class j (both L2-normalised), so the true class must win by a cosine margin m.
    With ``margin=0`` it is a scaled cosine-softmax cross-entropy.

    ``logits(embedding)`` are the cosines ``cos θ_j`` ([B, num_classes], no scale, no
    margin — their argmax is the prediction); ``score(embedding)`` is the cosine to the
    bona fide class's weight (higher = more bona fide).

    Args:
        in_dim: embedding size (wired by the builder).
        num_classes: number of classes (wired by the builder).
        scale: s, the multiplier of the cosines (the paper uses 30).
        margin: m, subtracted from the true class's cosine (the paper finds 0.35 best).
        bonafide_label: class index of bona fide speech, used by ``score``.
    """

    loss_name = "am_softmax"
    out_dim_rule = "a scalar loss; logits() gives [batch, num_classes] cosines"

    def __init__(
        self,
        in_dim: int,
        num_classes: int,
        scale: PositiveFloat = 30.0,
        margin: NonNegativeFloat = 0.35,
        bonafide_label: int = 1,
    ):
        super().__init__(in_dim, num_classes)
        if not scale > 0 or not math.isfinite(scale):
            raise ValueError(f"am_softmax: scale must be a positive number, got {scale!r}")
        if not 0.0 <= margin < 2.0:
            raise ValueError(f"am_softmax: margin must be in [0, 2) (a cosine difference), got {margin!r}")
        self.set_bonafide_label(bonafide_label, num_classes)
        self.scale, self.margin = float(scale), float(margin)
        self.add_class_weights(num_classes)

    def margin_loss(self, cos: torch.Tensor, label: torch.Tensor, embedding: torch.Tensor) -> torch.Tensor:
        """Cross-entropy over ``s · (cos θ_j − m · [j = y])``."""
        margins = torch.zeros_like(cos).scatter(1, label.unsqueeze(1), self.margin)
        return F.cross_entropy(self.scale * (cos - margins), label)


@register_loss("oc_softmax")
class OCSoftmax(CosineMarginLoss):
    """One-class softmax (Zhang, Jiang & Li, 2021). One learnable centre w; with
    ``ŝ = cos(embedding, w)``, each sample costs

    * bona fide (``label == bonafide_label``): ``softplus(α · (m_real − ŝ))``
    * spoof (any other label):                 ``softplus(α · (ŝ − m_fake))``

    averaged over the batch — bona fide speech is compacted within cosine ``m_real`` of
    the centre while spoofs, of whatever attack, are only pushed beyond ``m_fake``.

    ``score(embedding)`` is ŝ, the cosine to the centre (higher = more bona fide; the
    paper's detection score). ``logits(embedding)`` is ``[B, 2]``: column 1 = ŝ (bona
    fide), column 0 = ``m_real + m_fake − ŝ``, so the argmax says bona fide exactly when
    ŝ lies above the midpoint ``(m_real + m_fake) / 2`` of the two margins.

    Args:
        in_dim: embedding size (wired by the builder).
        num_classes: number of classes in the data (wired by the builder); only checked
            (at least 2, and bonafide_label must be one of them) — every label other than
            bonafide_label counts as spoof.
        m_real: cosine margin of bona fide speech (the paper: 0.9).
        m_fake: cosine margin of spoofs (the paper: 0.2); below m_real.
        alpha: scale α inside the softplus (the paper: 20).
        bonafide_label: the label of bona fide speech in the training data (``logits`` keeps
            modforge's column order regardless: 0 = spoof, 1 = bona fide).
    """

    loss_name = "oc_softmax"
    out_dim_rule = "a scalar loss; logits() gives [batch, 2] (column 1 = bona fide)"

    def __init__(
        self,
        in_dim: int,
        num_classes: Optional[int] = None,
        m_real: FiniteFloat = 0.9,
        m_fake: FiniteFloat = 0.2,
        alpha: NonNegativeFloat = 20.0,
        bonafide_label: int = 1,
    ):
        super().__init__(in_dim, num_classes)
        if not (-1.0 <= m_fake < m_real <= 1.0):
            raise ValueError(
                f"oc_softmax: margins must be cosines with -1 <= m_fake < m_real <= 1, got m_real={m_real!r}, "
                f"m_fake={m_fake!r}"
            )
        if not alpha > 0 or not math.isfinite(alpha):
            raise ValueError(f"oc_softmax: alpha must be a positive number, got {alpha!r}")
        self.set_bonafide_label(bonafide_label, num_classes)
        self.m_real, self.m_fake, self.alpha = float(m_real), float(m_fake), float(alpha)
        self.center = nn.Parameter(torch.empty(1, in_dim))
        nn.init.normal_(self.center)

    def rows(self) -> torch.Tensor:
        """The one bona fide centre."""
        return self.center

    def score(self, embedding: torch.Tensor) -> torch.Tensor:
        """``[B]`` cosine to the bona fide centre (higher = more bona fide)."""
        return self.cosines(embedding).squeeze(1)

    def logits(self, embedding: torch.Tensor) -> torch.Tensor:
        """``[B, 2]``: ``[m_real + m_fake − ŝ, ŝ]`` (column 1 = bona fide)."""
        s = self.score(embedding)
        return torch.stack([(self.m_real + self.m_fake) - s, s], dim=1)

    def margin_loss(self, cos: torch.Tensor, label: torch.Tensor, embedding: torch.Tensor) -> torch.Tensor:
        """The batch mean of ``softplus(α · (m_real − ŝ))`` (bona fide) or ``softplus(α · (ŝ − m_fake))``."""
        s = cos.squeeze(1)
        bonafide = label == self.bonafide_label
        return F.softplus(self.alpha * torch.where(bonafide, self.m_real - s, s - self.m_fake)).mean()


def _chebyshev(c: torch.Tensor, m: int) -> torch.Tensor:
    """``cos(m θ)`` from ``c = cos θ`` (Chebyshev polynomial T_m; finite gradient at c = ±1,
    unlike ``cos(m · acos(c))``)."""
    previous, current = torch.ones_like(c), c
    if m == 0:
        return previous
    for _ in range(m - 1):
        previous, current = current, 2 * c * current - previous
    return current


@register_loss("a_softmax")
class ASoftmax(CosineMarginLoss):
    """Angular softmax, SphereFace (Liu et al., 2017). Class weights are L2-normalised
    (no bias); the embedding keeps its norm. With θ_j the angle to class j, the logits are
    ``‖x‖ cos θ_j`` except the true class's, which becomes

        ``‖x‖ (λ cos θ_y + ψ(θ_y)) / (1 + λ)``,  ``ψ(θ) = (−1)^k cos(m θ) − 2k``

    for θ in [kπ/m, (k+1)π/m] (k = 0..m−1): ψ is monotonically decreasing on [0, π] and
    equals cos(mθ) for θ ≤ π/m, a multiplicative angular margin m. The blend weight λ
    follows the reference implementation's annealing (the SphereFace Caffe margin layer):
    ``λ = max(lambda_min, lambda_base · (1 + lambda_gamma · t)^(−lambda_power))``,
    where t counts the forward calls made in training mode (a buffer, saved with the
    state so a resumed run continues the schedule; eval-mode calls leave it alone). λ
    starts at lambda_base (≈ plain softmax, so training starts as easily as with
    softmax) and falls to lambda_min. ``lambda_base == lambda_min`` gives a fixed λ;
    ``lambda_min = 0`` lets the margin take over completely.

    ``logits(embedding)`` are the cosines ``cos θ_j`` ([B, num_classes]; their argmax
    equals that of ``‖x‖ cos θ_j``); ``score(embedding)`` is the cosine to the bona fide
    class's weight (higher = more bona fide).

    Args:
        in_dim: embedding size (wired by the builder).
        num_classes: number of classes (wired by the builder).
        margin: m, the integer angular margin (the paper uses 4; 1 gives a weight-normalised softmax).
        lambda_base: λ at the first training step (reference: 1000).
        lambda_min: the floor λ anneals to (reference: 5).
        lambda_gamma: annealing rate γ (reference: 0.12).
        lambda_power: annealing power (reference: 1).
        bonafide_label: class index of bona fide speech, used by ``score``.
    """

    loss_name = "a_softmax"
    out_dim_rule = "a scalar loss; logits() gives [batch, num_classes] cosines"

    def __init__(
        self,
        in_dim: int,
        num_classes: int,
        margin: PositiveInt = 4,
        lambda_base: PositiveFloat = 1000.0,
        lambda_min: NonNegativeFloat = 5.0,
        lambda_gamma: NonNegativeFloat = 0.12,
        lambda_power: NonNegativeFloat = 1.0,
        bonafide_label: int = 1,
    ):
        super().__init__(in_dim, num_classes)
        if not isinstance(margin, int) or isinstance(margin, bool) or margin < 1:
            raise ValueError(f"a_softmax: margin must be a positive integer (the paper uses 4), got {margin!r}")
        for key, value in (("lambda_min", lambda_min), ("lambda_gamma", lambda_gamma), ("lambda_power", lambda_power)):
            if not value >= 0 or not math.isfinite(value):
                raise ValueError(f"a_softmax: {key} must be a non-negative number, got {value!r}")
        if not lambda_base >= lambda_min or not math.isfinite(lambda_base):
            raise ValueError(
                f"a_softmax: lambda_base must be a number no smaller than lambda_min ({lambda_min}), got {lambda_base!r}"
            )
        self.set_bonafide_label(bonafide_label, num_classes)
        self.margin = margin
        self.lambda_base, self.lambda_min = float(lambda_base), float(lambda_min)
        self.lambda_gamma, self.lambda_power = float(lambda_gamma), float(lambda_power)
        self.add_class_weights(num_classes)
        self.register_buffer("iteration", torch.zeros((), dtype=torch.long))

    def current_lambda(self) -> torch.Tensor:
        """λ for the next training step (a 0-d tensor on the buffer's device)."""
        t = self.iteration.to(torch.float32)
        annealed = self.lambda_base * (1.0 + self.lambda_gamma * t) ** (-self.lambda_power)
        return annealed.clamp(min=self.lambda_min)

    def psi(self, cos: torch.Tensor) -> torch.Tensor:
        """``ψ(θ) = (−1)^k cos(mθ) − 2k`` from ``cos θ`` (k from the detached angle, as in the reference)."""
        m = self.margin
        c = cos.clamp(-1.0, 1.0)
        theta = torch.acos(c.detach())
        k = torch.floor(m * theta / math.pi).clamp(0, m - 1)
        sign = 1.0 - 2.0 * torch.remainder(k, 2.0)
        return sign * _chebyshev(c, m) - 2.0 * k

    def margin_loss(self, cos: torch.Tensor, label: torch.Tensor, embedding: torch.Tensor) -> torch.Tensor:
        """Cross-entropy over ``‖x‖ cos θ_j``, the true class's blended with ``ψ(θ_y)``; counts the step."""
        cos = cos.clamp(-1.0, 1.0)
        norm = embedding.norm(dim=1, keepdim=True)
        index = label.unsqueeze(1)
        cos_y = cos.gather(1, index)
        lam = self.current_lambda().to(cos.dtype)
        target = (lam * cos_y + self.psi(cos_y)) / (1.0 + lam)
        logits = norm * cos.scatter(1, index, target)
        if self.training:
            with torch.no_grad():
                self.iteration.add_(1)
        return F.cross_entropy(logits, label)
