"""``ecapa_tdnn`` — ECAPA-TDNN (Desplanques, Thienpondt & Demuynck, "ECAPA-TDNN: Emphasized
Channel Attention, Propagation and Aggregation in TDNN Based Speaker Verification",
Interspeech 2020), a frame-level 1-D convolutional network that turns frame features
(80 log-mel bands in the paper) into one utterance embedding.

Matches: TaoRuijie/ECAPA-TDNN ``model.py`` (``ECAPA_TDNN(C=1024)`` after its feature
extraction) at 4904fda (2023-05-29), whose released weights are ``exps/pretrain.model``:

* ``Conv1D(k=5) → ReLU → BN`` to ``C`` channels;
* three SE-Res2Blocks (k=3, dilations 2, 3, 4, Res2Net scale 8, SE bottleneck 128), each
  ``Conv1D(k=1) → Res2 dilated Conv1D → Conv1D(k=1) → SE`` with every convolution followed by
  ReLU and BN, plus a residual connection; in the Res2 stage group ``i ≥ 1`` is convolved
  after adding the previous group's output and the last group passes through unchanged.
  The input of each block is the *sum* of the outputs of every block before it (the
  paper's Section 3.4);
* multi-layer feature aggregation: the three blocks' outputs concatenated, ``Conv1D + ReLU``
  (k=1) to 1536 channels;
* attentive statistics pooling with global context: the attention sees each frame, the
  mean and the standard deviation over time (``Conv1D → ReLU → BN → tanh → Conv1D``, 256
  wide, a softmax over time per channel); the global standard deviation is
  ``sqrt(max(var, 1e-4))`` with the *sample* variance, the weighted one
  ``sqrt(max(E_w[x²] − μ², 1e-4))``, as the reference computes them; then ``BN``, ``FC``
  to the 192-d embedding, ``BN``.

With 80 inputs that is 15,444,544 parameters for C=1024 (the reference's count).
``attention_dim=128`` is the paper's attention bottleneck (Table 2: 14.7 M for C=1024,
6.2 M for C=512; 14,657,728 and 6,191,360 here).

Remaining differences: the reference's module names differ (``conv1``/``bn1``,
``layer1-3`` with ``convs``/``bns``, ``layer4``, ``attention``, ``bn5``, ``fc6``, ``bn6``), so its
state dict needs its keys renamed; and the reference computes its features inside the
model (pre-emphasis 0.97, an 80-band mel spectrogram of 25 ms Hamming windows, 512-point
DFT, 20-7600 Hz, ``log(x + 1e-6)`` minus its mean over time, SpecAugment-style masking when
training) — here that is the frontend's job. speechbrain's ``ECAPA_TDNN`` is a different
network (blocks fed one after the other, a convolution + BN aggregation layer, no final
BN), so its weights do not fit.
"""

from __future__ import annotations

import torch
import torch.nn as nn

from ...core.constraints import PositiveInt
from ...core.registries import register_backbone
from ..base import Backbone
from ..common import SqueezeExcitation, frame_features, frame_layout, require_positive
from ..layouts import Layout
from ..necks.attentive_stats_pool import AttentiveStatsPool

__all__ = ["ECAPATDNN", "ReferenceStatsPool", "SERes2Block", "conv_relu_bn"]

STD_FLOOR = 1e-4  # TaoRuijie/ECAPA-TDNN's floor of both variances before the square root


