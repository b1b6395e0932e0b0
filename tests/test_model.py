"""build_model: wiring, dictionary flow, returnt, losses, layouts, and every error path."""

from __future__ import annotations

import pytest
import torch
import torch.nn as nn
import torch.nn.functional as F

import modforge as mf
from modforge.core.errors import BuildError, ConfigError
from modforge.model import ModelBuildError, ModelOutputError, StageError

IMG = torch.randn(3, 1, 8, 8)
LABELS = torch.tensor([0, 3, 9])


def digits_cnn(**extra):
    cfg = {"backbone": {"type": "cnn", "args": {"channels": [8, 16]}}, "neck": "global_avg_pool", "head": "linear"}
    cfg.update(extra)
    return mf.build_model(cfg, in_dim=1, num_classes=10, input_shape=(1, 8, 8))


def test_dimensions_are_wired_from_part_to_part():
    model = digits_cnn()
    info = {i.name: i for i in model.stage_info}
    assert (info["backbone"].in_dim, info["backbone"].out_dim) == (1, 16)
    assert (info["neck"].in_dim, info["neck"].out_dim) == (16, 16)
    assert (info["head"].in_dim, info["head"].out_dim) == (16, 10)
    assert model.stage("head").fc.in_features == 16
    assert model(IMG).shape == (3, 10)


def test_vector_input_chain_and_shorthand():
    model = mf.build_model(
        {"backbone": {"type": "mlp", "args": {"hidden_dims": [32]}}, "head": "linear"}, in_dim=64, num_classes=10
    )
    assert model(torch.randn(5, 64)).shape == (5, 10)
    assert model.embedding_dim == 32 and model.out_dim == 10


def test_dict_flow_adds_stage_outputs_embedding_logits_and_losses():
    model = digits_cnn(losses=[{"type": "cross_entropy"}, {"type": "focal", "weight": 0.5, "name": "focus"}])
    out = model({"input": IMG, "label": LABELS, "index": torch.arange(3)})
    for key in (
        "input",
        "label",
        "index",
        "backbone",
        "neck",
        "head",
        "embedding",
        "features",
        "logits",
        "loss",
        "loss_cross_entropy",
        "loss_focus",
    ):
        assert key in out, key
    assert out["logits"] is out["head"] and out["embedding"] is out["features"]
    assert torch.allclose(out["embedding"], out["neck"])
    expected = F.cross_entropy(out["logits"], LABELS) + 0.5 * out["loss_focus"]
    assert torch.allclose(out["loss"], expected)
    out["loss"].backward()
    assert model.stage("backbone").block1[0].weight.grad is not None


def test_no_labels_no_losses():
    out = digits_cnn(losses=["cross_entropy"])({"input": IMG})
    assert "loss" not in out and "loss_cross_entropy" not in out


def test_returnt_modes():
    model = digits_cnn().eval()
    with torch.no_grad():
        logits = model(IMG)
        feats = model(IMG, returnt="features")
        both = model(IMG, returnt="both")
        full = model(IMG, returnt="full")
    assert feats.shape == (3, 16)
    assert torch.equal(both[0], logits) and torch.equal(both[1], feats)
    # full: the backbone's two blocks, then each stage's output, in order
    assert [tuple(t.shape) for t in full] == [(3, 8, 4, 4), (3, 16, 2, 2), (3, 16, 2, 2), (3, 16), (3, 10)]
    assert torch.equal(full[-1], logits)
    with pytest.raises(mf.UsageError, match="returnt must be one of"):
        model(IMG, returnt="logits")


def test_adapters_are_inserted_only_where_documented():
    model = mf.build_model({"backbone": "resnet18", "head": "linear"}, in_dim=3, num_classes=4)
    assert "head" in model.adapters and model.adapters["head"].op == "mean_hw"
    seq = mf.build_model(
        {"backbone": {"type": "resnet18", "args": {"width": 0.125}}, "head": "linear"},
        in_dim=20,
        num_classes=2,
        layout="sequence",
        input_shape=(30, 20),
    )
    assert seq.stage_info[0].in_dim == 1 and seq.adapters["backbone"].op == "to_image"  # a spectrogram as an image
    assert seq(torch.randn(2, 30, 20)).shape == (2, 2)


