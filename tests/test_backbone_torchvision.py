"""The ``torchvision`` backbone is torchvision's own network: parameter counts are torchvision's minus the
classifier, a torchvision state dict loaded through ``model.init`` (``format: torchvision``) gives
torchvision's outputs, ``features_only`` gives the stage maps torchvision's feature extraction gives;
``torchvision_resnet`` still loads a real torchvision ResNet into modforge's own ``resnet18``. Offline."""

from __future__ import annotations

import pytest
import torch

import modforge as mf
from modforge.components.backbones.torchvision_models import torchvision_classifier, torchvision_state_dict
from modforge.core.errors import ConfigError
from modforge.testing import check_part
from part_checks import assert_contract, refuse_network, with_random_bn_statistics

models = pytest.importorskip("torchvision.models")
feature_extraction = pytest.importorskip("torchvision.models.feature_extraction")


@pytest.fixture(autouse=True)
def no_network(monkeypatch):
    """Every test here runs offline: any connection attempt fails at once."""
    refuse_network(monkeypatch)


def reference(name: str, seed: int = 0) -> torch.nn.Module:
    """A torchvision model with random weights and random BatchNorm statistics (eval mode)."""
    torch.manual_seed(seed)
    model = models.get_model(name, weights=None)
    return with_random_bn_statistics(model)


def params(module: torch.nn.Module) -> int:
    return sum(p.numel() for p in module.parameters())


CLASSIFIERS = {"resnet18": "fc", "mobilenet_v3_small": "classifier.3", "efficientnet_b0": "classifier.1",
               "regnet_y_400mf": "fc", "shufflenet_v2_x0_5": "fc", "mnasnet0_5": "classifier.1",
               "convnext_tiny": "classifier.2", "swin_t": "head", "maxvit_t": "classifier.5"}  # fmt: skip


@pytest.mark.parametrize("name", sorted(CLASSIFIERS))
def test_parameter_count_is_torchvisions_minus_its_classifier(name):
    original = models.get_model(name, weights=None)
    classifier = CLASSIFIERS[name]
    assert torchvision_classifier(original.state_dict()) == classifier  # what format: torchvision leaves out
    head = sum(p.numel() for k, p in original.named_parameters() if k.startswith(f"{classifier}."))
    part = mf.BACKBONES.build({"type": "torchvision", "args": {"name": name}}, in_dim=3)
    assert part.classifier == classifier and params(part) == params(original) - head
    assert part.out_dim == original.get_submodule(classifier).in_features


def test_weights_file_through_model_init_gives_torchvisions_outputs(tmp_path):
    original = reference("mobilenet_v3_small")
    path = tmp_path / "mobilenet_v3_small.pth"
    torch.save(original.state_dict(), path)
    model = mf.build_model({"backbone": {"type": "torchvision", "args": {"name": "mobilenet_v3_small"}},
                            "head": "linear",
                            "init": {"path": str(path), "format": {"type": "torchvision", "args": {"head": "head"}}}},
                           in_dim=3, num_classes=1000).eval()  # fmt: skip
    assert model.init_records[0]["loaded"] == len(original.state_dict())
    x = torch.randn(2, 3, 64, 64)
    with torch.no_grad():
        logits, features = model(x, returnt="both")
        torch.testing.assert_close(logits, original(x), rtol=0, atol=1e-5)
        pooled = torch.flatten(original.avgpool(original.features(x)), 1)
        torch.testing.assert_close(features, original.classifier[:-1](pooled), rtol=0, atol=1e-5)


def test_features_only_gives_torchvisions_stage_maps(tmp_path, caplog):
    original = reference("resnet18", seed=1)
    path = tmp_path / "resnet18.safetensors"
    pytest.importorskip("safetensors.torch").save_file(original.state_dict(), str(path))
    caplog.set_level("INFO", logger="modforge.model")
    model = mf.build_model({"backbone": {"type": "torchvision", "args": {"name": "resnet18", "features_only": True}},
                            "neck": {"type": "fpn", "args": {"out_channels": 16}},
                            "head": {"type": "fcos", "args": {"strides": [4, 8, 16, 32]}},
                            "init": {"path": str(path), "format": "torchvision", "part": "backbone"}},
                           in_dim=3, num_classes=3, input_shape=(3, 64, 64))  # fmt: skip
    assert "left out the 2 tensors of torchvision's classifier (fc)" in caplog.text
    part = model.parts["backbone"].eval()
    assert part.return_layers == ["layer1", "layer2", "layer3", "layer4"]
    assert part.out_dim == [64, 128, 256, 512] and part.out_strides == [4, 8, 16, 32]
    nodes = {f"layer{i}": str(i) for i in range(1, 5)}
    expected = feature_extraction.create_feature_extractor(original, return_nodes=nodes).eval()
    x = torch.randn(2, 3, 64, 64)
    with torch.no_grad():
        for a, b in zip(part(x), expected(x).values(), strict=True):
            torch.testing.assert_close(a, b, rtol=0, atol=1e-5)


