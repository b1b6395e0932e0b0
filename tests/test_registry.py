"""The Registry contract: registration, lookup, suggestions, duplicates, building."""

from __future__ import annotations

import pytest
import torch.nn as nn

import modforge as mf
from modforge.core.errors import (
    BuildError,
    ConfigError,
    DuplicateComponentError,
    MissingArgumentError,
    RegistrationError,
    UnknownComponentError,
    UnknownKeyError,
)
from modforge.core.registry import Registry


def make_registry() -> Registry:
    reg = Registry("backbone", injected=("in_dim", "num_classes"))

    @reg.register("resnet18")
    class ResNet18(nn.Module):
        """A stand-in ResNet."""

        def __init__(self, in_dim: int, width: int = 64):
            super().__init__()
            self.width = width
            self.in_dim = in_dim

    @reg.register("resnet34")
    def resnet34(width: int = 64):
        return ResNet18(3, width)

    return reg


def test_register_class_and_function_and_lookup():
    reg = make_registry()
    assert "resnet18" in reg and "resnet34" in reg and "vgg" not in reg
    assert len(reg) == 2
    assert list(reg) == ["resnet18", "resnet34"]
    assert reg.get("resnet18").__name__ == "ResNet18"
    assert reg.get("resnet34").__name__ == "resnet34"


def test_decorator_forms_return_the_object_unchanged():
    reg = Registry("head")

    @reg.register
    def bare():
        return 1

    @reg.register()
    class Called:
        pass

    assert bare() == 1 and reg.get("bare") is bare
    assert reg.get("Called") is Called


def test_list_with_shell_wildcards():
    reg = make_registry()
    reg.register("vit_tiny")(lambda: None)
    assert reg.list("res*") == ["resnet18", "resnet34"]
    assert reg.list("*34") == ["resnet34"]
    assert reg.list("resnet?8") == ["resnet18"]
    assert reg.list("[v]*") == ["vit_tiny"]
    assert reg.list() == ["resnet18", "resnet34", "vit_tiny"]


def test_unknown_name_suggests_close_matches_and_how_to_list():
    reg = make_registry()
    with pytest.raises(UnknownComponentError) as info:
        reg.get("resnt18")
    msg = str(info.value)
    assert "no backbone named 'resnt18'; did you mean 'resnet18'?" in msg
    assert "modforge list backbone" in msg
    assert isinstance(info.value, LookupError) and isinstance(info.value, ConfigError)


@pytest.mark.parametrize("variant", ["resnet_18", "resnet-18", "ResNet18", "RESNET18"])
def test_lookups_are_exact_but_suggestions_ignore_case_and_separators(variant):
    reg = make_registry()
    assert variant not in reg
    with pytest.raises(UnknownComponentError, match=r"did you mean 'resnet18'"):
        reg.get(variant)


def test_duplicate_name_names_both_modules():
    reg = Registry("backbone")
    reg.register("net")(make_registry)  # defined in this test module

    def other():
        pass

    other.__module__ = "somebody.else"
    with pytest.raises(DuplicateComponentError) as info:
        reg.register("net")(other)
    msg = str(info.value)
    assert "backbone 'net' is already registered by test_registry" in msg
    assert "somebody.else" in msg and "force=True" in msg


def test_force_replaces_and_same_definition_reregisters_silently():
    reg = Registry("backbone")

    def first():
        pass

    def second():
        pass

    reg.register("net")(first)
    reg.register("net", force=True)(second)
    assert reg.get("net") is second
    reg.register("net")(second)  # the same definition again (a module imported twice)
    assert reg.get("net") is second


@pytest.mark.parametrize("bad", ["", "has space", "a:b", "-lead", 3])
def test_invalid_names_are_refused(bad):
    reg = Registry("loss")
    with pytest.raises(RegistrationError, match="invalid loss name"):
        reg.add(lambda: None, bad)


def test_non_callable_is_refused():
    with pytest.raises(RegistrationError, match="only classes and functions"):
        Registry("loss").add(42, "x")


def test_entry_records_where_it_came_from():
    reg = make_registry()
    entry = reg.entry("resnet18")
    assert entry.module == __name__
    assert entry.file.endswith("test_registry.py")
    assert isinstance(entry.line, int) and entry.line > 0
    assert "test_registry.py:" in entry.location
    assert entry.summary == "A stand-in ResNet."


def test_build_injects_only_accepted_context():
    reg = make_registry()
    net = reg.build({"type": "resnet18", "args": {"width": "32"}}, in_dim=5, num_classes=10)
    assert (net.in_dim, net.width) == (5, 32)
    built = reg.build("resnet34", in_dim=5, num_classes=10)  # function without in_dim: not passed
    assert built.width == 64


def test_build_user_value_for_injected_argument_must_agree():
    reg = make_registry()
    assert reg.build({"type": "resnet18", "args": {"in_dim": 5}}, in_dim=5).in_dim == 5
    assert reg.build({"type": "resnet18", "args": {"in_dim": 7}}).in_dim == 7  # nothing to wire: the user's value
    with pytest.raises(ConfigError, match=r"'in_dim' is wired from the previous part's output size \(5 here\) but the config sets 7"):
        reg.build({"type": "resnet18", "args": {"in_dim": 7}}, in_dim=5)


def test_build_errors_are_located():
    reg = make_registry()
    with pytest.raises(
        UnknownKeyError, match=r"model.backbone.args.widht: unknown argument 'widht'; did you mean 'width'"
    ):
        reg.build({"type": "resnet18", "args": {"widht": 1}}, path="model.backbone", in_dim=1)
    with pytest.raises(MissingArgumentError, match=r"model.backbone.args.in_dim: required argument missing"):
        reg.build("resnet18", path="model.backbone")
    with pytest.raises(UnknownComponentError, match=r"model.backbone.type: no backbone named 'vgg'"):
        reg.build("vgg", path="model.backbone")


def test_constructor_failure_becomes_build_error_naming_the_part():
    reg = Registry("head")

    @reg.register("picky")
    def picky(size: int = 1):
        raise ValueError("size must be even")

    with pytest.raises(BuildError) as info:
        reg.build("picky", path="model.head")
    assert str(info.value) == "model.head: building head 'picky' failed: ValueError: size must be even"
    assert isinstance(info.value.__cause__, ValueError)


def test_global_registries_and_public_decorators():
    assert set(mf.REGISTRIES) == {
        "frontend",
        "backbone",
        "neck",
        "head",
        "loss",
        "dataset",
        "metric",
        "optimizer",
        "scheduler",
        "engine",
        "callback",
        "algorithm",
        "model",
        "augmentation",
        "checkpoint_format",
        "trainer",
        "task",
        "extension",
    }
    for kind, registry in mf.REGISTRIES.items():
        decorator = getattr(mf, f"register_{kind}")

        @decorator(f"probe_{kind}")
        def probe(kind=kind):
            return kind

        assert f"probe_{kind}" in registry
        assert mf.registry_for(kind) is registry
    assert mf.registry_for("backbones") is mf.BACKBONES
    with pytest.raises(UnknownComponentError, match="did you mean 'backbone'"):
        mf.registry_for("backbon")
