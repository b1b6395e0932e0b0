"""``tcm_conformer`` — the conformer back-end with temporal-channel modeling (TCM) self-attention
of Truong, Tao, Nguyen, Luong, Lee & Chng, "Temporal-Channel Modeling in Multi-head
Self-Attention for Synthetic Speech Detection", Interspeech 2024, meant to sit on XLS-R
(wav2vec 2.0) frame features.

Matches: ductuantruong/tcm_add ``model.py`` (``Model`` after its SSL front end, ``MyConformer``)
and ``conformer.py`` at 726387e (2024-12-04), with ``main.py``'s defaults (``--emb-size 144
--heads 4 --num_encoders 4 --kernel_size 31``), the configuration of its released models:

* ``Linear(in_dim → 144)`` (``LL``), ``BatchNorm2d(1)`` over the whole [T, D] map, SELU;
* fixed sinusoidal position encodings added to the frames — angle ``p / 10000^(2⌊i/2⌋/D)``
  rounded to float32, sine on even channels, cosine on odd ones, as the reference's table —
  then a learned class token (``torch.rand`` initialisation) prepended, without a position;
* four conformer blocks: ``x + ½·FFN(x)``, ``x + MHSA(TCM)(LN(x))``, ``x + Conv(x)``,
  ``x + ½·FFN(x)``, ``LayerNorm``; FFN = ``LayerNorm → Linear (×4) → Swish → Linear``; the
  convolution module is ``LayerNorm → pointwise conv (×2 expansion) → GLU → depthwise conv
  (k=31, "same" padding) → BatchNorm → Swish → pointwise conv``; Swish is ``x·sigmoid(x)``
  and GLU ``a·sigmoid(b)``, computed as the reference computes them. The four blocks start
  from one initialisation, deep-copied, as the reference's ``_get_clones`` does;
* the embedding is the class token's output (144-d); the reference's ``fc5`` (2-way
  linear) is modforge's ``linear`` head.

TCM self-attention (the paper's Section 2, built on DHVT's head tokens): the channels are cut
into one group per head; each group, averaged over time (the class token included), is
projected to a full-width *head token* (``Linear(d_head → D)``, LayerNorm over each head's
slice, GELU, plus a learned head position). The head tokens join the sequence for ordinary
multi-head self-attention (qkv without bias, scale d_head^-½, no attention dropout), so
frames attend to channel summaries and back; afterwards the mean of the head tokens and the
mean of the frame tokens are added to the class token and the head tokens are dropped.

Remaining differences: the module names differ from the reference's (``LL``, ``first_bn``,
``conformer.encoder_blocks.{i}.ff1.fn.fn.net``, ``attn.fn``/``attn.norm``, ``conv.net``, ...), so its
state dict needs its keys renamed, and its stored ``positional_emb`` table (10,000 × 144,
not trained) is computed here instead — the same values, for any number of frames (the
reference stops at 10,000). ``dropout`` (0, as in the reference) sets the feed-forward,
convolution and attention-output dropouts together.

Reference configuration: embedding 144, 4 heads, 4 blocks, kernel 31, FFN ×4 — 2,382,338
parameters on 1024-d XLS-R features (2,382,628 with the reference's 2-way classifier; the
Nes2Net paper lists TCM's back-end as 2,383k).
"""

from __future__ import annotations

import copy

import torch
import torch.nn as nn
import torch.nn.functional as F

from ...core.constraints import PositiveInt, Probability
from ...core.registries import register_backbone
from ..base import Backbone
from ..common import frame_features, frame_layout, require_positive
from ..layouts import Layout


class Swish(nn.Module):
    """``x · sigmoid(x)``, rounded as the reference computes it (``nn.SiLU`` differs in the last bit)."""

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x * x.sigmoid()


class FeedForward(nn.Module):
    """Pre-norm conformer feed-forward: ``LayerNorm → Linear (×mult) → Swish → Linear``."""

    def __init__(self, dim: int, mult: int, dropout: float):
        super().__init__()
        self.net = nn.Sequential(
            nn.LayerNorm(dim),
            nn.Linear(dim, dim * mult),
            Swish(),
            nn.Dropout(dropout),
            nn.Linear(dim * mult, dim),
            nn.Dropout(dropout),
        )

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.net(x)


