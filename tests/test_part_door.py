"""The door for parts ported from DeepFense, Mammoth and United Perception: each mistake a
porter makes gets one clear error at config or build time, and the zoo keeps the contract
(range-checked arguments, ``features`` semantics, TorchScript) that ported code relies on."""

from __future__ import annotations

import inspect
import warnings
from typing import Optional

import pytest
import torch
import torch.nn as nn

import modforge as mf
from modforge.components import Backbone, Layout
from modforge.core.coercion import coerce, describe_type
from modforge.core.constraints import NonNegativeFloat, PositiveFloat, PositiveInt, Probability
from modforge.core.errors import ConfigError, ConfigValueError, MissingArgumentError, RegistrationError, UnknownKeyError
from modforge.core.registry import Registry
from modforge.model.errors import ModelBuildError
from modforge.model.wiring import check_class_count
from modforge.testing import PART_KINDS, check_part, subjects_for

# ----------------------------------------------------------------- constrained types


@pytest.mark.parametrize(
    ("tp", "name"),
    [
        (Probability, "a number in [0, 1]"),
        (PositiveInt, "a whole number > 0"),
        (PositiveFloat, "a finite number > 0"),
        (NonNegativeFloat, "a finite number >= 0"),
        (Optional[PositiveInt], "a whole number > 0 or None"),
        (list[PositiveInt], "list of whole numbers > 0"),
    ],
)
def test_constrained_types_have_human_names(tp, name):
    assert describe_type(tp) == name


@pytest.mark.parametrize("value", [-0.5, 1.5, float("nan"), "nan", float("inf")])
def test_a_probability_refuses_values_outside_0_1(value):
    with pytest.raises(ConfigValueError, match=r"expected a number in \[0, 1\], got"):
        coerce(value, Probability)


def test_a_positive_int_refuses_a_boolean():
    with pytest.raises(ConfigValueError, match="expected a whole number > 0, got True"):
        coerce(True, PositiveInt)


def test_zoo_dropout_out_of_range_is_refused_at_validation_naming_the_key():
    with pytest.raises(ConfigValueError) as err:
        mf.HEADS.validate({"type": "linear", "args": {"dropout": -0.5}}, path="model.head")
    assert str(err.value) == "model.head.args.dropout: expected a number in [0, 1], got -0.5"
    with pytest.raises(ConfigValueError, match=r"model.backbone.args.hidden_dims: expected tuple of whole numbers > 0"):
        mf.BACKBONES.validate({"type": "mlp", "args": {"hidden_dims": [64, 0]}}, path="model.backbone")
    with pytest.raises(ConfigValueError, match=r"continual.algorithm.args.buffer_size: expected a whole number > 0"):
        mf.REGISTRIES["algorithm"].validate({"type": "der", "args": {"buffer_size": 0}}, path="continual.algorithm")


def test_part_signatures_keep_their_constraints():
    spec = mf.HEADS.signature("linear").get("dropout")
    assert spec.type_name == "a number in [0, 1]"


# ----------------------------------------------------------------- DeepFense habits


class InputDim(nn.Module):
    def __init__(self, input_dim: int, output_dim: int = 8):
        super().__init__()
        self.fc = nn.Linear(input_dim, output_dim)


class ConfigDict(nn.Module):
    def __init__(self, config):
        super().__init__()


def _scratch(obj) -> Registry:
    registry = Registry("backbone", injected=("in_dim", "in_layout", "num_classes"))
    registry.add(obj, "ported")
    return registry


def test_input_dim_is_reported_as_a_misnamed_in_dim():
    with pytest.raises(MissingArgumentError) as err:
        _scratch(InputDim).validate({"type": "ported"}, path="model.backbone")
    assert "required argument missing (expected int)" in str(err.value)
    assert "the builder wires a part's input size into an argument named in_dim" in str(err.value)
    assert "rename 'input_dim' to in_dim" in str(err.value)


def test_an_unannotated_argument_says_it_is_read_as_str():
    registry = _scratch(ConfigDict)
    with pytest.raises(ConfigValueError) as err:
        registry.validate({"type": "ported", "args": {"config": {"a": 1}}}, path="model.backbone")
    assert str(err.value) == (
        "model.backbone.args.config: expected str, got {'a': 1} (it has no type annotation, so it is read as str)"
    )
    with pytest.raises(MissingArgumentError, match="it has no type annotation, so it is read as str"):
        registry.validate({"type": "ported"}, path="model.backbone")


# ----------------------------------------------------------------- United Perception habits


def test_kwarg_beside_type_suggests_renaming_it_to_args():
    with pytest.raises(UnknownKeyError) as err:
        mf.BACKBONES.validate({"type": "mlp", "kwarg": {"hidden_dims": [8]}}, path="model.stages.0")
    assert "did you mean 'args'? Rename 'kwarg:' to 'args:'" in str(err.value)
    assert "args.kwarg" not in str(err.value)


class _DictHead(nn.Module):
    dict_io = True

    def __init__(self, in_dim: int, num_classes: int):
        super().__init__()
        self.fc = nn.Linear(in_dim, num_classes)


class ReturnsNone(_DictHead):
    def forward(self, input: dict):
        input["logits"] = self.fc(input["backbone"])


class WritesNoLogits(_DictHead):
    def forward(self, input: dict):
        input["scores"] = self.fc(input["backbone"])
        return input