def test_default_levels_out_indices_and_return_layers():
    build = mf.BACKBONES.build
    mobile = build({"type": "torchvision", "args": {"name": "mobilenet_v3_small", "features_only": True}}, in_dim=3)
    assert mobile.return_layers == ["features.1", "features.3", "features.8", "features.12"]
    assert mobile.out_dim == [16, 24, 48, 576] and mobile.out_strides == [4, 8, 16, 32]
    last_two = build({"type": "torchvision", "args": {"name": "mobilenet_v3_small", "features_only": True,
                                                      "out_indices": [-2, -1]}}, in_dim=3)  # fmt: skip
    assert last_two.return_layers == ["features.8", "features.12"] and last_two.out_dim == [48, 576]
    named = build({"type": "torchvision", "args": {"name": "resnet18", "features_only": True,
                                                   "return_layers": ["layer3", "layer4"]}}, in_dim=3)  # fmt: skip
    assert named.out_dim == [256, 512] and named.out_strides == [16, 32]


def test_unknown_names_and_impossible_requests_get_one_clear_error():
    build = mf.BACKBONES.build
    with pytest.raises(ConfigError, match=r"unknown torchvision classification model 'resnet5'.*did you mean resnet50"):
        build({"type": "torchvision", "args": {"name": "resnet5"}}, in_dim=3)
    with pytest.raises(ConfigError, match=r"unknown torchvision classification model 'fasterrcnn_resnet50_fpn'"):
        build({"type": "torchvision", "args": {"name": "fasterrcnn_resnet50_fpn"}}, in_dim=3)
    with pytest.raises(ConfigError, match=r"features_only needs a convolutional network: torchvision's swin_t"):
        build({"type": "torchvision", "args": {"name": "swin_t", "features_only": True}}, in_dim=3)
    with pytest.raises(ConfigError, match=r"squeezenet1_1 has no linear classifier"):
        build({"type": "torchvision", "args": {"name": "squeezenet1_1"}}, in_dim=3)
    with pytest.raises(ConfigError, match=r"torchvision's resnet18 does not take dropout"):
        build({"type": "torchvision", "args": {"name": "resnet18", "dropout": 0.1}}, in_dim=3)
    with pytest.raises(ConfigError, match=r"return_layers of torchvision's resnet18: .*layer9"):
        build({"type": "torchvision", "args": {"name": "resnet18", "features_only": True, "return_layers": ["layer9"]}},
              in_dim=3)  # fmt: skip
    with pytest.raises(ConfigError, match=r"out_indices \(4,\) out of range: torchvision's resnet18 has 4 levels"):
        build({"type": "torchvision", "args": {"name": "resnet18", "features_only": True, "out_indices": [4]}}, in_dim=3)


def test_other_input_channels_replace_the_first_convolution():
    part = mf.BACKBONES.build({"type": "torchvision", "args": {"name": "efficientnet_b0", "dropout": 0.3}}, in_dim=1)
    assert part.model.features[0][0].in_channels == 1 and part.model.classifier[0].p == 0.3
    with torch.no_grad():
        assert part.eval()(torch.randn(2, 1, 32, 32)).shape == (2, 1280)


def test_the_classifier_map_sends_the_classifier_to_a_head_or_leaves_it_out():
    state = reference("resnet18").state_dict()
    converted, left = torchvision_state_dict(state, head_prefix="parts.head.")
    assert not left and converted["parts.head.fc.weight"] is state["fc.weight"]
    assert "parts.backbone.model.layer4.1.bn2.running_var" in converted
    with pytest.raises(ValueError, match="classifier fc9 is not in the file"):
        torchvision_state_dict(state, classifier="fc9")


def test_torchvision_resnet_still_loads_a_real_torchvision_resnet_into_modforges_resnet18(tmp_path):
    original = reference("resnet18", seed=2)
    path = tmp_path / "resnet18-f37072fd.pth"
    torch.save(original.state_dict(), path)
    model = mf.build_model({"backbone": {"type": "resnet18", "args": {"stem": "imagenet"}}, "head": "linear",
                            "init": {"path": str(path)}}, in_dim=3, num_classes=1000).eval()  # fmt: skip
    assert model.init_records[0]["format"] == "torchvision_resnet"  # format: auto still picks it
    x = torch.randn(2, 3, 64, 64)
    with torch.no_grad():
        torch.testing.assert_close(model(x), original(x), rtol=0, atol=1e-5)


@pytest.mark.slow
@pytest.mark.parametrize(("name", "args"), [("mobilenet_v3_small", {}), ("resnet18", {"features_only": True})])
def test_conformance_sample(name, args):
    results = check_part("backbone", "torchvision", {"name": name, **args})
    assert_contract(results)