def test_incompatible_layouts_fail_at_build_time_naming_both_parts():
    with pytest.raises(ModelBuildError) as info:
        mf.build_model({"backbone": "mlp", "neck": "fpn"}, in_dim=8)
    msg = str(info.value)
    assert msg.startswith("model.neck: neck 'fpn' accepts multiscale")
    assert "backbone 'mlp' produces vector [B, D]" in msg and "no adapter" in msg
    with pytest.raises(
        ModelBuildError, match=r"backbone 'vit_tiny' accepts image \[B, C, H, W\], but the input produces vector"
    ):
        mf.build_model({"backbone": "vit_tiny"}, in_dim=8, layout="vector")


def test_general_form_with_prev_and_multiscale():
    model = mf.build_model(
        {
            "stages": [
                {"name": "backbone", "type": "resnet18", "args": {"width": 0.125, "features_only": True}},
                {"name": "fpn", "kind": "neck", "type": "fpn", "args": {"out_channels": 16}},
                {"name": "pool", "kind": "neck", "type": "global_avg_pool"},
                {"name": "head", "prev": "pool", "type": "linear"},
            ]
        },
        in_dim=3,
        num_classes=7,
    )
    info = {i.name: i for i in model.stage_info}
    assert info["backbone"].out_dim == [8, 16, 32, 64] and info["fpn"].out_dim == [16] * 4
    assert info["pool"].out_dim == 64 and model(torch.randn(2, 3, 32, 32)).shape == (2, 7)


def test_prev_can_skip_stages():
    model = mf.build_model(
        {
            "stages": [
                {"name": "backbone", "type": "mlp", "args": {"hidden_dims": [12]}},
                {"name": "extra", "kind": "neck", "type": "identity"},
                {"name": "head", "prev": "backbone", "type": "linear"},
            ]
        },
        in_dim=6,
        num_classes=3,
    )
    assert model.stage_info[-1].prev == "backbone" and model(torch.randn(2, 6)).shape == (2, 3)


@pytest.mark.parametrize(
    ("model_cfg", "pattern"),
    [
        (
            {"stages": [{"name": "backbone", "type": "mlp"}, {"name": "head", "prev": "bakbone", "type": "linear"}]},
            r"model.stages.1.prev: stage 'head' reads from prev 'bakbone', which is not an earlier stage",
        ),
        (
            {"stages": [{"name": "head", "prev": "backbone", "type": "linear"}, {"name": "backbone", "type": "mlp"}]},
            r"stages may only read from earlier stages",
        ),
        ({"stages": [{"name": "logits", "kind": "backbone", "type": "mlp"}]}, r"stage name 'logits' is reserved"),
        (
            {
                "stages": [
                    {"name": "a", "kind": "backbone", "type": "mlp"},
                    {"name": "a", "kind": "head", "type": "linear"},
                ]
            },
            r"two stages are named 'a'",
        ),
        ({"stages": [{"name": "x", "type": "mlp"}]}, r"stage 'x' needs 'kind'"),
        ({"backbone": "mlp", "stages": []}, r"use either 'stages:' or the chain keys"),
        ({"head": "linear"}, r"a model needs a backbone"),
        ({"backbone": "mlp", "lossses": []}, r"unknown model key 'lossses'; did you mean 'losses'"),
        (
            {"backbone": "mlp", "losses": [{"type": "cross_entropy", "weight": "x"}]},
            r"model.losses.0.weight: expected a number",
        ),
    ],
)
def test_model_section_errors(model_cfg, pattern):
    with pytest.raises(ConfigError, match=pattern):
        mf.build_model(model_cfg, in_dim=4, num_classes=3)


