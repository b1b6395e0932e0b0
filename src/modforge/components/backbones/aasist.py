"""``aasist``, ``aasist_l`` — AASIST: audio anti-spoofing with integrated spectro-temporal
graph attention networks (Jung et al., ICASSP 2022, arXiv:2110.01200).

The default computes what the authors' released code computes: clovaai/aasist at commit
a04c986, ``models/AASIST.py`` (the code behind their ``AASIST.pth`` / ``AASIST-L.pth``).
Those files load into ``aasist`` / ``aasist_l`` + the ``linear`` head through
:func:`official_aasist_state_dict` and give the authors' logits (to float rounding).

From a waveform: a sinc convolution with fixed mel-spaced band-pass filters (not learned)
gives a [B, 1, filters, time] map; ``|·|``, a 3×3 max-pool, batch norm and SELU; six
residual blocks (each max-pooling time by 3). Max of ``|·|`` over time gives the spectral
graph's nodes (plus a learned position embedding), max over frequency the temporal
graph's. Each graph goes through graph attention and graph pooling; two parallel
branches of heterogeneous stacking graph attention (HS-GAL, with a learned master node)
combine them, and the element-wise max of the branches is read out as
``[max|T|, mean T, max|S|, mean S, master]`` — 5 × ``gat_dims[1]`` values. The reference
model's final ``Linear(5 × gat_dims[1], 2)`` is modforge's ``linear`` head, so
``aasist`` + ``linear`` has the authors' 297,866 parameters and ``aasist_l`` + ``linear``
their 85,306 (clovaai/aasist, ``config/AASIST.conf``, ``config/AASIST-L.conf``).

From a sequence of frontend features [B, T, D] (e.g. wav2vec 2.0): the SSL-AASIST variant
of Tak et al. (Odyssey 2022, TakHemlata/SSL_Anti-spoofing ``model.py``): ``Linear(D,
ssl_dim)``, the map [B, 1, ssl_dim, T], a 3×3 max-pool, batch norm and SELU, the same
residual blocks without their time pooling, then batch norm, SELU and a 1×1-conv attention
whose softmax over time (frequency) weights the sum that gives the spectral (temporal)
nodes; the graph part is the same.

The residual blocks, reference code vs paper:

* ``preactivation=False`` (the default) is the released code: blocks 2–6 apply ``conv1``
  to their *input* ``x``. The code does compute ``SELU(bn1(x))`` first, but discards it,
  so ``bn1`` never reaches the output and the released ``bn1`` weights are their untrained
  1 and 0 (the same in SSL-AASIST's code). The published weights were trained this way,
  which is why it is the default. ``bn1`` is kept, so checkpoints load strictly and the
  parameter counts match, but frozen (``requires_grad`` off: it would get no gradient)
  and not evaluated (the reference's computation of it is dead work; its running
  statistics, which the reference updates in training and never uses, stay as they are).
* ``preactivation=True`` is the block as the paper describes it (BN → SELU → ``conv1``;
  ``bn1`` used and trained). It is a different model: the published weights do not
  apply to it.

Beyond the reference code (inputs the reference accepts give its outputs unchanged):

* Short inputs: a waveform shorter than ``first_conv`` + 3⁷ − 1 samples (2,315 at the
  defaults, 0.14 s), on which the reference's pooling fails, is zero-padded at the end to
  that length (silence); a sequence shorter than 3 frames repeats its last frame up to 3
  (the max-pool then takes the max over the frames there are). Graph pools keep at least
  one node, as in the reference.
* ``freq_aug`` is the reference's ``Freq_aug`` (off in its configs and here by default):
  in train mode only, each forward zeroes a random run of 0–19 adjacent sinc filters; the
  draws come from torch's generator instead of numpy's and Python's.
* The reference reads only the first three pool ratios (the two graph pools and, for all
  four branch pools, the third) and the first three temperatures (the HS-GALs use the
  third); the four-value lists are kept so the reference configs carry over unchanged.
* The sinc filters are designed in float64 (``mel_sinc_filters``; the reference mixes
  float32 taps in): the banks differ by ≤ 1.5e-7, the released models' logits by ~1e-5.

How it is computed (same values and gradients as the reference's operations): SELUs and
residual additions in place where autograd allows, as the reference does; max-pools over
views of the windows (:class:`TimeMaxPool`; with autograd it keeps two bool masks instead
of the pooled map and int64 indices), and the waveform's ``|·|`` in place, when no
gradient flows through the fixed filter bank; no ``bn1`` computed for nothing.
"""

