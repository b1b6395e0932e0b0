"""``lcnn`` — Light CNN with Max-Feature-Map activations for spoofing detection.

The LCNN of the STC systems for ASVspoof 2019 (Lavrentyeva et al., Interspeech 2019,
"STC antispoofing systems for the ASVspoof2019 challenge") in the form of the ASVspoof
2021 LFCC-LCNN baseline (Wang & Yamagishi), which is the variant built here.

Matches: asvspoof-challenge/2021 ``LA/Baseline-LFCC-LCNN/project/baseline_LA/model.py``
(``m_transform``, ``m_before_pooling`` and the mean before ``m_output_act``; the DF and PA
baselines are the same) with ``sandbox/block_nn.py``'s ``MaxFeatureMap2D`` and ``BLSTMLayer``,
at 4ab5666 (2021-06-01) — whose released weights (``__pretrained/trained_network.pt``) were
trained on the ``lfcc`` frontend's default features (60 dims: 20 LFCC + deltas), which
``lfcc`` + ``lcnn`` + ``linear`` reproduce:

1. a stack of convolutions, each followed by Max-Feature-Map (MFM: the channels are split
   in two halves and their element-wise maximum kept, halving the channels):
   conv 5×5 (64) → MFM → max-pool 2×2, then pairs of 1×1 / 3×3 convolutions with
   affine-free BatchNorm between them — 64→32, 96→48, pool, BN; 96→48, 128→64, pool;
   128→64, 64→32, BN; 64→32, 64→32, pool — and dropout 0.7;
2. the map [B, 32, F/16, T/16] read as a sequence over time of 32 × F/16 features, two
   bidirectional LSTM layers with a residual connection, and the average over time.
   That average is the embedding (the baseline's output layer, ``Linear(96, 1)``, is
   modforge's ``linear`` head); averaging over time is what makes the network take any
   number of frames (the 2019 system instead used fully connected layers on fixed-size
   inputs, which is why it is not the variant chosen).

Differences from the baseline, all deliberate (none changes what the baseline computes
on its 60-dim features):

* Input orientation. modforge's image is [B, C, F, T] (frequency = H, time = W); the
  baseline convolves [B, 1, T, F]. The kernels are square, so this is the same network
  with its kernels transposed (a baseline weight ``w`` is ``w.transpose(-1, -2)`` here);
  the flattened features keep the baseline's order (channel-major, then frequency).
* Names. The two ``BLSTMLayer`` modules (each ``nn.LSTM(96, 48, bidirectional=True)``) are one
  2-layer bidirectional ``nn.LSTM`` — the same computation, its layer-1 weights under
  ``*_l1`` keys; the convolutions sit in four ``stages`` instead of one ``Sequential``. A
  baseline state dict therefore needs its keys renamed (and the kernels transposed).
* Output. The baseline's ``Linear(96, 1)`` gives one logit (a sigmoid and BCE in
  training, the logit as the score); modforge's ``linear`` head gives ``num_classes``.
* Frequency width. The baseline's width, 32 × (60 LFCC dims // 16) = 96, depends on the
  number of frequency bins, which the builder cannot hand over (a spectrogram arrives as
  a one-channel image, ``in_dim`` = 1). Here the frequency axis left after the four pools
  is max-pooled adaptively to ``freq_bins`` (default 3), so the width is
  ``32 × freq_bins`` whatever F is — and for the baseline's 60 bins that pooling is the
  identity, so the computation is the baseline's.
* Short inputs. Each 2×2 max-pool keeps the baseline's floor mode while an axis holds at
  least 2 entries and reduces a 1-entry axis to itself instead of to nothing, so any
  F ≥ 1 and any T ≥ 1 work (the baseline needs 16 of each). This is written without
  branches on the sizes, so an ONNX export with a dynamic time axis stays correct.

Parameters: 269,632 in the backbone; 269,826 with a 2-class ``linear`` head (the
baseline's single-logit model has 269,729 trainable parameters).
"""

from __future__ import annotations

import torch
import torch.nn as nn
import torch.nn.functional as F

from ...core.constraints import PositiveInt, Probability
from ...core.registries import register_backbone
from ..base import Backbone
from ..layouts import Layout

__all__ = ["LCNN", "MaxFeatureMap", "MaxPool2x2", "pool_frequency"]


