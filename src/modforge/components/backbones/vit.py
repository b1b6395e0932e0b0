"""``vit_tiny`` — Vision Transformer, tiny size (ViT-Ti: 192 wide, 12 blocks, 3 heads,
MLP ratio 4; Touvron et al., DeiT, 2021) with a configurable patch size.

Matches: huggingface/pytorch-image-models ``timm/models/vision_transformer.py`` at 9456764,
``vit_tiny_patch16_224`` (the architecture of facebookresearch/deit's ``deit_tiny_patch16_224``):
a 16×16/16 patch convolution (with bias), a class token and
learned position embeddings for 1 + 14×14 tokens (the class token has one), 12 pre-norm
blocks ``x + Attn(LN(x))``, ``x + MLP(LN(x))`` (qkv with bias, scale head_dim^-½, exact
GELU, MLP ratio 4), LayerNorm eps 1e-6 everywhere, a final LayerNorm and the class token's
output; ``pool="mean"`` is timm's ``global_pool="avg"``: the mean of the patch tokens, then
the LayerNorm (timm's ``fc_norm``). Initialisation is timm's: truncated normal (std 0.02)
position embeddings and linear weights (the packed qkv included), zero biases, class token
normal (std 1e-6). The tests check the forward against a plain-PyTorch transcription of
timm's. timm's ``head`` is modforge's ``linear`` head.

Remaining differences: the qkv / proj / MLP weights sit in ``nn.TransformerEncoderLayer``
(``self_attn.in_proj_weight``, ``self_attn.out_proj``, ``linear1``/``linear2``,
``norm1``/``norm2``), so a timm state dict needs its keys renamed (the tensors carry over
as they are); ``dropout`` is one rate for timm's ``pos_drop_rate``, ``proj_drop_rate`` and
``attn_drop_rate`` (timm's ``drop_rate`` is the head's), and there is no stochastic depth
(``drop_path_rate``; DeiT trains with 0.1, ``vit_tiny`` has 0); the patch convolution keeps PyTorch's default initialisation, as timm's. Extension: grids
other than ``image_size`` / ``patch_size`` resample the position embeddings bicubically
(timm's model takes only its ``img_size`` unless ``dynamic_img_size`` is set); timm's own
resampling (``resample_abs_pos_embed``) also antialiases, which ONNX cannot export, so
resampled embeddings differ from timm's a little (not at the native grid).
"""

from __future__ import annotations

import math
from typing import Literal

import torch
import torch.nn as nn
import torch.nn.functional as F

from ...core.constraints import PositiveInt, Probability
from ...core.registries import register_backbone
from ..base import Backbone
from ..layouts import Layout


@register_backbone("vit_tiny")
class ViTTiny(Backbone):
    """ViT-Tiny: patch embedding, a class token, 12 pre-norm transformer blocks.

    Args:
        in_dim: input channels (wired by the builder).
        patch_size: side of the square patches; the image sides must be multiples of it.
        image_size: the grid the position embeddings are learned for (other sizes are
            interpolated).
        pool: 'cls' (the normalised class token, timm's 'token') or 'mean' (the mean of the
            patch tokens, then the final LayerNorm: timm's 'avg').
        dropout: dropout inside the blocks (attention weights included) and after the embeddings.
    """

    accepts = (Layout.IMAGE,)
    produces = Layout.VECTOR
    out_dim_rule = "192 (the embedding width)"
    embed_dim, depth, num_heads, mlp_ratio = 192, 12, 3, 4
    norm_eps = 1e-6  # timm's ViT LayerNorms (PyTorch's default is 1e-5)

    def __init__(
        self,
        in_dim: int,
        patch_size: PositiveInt = 16,
        image_size: PositiveInt = 224,
        pool: Literal["cls", "mean"] = "cls",
        dropout: Probability = 0.0,
    ):
        super().__init__()
        if patch_size <= 0 or image_size % patch_size:
            raise ValueError(f"image_size ({image_size}) must be a positive multiple of patch_size ({patch_size})")
        self.patch_size, self.pool = patch_size, pool
        self.patch_embed = nn.Conv2d(in_dim, self.embed_dim, patch_size, stride=patch_size)
        grid = image_size // patch_size
        self.cls_token = nn.Parameter(torch.zeros(1, 1, self.embed_dim))
        self.pos_embed = nn.Parameter(torch.zeros(1, 1 + grid * grid, self.embed_dim))
        self.drop = nn.Dropout(dropout)
        self.blocks = nn.ModuleList(
            nn.TransformerEncoderLayer(
                self.embed_dim,
                self.num_heads,
                self.embed_dim * self.mlp_ratio,
                dropout,
                activation="gelu",
                layer_norm_eps=self.norm_eps,
                batch_first=True,
                norm_first=True,
            )
            for _ in range(self.depth)
        )
        self.norm = nn.LayerNorm(self.embed_dim, eps=self.norm_eps)  # timm's norm ('cls') or fc_norm ('mean')
        self.out_dim = self.embed_dim
        self._init_weights()

    def _init_weights(self) -> None:
        """timm's default ViT initialisation (``init_weights_vit_timm``)."""
        nn.init.trunc_normal_(self.pos_embed, std=0.02)
        nn.init.normal_(self.cls_token, std=1e-6)
        for block in self.blocks:
            nn.init.trunc_normal_(block.self_attn.in_proj_weight, std=0.02)  # timm's qkv Linear
            nn.init.zeros_(block.self_attn.in_proj_bias)
            for linear in (block.self_attn.out_proj, block.linear1, block.linear2):
                nn.init.trunc_normal_(linear.weight, std=0.02)
                nn.init.zeros_(linear.bias)

    def _position_embedding(self, grid_h: int, grid_w: int) -> torch.Tensor:
        cls_pos, patch_pos = self.pos_embed[:, :1], self.pos_embed[:, 1:]
        side = int(math.sqrt(patch_pos.shape[1]))
        if (grid_h, grid_w) == (side, side):
            return self.pos_embed
        patch_pos = patch_pos.reshape(1, side, side, -1).permute(0, 3, 1, 2)
        # timm resamples with antialias=True, which ONNX cannot export (aten::_upsample_bicubic2d_aa)
        patch_pos = F.interpolate(patch_pos, size=(grid_h, grid_w), mode="bicubic", align_corners=False)
        return torch.cat([cls_pos, patch_pos.flatten(2).transpose(1, 2)], dim=1)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        h, w = x.shape[-2:]
        if h % self.patch_size or w % self.patch_size:
            raise ValueError(f"image size {h}×{w} is not a multiple of patch_size {self.patch_size}")
        tokens = self.patch_embed(x)
        grid_h, grid_w = tokens.shape[-2:]
        tokens = tokens.flatten(2).transpose(1, 2)
        tokens = torch.cat([self.cls_token.expand(tokens.shape[0], -1, -1), tokens], dim=1)
        tokens = self.drop(tokens + self._position_embedding(grid_h, grid_w))
        for block in self.blocks:
            tokens = block(tokens)
        if self.pool == "cls":
            return self.norm(tokens[:, 0])  # LayerNorm is per token: normalising the class token alone is the same
        return self.norm(tokens[:, 1:].mean(dim=1))
