"""The ``timm`` backbone is timm's own network: parameter counts are timm's minus the classifier, a timm
state dict loaded through ``model.init`` (``format: timm``) gives timm's outputs, ``features_only`` gives
timm's feature maps and drives ``fpn`` + ``fcos`` on the shapes set; nothing reaches the network
(``hub: true`` offline is refused with the way round it), and ``modforge list`` does not import timm."""

from __future__ import annotations

import importlib
import importlib.util
import json
import subprocess
import sys
from pathlib import Path

import pytest
import torch

import modforge as mf
from modforge.components.backbones.timm_models import timm_state_dict
from modforge.core.errors import ConfigError
from modforge.testing import check_part
from part_checks import assert_contract, refuse_network, with_random_bn_statistics


class _OnFirstUse:
    """A module imported when a test first uses it, not when the file is collected: each of the two test
    workers collects every file, and only the one running this file needs timm (its import, torchvision's
    included, costs seconds)."""

    def __init__(self, name: str):
        self._name = name

    def __getattr__(self, attribute: str):
        if attribute.startswith("_"):  # pytest's probes of the module's names while collecting (_mock_name...)
            raise AttributeError(attribute)
        return getattr(importlib.import_module(self._name), attribute)


pytestmark = pytest.mark.skipif(not all(importlib.util.find_spec(name) for name in ("timm", "safetensors")),
                                reason="timm and safetensors are not installed")  # fmt: skip
timm = _OnFirstUse("timm")
safetensors_torch = _OnFirstUse("safetensors.torch")

ROOT = Path(__file__).resolve().parents[1]
FCOS_TIMM = ROOT / "configs" / "detection" / "shapes_fcos_timm.yaml"


@pytest.fixture(autouse=True)
def no_network(monkeypatch):
    """Every test here runs offline: any connection attempt fails at once."""
    refuse_network(monkeypatch)


def timm_reference(name: str, seed: int = 0, **kwargs) -> torch.nn.Module:
    """A timm model with random weights and, for BatchNorm, random running statistics (eval mode)."""
    torch.manual_seed(seed)
    model = timm.create_model(name, **kwargs)
    return with_random_bn_statistics(model)


def params(module: torch.nn.Module) -> int:
    return sum(p.numel() for p in module.parameters())


@pytest.mark.parametrize("name", ["resnet18", "convnext_atto", "mobilenetv3_small_050"])
def test_parameter_count_is_timms_minus_its_classifier(name):
    reference = timm.create_model(name)
    classifier = reference.pretrained_cfg["classifier"]
    head = sum(p.numel() for k, p in reference.named_parameters() if k.startswith(f"{classifier}."))
    part = mf.BACKBONES.build({"type": "timm", "args": {"name": name}}, in_dim=3)
    assert head > 0 and params(part) == params(reference) - head
    with torch.no_grad():
        assert part.eval()(torch.randn(2, 3, 64, 64)).shape == (2, part.out_dim)


def test_weights_file_through_model_init_gives_timms_outputs(tmp_path):
    reference = timm_reference("convnext_atto")
    path = tmp_path / "convnext_atto.safetensors"
    safetensors_torch.save_file(reference.state_dict(), str(path))
    model = mf.build_model({"backbone": {"type": "timm", "args": {"name": "convnext_atto"}}, "head": "linear",
                            "init": {"path": str(path), "format": {"type": "timm", "args": {"head": "head"}}}},
                           in_dim=3, num_classes=1000).eval()  # fmt: skip
    assert model.init_records[0]["format"] == "timm" and model.init_records[0]["loaded"] == len(reference.state_dict())
    x = torch.randn(2, 3, 64, 64)
    with torch.no_grad():
        logits, features = model(x, returnt="both")
        expected = reference.forward_features(x)
        torch.testing.assert_close(features, reference.forward_head(expected, pre_logits=True), rtol=0, atol=1e-5)
        torch.testing.assert_close(logits, reference(x), rtol=0, atol=1e-5)


