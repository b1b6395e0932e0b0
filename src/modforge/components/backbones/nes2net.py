"""``nes2net`` — Nes2Net-X, the nested Res2Net back-end of Liu, Truong, Das, Lee & Li,
"Nes2Net: A Lightweight Nested Architecture for Foundation Model Driven Speech
Anti-spoofing" (IEEE T-IFS 2025, arXiv 2504.05657).

Matches: Liu-Tianchi/Nes2Net_ASVspoof_ITW ``model_scripts/wav2vec2_Nes2Net_X.py``
(``Nested_Res2Net_TDNN``, the back-end after XLS-R) at ee8b559 (2025-03-12), with ``main.py``'s
defaults (``--Nes_ratio 8 8 --SE_ratio 1 --dilation 2 --pool_func mean``), the configuration of
its released ASVspoof / In-the-Wild checkpoints. (Liu-Tianchi/Nes2Net's WavLM models for
singing-voice deepfakes use the same blocks with ``--dilation 1``: pass ``dilation=1``.)

Speech foundation models (XLS-R, WavLM) give 1024-d frames; instead of a dimensionality
reduction layer, Nes2Net works on all of them directly:

* **outer Res2Net**: the channels are cut into ``s₁`` groups (8 → 128 channels each); group
  ``i`` plus the previous group's output goes through an inner block, ReLU and BatchNorm, the
  last group passes unchanged, everything is concatenated again (1024 channels), then
  BatchNorm and ReLU;
* **inner block** (Nes2Net-X's Bottle2neck): ``Conv1D(k=1) → ReLU → BN``, a Res2Net of ``s₂``
  groups (8 → 16 channels) with the X variant's *learnable weighted sum*: at step ``i`` the
  running stack of earlier outputs and the next group is convolved (one shared dilated
  ``k×1`` convolution per step, ReLU, BN) and the ``i + 2`` slices are fused with learned
  weights; then ``Conv1D(k=1) → ReLU → BN``, squeeze-excitation (ratio 1), and a residual;
* temporal pooling: the mean over time (the reference ASVspoof configuration) or attentive
  statistics pooling (the reference's ASTP option: tanh attention, weighted mean ‖ std).

The embedding is the pooled vector (the reference's 2-way linear classifier is modforge's
``linear`` head). Reference configuration (``Nes_ratio [8, 8]``, ``SE_ratio [1]``, dilation
2, mean pooling): 509,989 parameters on 1024-d features, 512,039 with the reference's
classifier (the paper and the repository report 511k).

The tests check the forward against a transcription of the reference's. Remaining
differences: the module names differ (``Build_in_Res2Nets.{i}`` → ``groups.{i}.0``, ``bns.{i}``
→ ``groups.{i}.2``, ``convs``/``bns``/``weighted_sum`` → ``steps.{j}.conv``/``bn``/``weights``,
``conv1``/``bn1``/``conv3``/``bn3`` → ``conv_in``/``bn_in``/``conv_out``/``bn_out``, ``se.se.1``/``se.se.3`` →
``se.reduce``/``se.expand``), so its state dict needs its keys renamed; and inputs the
reference refuses are accepted: feature sizes that are not a multiple of ``s₁`` are
zero-padded up to the next multiple (no projection, in the spirit of the design), so
``out_dim`` is the padded size; groups narrower than ``s₂`` get inner groups of one channel,
and a squeeze-excitation bottleneck never narrower than 2 (the reference's ``C // SE_ratio``).
"""

from __future__ import annotations

from typing import Literal

import torch
import torch.nn as nn
import torch.nn.functional as F

from ...core.constraints import PositiveInt
from ...core.registries import register_backbone
from ..base import Backbone
from ..common import SqueezeExcitation, frame_features, frame_layout, require_positive
from ..layouts import Layout