def test_part_argument_errors_name_the_stage():
    with pytest.raises(
        BuildError,
        match=r"model.loss|model.losses.0: building loss 'cross_entropy' failed: ValueError: class_weights needs one weight per class \(3\)",
    ):
        mf.build_model(
            {
                "backbone": "mlp",
                "head": "linear",
                "losses": [{"type": "cross_entropy", "args": {"class_weights": [1, 2]}}],
            },
            in_dim=4,
            num_classes=3,
        )
    with pytest.raises(
        BuildError, match=r"model.backbone: building backbone 'cnn' failed: ValueError: kernel_size must be odd"
    ):
        mf.build_model({"backbone": {"type": "cnn", "args": {"kernel_size": 2}}}, in_dim=1)


class NoOutDim(nn.Module):
    def __init__(self, in_dim: int, width: int = 6):
        super().__init__()
        self.fc = nn.Linear(in_dim, width)

    def forward(self, x):
        return self.fc(x)


class Crashes(nn.Module):
    def __init__(self, in_dim: int):
        super().__init__()

    def forward(self, x):
        raise RuntimeError("kaboom in forward")


class LiesAboutOutDim(NoOutDim):
    out_dim = 99


class LossyStage(nn.Module):
    """Writes its own loss key (UP style) via returning it is impossible for tensor parts,
    so this one is used as a dict-io head."""

    dict_io = True
    output_key = "logits"

    def __init__(self, in_dim: int, num_classes: int, bad: str = "none"):
        super().__init__()
        self.fc = nn.Linear(in_dim, num_classes)
        self.bad = bad

    def forward(self, batch: dict) -> dict:
        batch["logits"] = self.fc(batch["backbone"])
        if "label" in batch:
            value = F.cross_entropy(
                batch["logits"], batch["label"], reduction="none" if self.bad == "vector" else "mean"
            )
            batch["aux_loss"] = "oops" if self.bad == "text" else value
        return batch


def test_plain_module_without_out_dim_is_measured():
    mf.register_backbone("no_out_dim")(NoOutDim)
    model = mf.build_model(
        {"backbone": {"type": "no_out_dim", "args": {"width": 5}}, "head": "linear"}, in_dim=3, num_classes=2
    )
    assert model.stage_info[0].out_dim == 5 and model.stage("head").fc.in_features == 5


def test_dry_run_failure_and_lying_out_dim_are_build_errors():
    mf.register_backbone("crashes")(Crashes)
    with pytest.raises(ModelBuildError) as info:
        mf.build_model({"backbone": "crashes"}, in_dim=3)
    assert str(info.value) == (
        "model.backbone: backbone 'crashes' failed its dry run on tensor[2, 3] float32 (vector [B, D]): "
        "RuntimeError: kaboom in forward"
    )
    mf.register_backbone("liar")(LiesAboutOutDim)
    with pytest.raises(ModelBuildError, match=r"declares out_dim 99 but its output tensor\[2, 6\] float32 has 6"):
        mf.build_model({"backbone": "liar"}, in_dim=3)


def test_a_stage_that_fails_at_run_time_is_named():
    model = digits_cnn()
    with pytest.raises(StageError) as info:
        model(torch.randn(2, 3, 8, 8))  # 3 channels instead of 1
    assert str(info.value).startswith(
        "stage 'backbone' (backbone 'cnn') failed on tensor[2, 3, 8, 8] float32: RuntimeError"
    )
    with pytest.raises(ModelOutputError, match="the batch has no 'input' key"):
        model({"image": IMG})