def test_a_pth_file_for_new_classes_leaves_the_classifier_out(tmp_path, caplog):
    reference = timm_reference("resnet18", seed=1)
    path = tmp_path / "resnet18.pth"
    torch.save(reference.state_dict(), path)
    caplog.set_level("INFO", logger="modforge.model")
    model = mf.build_model({"backbone": {"type": "timm", "args": {"name": "resnet18"}}, "head": "linear",
                            "init": {"path": str(path), "format": "timm", "part": "backbone"}}, in_dim=3,
                           num_classes=5).eval()  # fmt: skip
    assert "left out the 2 tensors of timm's classifier (fc)" in caplog.text
    x = torch.randn(2, 3, 64, 64)
    with torch.no_grad():
        torch.testing.assert_close(model(x, returnt="features"), reference.forward_head(reference.forward_features(x),
                                   pre_logits=True), rtol=0, atol=1e-5)  # fmt: skip
    # a ResNet file is timm's and torchvision's alike: format: auto takes it for modforge's own resnet18 (format
    # torchvision_resnet), never for the timm part, and says so
    with pytest.raises(ConfigError, match=r"\(format torchvision_resnet\) does not fit the model"):
        mf.build_model({"backbone": {"type": "timm"}, "head": "linear", "init": {"path": str(path), "part": "backbone"}},
                       in_dim=3, num_classes=5)  # fmt: skip


def test_features_only_gives_timms_feature_maps_and_fits_fpn(tmp_path):
    reference = timm_reference("resnet18", seed=2)
    path = tmp_path / "resnet18.safetensors"
    safetensors_torch.save_file(reference.state_dict(), str(path))
    backbone = {"type": "timm", "args": {"name": "resnet18", "features_only": True, "out_indices": [1, 2, 3, 4]}}
    part = mf.BACKBONES.build(backbone, in_dim=3)
    assert part.out_dim == [64, 128, 256, 512] and part.out_strides == [4, 8, 16, 32]
    state, left = timm_state_dict(reference.state_dict(), backbone_prefix="model.")
    assert sorted(left) == ["fc.bias", "fc.weight"]
    part.load_state_dict(state)  # strict: every tensor the pruned network has, nothing else
    features = timm.create_model("resnet18", features_only=True, out_indices=(1, 2, 3, 4), pretrained=True,
                                 pretrained_cfg_overlay={"file": str(path)}).eval()  # timm reads the same local file
    x = torch.randn(2, 3, 64, 64)
    with torch.no_grad():
        ours, theirs = part.eval()(x), features(x)
    assert len(ours) == len(theirs) == 4
    for a, b in zip(ours, theirs, strict=True):
        torch.testing.assert_close(a, b, rtol=0, atol=1e-5)
    fpn = mf.NECKS.build({"type": "fpn", "args": {"out_channels": 16}}, in_dim=part.out_dim)
    assert [t.shape[1] for t in fpn(ours)] == [16] * 4


def test_features_only_init_names_the_layers_a_pyramid_does_not_use(tmp_path):
    reference = timm_reference("convnext_atto", seed=3)
    path = tmp_path / "convnext_atto.safetensors"
    safetensors_torch.save_file(reference.state_dict(), str(path))
    section = {"backbone": {"type": "timm", "args": {"name": "convnext_atto", "features_only": True}},
               "neck": {"type": "fpn", "args": {"out_channels": 16}}, "head": {"type": "fcos", "args": {"strides": [4, 8, 16, 32]}}}  # fmt: skip
    with pytest.raises(ConfigError, match=r"2 file keys the model does not have: parts\.backbone\.model\.head\.norm\.bias"):
        mf.build_model(dict(section, init={"path": str(path), "format": "timm", "part": "backbone"}), in_dim=3, num_classes=3,
                       input_shape=(3, 64, 64))  # fmt: skip
    model = mf.build_model(dict(section, init={"path": str(path), "format": "timm", "part": "backbone",
                                               "exclude": ["parts.backbone.model.head.*"]}),
                           in_dim=3, num_classes=3, input_shape=(3, 64, 64))  # fmt: skip
    features = timm.create_model("convnext_atto", features_only=True, pretrained=True,
                                 pretrained_cfg_overlay={"file": str(path)}).eval()  # fmt: skip
    x = torch.randn(2, 3, 64, 64)
    with torch.no_grad():
        for a, b in zip(model.parts["backbone"].eval()(x), features(x), strict=True):
            torch.testing.assert_close(a, b, rtol=0, atol=1e-5)


