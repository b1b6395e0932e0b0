"""``vit_tiny`` — Vision Transformer, tiny size (ViT-Ti: 192 wide, 12 blocks, 3 heads,
MLP ratio 4; Touvron et al., DeiT, 2021) with a configurable patch size.

Position embeddings are learned for an ``image_size`` grid and interpolated
(bicubically) when an input's grid differs, so one model takes any image size that is
a multiple of the patch size.
"""

from __future__ import annotations

import math
from typing import Literal

import torch
import torch.nn as nn
import torch.nn.functional as F

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
        pool: 'cls' (the class token) or 'mean' (mean of the patch tokens).
        dropout: dropout inside the blocks and after the embeddings.
    """

    accepts = (Layout.IMAGE,)
    produces = Layout.VECTOR
    out_dim_rule = "192 (the embedding width)"
    embed_dim, depth, num_heads, mlp_ratio = 192, 12, 3, 4

    def __init__(
        self,
        in_dim: int,
        patch_size: int = 16,
        image_size: int = 224,
        pool: Literal["cls", "mean"] = "cls",
        dropout: float = 0.0,
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
                batch_first=True,
                norm_first=True,
            )
            for _ in range(self.depth)
        )
        self.norm = nn.LayerNorm(self.embed_dim)
        self.out_dim = self.embed_dim
        nn.init.trunc_normal_(self.pos_embed, std=0.02)
        nn.init.trunc_normal_(self.cls_token, std=0.02)

    def _position_embedding(self, grid_h: int, grid_w: int) -> torch.Tensor:
        cls_pos, patch_pos = self.pos_embed[:, :1], self.pos_embed[:, 1:]
        side = int(math.sqrt(patch_pos.shape[1]))
        if (grid_h, grid_w) == (side, side):
            return self.pos_embed
        patch_pos = patch_pos.reshape(1, side, side, -1).permute(0, 3, 1, 2)
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
        tokens = self.norm(tokens)
        return tokens[:, 0] if self.pool == "cls" else tokens[:, 1:].mean(dim=1)
