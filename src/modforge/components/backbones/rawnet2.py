"""``rawnet2`` — RawNet2 for spoofing detection on raw audio (Tak et al., ICASSP 2021).

"End-to-end anti-spoofing with RawNet2" is the ASVspoof 2021 LA/DF baseline
(eurecom-asp/rawnet2-antispoofing; asvspoof-challenge/2021 ``LA/Baseline-RawNet2`` with
``model_config_RawNet.yaml``). The network, with the reference configuration as defaults:

1. a *fixed* sinc filter bank: 20 band-pass filters whose edges are equally spaced on the
   mel scale from 0 Hz to Nyquist, each an ideal band-pass (difference of two sinc
   low-passes) under a Hamming window, 1024 taps made odd (1025) so every filter is
   symmetric; a valid convolution (no padding). The edges are the 2021 baseline's (the
   eurecom-asp code spaces 23 mel points and uses the lowest 21, ending below Nyquist);
2. ``|x|`` → max-pool 3 → BatchNorm → SELU;
3. residual blocks — two of width 20, then four of width 128 — each
   ``[BN → LeakyReLU(0.3)] → conv3 → BN → LeakyReLU(0.3) → conv3`` plus the (1×1-projected)
   input, then max-pool 3 and *filter-wise feature map scaling* (FMS): a sigmoid of a
   linear map of the time-averaged map scales and shifts every filter, ``x·s + s``;
4. BN → SELU → a 3-layer GRU of 1024 units whose last time step goes through a 1024-unit
   fully connected layer. That layer's output is the embedding; the reference's final
   ``Linear(1024, 2)`` is modforge's ``linear`` head.

Differences from the released code, all deliberate:

* Length robustness. Every max-pool of 3 (seven in all) uses the reference's floor mode
  while the time axis holds at least 3 frames, and reduces a shorter axis to one frame
  (its maximum) instead of to nothing (:func:`pool_time`). The reference's output is
  unchanged wherever it runs; inputs it cannot take (such as a [B, C, 32] feature map)
  now reach the GRU with at least one frame. The pooling is written without branches on
  the time length, so an ONNX export with a dynamic time axis pools correctly at every
  length, and TorchScript runs it as is.
* Pre-activation. The paper's blocks start with BN → LeakyReLU (all but the first); the
  ASVspoof 2021 baseline computes it and then convolves the block input instead (its
  ``bn1`` is dead), the eurecom-asp repository applies it. ``preactivation=True`` (the
  default) applies it; ``False`` reproduces the baseline's computation (and has no
  ``bn1``, so 848 fewer parameters than the reference count).
* Input. A waveform [B, T] goes through steps 1-2; a channels map [B, C, T] — the output
  of a frontend that already did them, such as modforge's ``sinc`` (learnable or fixed
  filters, then ``|x|``, max-pool 3, BatchNorm, SELU) — goes straight to the first
  residual block, which then takes ``C = in_dim`` filters.

Parameters with the reference configuration: 17,619,360 in the backbone, 17,621,410 with
the 2-class ``linear`` head — the count of the reference ``RawNet`` module.
"""

from __future__ import annotations

import torch
import torch.nn as nn
import torch.nn.functional as F

from ...core.registries import register_backbone
from ..base import Backbone
from ..frontends.filterbanks import mel_sinc_filters
from ..layouts import Layout

__all__ = ["FMSResidualBlock", "MelSincConv", "RawNet2", "SincFront", "pool_time"]