class TCMAttention(nn.Module):
    """Multi-head self-attention with temporal-channel head tokens (input pre-normed outside).

    ``x`` is ``[B, 1 + T, D]`` with the class token first; the output has the same shape.
    """

    def __init__(self, dim: int, heads: int, dropout: float):
        super().__init__()
        self.heads = heads
        self.head_dim = dim // heads
        self.scale = self.head_dim**-0.5
        self.qkv = nn.Linear(dim, dim * 3, bias=False)
        self.proj = nn.Linear(dim, dim)
        self.token_proj = nn.Linear(self.head_dim, dim)
        self.token_norm = nn.LayerNorm(self.head_dim)
        self.token_pos = nn.Parameter(torch.zeros(1, heads, dim))
        self.drop = nn.Dropout(dropout)

    def head_tokens(self, x: torch.Tensor) -> torch.Tensor:
        """One token per head from that head's channel group averaged over time: ``[B, H, D]``."""
        b, n, d = x.shape
        groups = x.reshape(b, n, self.heads, self.head_dim).mean(dim=1)  # [B, H, D/H]
        tokens = self.token_proj(groups).reshape(b, self.heads, self.heads, self.head_dim)
        return F.gelu(self.token_norm(tokens)).flatten(2) + self.token_pos

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        b, n, d = x.shape
        x = torch.cat([x, self.head_tokens(x)], dim=1)
        m = n + self.heads
        qkv = self.qkv(x).reshape(b, m, 3, self.heads, self.head_dim).permute(2, 0, 3, 1, 4)
        q, k, v = qkv[0], qkv[1], qkv[2]
        attn = torch.softmax((q @ k.transpose(-2, -1)) * self.scale, dim=-1)
        out = self.proj((attn @ v).transpose(1, 2).reshape(b, m, d))
        frames, tokens = out[:, 1:n], out[:, n:]
        cls = out[:, :1] + tokens.mean(dim=1, keepdim=True) + frames.mean(dim=1, keepdim=True)
        return self.drop(torch.cat([cls, frames], dim=1))