def test_stage_loss_keys_are_summed_and_validated():
    mf.register_head("lossy")(LossyStage)
    cfg = {"backbone": {"type": "mlp", "args": {"hidden_dims": [8]}}, "head": "lossy", "losses": ["cross_entropy"]}
    model = mf.build_model(cfg, in_dim=4, num_classes=3)
    x, y = torch.randn(5, 4), torch.randint(0, 3, (5,))
    out = model({"input": x, "label": y})
    assert torch.allclose(out["loss"], out["aux_loss"] + out["loss_cross_entropy"])
    assert torch.allclose(out["aux_loss"], out["loss_cross_entropy"])
    for bad, pattern in (
        ("vector", r"batch key 'aux_loss' holds a loss by its name .* but is tensor\[5\]"),
        ("text", r"batch key 'aux_loss' .* but is str"),
    ):
        cfg["head"] = {"type": "lossy", "args": {"bad": bad}}
        with pytest.raises((ModelOutputError, ModelBuildError), match=pattern):
            mf.build_model(cfg, in_dim=4, num_classes=3)({"input": x, "label": y})


def test_input_keys_that_look_like_losses_are_not_summed():
    model = digits_cnn(losses=["cross_entropy"])
    out = model({"input": IMG, "label": LABELS, "loss_weight": torch.ones(3)})
    assert torch.allclose(out["loss"], out["loss_cross_entropy"])


def test_model_flat_params_and_backbone_access():
    model = digits_cnn()
    assert model.get_params().numel() == sum(p.numel() for p in model.parameters())
    assert model.backbone is model.stage("backbone")
    assert model.get_grads().abs().sum() == 0


def test_build_from_config_object_with_plugins(write):
    write(
        "parts.py",
        "import torch.nn as nn\nimport modforge as mf\n\n@mf.register_head('cfg_head')\n"
        "def cfg_head(in_dim: int, num_classes: int):\n    return nn.Linear(in_dim, num_classes)\n",
    )
    path = write(
        "m.yaml", "plugins: [parts.py]\nmodel:\n  backbone: {type: mlp, args: {hidden_dims: [4]}}\n  head: cfg_head\n"
    )
    model = mf.build_model(mf.load_config(path), in_dim=3, num_classes=2)
    assert model(torch.randn(2, 3)).shape == (2, 2)
    with pytest.raises(
        mf.UnknownComponentError,
        match=r"model.head.type: no head named 'cfg_hed'; did you mean 'cfg_head'.*\(in override 'model.head=cfg_hed'\)",
    ):
        mf.build_model(mf.load_config(path, ["model.head=cfg_hed"]), in_dim=3, num_classes=2)


def test_loss_values():
    logits, target = torch.randn(6, 4), torch.randint(0, 4, (6,))
    ce = mf.LOSSES.build({"type": "cross_entropy", "args": {"label_smoothing": 0.1}}, num_classes=4)
    assert torch.allclose(ce(logits, target), F.cross_entropy(logits, target, label_smoothing=0.1))
    focal0 = mf.LOSSES.build({"type": "focal", "args": {"gamma": 0.0}}, num_classes=4)
    assert torch.allclose(focal0(logits, target), F.cross_entropy(logits, target))
    focal = mf.LOSSES.build("focal", num_classes=4)
    assert focal(logits, target) < F.cross_entropy(logits, target)
    bce = mf.LOSSES.build("bce_with_logits")
    assert torch.allclose(bce(logits, target), F.binary_cross_entropy_with_logits(logits, F.one_hot(target, 4).float()))
    weighted = mf.LOSSES.build({"type": "cross_entropy", "args": {"class_weights": [1, 2, 3, 4]}}, num_classes=4)
    assert torch.allclose(
        weighted(logits, target), F.cross_entropy(logits, target, weight=torch.tensor([1.0, 2, 3, 4]))
    )


def test_cosine_head_is_scale_times_cosine():
    head = mf.HEADS.build({"type": "cosine", "args": {"scale": 10.0, "learn_scale": False}}, in_dim=3, num_classes=2)
    x = torch.randn(4, 3)
    expected = 10.0 * F.normalize(x) @ F.normalize(head.weight).T
    assert torch.allclose(head(x), expected, atol=1e-5)
    assert torch.allclose(head(x * 7), head(x), atol=1e-5)  # invariant to the embedding's norm