def _frames(length: int, kernel: int) -> int:
    """``max(length // kernel, 1)``; as traceable arithmetic when ``length`` is a traced size."""
    if torch.jit.is_scripting():
        return max(length // kernel, 1)
    return (length + kernel * (length < kernel)) // kernel


class MaxPool2x2(nn.Module):
    """2×2 max-pool, stride 2, in floor mode, except that an axis of size 1 stays 1 (not 0)."""

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        height, width = x.shape[-2], x.shape[-1]
        pooled = F.max_pool2d(x, 2, 2, ceil_mode=True)
        return pooled[..., : _frames(height, 2), : _frames(width, 2)]


class MaxFeatureMap(nn.Module):
    """Max-Feature-Map: the element-wise maximum of the two halves of ``2 × channels`` channels.

    Args:
        channels: output channels (half the input's); fixed so exported graphs know the width.
    """

    def __init__(self, channels: int):
        super().__init__()
        self.channels = int(channels)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return torch.maximum(x[:, : self.channels], x[:, self.channels : 2 * self.channels])


def pool_frequency(x: torch.Tensor, bins: int) -> torch.Tensor:
    """Adaptive max-pool of axis 2 (frequency) of [B, C, F, T] to ``bins`` entries.

    Bin ``i`` is the maximum over ``[floor(i·F/bins), ceil((i+1)·F/bins))`` (the windows of
    ``nn.AdaptiveMaxPool``); the identity when ``F == bins``.
    """
    size = x.shape[2]
    if size == bins:
        return x
    parts = []
    for i in range(bins):
        start = (i * size) // bins
        end = ((i + 1) * size + bins - 1) // bins
        parts.append(x[:, :, start:end].amax(dim=2, keepdim=True))
    return torch.cat(parts, dim=2)


def _mfm_conv(in_channels: int, out_channels: int, kernel_size: int) -> list[nn.Module]:
    """A convolution to ``2 × out_channels`` and MFM down to ``out_channels``."""
    return [
        nn.Conv2d(in_channels, 2 * out_channels, kernel_size, padding=kernel_size // 2),
        MaxFeatureMap(out_channels),
    ]


@register_backbone("lcnn")
class LCNN(Backbone):
    """LCNN with Max-Feature-Map activations and BLSTM pooling over time (the ASVspoof 2021
    LFCC-LCNN baseline). Takes a spectrogram as an image [B, C, F, T] — e.g. 60 LFCC dims
    from ``lfcc`` adapted to [B, 1, 60, T] — with any F and T; outputs a 32 × freq_bins
    embedding.

    Args:
        in_dim: input channels (1 for a spectrogram; wired by the builder).
        freq_bins: frequency entries kept after the convolutions (adaptive max-pooling);
            the baseline has 60 // 16 = 3. The embedding has 32 × freq_bins values.
        dropout: dropout after the convolution stack (the baseline's 0.7).
    """

    accepts = (Layout.IMAGE,)
    produces = Layout.VECTOR
    out_dim_rule = "32 × freq_bins (96 with the default 3, the baseline's 60 LFCC dims // 16)"

    def __init__(self, in_dim: int = 1, freq_bins: PositiveInt = 3, dropout: Probability = 0.7):
        super().__init__()
        if int(in_dim) < 1:
            raise ValueError(f"lcnn: in_dim must be a positive number of input channels, got {in_dim}")
        if int(freq_bins) < 1:
            raise ValueError(f"lcnn: freq_bins must be a positive integer, got {freq_bins}")
        if not 0.0 <= float(dropout) < 1.0:
            raise ValueError(f"lcnn: dropout must be in [0, 1), got {dropout}")
        self.in_channels = int(in_dim)
        self.freq_bins = int(freq_bins)
        self.stages = nn.ModuleList(  # the convolution stack, one stage per 2×2 max-pool
            [
                nn.Sequential(*_mfm_conv(self.in_channels, 32, 5), MaxPool2x2()),
                nn.Sequential(
                    *_mfm_conv(32, 32, 1),
                    nn.BatchNorm2d(32, affine=False),
                    *_mfm_conv(32, 48, 3),
                    MaxPool2x2(),
                    nn.BatchNorm2d(48, affine=False),
                ),
                nn.Sequential(
                    *_mfm_conv(48, 48, 1), nn.BatchNorm2d(48, affine=False), *_mfm_conv(48, 64, 3), MaxPool2x2()
                ),
                nn.Sequential(
                    *_mfm_conv(64, 64, 1),
                    nn.BatchNorm2d(64, affine=False),
                    *_mfm_conv(64, 32, 3),
                    nn.BatchNorm2d(32, affine=False),
                    *_mfm_conv(32, 32, 1),
                    nn.BatchNorm2d(32, affine=False),
                    *_mfm_conv(32, 32, 3),
                    MaxPool2x2(),
                    nn.Dropout(float(dropout)),
                ),
            ]
        )
        width = 32 * self.freq_bins
        # two bidirectional LSTM layers, width // 2 units each way (the baseline's two BLSTMLayers)
        self.blstm = nn.LSTM(width, width // 2, num_layers=2, bidirectional=True, batch_first=True)
        self.out_dim = width

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if x.dim() != 4 or x.shape[1] != self.in_channels:
            raise ValueError(
                f"lcnn: expected a spectrogram image [B, {self.in_channels}, F, T], got shape {list(x.shape)}"
            )
        for stage in self.stages:
            x = stage(x)
        x = pool_frequency(x, self.freq_bins)  # [B, 32, freq_bins, T']
        x = x.permute(0, 3, 1, 2).flatten(2)  # [B, T', 32 · freq_bins], channel-major like the baseline
        hidden, _ = self.blstm(x)
        return (hidden + x).mean(dim=1)