def test_unknown_names_arguments_and_levels_get_one_clear_error():
    with pytest.raises(ConfigError, match=r"unknown timm model 'convnext_tinyy'.*did you mean convnext_tiny"):
        mf.BACKBONES.build({"type": "timm", "args": {"name": "convnext_tinyy"}}, in_dim=3)
    with pytest.raises(ConfigError, match=r"timm's resnet18 does not take img_size"):
        mf.BACKBONES.build({"type": "timm", "args": {"name": "resnet18", "img_size": 64}}, in_dim=3)
    with pytest.raises(ConfigError, match=r"out_indices \(7,\) out of range: timm's resnet18 has 5 feature levels"):
        mf.BACKBONES.build({"type": "timm", "args": {"name": "resnet18", "features_only": True, "out_indices": [7]}},
                           in_dim=3)  # fmt: skip
    with pytest.raises(ConfigError, match="set features_only too"):
        mf.BACKBONES.build({"type": "timm", "args": {"out_indices": [1]}}, in_dim=3)
    with pytest.raises(ConfigError, match=r"unknown argument 'pretrained'"):
        mf.BACKBONES.build({"type": "timm", "args": {"pretrained": True}}, in_dim=3)


def test_hub_is_refused_offline_with_the_way_round_it(monkeypatch, tmp_path):
    constants = pytest.importorskip("huggingface_hub.constants")
    monkeypatch.setattr(constants, "HF_HUB_OFFLINE", True)
    monkeypatch.setattr(constants, "HF_HUB_CACHE", str(tmp_path / "hub"))  # nothing cached: nothing to fall back on
    monkeypatch.setenv("HF_HOME", str(tmp_path / "hf"))
    monkeypatch.setenv("TORCH_HOME", str(tmp_path / "torch"))
    with pytest.raises(ConfigError) as caught:
        mf.BACKBONES.build({"type": "timm", "args": {"name": "resnet18.a1_in1k", "hub": True}}, in_dim=3)
    message = str(caught.value)
    assert "hub: true could not fetch the pretrained weights of timm's resnet18.a1_in1k (hf.co/timm/resnet18.a1_in1k)" in message
    assert "format: timm" in message and "hub: false" in message
    with pytest.raises(ConfigError, match="timm has no pretrained weights for 'resnet50t'"):
        mf.BACKBONES.build({"type": "timm", "args": {"name": "resnet50t", "hub": True}}, in_dim=3)


def test_hub_reads_a_cached_file_without_any_request(monkeypatch, tmp_path):
    constants = pytest.importorskip("huggingface_hub.constants")
    monkeypatch.setattr(constants, "HF_HUB_CACHE", str(tmp_path / "hub"))
    repo = tmp_path / "hub" / "models--timm--resnet18.a1_in1k"
    commit = "0" * 40
    (repo / "refs").mkdir(parents=True)
    (repo / "refs" / "main").write_text(commit)
    (repo / "snapshots" / commit).mkdir(parents=True)
    reference = timm_reference("resnet18", seed=4)
    safetensors_torch.save_file(reference.state_dict(), str(repo / "snapshots" / commit / "model.safetensors"))
    part = mf.BACKBONES.build({"type": "timm", "args": {"name": "resnet18.a1_in1k", "hub": True}}, in_dim=3).eval()
    x = torch.randn(2, 3, 64, 64)
    with torch.no_grad():  # sockets are refused (no_network): the weights came from the cache
        torch.testing.assert_close(part(x), reference.forward_head(reference.forward_features(x), pre_logits=True),
                                   rtol=0, atol=1e-5)  # fmt: skip


def test_models_without_forward_intermediates_use_timms_feature_network(monkeypatch):
    resnet = pytest.importorskip("timm.models.resnet")
    monkeypatch.delattr(resnet.ResNet, "prune_intermediate_layers")
    part = mf.BACKBONES.build({"type": "timm", "args": {"features_only": True, "out_indices": [2, 3]}}, in_dim=3)
    assert type(part.model).__name__ == "FeatureListNet" and part.out_dim == [128, 256] and part.out_strides == [8, 16]
    with torch.no_grad():
        assert [tuple(t.shape) for t in part.eval()(torch.randn(1, 3, 64, 64))] == [(1, 128, 8, 8), (1, 256, 4, 4)]