@pytest.mark.parametrize(
    ("head", "message"),
    [(ReturnsNone, "must return the batch dict with 'logits' set, but it returned None"),
     (WritesNoLogits, "must write its output to batch['logits']")],
)  # fmt: skip
def test_a_dict_io_head_that_breaks_the_contract_is_one_clear_build_error(head, message):
    mf.HEADS.add(head, "door_head", force=True)
    try:
        with pytest.raises(ModelBuildError) as err:
            mf.build_model({"backbone": "mlp", "head": "door_head"}, in_dim=4, num_classes=3)
        assert str(err.value).startswith("model.head: head 'door_head' is dict_io") and message in str(err.value)
    finally:
        mf.HEADS.remove("door_head")


def test_layouts_given_by_name_become_layouts_at_registration():
    class Named(nn.Module):
        accepts = ("vector",)
        produces = "vector"

    _scratch(Named)
    assert Named.accepts == (Layout.VECTOR,) and Named.produces is Layout.VECTOR

    class Wrong(nn.Module):
        accepts = ("vectr",)

    with pytest.raises(RegistrationError, match=r"backbone 'ported'.accepts: 'vectr' is not a layout; expected one of"):
        _scratch(Wrong)


# ----------------------------------------------------------------- heads and class counts


def test_no_head_with_a_feature_sized_output_is_a_build_error_naming_model_head():
    with pytest.raises(ModelBuildError) as err:
        mf.build_model({"backbone": "mlp", "losses": ["cross_entropy"]}, in_dim=4, num_classes=10)
    assert str(err.value).startswith("model.head: the model has no head, so its logits are the output of backbone")
    assert "256 values per sample, but the data has 10 classes" in str(err.value)


def test_a_configured_num_classes_that_disagrees_with_the_data_is_refused():
    with pytest.raises(ConfigError) as err:
        mf.build_model({"backbone": "mlp", "head": {"type": "linear", "args": {"num_classes": 21}}}, in_dim=4,
                       num_classes=10)  # fmt: skip
    assert "wired from the data's class count (10 here) but the config sets 21" in str(err.value)
    section = {"backbone": "mlp", "head": {"type": "linear", "args": {"num_classes": 21}}}
    with pytest.raises(ConfigError, match=r"model.head.args.num_classes: the data has 10 classes but the config sets"):
        check_class_count(section, 10)
    check_class_count(section, None)  # not known before loading: nothing to check
    check_class_count(section, 21)


# ----------------------------------------------------------------- Mammoth habits


class OwnsClassifier(Backbone):
    accepts = (Layout.VECTOR,)
    produces = Layout.VECTOR

    def __init__(self, in_dim: int, num_classes: int = 3):
        super().__init__()
        self.body = nn.Linear(in_dim, 6)
        self.classifier = nn.Linear(6, num_classes)
        self.out_dim = num_classes

    def forward(self, x, returnt: str = "out"):
        feats = torch.relu(self.body(x))
        if returnt == "features":
            return feats
        out = self.classifier(feats)
        return (out, feats) if returnt == "both" else [feats, out] if returnt == "full" else out


def test_features_of_a_backbone_that_owns_its_classifier_are_not_its_logits():
    net = OwnsClassifier(4).eval()
    x = torch.randn(2, 4)
    assert net.features(x).shape == (2, 6) and torch.equal(net.features(x), net(x, returnt="features"))


class FullNotAList(OwnsClassifier):
    def forward(self, x, returnt: str = "out"):
        out = super().forward(x, "full" if returnt == "full" else returnt)
        return out[-1] if returnt == "full" else out


class FeaturesDiffer(OwnsClassifier):
    def features(self, x):
        return self(x)


@pytest.mark.parametrize(("cls", "message"), [(FullNotAList, 'returnt="full" must return a non-empty list of tensors'),
                                              (FeaturesDiffer, 'features() differs from returnt="features"')])  # fmt: skip
def test_the_conformance_suite_checks_features_and_full(cls, message):
    rows = {r.check: r for r in check_part("backbone", cls)}
    assert rows["returnt"].status == "fail" and message in rows["returnt"].detail
    good = {r.check: r for r in check_part("backbone", OwnsClassifier)}
    assert good["returnt"].status == "pass" and "full: 2 layers" in good["returnt"].detail


def test_a_built_models_backbone_is_model_parts_backbone():
    mf.BACKBONES.add(OwnsClassifier, "door_owner", force=True)
    try:
        model = mf.build_model({"backbone": "door_owner", "losses": ["cross_entropy"]}, in_dim=4, num_classes=3)
    finally:
        mf.BACKBONES.remove("door_owner")
    assert isinstance(model.parts["backbone"], OwnsClassifier) and model.backbone is model.parts["backbone"]
    assert model.stage("backbone") is model.parts["backbone"]


# ----------------------------------------------------------------- TorchScript

_PARTS = [(kind, name) for kind in PART_KINDS for name in mf.REGISTRIES[kind].list()]


@pytest.mark.parametrize(("kind", "name"), _PARTS, ids=[f"{k}-{n}" for k, n in _PARTS])
def test_every_zoo_part_scripts_or_says_why_not(kind, name):
    obj = mf.REGISTRIES[kind].get(name)
    classes = inspect.getmro(obj) if inspect.isclass(obj) else (obj,)  # resnet18 says it on its base, ResNet
    documented = any("Not scriptable by ``torch.jit.script``" in (c.__doc__ or "") for c in classes)
    if documented:
        pytest.skip("documented as not scriptable (the torchscript engine traces it)")
    part = subjects_for(kind, name)[0].build().eval()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        torch.jit.script(part)


def test_the_mlp_backbone_scripts_and_matches_eager():
    net = mf.BACKBONES.build({"type": "mlp", "args": {"hidden_dims": [8, 4]}}, in_dim=5).eval()
    x = torch.randn(3, 5)
    assert torch.equal(torch.jit.script(net)(x), net(x))
