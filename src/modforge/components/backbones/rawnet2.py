"""``rawnet2`` — RawNet2 for spoofing detection on raw audio (Tak et al., ICASSP 2021).

Matches: asvspoof-challenge/2021 ``LA/Baseline-RawNet2/model.py`` with
``model_config_RawNet.yaml`` at 4ab5666 (2021-06-01; ``DF/Baseline-RawNet2`` links to the
same files) — the ASVspoof 2021 LA/DF baseline, whose released weights
(``pre_trained_DF_RawNet2.zip``) were trained with that code. With the defaults and the
reference's weights (:func:`reference_state_dict`), the backbone + ``linear`` head compute
the reference's ``fc2_gru`` output; the tests check this against a re-implementation of
the reference forward, to float32 rounding. The network:

1. a *fixed* sinc filter bank: 20 band-pass filters whose edges are equally spaced on the
   mel scale from 0 Hz to Nyquist, each an ideal band-pass (difference of two sinc
   low-passes) under a Hamming window, 1024 taps made odd (1025) so every filter is
   symmetric; a valid convolution (no padding);
2. ``|x|`` → max-pool 3 → BatchNorm → SELU;
3. residual blocks — two of width 20, then four of width 128 — each
   ``conv3 → BN → LeakyReLU(0.3) → conv3`` plus the (1×1-projected) input, then max-pool 3
   and *filter-wise feature map scaling* (FMS): a sigmoid of a linear map of the
   time-averaged map scales and shifts every filter, ``x·s + s``;
4. BN → SELU → a 3-layer GRU of 1024 units whose last time step goes through a 1024-unit
   fully connected layer (``fc1_gru``). That layer's output is the embedding; the
   reference's final ``Linear(1024, 2)`` (``fc2_gru``) is modforge's ``linear`` head.

The paper, and eurecom-asp/rawnet2-antispoofing (``model.py`` at e259c53, 2023-08-08),
start every block but the first with BN → LeakyReLU(0.3). The 2021 baseline computes that
pre-activation and then convolves the block *input* (``out = self.conv1(x)``), so its
``bn1`` layers are dead: they hold parameters and running statistics but never reach the
output. ``preactivation=False`` (the default) is the baseline's computation and has no
``bn1``, hence 848 fewer parameters than the reference module; ``preactivation=True`` is
the paper's block (eurecom-asp published no weights).

Remaining differences from the released code:

* Filter design. The filters are designed once in float64 and stored in float32; the
  reference rebuilds them at every call with a float32 ``np.sinc`` (whose precision
  depends on the NumPy version). The taps agree to 1.4e-7 (of a largest tap of 0.13).
* Length robustness. Every max-pool of 3 (seven in all) uses the reference's floor mode
  while the time axis holds at least 3 frames, and reduces a shorter axis to one frame
  (its maximum) instead of to nothing (:func:`pool_time`). The reference's output is
  unchanged wherever it runs; inputs it cannot take (such as a [B, C, 32] feature map)
  now reach the GRU with at least one frame. Exported graphs (ONNX, TorchScript,
  torch.compile) pool without branches on the time length, so a dynamic time axis pools
  correctly at every length.
* Output. The reference returns ``log_softmax`` of ``fc2_gru`` and scores a trial by the
  bona fide log-probability (column 1); the ``linear`` head returns the logits
  (``log_softmax`` of them is the reference's output).
* Input. A waveform [B, T] goes through steps 1-2; a channels map [B, C, T] — the output
  of a frontend that already did them, such as modforge's ``sinc`` (learnable or fixed
  filters, then ``|x|``, max-pool 3, BatchNorm, SELU) — goes straight to the first
  residual block, which then takes ``C = in_dim`` filters.
* The eurecom-asp configuration (128 sinc filters of 129 taps whose edges are the lowest
  of 131 mel points, widths 128/512) is not reproduced: its filter edges differ.

Parameters with the reference configuration: 17,618,512 in the backbone, 17,620,562 with
the 2-class ``linear`` head — the reference ``RawNet`` module's 17,621,410 less its 848
dead ``bn1`` parameters (``preactivation=True`` has them: 17,619,360 / 17,621,410).
"""

from __future__ import annotations

import re
from collections.abc import Mapping

import torch
import torch.nn as nn
import torch.nn.functional as F

from ...core.constraints import PositiveInt
from ...core.registries import register_backbone
from ..base import Backbone
from ..frontends.filterbanks import mel_sinc_filters
from ..layouts import Layout