def test_other_input_channels_and_flags_come_from_the_signature(cli):
    part = mf.BACKBONES.build({"type": "timm", "args": {"name": "resnet18", "drop_path_rate": 0.1}}, in_dim=1)
    assert part.model.conv1.in_channels == 1
    with torch.no_grad():
        assert part.eval()(torch.randn(2, 1, 32, 32)).shape == (2, 512)
    res = cli("config", str(ROOT / "configs" / "digits.yaml"), "--backbone", "timm", "--name", "convnext_atto",
              "--drop-path-rate", "0.1", "--features-only", "--out-indices", "1,2")  # fmt: skip
    assert res.code == 0, res.err
    assert "name: convnext_atto" in res.out and "drop_path_rate: 0.1" in res.out and "features_only: true" in res.out


@pytest.mark.slow
@pytest.mark.parametrize(("name", "args"), [("convnext_atto", {}), ("mobilenetv3_small_050", {}),
                                            ("resnet18", {"features_only": True, "out_indices": [1, 2, 3, 4]})])  # fmt: skip
def test_conformance_sample(name, args):
    results = check_part("backbone", "timm", {"name": name, **args})
    assert_contract(results)
    engines = [r for r in results if r.check == "engines"]
    assert engines[0].status == ("skip" if args else "pass"), engines  # a list of maps: checked by the tests above


def test_listing_backbones_imports_neither_timm_nor_torchvision():
    probe = ("import json, sys\nfrom modforge.cli.main import main\ncode = main(['list', 'backbone'])\n"
             "sys.stdout.flush()\nprint('__MODULES__' + json.dumps(sorted(sys.modules)))\nsys.exit(code)\n")  # fmt: skip
    done = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    listing, modules = done.stdout.rsplit("__MODULES__", 1)
    assert "timm_models" in listing and "torchvision_models" in listing
    loaded = {m.split(".")[0] for m in json.loads(modules)}
    assert not {"timm", "torchvision"} & loaded


@pytest.mark.slow
def test_fcos_on_a_timm_pyramid_trains_on_the_shapes_set(cli, tmp_path):
    from modforge.data.detection.shapes import make_shapes

    make_shapes(tmp_path / "shapes", images=40, size=64, seed=0, max_object=32)
    res = cli("train", str(FCOS_TIMM), f"data.args.root={tmp_path / 'shapes'}", "data.args.min_size=64",
              "data.args.max_size=64", "data.batch_size=8", "data.eval_batch_size=8", "train.max_epochs=1",
              "train.max_steps=null", "model.neck.args.out_channels=32", "train.progress=never", "train.num_threads=1",
              "train.scheduler.args.warmup=2", "--run-dir", "run")  # fmt: skip
    assert res.code == 0, res.err
    summary = json.loads((tmp_path / "run" / "summary.json").read_text())
    assert {"map", "map_50", "loss"} <= set(summary["test"])
    config = (tmp_path / "run" / "config.yaml").read_text()
    assert "type: timm" in config and "name: convnext_atto" in config


def test_a_model_rebuilt_for_its_checkpoint_fetches_nothing_even_with_hub_true(monkeypatch, tmp_path):
    """``init_weights=False`` (test, resume, export: the weights come from a checkpoint) builds a
    ``hub: true`` part without touching the hub — offline and with nothing cached, it still builds."""
    constants = pytest.importorskip("huggingface_hub.constants")
    monkeypatch.setattr(constants, "HF_HUB_OFFLINE", True)
    monkeypatch.setattr(constants, "HF_HUB_CACHE", str(tmp_path / "hub"))
    cfg = {"backbone": {"type": "timm", "args": {"name": "resnet18.a1_in1k", "hub": True}}, "head": "linear"}
    with pytest.raises(ConfigError, match="hub: true could not fetch"):
        mf.build_model(cfg, in_dim=3, num_classes=4, input_shape=(3, 32, 32))
    model = mf.build_model(cfg, in_dim=3, num_classes=4, input_shape=(3, 32, 32), init_weights=False)
    assert model.eval()(torch.randn(1, 3, 32, 32)).shape == (1, 4)