def conv_relu_bn(in_channels: int, out_channels: int, kernel_size: int = 1, dilation: int = 1) -> nn.Sequential:
    """The paper's TDNN unit: ``Conv1D → ReLU → BN`` with 'same' padding (odd kernels)."""
    return nn.Sequential(
        nn.Conv1d(in_channels, out_channels, kernel_size, dilation=dilation, padding=(kernel_size // 2) * dilation),
        nn.ReLU(),
        nn.BatchNorm1d(out_channels),
    )


class SERes2Block(nn.Module):
    """SE-Res2Block: ``1×1 conv → Res2 dilated conv → 1×1 conv → SE`` + residual.

    The Res2 stage splits the channels into ``scale`` groups of ``channels // scale``; group
    ``i`` (``i ≥ 1``) is convolved after adding the previous group's output, the last group
    passes through unchanged (as in TaoRuijie/ECAPA-TDNN and Res2Net).
    """

    def __init__(self, channels: int, kernel_size: int, dilation: int, scale: int, se_bottleneck: int):
        super().__init__()
        self.width = channels // scale
        inner = self.width * scale
        self.conv_in = conv_relu_bn(channels, inner)
        self.res2 = nn.ModuleList(conv_relu_bn(self.width, self.width, kernel_size, dilation) for _ in range(scale - 1))
        self.conv_out = conv_relu_bn(inner, channels)
        self.se = SqueezeExcitation(channels, se_bottleneck)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        groups = torch.split(self.conv_in(x), self.width, dim=1)
        outputs: list[torch.Tensor] = []
        previous = groups[0]
        for i, conv in enumerate(self.res2):
            previous = conv(groups[i] if i == 0 else groups[i] + previous)
            outputs.append(previous)
        outputs.append(groups[len(groups) - 1])
        return self.se(self.conv_out(torch.cat(outputs, dim=1))) + x


@torch.jit.unused
def _traced() -> bool:
    """Whether the call is being traced or compiled (ONNX export, torch.jit.trace, torch.compile)."""
    return torch.jit.is_tracing() or torch.compiler.is_compiling()


class ReferenceStatsPool(AttentiveStatsPool):
    """Attentive statistics pooling with global context computed as TaoRuijie/ECAPA-TDNN's model.py does:
    the global standard deviation from the sample variance, both variances floored at 1e-4, and the
    weighted moments ``Σ x·w`` and ``Σ x²·w``. The layers (``attention``) are the neck's."""

    def __init__(self, in_dim: int, attention_dim: int):
        super().__init__(in_dim, Layout.CHANNELS, attention_dim=attention_dim, global_context=True)
        self.floor = STD_FLOOR

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        frames = x.shape[-1]
        # the sample variance; of one frame (where it is undefined and the reference gives NaN), 0.
        # Exported graphs keep the sample variance (a traced length cannot choose between the two).
        if torch.jit.is_scripting():
            correction = 1 if frames > 1 else 0
        else:
            correction = 1 if _traced() or frames > 1 else 0
        mean = x.mean(dim=2, keepdim=True).expand(-1, -1, frames)
        std = x.var(dim=2, keepdim=True, correction=correction).clamp(min=self.floor).sqrt().expand(-1, -1, frames)
        weights = torch.softmax(self.attention(torch.cat([x, mean, std], dim=1)), dim=2)
        mu = (x * weights).sum(dim=2)
        sigma = (((x * x) * weights).sum(dim=2) - mu * mu).clamp(min=self.floor).sqrt()
        return torch.cat([mu, sigma], dim=1)


@register_backbone("ecapa_tdnn")
class ECAPATDNN(Backbone):
    """ECAPA-TDNN: SE-Res2Blocks, multi-layer aggregation, attentive statistics pooling → embedding.

    Args:
        in_dim: feature size of each frame (e.g. 80 mel bands; wired by the builder).
        in_layout: 'sequence' ([B, T, D]) or 'channels' ([B, D, T]) (wired by the builder).
        channels: width C of the frame-level blocks (1024 in the paper's main system, 512 for
            the small one).
        embed_dim: size of the output embedding.
        mfa_dim: channels of the multi-layer feature aggregation convolution.
        dilations: one SE-Res2Block per dilation.
        kernel_size: kernel of the dilated Res2 convolutions (odd).
        scale: Res2Net scale (number of channel groups).
        se_bottleneck: bottleneck width of the squeeze-excitation gates.
        attention_dim: bottleneck width of the pooling attention (256: TaoRuijie/ECAPA-TDNN;
            128: the paper).
    """

    accepts = (Layout.SEQUENCE, Layout.CHANNELS)
    produces = Layout.VECTOR
    out_dim_rule = "embed_dim"

    def __init__(
        self,
        in_dim: int,
        in_layout: Layout = Layout.SEQUENCE,
        channels: PositiveInt = 1024,
        embed_dim: PositiveInt = 192,
        mfa_dim: PositiveInt = 1536,
        dilations: tuple[PositiveInt, ...] = (2, 3, 4),
        kernel_size: PositiveInt = 3,
        scale: PositiveInt = 8,
        se_bottleneck: PositiveInt = 128,
        attention_dim: PositiveInt = 256,
    ):
        super().__init__()
        layout = frame_layout("ecapa_tdnn", in_layout)
        sizes = {"in_dim": in_dim, "channels": channels, "embed_dim": embed_dim, "mfa_dim": mfa_dim}
        sizes |= {"se_bottleneck": se_bottleneck, "attention_dim": attention_dim}
        require_positive("ecapa_tdnn", **sizes)
        if scale < 2 or channels < scale:
            raise ValueError(f"scale must be at least 2 and at most channels ({channels}), got {scale}")
        if kernel_size < 1 or kernel_size % 2 == 0:
            raise ValueError(f"kernel_size must be a positive odd number (to keep the frame count), got {kernel_size}")
        if not dilations or any(d < 1 for d in dilations):
            raise ValueError(f"dilations must be a non-empty list of positive integers, got {tuple(dilations)}")
        self.in_dim = in_dim
        self.channel_first = layout is Layout.CHANNELS
        self.layer0 = conv_relu_bn(in_dim, channels, kernel_size=5)
        self.blocks = nn.ModuleList(
            SERes2Block(channels, kernel_size, dilation, scale, se_bottleneck) for dilation in dilations
        )
        self.mfa = nn.Sequential(nn.Conv1d(channels * len(dilations), mfa_dim, 1), nn.ReLU())
        self.pool = ReferenceStatsPool(mfa_dim, attention_dim)
        self.pool_norm = nn.BatchNorm1d(2 * mfa_dim)
        self.fc = nn.Linear(2 * mfa_dim, embed_dim)
        self.embed_norm = nn.BatchNorm1d(embed_dim)
        self.out_dim = embed_dim

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = frame_features(x, self.in_dim, self.channel_first, "ecapa_tdnn", channels=True)
        x = self.layer0(x)
        total = x
        outputs: list[torch.Tensor] = []
        for block in self.blocks:
            out = block(total)
            outputs.append(out)
            total = total + out
        x = self.mfa(torch.cat(outputs, dim=1))
        x = self.pool_norm(self.pool(x))
        return self.embed_norm(self.fc(x))