from __future__ import annotations

import math
from collections.abc import Mapping

import torch
import torch.nn as nn
import torch.nn.functional as F
from torch.autograd.function import once_differentiable

from ...core.constraints import PositiveInt, Probability
from ...core.registries import register_backbone
from ..base import Backbone
from ..frontends.filterbanks import mel_sinc_filters
from ..layouts import Layout
from .graph_attention import GraphAttentionLayer, GraphPool, InferenceBranch, shortfall

__all__ = ["AASIST", "AASISTL", "ResidualBlock", "SincFront", "TimeMaxPool", "official_aasist_state_dict"]

Pairs = tuple[tuple[int, int], ...]
ENCODER_BLOCKS = 6  # filts[1], filts[2], filts[3], then filts[4] three times
ATTENTION_HIDDEN = 128  # SSL-AASIST's 1×1-conv attention width
FREQ_AUG_WIDTH = 20  # the reference's Freq_aug masks int(uniform(0, 20)) filters: 0 to 19


class _FirstMaxPool(torch.autograd.Function):
    """Max over windows of 3 along the last axis (stride 3, the remainder dropped), with
    ``F.max_pool2d``'s values and gradient (each window's gradient goes to its first
    maximum). It keeps two bool masks of the output's size for the backward pass where
    ``max_pool2d`` keeps its whole input and int64 indices (10× less memory)."""

    @staticmethod
    def forward(ctx, x: torch.Tensor) -> torch.Tensor:
        windows = x.narrow(-1, 0, x.size(-1) // 3 * 3).unflatten(-1, (-1, 3))
        out = windows.amax(dim=-1)
        first = windows[..., 0] == out
        second = (windows[..., 1] == out).logical_and_(first.logical_not())
        ctx.save_for_backward(first, second)
        ctx.input_shape = x.shape
        return out

    @staticmethod
    @once_differentiable
    def backward(ctx, grad: torch.Tensor) -> torch.Tensor:
        first, second = ctx.saved_tensors
        grad_in = grad.new_empty(ctx.input_shape)
        windows = grad_in.narrow(-1, 0, 3 * grad.size(-1)).unflatten(-1, (-1, 3))
        zero = grad.new_zeros(())
        torch.where(first, grad, zero, out=windows[..., 0])
        torch.where(second, grad, zero, out=windows[..., 1])
        torch.where(first.logical_or(second), zero, grad, out=windows[..., 2])
        grad_in.narrow(-1, 3 * grad.size(-1), grad_in.size(-1) - 3 * grad.size(-1)).zero_()
        return grad_in


class TimeMaxPool(nn.Module):
    """``nn.MaxPool2d((1, 3))`` — the same values and gradients, faster and lighter in
    eager mode: without autograd a max over a view of the windows (about 5× faster than
    ``max_pool2d`` on AASIST's largest map), with autograd :class:`_FirstMaxPool`.
    Scripted or traced (TorchScript, ONNX), it is ``F.max_pool2d``. Its gradient is not
    differentiable again (no double backward through the encoder)."""

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if torch.jit.is_scripting() or torch.jit.is_tracing():
            return F.max_pool2d(x, (1, 3))
        return self._eager(x)

    @torch.jit.unused
    def _eager(self, x: torch.Tensor) -> torch.Tensor:
        if x.requires_grad and torch.is_grad_enabled():
            return _FirstMaxPool.apply(x)
        return x.narrow(-1, 0, x.size(-1) // 3 * 3).unflatten(-1, (-1, 3)).amax(dim=-1)


class SincFront(nn.Module):
    """Waveform [B, T] → [B, 1, n_filters // 3, (T − K + 1) // 3]: fixed sinc filter bank
    (a buffer, not trained), ``|·|``, 3×3 max-pool, batch norm, SELU.

    A waveform too short for the 3×3 pool and ``time_pools`` further 1×3 pools to leave a
    frame (K − 1 + 3^(time_pools + 1) samples) is zero-padded at the end to that length.

    Args:
        n_filters: number of band-pass filters.
        kernel_size: filter length K (made odd, as in the reference: 128 → 129).
        sample_rate: sampling rate the filters are designed for.
        time_pools: how many times the encoder after this front divides time by 3.
        freq_aug: in train mode, zero a random run of 0–19 adjacent filters at every
            forward (the reference's ``Freq_aug``).
    """

    def __init__(self, n_filters: int, kernel_size: int, sample_rate: int, time_pools: int, freq_aug: bool = False):
        super().__init__()
        kernel_size += 1 - kernel_size % 2
        self.register_buffer("band_pass", mel_sinc_filters(n_filters, kernel_size, sample_rate).unsqueeze(1),
                             persistent=False)
        self.first_bn = nn.BatchNorm2d(1)
        self.min_samples = kernel_size - 1 + 3 ** (time_pools + 1)
        self.freq_aug = bool(freq_aug)
        self.mask_widths = min(FREQ_AUG_WIDTH, n_filters + 1)  # widths 0 … mask_widths − 1

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = F.pad(x, [0, shortfall(x.size(-1), self.min_samples)])
        bank = self.band_pass
        if self.training and self.freq_aug:
            bank = self._masked(bank)
        x = F.conv1d(x.unsqueeze(1), bank).unsqueeze(1)  # [B, 1, filters, T']
        if torch.jit.is_scripting() or torch.jit.is_tracing() or x.requires_grad:
            x = F.max_pool2d(torch.abs(x), (3, 3))
        else:
            x = self._pool_without_grad(x)
        return F.selu(self.first_bn(x), inplace=True)

    @torch.jit.unused
    def _pool_without_grad(self, x: torch.Tensor) -> torch.Tensor:
        """``F.max_pool2d(|x|, (3, 3))``'s values, faster: ``|·|`` in place (no autograd
        needs the map) and the max over time, then over frequency, of views of the windows."""
        x = x.abs_()
        x = x.narrow(-1, 0, x.size(-1) // 3 * 3).unflatten(-1, (-1, 3)).amax(dim=-1)
        return x.narrow(-2, 0, x.size(-2) // 3 * 3).unflatten(-2, (-1, 3)).amax(dim=-2)

    def _masked(self, bank: torch.Tensor) -> torch.Tensor:
        count = bank.size(0)
        width = int(torch.randint(0, self.mask_widths, [1]).item())
        first = int(torch.randint(0, count - width + 1, [1]).item())
        bank = bank.clone()
        bank[first : first + width] = 0.0
        return bank


class SequenceFront(nn.Module):
    """Sequence [B, T, D] → [B, 1, width // 3, T // 3]: ``Linear(D, width)``, the
    features as a one-channel map (frequency = the projected features), 3×3 max-pool,
    batch norm, SELU (SSL-AASIST).

    Args:
        in_dim: feature size D of the sequence.
        width: projection width (the map's height before pooling).
    """

    def __init__(self, in_dim: int, width: int):
        super().__init__()
        self.LL = nn.Linear(in_dim, width)
        self.first_bn = nn.BatchNorm2d(1)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = self.LL(x).transpose(1, 2)  # [B, width, T]
        x = F.pad(x, [0, shortfall(x.size(-1), 3)], mode="replicate")
        x = F.max_pool2d(x.unsqueeze(1), (3, 3))
        return F.selu(self.first_bn(x), inplace=True)


class ResidualBlock(nn.Module):
    """Residual block on [B, C, F, T] maps: conv 2×3 → BN → SELU → conv 2×3, plus the
    input (a 1×3 conv when the channels change), then a 1×3 max-pool over time (the
    waveform model; none in SSL-AASIST).

    As in the reference code, ``conv1`` takes the block's input itself; with
    ``preactivation`` it takes ``SELU(bn1(x))`` instead (the paper's pre-activation block).
    Every block but the first has ``bn1`` either way (the reference's parameters); without
    ``preactivation`` it is frozen and not evaluated, since nothing would use it.

    Args:
        in_channels: input channels.
        out_channels: output channels.
        first: the first block (its input is already normalised: no ``bn1`` at all).
        pool: max-pool time by 3 at the end.
        preactivation: BN → SELU before ``conv1`` (the paper), not the reference code.
    """

    def __init__(
        self, in_channels: int, out_channels: int, first: bool = False, pool: bool = True,
        preactivation: bool = False,
    ):
        super().__init__()
        self.bn1 = nn.Identity() if first else nn.BatchNorm2d(in_channels)
        self.first = first
        self.preactivation = bool(preactivation) and not first
        if not first and not self.preactivation:
            self.bn1.requires_grad_(False)  # kept for the checkpoints, unused (see the class doc)
        self.conv1 = nn.Conv2d(in_channels, out_channels, (2, 3), padding=(1, 1))
        self.bn2 = nn.BatchNorm2d(out_channels)
        self.conv2 = nn.Conv2d(out_channels, out_channels, (2, 3), padding=(0, 1))
        self.conv_downsample = (
            nn.Conv2d(in_channels, out_channels, (1, 3), padding=(0, 1)) if in_channels != out_channels else nn.Identity()
        )
        self.mp = TimeMaxPool() if pool else nn.Identity()

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        out = self.conv1(F.selu(self.bn1(x)) if self.preactivation else x)
        # in place, as in the reference: BN's backward needs its input, not its output; SELU's
        # needs its result, which nothing changes later; no backward needs conv2's output
        out = self.conv2(F.selu(self.bn2(out), inplace=True))
        out += self.conv_downsample(x)
        return self.mp(out)


class MaxNodes(nn.Module):
    """Encoder map [B, C, F, T] → spectral nodes [B, F, C] (max ``|·|`` over time) and
    temporal nodes [B, T, C] (max ``|·|`` over frequency) — AASIST."""

    def forward(self, e: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        e = torch.abs(e)
        return e.amax(dim=3).transpose(1, 2), e.amax(dim=2).transpose(1, 2)


class AttentiveNodes(nn.Module):
    """Encoder map → spectral and temporal nodes by attention-weighted sums (SSL-AASIST):
    BN, SELU, a 1×1-conv attention map; softmax over time weights the spectral nodes,
    softmax over frequency the temporal ones.

    Args:
        channels: encoder output channels.
    """

    def __init__(self, channels: int):
        super().__init__()
        self.first_bn1 = nn.BatchNorm2d(channels)
        self.attention = nn.Sequential(
            nn.Conv2d(channels, ATTENTION_HIDDEN, kernel_size=1),
            nn.SELU(inplace=True),
            nn.BatchNorm2d(ATTENTION_HIDDEN),
            nn.Conv2d(ATTENTION_HIDDEN, channels, kernel_size=1),
        )

    def forward(self, e: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        e = F.selu(self.first_bn1(e), inplace=True)
        w = self.attention(e)
        spectral = torch.sum(e * torch.softmax(w, dim=-1), dim=-1)
        temporal = torch.sum(e * torch.softmax(w, dim=-2), dim=-2)
        return spectral.transpose(1, 2), temporal.transpose(1, 2)


def _check_args(
    filts: Pairs,
    gat_dims: tuple[int, int],
    pool_ratios: tuple[float, ...],
    temperatures: tuple[float, ...],
    dropouts: dict[str, float],
    positives: dict[str, int],
) -> None:
    """One clear ValueError for the first argument that cannot build the model."""
    for name, value in positives.items():
        if value < 1:
            raise ValueError(f"{name} must be a positive integer, got {value}")
    if len(filts) != 4 or any(len(pair) != 2 or min(pair) < 1 for pair in filts):
        raise ValueError(f"filts must be 4 (in, out) channel pairs of positive integers, got {filts}")
    if filts[0][0] != 1:
        raise ValueError(f"filts[0] must start from 1 channel (the one-channel map), got {filts[0]}")
    for prev, pair in zip(filts, filts[1:], strict=False):
        if pair[0] != prev[1]:
            raise ValueError(f"filts must chain: {pair} takes {pair[0]} channels but {prev} gives {prev[1]}")
    if filts[3][0] != filts[3][1]:
        raise ValueError(f"filts[3] is repeated three times, so it must keep its channels, got {filts[3]}")
    if len(gat_dims) != 2 or min(gat_dims) < 1:
        raise ValueError(f"gat_dims must be 2 positive integers, got {gat_dims}")
    if len(pool_ratios) != 4 or not all(0 < r <= 1 for r in pool_ratios):
        raise ValueError(f"pool_ratios must be 4 values in (0, 1], got {pool_ratios}")
    if len(temperatures) != 4 or not all(t > 0 and math.isfinite(t) for t in temperatures):
        raise ValueError(f"temperatures must be 4 positive values, got {temperatures}")
    for name, p in dropouts.items():
        if not 0 <= p < 1:
            raise ValueError(f"{name} must be in [0, 1), got {p}")


class AASIST(Backbone):
    """AASIST: spectro-temporal graph attention on a sinc-filter encoder (Jung et al.,
    2022); on sequence input the SSL-AASIST variant (Tak et al., 2022). Outputs the
    5 × gat_dims[1] readout (the reference's last Linear is the ``linear`` head).

    Args:
        in_dim: 1 for a waveform; the feature size D of a sequence (wired by the builder).
        in_layout: waveform (sinc front) or sequence (SSL-AASIST front) (wired by the builder).
        sinc_filters: number of fixed mel-spaced sinc filters (the reference's filts[0]).
        first_conv: sinc filter length in samples (made odd: 128 → 129).
        filts: (in, out) channels of the residual stages; the last is used for three blocks.
        gat_dims: node sizes of the spectral/temporal graphs and of the HS-GAL branches.
        pool_ratios: fraction of nodes kept by the spectral pool, the temporal pool and the
            branch pools (a 4th value is accepted and unused, as in the reference).
        temperatures: softmax temperatures of the spectral GAT, the temporal GAT and the
            HS-GALs (a 4th value is accepted and unused, as in the reference).
        ssl_dim: width of the Linear projection of sequence input (SSL-AASIST's 128).
        sample_rate: sampling rate the sinc filters are designed for.
        dropout: dropout on the readout (train mode).
        branch_dropout: dropout on each branch's nodes before their max.
        gat_dropout: input dropout of every graph attention layer.
        pool_dropout: dropout before each graph pool's scoring.
        preactivation: residual blocks as the paper draws them (BN → SELU → conv1) instead
            of the released code (conv1 on the block's input; the published weights).
        freq_aug: in train mode, zero a random run of 0–19 adjacent sinc filters at each
            forward (the reference's ``Freq_aug``; waveform input only).
    """

    accepts = (Layout.WAVEFORM, Layout.SEQUENCE)
    produces = Layout.VECTOR
    out_dim_rule = "5 × gat_dims[1]: max |temporal|, mean temporal, max |spectral|, mean spectral, master node"

    def __init__(
        self,
        in_dim: int = 1,
        in_layout: Layout = Layout.WAVEFORM,
        sinc_filters: PositiveInt = 70,
        first_conv: PositiveInt = 128,
        filts: Pairs = ((1, 32), (32, 32), (32, 64), (64, 64)),
        gat_dims: tuple[int, int] = (64, 32),
        pool_ratios: tuple[float, ...] = (0.5, 0.7, 0.5, 0.5),
        temperatures: tuple[float, ...] = (2.0, 2.0, 100.0, 100.0),
        ssl_dim: PositiveInt = 128,
        sample_rate: PositiveInt = 16000,
        dropout: Probability = 0.5,
        branch_dropout: Probability = 0.2,
        gat_dropout: Probability = 0.2,
        pool_dropout: Probability = 0.3,
        preactivation: bool = False,
        freq_aug: bool = False,
    ):
        super().__init__()
        layout = Layout(in_layout)
        if layout not in self.accepts:
            raise ValueError(f"aasist takes a waveform [B, T] or a sequence [B, T, D], not {layout.value} input")
        filts = tuple(tuple(int(c) for c in pair) for pair in filts)
        gat_dims = tuple(int(d) for d in gat_dims)
        pool_ratios = tuple(float(r) for r in pool_ratios)
        temperatures = tuple(float(t) for t in temperatures)
        _check_args(
            filts, gat_dims, pool_ratios, temperatures,
            {"dropout": dropout, "branch_dropout": branch_dropout, "gat_dropout": gat_dropout,
             "pool_dropout": pool_dropout},
            {"in_dim": in_dim, "first_conv": first_conv, "sample_rate": sample_rate},
        )
        waveform = layout is Layout.WAVEFORM
        if waveform and in_dim != 1:
            raise ValueError(f"a waveform has in_dim 1 (one channel), got in_dim {in_dim}")
        if freq_aug and not waveform:
            raise ValueError("freq_aug masks sinc filters: it needs waveform input, not a sequence")
        height = sinc_filters if waveform else ssl_dim
        if height < 3:
            raise ValueError(f"{'sinc_filters' if waveform else 'ssl_dim'} must be at least 3 (the 3×3 pool), got {height}")

        self.front: nn.Module = (
            SincFront(sinc_filters, first_conv, sample_rate, time_pools=ENCODER_BLOCKS, freq_aug=freq_aug)
            if waveform else SequenceFront(in_dim, ssl_dim)
        )
        stages = [*filts, filts[3], filts[3]]
        self.encoder = nn.Sequential(
            *(ResidualBlock(cin, cout, first=i == 0, pool=waveform, preactivation=preactivation)
              for i, (cin, cout) in enumerate(stages))
        )
        channels = filts[3][1]
        self.nodes: nn.Module = MaxNodes() if waveform else AttentiveNodes(channels)
        self.pos_S = nn.Parameter(torch.randn(1, height // 3, channels))
        self.master1 = nn.Parameter(torch.randn(1, 1, gat_dims[0]))
        self.master2 = nn.Parameter(torch.randn(1, 1, gat_dims[0]))
        self.gat_s = GraphAttentionLayer(channels, gat_dims[0], temperatures[0], gat_dropout)
        self.gat_t = GraphAttentionLayer(channels, gat_dims[0], temperatures[1], gat_dropout)
        self.pool_s = GraphPool(pool_ratios[0], gat_dims[0], pool_dropout)
        self.pool_t = GraphPool(pool_ratios[1], gat_dims[0], pool_dropout)
        self.branch1 = InferenceBranch(gat_dims[0], gat_dims[1], pool_ratios[2], temperatures[2], gat_dropout,
                                       pool_dropout)
        self.branch2 = InferenceBranch(gat_dims[0], gat_dims[1], pool_ratios[2], temperatures[2], gat_dropout,
                                       pool_dropout)
        self.drop_way = nn.Dropout(branch_dropout)
        self.drop = nn.Dropout(dropout)
        self.waveform = waveform
        self.in_dim = in_dim
        self.out_dim = 5 * gat_dims[1]

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if self.waveform:
            if x.dim() != 2:
                raise ValueError(f"aasist expects a waveform [B, T], got a {x.dim()}-D input")
        elif x.dim() != 3 or x.size(-1) != self.in_dim:
            raise ValueError(f"aasist expects a sequence [B, T, {self.in_dim}], got shape {list(x.shape)}")
        e = self.encoder(self.front(x))
        spectral, temporal = self.nodes(e)
        out_s = self.pool_s(self.gat_s(spectral + self.pos_S))
        out_t = self.pool_t(self.gat_t(temporal))
        batch = x.size(0)
        t1, s1, m1 = self.branch1(out_t, out_s, self.master1.expand(batch, -1, -1))
        t2, s2, m2 = self.branch2(out_t, out_s, self.master2.expand(batch, -1, -1))
        out_t = torch.maximum(self.drop_way(t1), self.drop_way(t2))
        out_s = torch.maximum(self.drop_way(s1), self.drop_way(s2))
        master = torch.maximum(self.drop_way(m1), self.drop_way(m2))
        readout = torch.cat(
            [torch.abs(out_t).amax(dim=1), out_t.mean(dim=1), torch.abs(out_s).amax(dim=1), out_s.mean(dim=1),
             master.squeeze(1)],
            dim=1,
        )
        return self.drop(readout)


register_backbone("aasist")(AASIST)


class AASISTL(AASIST):
    def __init__(
        self,
        in_dim: int = 1,
        in_layout: Layout = Layout.WAVEFORM,
        sinc_filters: PositiveInt = 70,
        first_conv: PositiveInt = 128,
        filts: Pairs = ((1, 32), (32, 32), (32, 24), (24, 24)),
        gat_dims: tuple[int, int] = (24, 32),
        pool_ratios: tuple[float, ...] = (0.4, 0.5, 0.7, 0.5),
        temperatures: tuple[float, ...] = (2.0, 2.0, 100.0, 100.0),
        ssl_dim: PositiveInt = 128,
        sample_rate: PositiveInt = 16000,
        dropout: Probability = 0.5,
        branch_dropout: Probability = 0.2,
        gat_dropout: Probability = 0.2,
        pool_dropout: Probability = 0.3,
        preactivation: bool = False,
        freq_aug: bool = False,
    ):
        super().__init__(
            in_dim, in_layout, sinc_filters, first_conv, filts, gat_dims, pool_ratios, temperatures, ssl_dim,
            sample_rate, dropout, branch_dropout, gat_dropout, pool_dropout, preactivation, freq_aug,
        )


AASISTL.__doc__ = (
    """AASIST-L, the light AASIST (85,306 parameters with its 2-way output layer): narrower
    last stages (24 channels), gat_dims (24, 32) and pool ratios (0.4, 0.5, 0.7, 0.5).

"""
    + AASIST.__doc__[AASIST.__doc__.index("    Args:") :]
)
register_backbone("aasist_l")(AASISTL)


# --- the authors' released weights ------------------------------------------------------

BACKBONE_PREFIX = "parts.backbone."  # how a modforge model names its stages' state
HEAD_PREFIX = "parts.head."
_BN = ("weight", "bias", "running_mean", "running_var", "num_batches_tracked")
_AFFINE = ("weight", "bias")
_GAT = {"att_weight": (), "att_proj": _AFFINE, "proj_with_att": _AFFINE, "proj_without_att": _AFFINE, "bn": _BN}
_HS_GAL = {
    "att_weight11": (), "att_weight22": (), "att_weight12": (), "att_weightM": (),
    **{name: _AFFINE for name in ("proj_type1", "proj_type2", "att_proj", "att_projM", "proj_with_att",
                                  "proj_without_att", "proj_with_attM", "proj_without_attM")},
    "bn": _BN,
}
_MODULES = {  # reference module → (modforge name under the backbone, its tensors: {child: tensor names})
    "GAT_layer_S": ("gat_s", _GAT),
    "GAT_layer_T": ("gat_t", _GAT),
    "HtrgGAT_layer_ST11": ("branch1.hs_gal1", _HS_GAL),
    "HtrgGAT_layer_ST12": ("branch1.hs_gal2", _HS_GAL),
    "HtrgGAT_layer_ST21": ("branch2.hs_gal1", _HS_GAL),
    "HtrgGAT_layer_ST22": ("branch2.hs_gal2", _HS_GAL),
    **{ref: (ours, {"proj": _AFFINE}) for ref, ours in (
        ("pool_S", "pool_s"), ("pool_T", "pool_t"), ("pool_hS1", "branch1.pool_s"), ("pool_hT1", "branch1.pool_t"),
        ("pool_hS2", "branch2.pool_s"), ("pool_hT2", "branch2.pool_t"))},
}


def _official_names(state: Mapping[str, object]) -> tuple[dict[str, str], set[str]]:
    """(reference key → modforge key for every tensor the released model has, the keys
    that may be absent). Block i has ``conv_downsample`` when its ``conv1`` changes the
    channel count (read from the file; optional when that ``conv1`` is itself missing)."""
    names: dict[str, str] = {name: BACKBONE_PREFIX + name for name in ("pos_S", "master1", "master2")}
    names.update({f"first_bn.{t}": f"{BACKBONE_PREFIX}front.first_bn.{t}" for t in _BN})
    optional: set[str] = set()
    for i in range(ENCODER_BLOCKS):
        ref, ours = f"encoder.{i}.0.", f"{BACKBONE_PREFIX}encoder.{i}."
        children = {"conv1": _AFFINE, "bn2": _BN, "conv2": _AFFINE, **({"bn1": _BN} if i else {})}
        conv1 = state.get(ref + "conv1.weight")
        shape = getattr(conv1, "shape", None)
        if shape is None or len(shape) != 4 or shape[0] != shape[1]:
            children["conv_downsample"] = _AFFINE
            if shape is None or len(shape) != 4:
                optional.update(f"{ref}conv_downsample.{t}" for t in _AFFINE)
        for child, tensors in children.items():
            names.update({f"{ref}{child}.{t}": f"{ours}{child}.{t}" for t in tensors})
    for ref, (ours, children) in _MODULES.items():
        for child, tensors in children.items():
            if not tensors:  # a parameter of the module itself
                names[f"{ref}.{child}"] = f"{BACKBONE_PREFIX}{ours}.{child}"
            names.update({f"{ref}.{child}.{t}": f"{BACKBONE_PREFIX}{ours}.{child}.{t}" for t in tensors})
    names.update({f"out_layer.{t}": f"{HEAD_PREFIX}fc.{t}" for t in _AFFINE})
    return names, optional


def official_aasist_state_dict(reference_state: Mapping[str, torch.Tensor]) -> dict[str, torch.Tensor]:
    """The authors' AASIST / AASIST-L state dict (clovaai/aasist ``models/AASIST.py``
    ``Model``, e.g. their ``AASIST.pth`` read with ``torch.load(weights_only=True)``),
    renamed as modforge's ``aasist`` / ``aasist_l`` backbone + ``linear`` head name it
    (``parts.backbone.…``, ``parts.head.fc.…``): load the result strictly into
    ``build_model({"backbone": "aasist", "head": "linear"}, in_dim=1, num_classes=2,
    layout="waveform")``, whose default ``preactivation=False`` is the code the weights
    were trained with.

    Every tensor is mapped by a fixed name table (the values are the same objects, not
    copies); nothing is guessed, dropped or invented. Sizes are not checked here (strict
    loading checks them against the model).

    Raises:
        ValueError: naming every key of ``reference_state`` that has no place in the model
            and every tensor of the model that ``reference_state`` lacks, or every entry
            that is not a tensor.
    """
    if not isinstance(reference_state, Mapping):
        raise ValueError(f"expected the reference model's state dict (a mapping), got {type(reference_state).__name__}")
    others = sorted(str(k) for k, v in reference_state.items() if not isinstance(v, torch.Tensor))
    if others:
        raise ValueError(f"not an AASIST state dict: entries that are not tensors: {', '.join(others)}")
    names, optional = _official_names(reference_state)
    unmapped = sorted(str(k) for k in reference_state if k not in names)
    missing = sorted(k for k in names if k not in reference_state and k not in optional)
    if unmapped or missing:
        problems = []
        if unmapped:
            problems.append(f"{len(unmapped)} key(s) with no place in modforge's AASIST: {', '.join(unmapped)}")
        if missing:
            problems.append(f"{len(missing)} tensor(s) of the reference model missing: {', '.join(missing)}")
        hint = ""
        if unmapped and all(str(k).startswith("module.") for k in reference_state):
            hint = " (every key starts with 'module.', a DataParallel wrapper's prefix: remove it first)"
        raise ValueError("not the authors' AASIST state dict: " + "; ".join(problems) + hint)
    return {names[k]: v for k, v in reference_state.items()}
