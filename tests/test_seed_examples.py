"""The seed documents' registration examples, ported to modforge and run for real."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch
import yaml

import modforge as mf
from modforge.core.errors import BuildError, MissingArgumentError, UnknownKeyError
from modforge.experiment import validate_config

SEEDS = Path(__file__).parent / "seed_parts"


def test_deepfense_backends_register_list_and_run(write):
    mf.load_plugins([str(SEEDS / "deepfense_backbones.py")])
    assert "MyBackend" in mf.BACKBONES and "AttentionBackend" in mf.BACKBONES
    assert {"AttentionBackend", "MyBackend"} <= set(mf.BACKBONES.list())
    cfg = write(
        "deepfense.yaml",
        f"""
        plugins: [{SEEDS / "deepfense_backbones.py"}]
        model:
          backbone:
            type: MyBackend
            args: {{output_dim: 128, hidden_dim: 256}}
    """,
    )
    spec = validate_config(mf.load_config(cfg)).data["model"]["backbone"]
    backend = mf.BACKBONES.build(spec, in_dim=768).eval()
    assert backend(torch.randn(4, 100, 768)).shape == (4, 128)  # [B, T, D]
    assert backend(torch.randn(4, 768)).shape == (4, 128)  # [B, D]
    attention = mf.BACKBONES.build({"type": "AttentionBackend", "args": {"output_dim": 64}}, in_dim=768)
    assert attention(torch.randn(2, 50, 768)).shape == (2, 64)


def test_deepfense_habit_of_hand_writing_input_dim_is_caught(write):
    cfg = write(
        "deepfense_old.yaml",
        f"""
        plugins: [{SEEDS / "deepfense_backbones.py"}]
        model: {{backbone: {{type: MyBackend, args: {{input_dim: 768, output_dim: 128}}}}}}
    """,
    )
    with pytest.raises(
        UnknownKeyError,
        match=r"model.backbone.args.input_dim: unknown argument 'input_dim': this part's 'in_dim' is wired by the builder",
    ):
        validate_config(mf.load_config(cfg))


def test_mammoth_function_backbone_with_inferred_flags(cli, write):
    write(
        "base.yaml",
        f"plugins: [{SEEDS / 'mammoth_backbones.py'}]\nmodel: {{backbone: {{type: resnet, args: {{depth: 2}}}}}}\n",
    )
    res = cli("config", "base.yaml", "--depth", "3", "--width", "2")
    assert res.code == 0, res.err
    assert yaml.safe_load(res.out)["model"]["backbone"] == {"type": "resnet", "args": {"depth": 3, "width": 2}}
    sig = mf.BACKBONES.signature("resnet")
    depth, width = sig.get("depth"), sig.get("width")
    assert depth.required and depth.type is int and not width.required and width.default == 1
    net = mf.BACKBONES.build({"type": "resnet", "args": {"depth": 2, "width": 2}})
    assert net(torch.randn(2, 3, 8, 8)).shape == (2, 32)
    with pytest.raises(MissingArgumentError, match=r"model.backbone.args.depth: required argument missing"):
        mf.BACKBONES.build("resnet", path="model.backbone")


def test_up_custom_net_from_yaml(write):
    cfg = write(
        "up.yaml",
        f"""
        plugins: [{SEEDS / "up_parts.py"}]
        model:
          backbone: {{type: custom_net, args: {{depth: 3, out_planes: [64, 128, 256]}}}}
    """,
    )
    spec = validate_config(mf.load_config(cfg)).data["model"]["backbone"]
    net = mf.BACKBONES.build(spec)
    assert net(torch.randn(1, 3, 8, 8)).shape == (1, 256, 8, 8)
    with pytest.raises(
        BuildError, match=r"building backbone 'custom_net' failed: ValueError: out_planes needs 3 entries"
    ):
        mf.BACKBONES.build({"type": "custom_net", "args": {"depth": 3, "out_planes": [8]}}, path="model.backbone")
