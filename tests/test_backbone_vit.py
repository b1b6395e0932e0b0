"""``vit_tiny`` computes timm's ``vit_tiny_patch16_224`` (DeiT-Ti): the forward against a plain-PyTorch transcription of
timm's VisionTransformer (LayerNorm eps 1e-6, class-token and 'avg' pooling), and timm's initialisation."""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F

import modforge as mf
from modforge.components.backbones.vit import ViTTiny

EPS = 1e-6  # timm: partial(nn.LayerNorm, eps=1e-6)


def timm_forward(net: ViTTiny, x: torch.Tensor, global_pool: str = "token") -> torch.Tensor:
    """timm VisionTransformer.forward_features + forward_head (no head), written out with the weights of ``net``."""
    heads, dim = net.num_heads, net.embed_dim
    tokens = net.patch_embed(x)  # PatchEmbed: conv k=p, stride p, with bias
    grid = tokens.shape[-2:]
    tokens = tokens.flatten(2).transpose(1, 2)
    assert net.pos_embed.shape[1] == 1 + grid[0] * grid[1]  # timm's img_size: no resampling
    tokens = torch.cat([net.cls_token.expand(x.shape[0], -1, -1), tokens], dim=1) + net.pos_embed
    for block in net.blocks:
        b, n, _ = tokens.shape
        y = F.layer_norm(tokens, (dim,), block.norm1.weight, block.norm1.bias, EPS)
        qkv = F.linear(y, block.self_attn.in_proj_weight, block.self_attn.in_proj_bias)
        q, k, v = qkv.reshape(b, n, 3, heads, dim // heads).permute(2, 0, 3, 1, 4).unbind(0)
        attn = ((q * (dim // heads) ** -0.5) @ k.transpose(-2, -1)).softmax(dim=-1)
        y = (attn @ v).transpose(1, 2).reshape(b, n, dim)
        tokens = tokens + F.linear(y, block.self_attn.out_proj.weight, block.self_attn.out_proj.bias)
        y = F.layer_norm(tokens, (dim,), block.norm2.weight, block.norm2.bias, EPS)
        y = F.linear(F.gelu(F.linear(y, block.linear1.weight, block.linear1.bias)), block.linear2.weight, block.linear2.bias)
        tokens = tokens + y
    if global_pool == "token":  # norm, then the class token
        return F.layer_norm(tokens, (dim,), net.norm.weight, net.norm.bias, EPS)[:, 0]
    return F.layer_norm(tokens[:, 1:].mean(dim=1), (dim,), net.norm.weight, net.norm.bias, EPS)  # avg, then fc_norm


def randomised(net: ViTTiny) -> ViTTiny:
    with torch.no_grad():  # LayerNorm affine parameters away from 1/0, so that a wrong placement shows
        for name, p in net.named_parameters():
            if "norm" in name:
                p.add_(0.2 * torch.randn_like(p))
    return net.eval()


@pytest.mark.parametrize(("pool", "timm_pool"), [("cls", "token"), ("mean", "avg")])
def test_forward_is_timms(pool, timm_pool):
    torch.manual_seed(0)
    net = randomised(ViTTiny(3, patch_size=16, image_size=64, pool=pool))
    x = torch.randn(2, 3, 64, 64)
    with torch.no_grad():
        assert torch.allclose(net(x), timm_forward(net, x, timm_pool), rtol=1e-4, atol=1e-5)


def test_layer_norms_use_timms_epsilon_and_init():
    torch.manual_seed(0)
    net = mf.BACKBONES.build("vit_tiny", in_dim=3)
    norms = [m for m in net.modules() if isinstance(m, torch.nn.LayerNorm)]
    assert len(norms) == 2 * 12 + 1 and all(m.eps == EPS for m in norms)
    assert float(net.cls_token.detach().abs().max()) < 1e-4  # normal(std=1e-6)
    assert float(net.pos_embed.detach().std()) == pytest.approx(0.02, rel=0.1)
    weight = net.blocks[0].self_attn.in_proj_weight  # timm's qkv Linear: trunc_normal(std=0.02), zero bias
    assert float(weight.detach().std()) == pytest.approx(0.02, rel=0.1) and not net.blocks[0].self_attn.in_proj_bias.any()
    assert float(net.blocks[0].linear2.weight.detach().std()) == pytest.approx(0.02, rel=0.1)
