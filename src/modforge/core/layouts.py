"""Tensor layouts: what a part accepts and produces, in a form the builder can check.

=============  ====================  ===========================  =========================
layout         shape                 ``in_dim`` / ``out_dim``     example
=============  ====================  ===========================  =========================
waveform       ``[B, T]``            1 (mono samples)             raw audio
vector         ``[B, D]``            ``D``                        embeddings, logits
sequence       ``[B, T, D]``         ``D``                        frame features, tokens
channels       ``[B, C, T]``         ``C``                        1-D conv feature maps
image          ``[B, C, H, W]``      ``C``                        images, 2-D feature maps
multiscale     list of ``[B,C,H,W]`` list of ``C`` per level      FPN inputs/outputs
=============  ====================  ===========================  =========================

When one part's output layout is not one the next part accepts, the builder inserts a
documented *adapter* if the conversion is unambiguous (pooling a feature map into a
vector, viewing a spectrogram sequence as a one-channel image...) and otherwise stops
at build time with a message naming both parts and both layouts.
"""

from __future__ import annotations

import enum
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:  # pragma: no cover - torch is imported where tensors are made
    import torch

__all__ = ["Layout", "channel_dim", "example_input", "infer_layout", "out_dim_of", "rank_of"]


class Layout(str, enum.Enum):
    """The shape family of a tensor passed between parts."""

    WAVEFORM = "waveform"
    VECTOR = "vector"
    SEQUENCE = "sequence"
    CHANNELS = "channels"
    IMAGE = "image"
    MULTISCALE = "multiscale"

    @property
    def shape(self) -> str:
        """The shape in words, for messages: ``[B, T, D]``."""
        return _SHAPES[self]

    def __str__(self) -> str:
        return f"{self.value} {self.shape}"


_SHAPES = {
    Layout.WAVEFORM: "[B, T]",
    Layout.VECTOR: "[B, D]",
    Layout.SEQUENCE: "[B, T, D]",
    Layout.CHANNELS: "[B, C, T]",
    Layout.IMAGE: "[B, C, H, W]",
    Layout.MULTISCALE: "list of [B, C, H, W]",
}
_RANKS = {Layout.WAVEFORM: 2, Layout.VECTOR: 2, Layout.SEQUENCE: 3, Layout.CHANNELS: 3, Layout.IMAGE: 4}

# Default example sizes for dry runs and conformance checks: small but not degenerate.
DEFAULT_SPATIAL = {Layout.WAVEFORM: (4000,), Layout.SEQUENCE: (16,), Layout.CHANNELS: (32,), Layout.IMAGE: (32, 32)}


def rank_of(layout: Layout) -> int | None:
    """Number of tensor dimensions (with the batch), None for multiscale."""
    return _RANKS.get(Layout(layout))


def channel_dim(layout: Layout) -> int:
    """Which dimension holds the size reported as ``in_dim``/``out_dim``."""
    layout = Layout(layout)
    return -1 if layout in (Layout.VECTOR, Layout.SEQUENCE) else 1


def out_dim_of(output: Any, layout: Layout) -> int | list[int]:
    """The ``out_dim`` a tensor (or list of tensors) of ``layout`` has."""
    layout = Layout(layout)
    if layout is Layout.MULTISCALE:
        return [int(t.shape[1]) for t in output]
    if layout is Layout.WAVEFORM:
        return 1
    return int(output.shape[channel_dim(layout)])


def infer_layout(output: Any, hint: Layout | None = None) -> Layout:
    """Guess the layout of a part's output from its rank (a 3-D tensor is taken as a
    sequence unless ``hint`` says channels)."""
    if isinstance(output, (list, tuple)):
        return Layout.MULTISCALE
    rank = output.dim()
    if rank == 2:
        return hint if hint in (Layout.VECTOR, Layout.WAVEFORM) else Layout.VECTOR
    if rank == 3:
        return hint if hint in (Layout.SEQUENCE, Layout.CHANNELS) else Layout.SEQUENCE
    if rank == 4:
        return Layout.IMAGE
    raise ValueError(f"cannot tell the layout of a {rank}-D output of shape {tuple(output.shape)}")


def example_input(
    layout: Layout,
    in_dim: int | Sequence[int],
    *,
    batch: int = 2,
    spatial: Sequence[int] | None = None,
    generator: torch.Generator | None = None,
) -> torch.Tensor | list[torch.Tensor]:
    """A small random input of ``layout`` whose size matches ``in_dim``.

    ``spatial`` sets T (waveform/sequence/channels) or (H, W) (image; for multiscale the
    size of the first level, halved at each further level).
    """
    import torch

    layout = Layout(layout)

    def randn(*shape: int) -> torch.Tensor:
        return torch.randn(*shape, generator=generator)

    if layout is Layout.MULTISCALE:
        dims = list(in_dim) if isinstance(in_dim, Sequence) else [int(in_dim)]
        h, w = tuple(spatial) if spatial else (16, 16)
        return [randn(batch, c, max(1, h >> i), max(1, w >> i)) for i, c in enumerate(dims)]
    size = tuple(spatial) if spatial else DEFAULT_SPATIAL.get(layout, ())
    dim = int(in_dim) if not isinstance(in_dim, Sequence) else int(in_dim[-1])
    if layout is Layout.WAVEFORM:
        return randn(batch, *size[:1])
    if layout is Layout.VECTOR:
        return randn(batch, dim)
    if layout is Layout.SEQUENCE:
        return randn(batch, size[0], dim)
    if layout is Layout.CHANNELS:
        return randn(batch, dim, size[0])
    return randn(batch, dim, *size[:2])
