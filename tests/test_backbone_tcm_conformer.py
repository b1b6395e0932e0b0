"""``tcm_conformer``: the contract, the reference's parameter count and structure, 1-10 s inputs,
dynamic lengths under the engines, bad arguments."""

from __future__ import annotations

import math

import pytest
import torch
import torch.nn.functional as F

import modforge as mf
from modforge.components.backbones.tcm_conformer import ConformerBlock, TCMAttention, TCMConformer
from part_checks import assert_embeds, assert_engines_follow_the_frame_count


def n_params(module: torch.nn.Module) -> int:
    return sum(p.numel() for p in module.parameters())


def small(**kwargs) -> TCMConformer:
    return TCMConformer(12, **{"embed_dim": 16, "heads": 4, "num_encoders": 2, "kernel_size": 7, **kwargs})


def test_parameter_count_matches_the_reference():
    # ductuantruong/tcm_add Model minus XLS-R: LL(1024→144) + BatchNorm2d(1) + 4 conformer blocks + class token
    # = 2,382,338; with its 2-way fc5 (145 × 2) 2,382,628 — the Nes2Net paper's "TCM 2,383k"
    net = mf.BACKBONES.build("tcm_conformer", in_dim=1024)
    assert n_params(net) == 2_382_338 and n_params(net) + 144 * 2 + 2 == 2_382_628
    assert net.out_dim == 144 and len(net.blocks) == 4
    block = net.blocks[0]
    assert block.attn.heads == 4 and block.attn.head_dim == 36 and block.conv.depthwise.kernel_size == (31,)
    assert n_params(block) == 558_648


def test_head_tokens_join_the_attention_and_merge_into_the_class_token():
    attn = TCMAttention(16, heads=4, dropout=0.0).eval()
    x = torch.randn(2, 9, 16)  # class token + 8 frames
    with torch.no_grad():
        tokens = attn.head_tokens(x)
        assert tokens.shape == (2, 4, 16)
        out = attn(x)
        # recompute by hand: attention over frames + head tokens, then class += mean(head tokens) + mean(frames)
        joint = torch.cat([x, tokens], dim=1)
        q, k, v = attn.qkv(joint).chunk(3, dim=-1)
        split = lambda t: t.reshape(2, 13, 4, 4).transpose(1, 2)  # noqa: E731
        weights = torch.softmax(split(q) @ split(k).transpose(-2, -1) / math.sqrt(4), dim=-1)
        mixed = attn.proj((weights @ split(v)).transpose(1, 2).reshape(2, 13, 16))
        cls = mixed[:, :1] + mixed[:, 9:].mean(dim=1, keepdim=True) + mixed[:, 1:9].mean(dim=1, keepdim=True)
    assert out.shape == x.shape
    assert torch.allclose(out[:, 1:], mixed[:, 1:9], atol=1e-6) and torch.allclose(out[:, :1], cls, atol=1e-6)