__all__ = ["FMSResidualBlock", "MelSincConv", "RawNet2", "SincFront", "pool_time", "reference_state_dict"]


@torch.jit.unused
def _exporting() -> bool:
    """Whether the call is being traced or compiled (ONNX export, torch.jit.trace, torch.compile)."""
    return torch.jit.is_tracing() or torch.compiler.is_compiling()


def pool_time(x: torch.Tensor, kernel: int) -> torch.Tensor:
    """Max-pool the last axis with window and stride ``kernel``, never below one frame.

    ``T // kernel`` frames (PyTorch's floor mode, as in the reference) when ``T >= kernel``;
    one frame, the maximum over the whole axis, when ``T < kernel``. Eager calls pool in
    floor mode when they can; traced and compiled graphs take ceil-mode pooling cut to
    ``max(T // kernel, 1)`` frames, the count written as arithmetic on the traced length so
    an ONNX export keeps it dynamic. Both give the same values.
    """
    length = x.shape[-1]
    if torch.jit.is_scripting():
        if length >= kernel:
            return F.max_pool1d(x, kernel, kernel)
        return x.amax(dim=-1, keepdim=True)
    if not _exporting() and length >= kernel:  # the common case: a contiguous result, no slice
        return F.max_pool1d(x, kernel, kernel)
    pooled = F.max_pool1d(x, kernel, kernel, ceil_mode=True)
    keep = (length + kernel * (length < kernel)) // kernel  # max(length // kernel, 1), traceable
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
        self.act = nn.SELU(inplace=True)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        y = self.sinc(x)
        y = y.abs() if y.requires_grad else y.abs_()  # fixed filters: no gradient unless the input wants one
        return self.act(self.bn(pool_time(y, 3)))


class FMSResidualBlock(nn.Module):
    """One RawNet2 residual block with max-pool 3 and filter-wise feature map scaling.

    Args:
        in_channels: filters coming in.
        out_channels: filters going out (a 1×1 convolution projects the shortcut when they differ).
        preactivation: start with BatchNorm → LeakyReLU, as the paper (False: the ASVspoof
            2021 baseline's computation, where the first convolution sees the block input).
    """

    def __init__(self, in_channels: int, out_channels: int, preactivation: bool = False):
        super().__init__()
        self.pre = nn.Sequential(nn.BatchNorm1d(in_channels), nn.LeakyReLU(0.3)) if preactivation else nn.Identity()
        self.conv1 = nn.Conv1d(in_channels, out_channels, 3, padding=1)
        self.bn2 = nn.BatchNorm1d(out_channels)
        self.act = nn.LeakyReLU(0.3, inplace=True)  # on the BatchNorm's output, which backward does not need
        self.conv2 = nn.Conv1d(out_channels, out_channels, 3, padding=1)
        self.shortcut = nn.Conv1d(in_channels, out_channels, 1) if in_channels != out_channels else nn.Identity()
        self.attention = nn.Linear(out_channels, out_channels)  # FMS

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        out = self.conv2(self.act(self.bn2(self.conv1(self.pre(x)))))
        out += self.shortcut(x)  # in place, as the reference's ``out += identity``
        out = pool_time(out, 3)  # every RawNet2 max-pool: window and stride 3
        scale = torch.sigmoid(self.attention(out.mean(dim=-1))).unsqueeze(-1)
        return (out * scale).add_(scale)  # out · s + s (the product is fresh: add in place)