class WeightedStep(nn.Module):
    """One inner Res2Net step of Nes2Net-X: a dilated ``k×1`` conv, ReLU and BN applied to every
    slice of the stack ``[B, w, T, n]``, and the slices fused by ``n`` learned weights."""

    def __init__(self, width: int, kernel_size: int, dilation: int, slices: int):
        super().__init__()
        padding = (kernel_size // 2) * dilation
        self.conv = nn.Conv2d(width, width, (kernel_size, 1), dilation=(dilation, 1), padding=(padding, 0))
        self.bn = nn.BatchNorm2d(width)
        self.weights = nn.Parameter(torch.full((1, 1, 1, slices), 1.0 / slices))

    def forward(self, stack: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        stack = self.bn(torch.relu(self.conv(stack)))
        return stack, (stack * self.weights).sum(dim=-1)


class InnerRes2Net(nn.Module):
    """The inner block: ``1×1 conv → weighted-sum Res2Net → 1×1 conv → SE`` + residual."""

    def __init__(self, channels: int, scale: int, kernel_size: int, dilation: int, se_ratio: int):
        super().__init__()
        self.width = max(1, channels // scale)
        inner = self.width * scale
        self.conv_in = nn.Conv1d(channels, inner, 1)
        self.bn_in = nn.BatchNorm1d(inner)
        self.steps = nn.ModuleList(WeightedStep(self.width, kernel_size, dilation, i + 2) for i in range(scale - 1))
        self.conv_out = nn.Conv1d(inner, channels, 1)
        self.bn_out = nn.BatchNorm1d(channels)
        self.se = SqueezeExcitation(channels, max(2, channels // se_ratio))  # bottleneck C/ratio, at least 2

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        groups = torch.split(self.bn_in(torch.relu(self.conv_in(x))).unsqueeze(-1), self.width, dim=1)
        last = groups[len(groups) - 1]
        stack = last
        outputs: list[torch.Tensor] = []
        for i, step in enumerate(self.steps):
            stack, fused = step(torch.cat([stack, groups[i]], dim=-1))
            outputs.append(fused)
        outputs.append(last.squeeze(-1))
        out = self.bn_out(torch.relu(self.conv_out(torch.cat(outputs, dim=1))))
        return self.se(out) + x


class AttentiveStatistics(nn.Module):
    """Nes2Net's ASTP: ``Conv1D → tanh → Conv1D → softmax over time``, weighted mean ‖ std."""

    def __init__(self, channels: int, bottleneck: int):
        super().__init__()
        self.linear1 = nn.Conv1d(channels, bottleneck, 1)
        self.linear2 = nn.Conv1d(bottleneck, channels, 1)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        weights = torch.softmax(self.linear2(torch.tanh(self.linear1(x))), dim=2)
        mean = (weights * x).sum(dim=2)
        std = ((weights * (x * x)).sum(dim=2) - mean * mean).clamp(min=1e-10).sqrt()  # the reference's α·x²
        return torch.cat([mean, std], dim=1)


@register_backbone("nes2net")
class Nes2NetX(Backbone):
    """Nes2Net-X: a dimensionality-reduction-free nested Res2Net over SSL frame features → pooled embedding.

    Args:
        in_dim: feature size of each frame (1024 for XLS-R / WavLM Large; wired by the builder).
        in_layout: 'sequence' ([B, T, D]) or 'channels' ([B, D, T]) (wired by the builder).
        nes_ratio: (outer, inner) Res2Net scales, from outer to inner.
        se_ratio: squeeze-excitation reduction ratio of the inner blocks.
        dilation: dilation of the inner ``k×1`` convolutions.
        kernel_size: kernel of the inner convolutions (odd).
        pool: 'mean' over time (the reference ASVspoof setting) or 'attentive' statistics pooling.
        attention_dim: bottleneck of the attentive pooling (used with pool='attentive').
    """

    accepts = (Layout.SEQUENCE, Layout.CHANNELS)
    produces = Layout.VECTOR
    out_dim_rule = "in_dim rounded up to a multiple of nes_ratio[0] (× 2 with pool='attentive')"

    def __init__(
        self,
        in_dim: int,
        in_layout: Layout = Layout.SEQUENCE,
        nes_ratio: tuple[int, int] = (8, 8),
        se_ratio: PositiveInt = 1,
        dilation: PositiveInt = 2,
        kernel_size: PositiveInt = 3,
        pool: Literal["mean", "attentive"] = "mean",
        attention_dim: PositiveInt = 128,
    ):
        super().__init__()
        layout = frame_layout("nes2net", in_layout)
        if len(nes_ratio) != 2 or any(s < 2 for s in nes_ratio):
            raise ValueError(f"nes_ratio must be two scales (outer, inner), each at least 2, got {tuple(nes_ratio)}")
        sizes = {"in_dim": in_dim, "se_ratio": se_ratio, "dilation": dilation, "attention_dim": attention_dim}
        require_positive("nes2net", **sizes)
        if kernel_size < 1 or kernel_size % 2 == 0:
            raise ValueError(f"kernel_size must be a positive odd number (to keep the frame count), got {kernel_size}")
        if pool not in ("mean", "attentive"):
            raise ValueError(f"pool must be 'mean' or 'attentive', got {pool!r}")
        outer, inner = int(nes_ratio[0]), int(nes_ratio[1])
        self.in_dim = in_dim
        self.channel_first = layout is Layout.CHANNELS
        self.group = -(-in_dim // outer)  # channels per outer group
        width = self.group * outer
        self.pad = width - in_dim
        self.groups = nn.ModuleList(
            nn.Sequential(
                InnerRes2Net(self.group, inner, kernel_size, dilation, se_ratio), nn.ReLU(), nn.BatchNorm1d(self.group)
            )
            for _ in range(outer - 1)
        )
        self.bn = nn.BatchNorm1d(width)
        self.attentive = pool == "attentive"
        self.pooling = AttentiveStatistics(width, attention_dim) if self.attentive else nn.Identity()
        self.out_dim = 2 * width if self.attentive else width

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = frame_features(x, self.in_dim, self.channel_first, "nes2net", channels=True)
        if self.pad > 0:
            x = F.pad(x, [0, 0, 0, self.pad])
        chunks = torch.split(x, self.group, dim=1)
        outputs: list[torch.Tensor] = []
        sp = chunks[0]
        for i, block in enumerate(self.groups):
            sp = block(chunks[i] if i == 0 else sp + chunks[i])
            outputs.append(sp)
        outputs.append(chunks[len(chunks) - 1])
        out = torch.relu(self.bn(torch.cat(outputs, dim=1)))
        return self.pooling(out) if self.attentive else out.mean(dim=2)