def reference_forward(net: TCMConformer, x: torch.Tensor) -> torch.Tensor:
    """ductuantruong/tcm_add Model.forward after XLS-R (LL, first_bn, selu, MyConformer) and conformer.py's blocks,
    written out with the weights of ``net`` (eval mode): the class token's output."""
    b, frames, _ = x.shape
    dim = net.out_dim
    x = F.selu(net.input_norm(net.projection(x).unsqueeze(dim=1))).squeeze(dim=1)
    table = torch.FloatTensor([[p / (10000 ** (2 * (i // 2) / dim)) for i in range(dim)] for p in range(frames)])
    table[:, 0::2] = torch.sin(table[:, 0::2])
    table[:, 1::2] = torch.cos(table[:, 1::2])
    x = x + table.unsqueeze(0)
    x = torch.stack([torch.vstack((net.class_token[0], x[i])) for i in range(len(x))])
    swish = lambda t: t * t.sigmoid()  # noqa: E731

    def ff(module, t):
        net_ = module.net
        return net_[4](swish(net_[1](net_[0](t))))

    for block in net.blocks:
        x = ff(block.ff1, x) * 0.5 + x
        a, y = block.attn, block.attn_norm(x)  # PreNorm(Attention)
        n, heads, c = y.shape[1], a.heads, dim
        x_ = y.reshape(b, -1, heads, c // heads).permute(0, 2, 1, 3).mean(dim=2)
        x_ = a.token_proj(x_).reshape(b, -1, heads, c // heads)
        x_ = F.gelu(a.token_norm(x_)).flatten(2) + a.token_pos.expand(b, -1, -1)
        y = torch.cat([y, x_], dim=1)
        qkv = a.qkv(y).reshape(b, n + heads, 3, heads, c // heads).permute(2, 0, 3, 1, 4)
        q, k, v = qkv[0], qkv[1], qkv[2]
        attn = ((q @ k.transpose(-2, -1)) * a.scale).softmax(dim=-1)
        y = a.proj((attn @ v).transpose(1, 2).reshape(b, n + heads, c))
        cls, patch, ht = torch.split(y, [1, n - 1, heads], dim=1)
        cls = cls + torch.mean(ht, dim=1, keepdim=True) + torch.mean(patch, dim=1, keepdim=True)
        x = torch.cat([cls, patch], dim=1) + x
        conv = block.conv
        y = conv.pointwise_in(conv.norm(x).permute(0, 2, 1))
        out, gate = y.chunk(2, dim=1)
        y = conv.depthwise(F.pad(out * gate.sigmoid(), (15, 15)))
        y = conv.pointwise_out(swish(conv.bn(y))).permute(0, 2, 1)
        x = y + x
        x = ff(block.ff2, x) * 0.5 + x
        x = block.post_norm(x)
    return x[:, 0, :]


def test_forward_is_the_references():
    torch.manual_seed(0)
    net = mf.BACKBONES.build("tcm_conformer", in_dim=64).eval()  # the reference configuration on 64-d features
    with torch.no_grad():
        for module in net.modules():
            if isinstance(module, (torch.nn.BatchNorm1d, torch.nn.BatchNorm2d)):
                module.running_mean.normal_(0, 0.1)
                module.running_var.uniform_(0.5, 1.5)
            if isinstance(module, TCMAttention):
                module.token_pos.normal_(0, 0.1)
        x = torch.randn(2, 50, 64)
        assert torch.allclose(net(x), reference_forward(net, x), rtol=1e-4, atol=1e-5)


def test_blocks_start_from_one_initialisation_as_the_references_clones():
    net = mf.BACKBONES.build("tcm_conformer", in_dim=32)
    first = net.blocks[0].state_dict()
    for block in net.blocks[1:]:
        assert all(torch.equal(first[k], v) for k, v in block.state_dict().items())
        assert block.ff1.net[1].weight.data_ptr() != net.blocks[0].ff1.net[1].weight.data_ptr()  # copies, not shared


def test_position_encoding_is_the_references_sinusoid():
    net = small()
    pe = net.position_encoding(5, torch.zeros(1))[0]
    for p in range(5):
        for i in range(16):
            angle = p / 10000 ** (2 * (i // 2) / 16)
            assert pe[p, i].item() == pytest.approx(math.sin(angle) if i % 2 == 0 else math.cos(angle), abs=1e-6)
    # bit for bit the reference's float32 table (angles rounded to float32 before sin/cos), here at 144 channels
    net = mf.BACKBONES.build("tcm_conformer", in_dim=8)
    table = torch.FloatTensor([[p / (10000 ** (2 * (i // 2) / 144)) for i in range(144)] for p in range(700)])
    table[:, 0::2], table[:, 1::2] = torch.sin(table[:, 0::2]), torch.cos(table[:, 1::2])
    assert torch.equal(net.position_encoding(700, torch.zeros(1))[0], table)


def test_block_order_is_half_ffn_attention_conv_half_ffn_norm():
    block = ConformerBlock(16, heads=4, ff_mult=4, conv_expansion=2, kernel_size=7, dropout=0.0).eval()
    calls: list[str] = []
    for name in ("ff1", "attn", "conv", "ff2", "post_norm"):
        getattr(block, name).register_forward_hook(lambda _m, _i, _o, name=name: calls.append(name))
    with torch.no_grad():
        block(torch.randn(1, 6, 16))
    assert calls == ["ff1", "attn", "conv", "ff2", "post_norm"]


@pytest.mark.parametrize("frames", [50, 200, 500, 1000])  # 1 s, 4 s, 10 s of XLS-R features at 50 frames/s (and 1000)
def test_one_to_ten_seconds_of_features(frames):
    assert_embeds("tcm_conformer", 1024, frames, 144)


@pytest.mark.parametrize("engine", ["torchscript", "onnx"])
def test_engines_follow_the_frame_count(engine):
    assert_engines_follow_the_frame_count(small().eval(), engine)


def test_bad_arguments_and_inputs_raise_one_clear_error():
    with pytest.raises(mf.BuildError, match=r"embed_dim \(144\) must be a multiple of heads \(5\)"):
        mf.BACKBONES.build({"type": "tcm_conformer", "args": {"heads": 5}}, in_dim=1024)
    with pytest.raises(ValueError, match="sizes must be positive, got num_encoders=0"):
        TCMConformer(1024, num_encoders=0)
    with pytest.raises(ValueError, match="dropout must be in"):
        TCMConformer(1024, dropout=1.0)
    with pytest.raises(ValueError, match=r"expects frame features \[B, T, D\] with D=12, got \[2, 7\]"):
        small().eval()(torch.randn(2, 7))