@register_backbone("rawnet2")
class RawNet2(Backbone):
    """RawNet2 (Tak et al., 2021): fixed mel sinc filters, residual blocks with filter-wise
    feature map scaling, a GRU and a fully connected embedding. Takes a waveform [B, T]
    (16 kHz, at least 1025 samples; the reference trains on 64,600) or a frontend's
    channels [B, C, T] such as ``sinc``'s (its own sinc layer, |x|, pool, BN and SELU are
    then skipped). Defaults are the ASVspoof 2021 baseline's configuration and computation
    (asvspoof-challenge/2021 ``LA/Baseline-RawNet2``; load its weights through
    :func:`reference_state_dict`). Max-pools never shrink the time axis below one frame,
    so any length works (1 s to 10 s and beyond).

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
            in the paper and eurecom-asp/rawnet2-antispoofing. False (the default) is the
            ASVspoof 2021 baseline's computation, the one its released weights were trained
            with (its ``bn1`` layers are computed and discarded).
    """

    accepts = (Layout.WAVEFORM, Layout.CHANNELS)
    produces = Layout.VECTOR
    out_dim_rule = "fc_dim (1024 in the reference configuration)"

    def __init__(
        self,
        in_dim: int = 1,
        in_layout: Layout = Layout.WAVEFORM,
        sinc_filters: PositiveInt = 20,
        sinc_kernel: PositiveInt = 1024,
        sample_rate: PositiveInt = 16000,
        widths: tuple[int, int] = (20, 128),
        blocks: tuple[int, int] = (2, 4),
        gru_dim: PositiveInt = 1024,
        gru_layers: PositiveInt = 3,
        fc_dim: PositiveInt = 1024,
        preactivation: bool = False,
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
        self.gru_act = nn.SELU(inplace=True)
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


_REFERENCE_TOP = {"first_bn": "front.bn", "bn_before_gru": "gru_bn", "gru": "gru", "fc1_gru": "fc"}
_REFERENCE_BLOCK = {"conv1": "conv1", "bn2": "bn2", "conv2": "conv2", "conv_downsample": "shortcut"}
_REFERENCE_BLOCK_KEY = re.compile(r"block(\d+)\.0\.(bn1|conv1|bn2|conv2|conv_downsample)\.(\w+)")
_REFERENCE_ATTENTION_KEY = re.compile(r"fc_attention(\d+)\.0\.(weight|bias)")


def reference_state_dict(
    state: Mapping[str, torch.Tensor],
    *,
    backbone_prefix: str = "parts.backbone.",
    head_prefix: str | None = "parts.head.",
) -> dict[str, torch.Tensor]:
    """The ASVspoof 2021 baseline's ``RawNet`` weights (asvspoof-challenge/2021
    ``LA/Baseline-RawNet2/model.py``; its released ``pre_trained_DF_RawNet2.zip``) as modforge keys.

    ``first_bn`` → ``front.bn``; ``block{k}.0.{conv1, bn2, conv2, conv_downsample}`` →
    ``blocks.{k}.{conv1, bn2, conv2, shortcut}``; ``fc_attention{k}.0`` →
    ``blocks.{k}.attention``; ``bn_before_gru`` → ``gru_bn``; ``gru`` → ``gru``; ``fc1_gru``
    → ``fc``, all under ``backbone_prefix``; ``fc2_gru`` (the 2-class output layer) →
    ``fc`` under ``head_prefix`` (the ``linear`` head), or left out when ``head_prefix`` is
    None. The blocks' ``bn1`` entries are left out: the reference computes them and
    discards the result, so they never reach its output (``preactivation=False``, the
    default, has no such layers). The defaults fit ``build_model({"backbone": "rawnet2",
    "head": "linear"}, ...)``; ``backbone_prefix=""``, ``head_prefix=None`` fit a bare
    :class:`RawNet2`. Load the result with ``strict=True`` (the default) so that missing
    entries are reported.

    Raises:
        ValueError: naming every key that is not a reference ``RawNet`` key (none is guessed).
    """
    out: dict[str, torch.Tensor] = {}
    unknown: list[str] = []
    for key, value in state.items():
        module, _, rest = key.partition(".")
        block = _REFERENCE_BLOCK_KEY.fullmatch(key)
        attention = _REFERENCE_ATTENTION_KEY.fullmatch(key)
        if module in _REFERENCE_TOP and rest:
            out[f"{backbone_prefix}{_REFERENCE_TOP[module]}.{rest}"] = value
        elif module == "fc2_gru" and rest:
            if head_prefix is not None:
                out[f"{head_prefix}fc.{rest}"] = value
        elif block is not None:
            index, layer, name = block.groups()
            if layer != "bn1":  # bn1 is dead in the reference
                out[f"{backbone_prefix}blocks.{index}.{_REFERENCE_BLOCK[layer]}.{name}"] = value
        elif attention is not None:
            index, name = attention.groups()
            out[f"{backbone_prefix}blocks.{index}.attention.{name}"] = value
        else:
            unknown.append(key)
    if unknown:
        raise ValueError(
            f"rawnet2: {len(unknown)} key(s) are not those of the ASVspoof 2021 baseline's RawNet: "
            + ", ".join(unknown[:10])
            + (" ..." if len(unknown) > 10 else "")
        )
    return out
