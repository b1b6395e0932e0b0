"""The seed documents' examples, ported to modforge: built from YAML, run, and checked."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch
import yaml

import modforge as mf
from modforge.core.errors import BuildError, MissingArgumentError, UnknownKeyError
from modforge.experiment import validate_config

SEEDS = Path(__file__).parent / "seed_parts"
DEEPFENSE, MAMMOTH, UP = (str(SEEDS / f) for f in ("deepfense_backbones.py", "mammoth_backbones.py", "up_parts.py"))


@pytest.fixture(autouse=True)
def parts_beside_configs(tmp_path, monkeypatch):
    """The seed parts sit beside the test's configs, as a user's own parts sit beside theirs
    (a config may only import plug-ins beside it); configs name them by file name."""
    for source in (DEEPFENSE, MAMMOTH, UP):
        (tmp_path / Path(source).name).write_text(Path(source).read_text())
    monkeypatch.chdir(tmp_path)


def test_deepfense_backends_register_list_and_run(write):
    mf.load_plugins(["deepfense_backbones.py"])  # the user's own call, from Python
    assert "MyBackend" in mf.BACKBONES and "AttentionBackend" in mf.BACKBONES
    assert {"AttentionBackend", "MyBackend"} <= set(mf.BACKBONES.list())
    cfg = write(
        "deepfense.yaml",
        """
        plugins: [deepfense_backbones.py]
        model:
          backbone:
            type: MyBackend
            args: {output_dim: 128, hidden_dim: 256}
    """,
    )
    spec = validate_config(mf.load_config(cfg)).data["model"]["backbone"]
    backend = mf.BACKBONES.build(spec, in_dim=768).eval()
    assert backend(torch.randn(4, 100, 768)).shape == (4, 128)  # [B, T, D]
    assert backend(torch.randn(4, 768)).shape == (4, 128)  # [B, D]


def test_deepfense_attention_backend_in_a_model_with_dims_wired(write):
    cfg = write(
        "attn.yaml",
        """
        plugins: [deepfense_backbones.py]
        model:
          backbone: {type: AttentionBackend, args: {output_dim: 64}}
          head: linear
          losses: [cross_entropy]
    """,
    )
    model = mf.build_model(mf.load_config(cfg), in_dim=768, num_classes=2, input_shape=(50, 768))
    assert model.stage_info[0].in_layout.value == "sequence" and model.stage("head").fc.in_features == 64
    out = model({"input": torch.randn(3, 50, 768), "label": torch.tensor([0, 1, 1])})
    out["loss"].backward()
    assert model.stage("backbone").projection.weight.grad is not None


@pytest.mark.parametrize(
    ("target", "extra"),
    [(f"{DEEPFENSE}:MyBackend", ["--layout", "sequence", "vector"]), (f"{DEEPFENSE}:AttentionBackend", [])],
)
def test_deepfense_parts_pass_modforge_check(cli, target, extra):
    res = cli("check", "backbone", target, *extra)
    assert res.code == 0, res.out + res.err


def test_deepfense_habit_of_hand_writing_input_dim_is_caught(write):
    cfg = write(
        "deepfense_old.yaml",
        """
        plugins: [deepfense_backbones.py]
        model: {backbone: {type: MyBackend, args: {input_dim: 768, output_dim: 128}}}
    """,
    )
    with pytest.raises(
        UnknownKeyError,
        match=r"model.backbone.args.input_dim: unknown argument 'input_dim': this part's 'in_dim' is wired by the builder",
    ):
        validate_config(mf.load_config(cfg))


def test_mammoth_function_backbone_flags_returnt_and_no_head(cli, write):
    write("base.yaml", "plugins: [mammoth_backbones.py]\nmodel: {backbone: {type: resnet, args: {depth: 2}}}\n")
    res = cli("config", "base.yaml", "--depth", "3", "--width", "2")
    assert res.code == 0, res.err
    assert yaml.safe_load(res.out)["model"]["backbone"] == {"type": "resnet", "args": {"depth": 3, "width": 2}}
    sig = mf.BACKBONES.signature("resnet")
    assert sig.get("depth").required and sig.get("depth").type is int and sig.get("width").default == 1
    assert sig.get("num_classes").injected
    model = mf.build_model(
        {"backbone": {"type": "resnet", "args": {"depth": 2}}}, in_dim=3, num_classes=4, input_shape=(3, 8, 8)
    ).eval()
    x = torch.randn(2, 3, 8, 8)
    logits, feats = model(x, returnt="both")
    assert logits.shape == (2, 4) and feats.shape == (2, 16)  # the backbone's own classifier and features
    assert torch.equal(model(x, returnt="features"), feats)
    assert len(model(x, returnt="full")) == 3  # two blocks and the logits, as the backbone reports them
    with pytest.raises(MissingArgumentError, match=r"model.backbone.args.depth: required argument missing"):
        mf.BACKBONES.build("resnet", path="model.backbone")
    assert cli("check", "backbone", "resnet", "--args", "depth=1", "--plugins", "mammoth_backbones.py").code == 0


def test_up_custom_net_and_head_from_yaml_with_prev(write, cli):
    cfg = write(
        "up.yaml",
        """
        plugins: [up_parts.py]
        model:
          stages:
            - name: backbone
              type: custom_net
              args: {depth: 3, out_planes: [64, 128, 256]}
            - name: head
              prev: backbone
              type: custom_head
              args: {num_classes: 21}
    """,
    )
    config = validate_config(mf.load_config(cfg))
    model = mf.build_model(config, in_dim=3)
    assert model.stage_info[1].in_dim == [256] and model.stage("head").fc.out_features == 21
    out = model({"input": torch.randn(2, 3, 8, 8), "label": torch.tensor([1, 20])})
    assert set(out) >= {"features", "strides", "logits", "ce_loss", "loss"}
    assert torch.equal(out["loss"], out["ce_loss"])  # found by its name and back-propagated
    out["loss"].backward()
    assert model.stage("backbone").layers[0].weight.grad is not None
    with pytest.raises(
        BuildError, match=r"building backbone 'custom_net' failed: ValueError: out_planes needs 3 entries"
    ):
        mf.BACKBONES.build({"type": "custom_net", "args": {"depth": 3, "out_planes": [8]}}, path="model.backbone")
    assert cli("check", "backbone", "up_parts.py:CustomNet", "--args", "depth=2", "out_planes=[4,8]").code == 0
    assert cli("check", "head", "up_parts.py:CustomHead").code == 0