class ConvModule(nn.Module):
    """Conformer convolution module: pointwise → GLU → depthwise → BN → Swish → pointwise."""

    def __init__(self, dim: int, expansion: int, kernel_size: int, dropout: float):
        super().__init__()
        inner = dim * expansion
        self.norm = nn.LayerNorm(dim)
        self.pointwise_in = nn.Conv1d(dim, inner * 2, 1)
        self.padding = [kernel_size // 2, kernel_size // 2 - (kernel_size + 1) % 2]  # "same" for any kernel
        self.depthwise = nn.Conv1d(inner, inner, kernel_size, groups=inner)
        self.bn = nn.BatchNorm1d(inner)
        self.pointwise_out = nn.Conv1d(inner, dim, 1)
        self.drop = nn.Dropout(dropout)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        y = F.glu(self.pointwise_in(self.norm(x).transpose(1, 2)), dim=1)
        y = self.depthwise(F.pad(y, self.padding))
        y = self.bn(y)
        y = self.pointwise_out(y * y.sigmoid())  # Swish
        return self.drop(y.transpose(1, 2))


class ConformerBlock(nn.Module):
    """``x + ½·FFN → x + MHSA(TCM) → x + Conv → x + ½·FFN → LayerNorm``."""

    def __init__(self, dim: int, heads: int, ff_mult: int, conv_expansion: int, kernel_size: int, dropout: float):
        super().__init__()
        self.ff1 = FeedForward(dim, ff_mult, dropout)
        self.attn_norm = nn.LayerNorm(dim)
        self.attn = TCMAttention(dim, heads, dropout)
        self.conv = ConvModule(dim, conv_expansion, kernel_size, dropout)
        self.ff2 = FeedForward(dim, ff_mult, dropout)
        self.post_norm = nn.LayerNorm(dim)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = x + 0.5 * self.ff1(x)
        x = x + self.attn(self.attn_norm(x))
        x = x + self.conv(x)
        x = x + 0.5 * self.ff2(x)
        return self.post_norm(x)


@register_backbone("tcm_conformer")
class TCMConformer(Backbone):
    """Conformer with temporal-channel modeling attention over SSL frame features → class-token embedding.

    Args:
        in_dim: feature size of each frame (1024 for XLS-R 300M; wired by the builder).
        in_layout: 'sequence' ([B, T, D]) or 'channels' ([B, D, T]) (wired by the builder).
        embed_dim: conformer width and embedding size (the reference's emb_size, 144).
        heads: attention heads (embed_dim must be a multiple of it).
        num_encoders: number of conformer blocks.
        kernel_size: depthwise convolution kernel of the convolution module.
        ff_mult: feed-forward expansion factor.
        conv_expansion: channel expansion of the convolution module.
        dropout: dropout in the feed-forward, attention and convolution sub-layers (0 in the
            reference).
    """

    accepts = (Layout.SEQUENCE, Layout.CHANNELS)
    produces = Layout.VECTOR
    out_dim_rule = "embed_dim"

    def __init__(
        self,
        in_dim: int,
        in_layout: Layout = Layout.SEQUENCE,
        embed_dim: PositiveInt = 144,
        heads: PositiveInt = 4,
        num_encoders: PositiveInt = 4,
        kernel_size: PositiveInt = 31,
        ff_mult: PositiveInt = 4,
        conv_expansion: PositiveInt = 2,
        dropout: Probability = 0.0,
    ):
        super().__init__()
        layout = frame_layout("tcm_conformer", in_layout)
        sizes = {"in_dim": in_dim, "embed_dim": embed_dim, "heads": heads, "num_encoders": num_encoders}
        sizes |= {"kernel_size": kernel_size, "ff_mult": ff_mult, "conv_expansion": conv_expansion}
        require_positive("tcm_conformer", **sizes)
        if embed_dim % heads:
            raise ValueError(f"embed_dim ({embed_dim}) must be a multiple of heads ({heads})")
        if not 0.0 <= dropout < 1.0:
            raise ValueError(f"dropout must be in [0, 1), got {dropout}")
        self.in_dim = in_dim
        self.channel_first = layout is Layout.CHANNELS
        self.projection = nn.Linear(in_dim, embed_dim)
        self.input_norm = nn.BatchNorm2d(1)
        self.class_token = nn.Parameter(torch.rand(1, 1, embed_dim))
        block = ConformerBlock(embed_dim, heads, ff_mult, conv_expansion, kernel_size, dropout)
        self.blocks = nn.ModuleList(copy.deepcopy(block) for _ in range(num_encoders))  # the reference's _get_clones
        # sinusoidal encoding: position p, channel i → sin/cos(p / 10000^(2⌊i/2⌋/D)), sin on even i
        self.pe_denominators: list[float] = [10000 ** (2 * (i // 2) / embed_dim) for i in range(embed_dim)]
        self.register_buffer("even", torch.arange(embed_dim) % 2 == 0, persistent=False)
        self.out_dim = embed_dim

    def position_encoding(self, frames: int, like: torch.Tensor) -> torch.Tensor:
        """``[1, frames, D]`` fixed sinusoidal encodings on ``like``'s device and dtype: the angles
        divided in float64 and rounded to float32, then sine / cosine in float32 (the
        reference's table; float32 division on MPS, which has no float64)."""
        exact = torch.float32 if like.device.type == "mps" else torch.float64
        denominators = torch.tensor(self.pe_denominators, dtype=exact, device=like.device)
        position = torch.arange(frames, device=like.device, dtype=exact)
        angles = (position.unsqueeze(1) / denominators.unsqueeze(0)).float()
        return torch.where(self.even, torch.sin(angles), torch.cos(angles)).to(like.dtype).unsqueeze(0)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = frame_features(x, self.in_dim, self.channel_first, "tcm_conformer", channels=False)
        x = F.selu(self.input_norm(self.projection(x).unsqueeze(1)).squeeze(1))
        x = x + self.position_encoding(x.shape[1], x)
        x = torch.cat([self.class_token.expand(x.shape[0], -1, -1), x], dim=1)
        for block in self.blocks:
            x = block(x)
        return x[:, 0]