def pool_time(x: torch.Tensor, kernel: int) -> torch.Tensor:
    """Max-pool the last axis with window and stride ``kernel``, never below one frame.

    ``T // kernel`` frames (PyTorch's floor mode, as in the reference) when ``T >= kernel``;
    one frame, the maximum over the whole axis, when ``T < kernel``. Computed as ceil-mode
    pooling cut to ``max(T // kernel, 1)`` frames, with the count written as arithmetic on
    the traced length so an ONNX export keeps it dynamic.
    """
    length = x.shape[-1]
    pooled = F.max_pool1d(x, kernel, kernel, ceil_mode=True)
    if torch.jit.is_scripting():
        keep = max(length // kernel, 1)
    else:  # the same number as traceable arithmetic (a traced length is a tensor here)
        keep = (length + kernel * (length < kernel)) // kernel
    return pooled[..., :keep]


class MelSincConv(nn.Module):
    """A fixed (not trained) mel-spaced sinc band-pass filter bank over a mono waveform.

    Args:
        out_channels: number of band-pass filters.
        kernel_size: filter length in samples (an even length is made odd).
        sample_rate: sampling rate of the waveform, in Hz.
    """

    def __init__(self, out_channels: int = 20, kernel_size: int = 1024, sample_rate: int = 16000):
        super().__init__()
        filters = mel_sinc_filters(out_channels, kernel_size, sample_rate)
        self.kernel_size = int(filters.shape[-1])
        self.register_buffer("filters", filters.unsqueeze(1), persistent=False)  # rebuilt from the arguments

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if x.shape[-1] < self.kernel_size:
            raise ValueError(
                f"rawnet2: the waveform ({x.shape[-1]} samples) is shorter than the sinc filters "
                f"({self.kernel_size} taps); give at least {self.kernel_size} samples"
            )
        return F.conv1d(x, self.filters)


class SincFront(nn.Module):
    """RawNet2's first layer on a waveform: fixed sinc filters, ``|x|``, max-pool 3, BatchNorm, SELU.

    Args:
        filters: number of sinc band-pass filters.
        kernel_size: filter length in samples (an even length is made odd).
        sample_rate: sampling rate of the waveform, in Hz.
    """

    def __init__(self, filters: int = 20, kernel_size: int = 1024, sample_rate: int = 16000):
        super().__init__()
        self.sinc = MelSincConv(filters, kernel_size, sample_rate)
        self.bn = nn.BatchNorm1d(filters)
        self.act = nn.SELU()

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.act(self.bn(pool_time(torch.abs(self.sinc(x)), 3)))


class FMSResidualBlock(nn.Module):
    """One RawNet2 residual block with max-pool 3 and filter-wise feature map scaling.

    Args:
        in_channels: filters coming in.
        out_channels: filters going out (a 1×1 convolution projects the shortcut when they differ).
        preactivation: start with BatchNorm → LeakyReLU (the paper; not used on the first block).
    """

    def __init__(self, in_channels: int, out_channels: int, preactivation: bool = True):
        super().__init__()
        self.pre = nn.Sequential(nn.BatchNorm1d(in_channels), nn.LeakyReLU(0.3)) if preactivation else nn.Identity()
        self.conv1 = nn.Conv1d(in_channels, out_channels, 3, padding=1)
        self.bn2 = nn.BatchNorm1d(out_channels)
        self.act = nn.LeakyReLU(0.3)
        self.conv2 = nn.Conv1d(out_channels, out_channels, 3, padding=1)
        self.shortcut = nn.Conv1d(in_channels, out_channels, 1) if in_channels != out_channels else nn.Identity()
        self.attention = nn.Linear(out_channels, out_channels)  # FMS

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        out = self.conv2(self.act(self.bn2(self.conv1(self.pre(x)))))
        out = pool_time(out + self.shortcut(x), 3)  # every RawNet2 max-pool: window and stride 3
        scale = torch.sigmoid(self.attention(out.mean(dim=-1))).unsqueeze(-1)
        return out * scale + scale


@register_backbone("rawnet2")
class RawNet2(Backbone):
    """RawNet2 (Tak et al., 2021): fixed mel sinc filters, residual blocks with filter-wise
    feature map scaling, a GRU and a fully connected embedding. Takes a waveform [B, T]
    (16 kHz, at least 1025 samples; the reference trains on 64,600) or a frontend's
    channels [B, C, T] such as ``sinc``'s (its own sinc layer, |x|, pool, BN and SELU are
    then skipped). Defaults are the ASVspoof 2021
    baseline's configuration. Max-pools never shrink the time axis below one frame, so any
    length works (1 s to 10 s and beyond).

    Args:
        in_dim: input channels: 1 for a waveform, C for a channels map (wired by the builder).
        in_layout: 'waveform' [B, T] or 'channels' [B, C, T] (wired by the builder).
        sinc_filters: number of fixed sinc band-pass filters (reference: filts[0], 20).
        sinc_kernel: sinc filter length in samples, made odd (reference: first_conv, 1024).
        sample_rate: sampling rate the sinc filters are designed for, in Hz.
        widths: filters of the two residual stages (reference: filts[1..3], 20 then 128).
        blocks: residual blocks per stage (reference: blocks, 2 and 4).
        gru_dim: GRU hidden units (reference: gru_node, 1024).
        gru_layers: stacked GRU layers (reference: nb_gru_layer, 3).
        fc_dim: size of the fully connected embedding (reference: nb_fc_node, 1024).
        preactivation: BatchNorm → LeakyReLU at the start of every block but the first, as
            in the paper; False reproduces the ASVspoof 2021 baseline code, which skips it.
    """

    accepts = (Layout.WAVEFORM, Layout.CHANNELS)
    produces = Layout.VECTOR
    out_dim_rule = "fc_dim (1024 in the reference configuration)"

    def __init__(
        self,
        in_dim: int = 1,
        in_layout: Layout = Layout.WAVEFORM,
        sinc_filters: int = 20,
        sinc_kernel: int = 1024,
        sample_rate: int = 16000,
        widths: tuple[int, int] = (20, 128),
        blocks: tuple[int, int] = (2, 4),
        gru_dim: int = 1024,
        gru_layers: int = 3,
        fc_dim: int = 1024,
        preactivation: bool = True,
    ):
        super().__init__()
        layout = _check_arguments(in_dim, in_layout, sinc_filters, sinc_kernel, sample_rate, widths, blocks)
        for name, value in (("gru_dim", gru_dim), ("gru_layers", gru_layers), ("fc_dim", fc_dim)):
            if int(value) < 1:
                raise ValueError(f"rawnet2: {name} must be a positive integer, got {value}")
        self.from_waveform = layout is Layout.WAVEFORM
        self.in_channels = 1 if self.from_waveform else int(in_dim)
        if self.from_waveform:
            self.front: nn.Module = SincFront(int(sinc_filters), int(sinc_kernel), int(sample_rate))
            width = int(sinc_filters)
        else:  # the frontend did steps 1-2
            self.front = nn.Identity()
            width = int(in_dim)
        stages = []
        for stage, (count, out) in enumerate(zip(blocks, widths, strict=True)):
            for j in range(int(count)):
                first = stage == 0 and j == 0  # follows the front's BN → SELU: no pre-activation
                stages.append(FMSResidualBlock(width, int(out), preactivation=preactivation and not first))
                width = int(out)
        self.blocks = nn.ModuleList(stages)
        self.gru_bn = nn.BatchNorm1d(width)
        self.gru_act = nn.SELU()
        self.gru = nn.GRU(width, int(gru_dim), num_layers=int(gru_layers), batch_first=True)
        self.fc = nn.Linear(int(gru_dim), int(fc_dim))
        self.out_dim = int(fc_dim)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if self.from_waveform:
            if x.dim() == 2:
                x = x.unsqueeze(1)
            elif x.dim() != 3 or x.shape[1] != 1:
                raise ValueError(f"rawnet2: expected a waveform [B, T] (or [B, 1, T]), got shape {list(x.shape)}")
        elif x.dim() != 3 or x.shape[1] != self.in_channels:
            raise ValueError(f"rawnet2: expected channels [B, {self.in_channels}, T], got shape {list(x.shape)}")
        x = self.front(x)
        for block in self.blocks:
            x = block(x)
        x = self.gru_act(self.gru_bn(x)).transpose(1, 2)  # [B, T, C]
        x, _ = self.gru(x)
        return self.fc(x[:, -1])


def _check_arguments(
    in_dim: int,
    in_layout: Layout | str,
    sinc_filters: int,
    sinc_kernel: int,
    sample_rate: int,
    widths: tuple[int, int],
    blocks: tuple[int, int],
) -> Layout:
    """Validate the constructor's arguments; the layout as a :class:`Layout`."""
    try:
        layout = Layout(in_layout)
    except ValueError:
        layout = None
    if layout not in (Layout.WAVEFORM, Layout.CHANNELS):
        raise ValueError(f"rawnet2 takes a waveform [B, T] or channels [B, C, T], not {in_layout!r}")
    if layout is Layout.WAVEFORM and int(in_dim) != 1:
        raise ValueError(f"rawnet2: a waveform input has in_dim 1 (mono), got {in_dim}")
    if int(in_dim) < 1:
        raise ValueError(f"rawnet2: in_dim must be a positive number of channels, got {in_dim}")
    if int(sinc_filters) < 1 or int(sinc_kernel) < 2 or int(sample_rate) < 2:
        raise ValueError(
            "rawnet2: sinc_filters must be ≥ 1, sinc_kernel ≥ 2 and sample_rate ≥ 2, got "
            f"{sinc_filters}, {sinc_kernel} and {sample_rate}"
        )
    if len(widths) != 2 or len(blocks) != 2 or any(int(w) < 1 for w in widths) or any(int(b) < 1 for b in blocks):
        raise ValueError(
            "rawnet2: widths and blocks must each be two positive integers (one per stage), got "
            f"widths={tuple(widths)}, blocks={tuple(blocks)}"
        )
    return layout
