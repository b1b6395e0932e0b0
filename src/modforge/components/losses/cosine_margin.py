"""The core of the margin losses (``am_softmax``, ``oc_softmax``, ``a_softmax``, in ``margin.py``).

Each of them owns its classifier: learnt rows (class weights, or one bona fide centre) that an
embedding is scored against by the cosine of the angle between them. :class:`CosineMarginLoss`
holds what they share — the argument and input checks with their messages, the rows
(:meth:`~CosineMarginLoss.add_class_weights`), the normalised cosine logits
(:meth:`~CosineMarginLoss.cosines`), ``logits``/``score`` for class-weight losses, and a
``forward`` that checks the batch and hands the cosines to the loss's own
:meth:`~CosineMarginLoss.margin_loss`. A margin loss is then its arguments and that one method.
"""

from __future__ import annotations

import abc
from typing import ClassVar, Optional

import torch
import torch.nn as nn
import torch.nn.functional as F

from ..base import Loss

__all__ = ["CosineMarginLoss", "check_bonafide_label", "check_dims", "check_inputs", "cosines"]


def check_dims(name: str, in_dim: int, num_classes: Optional[int], *, min_classes: int = 2) -> None:
    """A positive int embedding size and, when given, at least ``min_classes`` classes."""
    if not isinstance(in_dim, int) or isinstance(in_dim, bool) or in_dim < 1:
        raise ValueError(f"{name}: in_dim must be a positive int (the embedding size), got {in_dim!r}")
    if num_classes is not None and (
        not isinstance(num_classes, int) or isinstance(num_classes, bool) or num_classes < min_classes
    ):
        raise ValueError(f"{name}: num_classes must be an int of at least {min_classes}, got {num_classes!r}")


def check_bonafide_label(name: str, bonafide_label: int, num_classes: Optional[int]) -> None:
    """A non-negative int, below ``num_classes`` when that is known."""
    if not isinstance(bonafide_label, int) or isinstance(bonafide_label, bool) or bonafide_label < 0:
        raise ValueError(f"{name}: bonafide_label must be a non-negative int, got {bonafide_label!r}")
    if num_classes is not None and bonafide_label >= num_classes:
        raise ValueError(
            f"{name}: bonafide_label {bonafide_label} is not a class index below num_classes ({num_classes})"
        )


def check_inputs(name: str, embedding: torch.Tensor, label: Optional[torch.Tensor], in_dim: int) -> None:
    """Shape checks only (no look at the values: that would synchronise with the device)."""
    if not isinstance(embedding, torch.Tensor) or embedding.dim() != 2 or embedding.shape[1] != in_dim:
        shape = tuple(embedding.shape) if isinstance(embedding, torch.Tensor) else type(embedding).__name__
        raise ValueError(f"{name}: expected an embedding of shape [batch, {in_dim}], got {shape}")
    if label is None:
        return
    if not isinstance(label, torch.Tensor) or label.dim() != 1 or label.shape[0] != embedding.shape[0]:
        shape = tuple(label.shape) if isinstance(label, torch.Tensor) else type(label).__name__
        raise ValueError(f"{name}: expected integer labels of shape [{embedding.shape[0]}], got {shape}")
    if label.is_floating_point() or label.is_complex() or label.dtype == torch.bool:
        raise ValueError(f"{name}: labels must be integer class indices, got dtype {label.dtype}")


def cosines(embedding: torch.Tensor, rows: torch.Tensor) -> torch.Tensor:
    """``[B, R]`` cosine of the angle between each embedding and each of the ``R`` rows."""
    return F.linear(F.normalize(embedding, dim=1), F.normalize(rows, dim=1))


class CosineMarginLoss(Loss, metaclass=abc.ABCMeta):
    """A loss that reads the embedding and scores it by its cosines to learnt rows (the base of
    the margin losses). Subclasses set ``loss_name`` (their registered name, which starts every
    error message), create their rows and define :meth:`margin_loss`.

    ``logits(embedding)`` are the cosines to the class weights (their argmax is the prediction)
    and ``score(embedding)`` the cosine to the bona fide class's weight; a loss with other rows
    (``oc_softmax``'s one centre) overrides both and :meth:`rows`.

    Not scriptable by ``torch.jit.script``: its argument checks build lists of sizes TorchScript
    cannot infer; losses run eager in every engine anyway (engines run the stages). The
    ``torchscript`` engine traces it instead, with a warning (see the engines table in the README).
    """

    input_key = "embedding"
    loss_name: ClassVar[str] = "margin loss"

    def __init__(self, in_dim: int, num_classes: Optional[int]):
        super().__init__()
        check_dims(self.loss_name, in_dim, num_classes)
        self.in_dim = in_dim

    def set_bonafide_label(self, bonafide_label: int, num_classes: Optional[int]) -> None:
        """Check and keep the class index of bona fide speech."""
        check_bonafide_label(self.loss_name, bonafide_label, num_classes)
        self.bonafide_label = bonafide_label

    def add_class_weights(self, num_classes: int) -> None:
        """One Xavier-uniform weight row per class, ``weight`` ``[num_classes, in_dim]``."""
        self.num_classes = num_classes
        self.weight = nn.Parameter(torch.empty(num_classes, self.in_dim))
        nn.init.xavier_uniform_(self.weight)

    def rows(self) -> torch.Tensor:
        """What embeddings are scored against: the class weights."""
        return self.weight

    def cosines(self, embedding: torch.Tensor, label: Optional[torch.Tensor] = None) -> torch.Tensor:
        """``[B, R]`` cosines between the (shape-checked) embeddings and :meth:`rows`."""
        check_inputs(self.loss_name, embedding, label, self.in_dim)
        return cosines(embedding, self.rows())

    def logits(self, embedding: torch.Tensor) -> torch.Tensor:
        """``[B, num_classes]`` cosines between the embeddings and the class weights."""
        return self.cosines(embedding)

    def score(self, embedding: torch.Tensor) -> torch.Tensor:
        """``[B]`` cosine to the bona fide class's weight (higher = more bona fide)."""
        return self.logits(embedding)[:, self.bonafide_label]

    @abc.abstractmethod
    def margin_loss(self, cos: torch.Tensor, label: torch.Tensor, embedding: torch.Tensor) -> torch.Tensor:
        """The scalar loss from the cosines ``[B, R]``, the long labels ``[B]`` and the embeddings
        (each registered loss says how its margin enters)."""

    def forward(self, embedding: torch.Tensor, label: torch.Tensor) -> torch.Tensor:
        cos = self.cosines(embedding, label)
        return self.margin_loss(cos, label.long(), embedding)
