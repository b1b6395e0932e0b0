"""YAML configs: safe loading, _base_ inheritance, overrides, origins, validation."""

from __future__ import annotations

import os

import pytest
import torch.nn as nn

import modforge as mf
from modforge.core.config import display_path, load_config, parse_override
from modforge.core.errors import (
    ConfigCycleError,
    ConfigError,
    ConfigFileError,
    ConfigSyntaxError,
    ConfigValueError,
    MissingArgumentError,
    UnknownComponentError,
    UnknownKeyError,
)
from modforge.experiment import apply_overrides, validate_config


@pytest.fixture
def tiny_parts():
    @mf.register_backbone("tiny_net")
    class TinyNet(nn.Module):
        def __init__(self, in_dim: int, depth: int, width: int = 8):
            super().__init__()

    @mf.register_head("tiny_head")
    def tiny_head(in_dim: int, num_classes: int, bias: bool = True):
        return nn.Linear(in_dim, num_classes, bias=bias)

    @mf.register_loss("tiny_loss")
    def tiny_loss(scale: float = 1.0):
        return nn.CrossEntropyLoss()


def test_base_inheritance_deep_merge_and_relative_paths(write):
    write(
        "configs/base/common.yaml",
        """
        seed: 1
        model:
          backbone: {type: tiny_net, args: {depth: 2, width: 16}}
          head: tiny_head
        train: {max_epochs: 10, optimizer: {type: adamw, args: {lr: 0.001}}}
    """,
    )
    child = write(
        "configs/exp/child.yaml",
        """
        _base_: ../base/common.yaml
        model:
          backbone: {args: {width: 64}}
        train: {max_epochs: 3}
    """,
    )
    cfg = load_config(child)
    assert cfg.data["seed"] == 1
    assert cfg.data["model"]["backbone"] == {"type": "tiny_net", "args": {"depth": 2, "width": 64}}
    assert cfg.data["train"] == {"max_epochs": 3, "optimizer": {"type": "adamw", "args": {"lr": 0.001}}}
    assert "_base_" not in cfg.data
    assert cfg.where("model.backbone.args.width").endswith(os.path.join("exp", "child.yaml") + ":3")
    assert cfg.where("model.backbone.args.depth").endswith(os.path.join("base", "common.yaml") + ":3")


def test_base_list_later_wins_lists_replace_and_delete_replaces(write):
    write("a.yaml", "x: {p: 1, q: [1, 2]}\nplugins: [pa]\n")
    write("b.yaml", "x: {p: 2, r: 3}\nplugins: [pb]\n")
    top = write(
        "top.yaml",
        """
        _base_: [a.yaml, b.yaml]
        x: {q: [9]}
        y: {_delete_: true, only: 1}
        plugins: [pa, pc]
    """,
    )
    cfg = load_config(top)
    assert cfg.data["x"] == {"p": 2, "q": [9], "r": 3}
    assert cfg.data["y"] == {"only": 1}
    assert cfg.data["plugins"] == ["pa", "pb", "pc"]  # plug-ins accumulate
    write("d1.yaml", "y: {a: 1, b: 2}\n")
    top2 = write("top2.yaml", "_base_: d1.yaml\ny: {_delete_: true, c: 3}\n")
    assert load_config(top2).data["y"] == {"c": 3}


def test_diamond_inheritance_is_not_a_cycle(write):
    write("root.yaml", "v: 1\n")
    write("l.yaml", "_base_: root.yaml\nl: 1\n")
    write("r.yaml", "_base_: root.yaml\nr: 1\n")
    top = write("top.yaml", "_base_: [l.yaml, r.yaml]\n")
    assert load_config(top).data == {"v": 1, "l": 1, "r": 1}


def test_base_cycle_is_reported_with_the_chain(write):
    write("a.yaml", "_base_: b.yaml\n")
    write("b.yaml", "_base_: c.yaml\n")
    write("c.yaml", "_base_: a.yaml\n")
    with pytest.raises(ConfigCycleError, match=r"a.yaml -> .*b.yaml -> .*c.yaml -> .*a.yaml"):
        load_config(write("entry.yaml", "_base_: a.yaml\n"))
    with pytest.raises(ConfigCycleError):
        load_config(write("self.yaml", "_base_: self.yaml\n"))


def test_missing_base_and_missing_file(write, tmp_path):
    with pytest.raises(ConfigFileError, match=r"_base_: _base_ file 'nope.yaml' not found"):
        load_config(write("x.yaml", "_base_: nope.yaml\n"))
    with pytest.raises(ConfigFileError, match="config file not found"):
        load_config(tmp_path / "absent.yaml")
    with pytest.raises(ConfigFileError, match="got a directory"):
        load_config(tmp_path)


@pytest.mark.parametrize("bad", ["_base_: 3\n", "_base_: []\n", "_base_: [a.yaml, 1]\n"])
def test_malformed_base_value(write, bad):
    with pytest.raises(ConfigValueError, match=r"^_base_: expected a file path or a list of file paths"):
        load_config(write("x.yaml", bad))


def test_broken_yaml_names_file_line_and_column(write):
    path = write("broken.yaml", "model:\n  backbone: {type: x\nseed: 1\n")
    with pytest.raises(ConfigSyntaxError) as info:
        load_config(path)
    assert "broken.yaml:3:" in str(info.value) and "invalid YAML" in str(info.value)


def test_python_tags_are_refused_and_never_run(write, tmp_path):
    marker = tmp_path / "pwned"
    path = write("evil.yaml", f"x: !!python/object/apply:os.system ['touch {marker}']\n")
    with pytest.raises(ConfigSyntaxError, match="Python tags are refused"):
        load_config(path)
    assert not marker.exists()


@pytest.mark.parametrize("text", ["- a\n- b\n", "just a string\n", "3\n"])
def test_top_level_must_be_a_mapping(write, text):
    with pytest.raises(ConfigFileError, match="top level of a config must be a mapping"):
        load_config(write("x.yaml", text))


def test_empty_file_is_an_empty_config(write):
    assert load_config(write("empty.yaml", "")).data == {}


def test_not_utf8(tmp_path):
    path = tmp_path / "bin.yaml"
    path.write_bytes(b"\xff\xfe\x00bad")
    with pytest.raises(ConfigFileError, match="not a UTF-8 text file"):
        load_config(path)


def test_overrides_are_yaml_typed_and_reach_into_lists(write):
    path = write("x.yaml", "model: {losses: [{type: a, weight: 1.0}]}\n")
    cfg = load_config(
        path,
        [
            "model.backbone.args.width=64",
            "train.dims=[1, 2]",
            "name=[unclosed",
            "quoted='123'",
            "model.losses.0.weight=2.5",
            "flag=false",
            "nothing=",
        ],
    )
    assert cfg.get("model.backbone.args.width") == 64
    assert cfg.get("train.dims") == [1, 2]
    assert cfg.get("name") == "[unclosed" and cfg.get("quoted") == "123"
    assert cfg.get("model.losses.0.weight") == 2.5
    assert cfg.get("flag") is False and cfg.get("nothing") is None
    assert cfg.where("model.backbone.args.width") == "override 'model.backbone.args.width=64'"


@pytest.mark.parametrize("bad", ["noequals", "=3", "a..b=1", ".a=1", "a.=1"])
def test_malformed_overrides(bad):
    with pytest.raises(ConfigValueError, match="override"):
        parse_override(bad)


def test_override_through_a_scalar_or_bad_index(write):
    path = write("x.yaml", "seed: 1\nlst: [1]\n")
    with pytest.raises(
        ConfigValueError, match=r"^seed.x: cannot set a key inside int value \(in override 'seed.x=1'\)"
    ):
        load_config(path, ["seed.x=1"])
    with pytest.raises(ConfigValueError, match=r"lst.5: '5' is not an index of this 1-item list"):
        load_config(path, ["lst.5=1"])


def test_config_from_mapping_and_yaml_round_trip():
    cfg = load_config({"seed": 3, "model": {"backbone": "x"}}, ["seed=4"])
    assert cfg.data["seed"] == 4
    assert load_config.__module__ == "modforge.core.config"
    import yaml

    assert yaml.safe_load(cfg.to_yaml()) == cfg.data


def test_validate_normalizes_shorthand_and_coerces(write, tiny_parts):
    path = write(
        "x.yaml",
        """
        model:
          backbone: {type: tiny_net, args: {depth: "3"}}
          head: tiny_head
          losses: [tiny_loss, {type: tiny_loss, args: {scale: 2}, weight: 0.5}]
    """,
    )
    cfg = validate_config(load_config(path))
    assert cfg.data["model"]["head"] == {"type": "tiny_head", "args": {}}
    assert cfg.data["model"]["backbone"]["args"] == {"depth": 3}
    assert cfg.data["model"]["losses"] == [
        {"type": "tiny_loss", "args": {}},
        {"type": "tiny_loss", "args": {"scale": 2.0}, "weight": 0.5},
    ]


def test_validation_errors_name_path_expected_type_value_and_file(write, tiny_parts):
    path = write("x.yaml", "model:\n  backbone:\n    type: tiny_net\n    args: {depth: abc}\n")
    with pytest.raises(ConfigValueError) as info:
        validate_config(load_config(path))
    assert str(info.value) == f"model.backbone.args.depth: expected int, got 'abc' (in {display_path(path)}:4)"


@pytest.mark.parametrize(
    ("text", "error", "pattern"),
    [
        (
            "model: {backbone: {type: tiny_net, args: {depth: 1, widht: 2}}}",
            UnknownKeyError,
            r"model.backbone.args.widht: unknown argument 'widht'; did you mean 'width'",
        ),
        (
            "model: {backbone: {type: tiny_nett, args: {depth: 1}}}",
            UnknownComponentError,
            r"model.backbone.type: no backbone named 'tiny_nett'; did you mean 'tiny_net'",
        ),
        (
            "model: {backbone: {type: tiny_net}}",
            MissingArgumentError,
            r"model.backbone.args.depth: required argument missing \(expected int\)",
        ),
        (
            "model: {backbone: {type: tiny_net, depth: 1}}",
            UnknownKeyError,
            r"model.backbone.depth: unknown key 'depth' beside 'type'.*args.depth",
        ),
        ("model: {backbone: {args: {depth: 1}}}", ConfigValueError, r"model.backbone: missing 'type'"),
        ("model: {backbone: 3}", ConfigValueError, r"model.backbone: expected a backbone name or \{type"),
        (
            "model: {backbone: {type: tiny_net, args: [1]}}",
            ConfigValueError,
            r"model.backbone.args: expected a mapping",
        ),
        (
            "model: {backbone: {type: tiny_net, args: {depth: 1}}, losses: [{type: tiny_loss, weight: heavy}]}",
            ConfigValueError,
            r"model.losses.0.weight: expected a number",
        ),
        (
            "model: {bakbone: tiny_net}",
            UnknownKeyError,
            r"model.bakbone: unknown model key 'bakbone'; did you mean 'backbone'",
        ),
        ("modle: {}", UnknownKeyError, r"modle: unknown section 'modle'; did you mean 'model'"),
        ("seed: abc", ConfigValueError, r"seed: expected int or None, got 'abc'"),
        ("model: [1]", ConfigValueError, r"model: expected a mapping"),
    ],
)
def test_bad_configs_give_one_located_error(write, tiny_parts, text, error, pattern):
    path = write("bad.yaml", text + "\n")
    with pytest.raises(error, match=pattern) as info:
        validate_config(load_config(path))
    assert isinstance(info.value, ConfigError) and info.value.where
    assert "bad.yaml" in str(info.value)


def test_type_import_path_only_inside_listed_plugins(write, tiny_parts, tmp_path, monkeypatch):
    write("mf_test_pkg/__init__.py", "")
    write(
        "mf_test_pkg/parts.py",
        """
        import torch.nn as nn
        class Unregistered(nn.Module):
            def __init__(self, in_dim: int, depth: int = 1):
                super().__init__()
    """,
    )
    monkeypatch.syspath_prepend(str(tmp_path))
    text = "model: {backbone: {type: 'mf_test_pkg.parts:Unregistered', args: {depth: 2}}}\n"
    with pytest.raises(UnknownComponentError, match=r"import path is accepted only for modules listed in 'plugins:'"):
        validate_config(load_config(write("no_plugins.yaml", text)))
    import sys

    assert "mf_test_pkg.parts" not in sys.modules  # refused before importing anything
    cfg = validate_config(load_config(write("ok.yaml", "plugins: [mf_test_pkg]\n" + text)))
    assert cfg.data["model"]["backbone"]["args"] == {"depth": 2}
    with pytest.raises(UnknownComponentError, match="has no attribute 'Missing'"):
        validate_config(
            load_config(write("bad.yaml", "plugins: [mf_test_pkg]\nmodel: {backbone: 'mf_test_pkg.parts.Missing'}\n"))
        )


def test_apply_overrides_expands_shorthand_between_steps(write, tiny_parts):
    cfg = load_config(write("x.yaml", "model: {head: tiny_head}\n"))
    apply_overrides(cfg, ["model.head.args.bias=false", "model.backbone=tiny_net", "model.backbone.args.depth=2"])
    assert cfg.data["model"]["head"] == {"type": "tiny_head", "args": {"bias": False}}
    assert cfg.data["model"]["backbone"] == {"type": "tiny_net", "args": {"depth": 2}}
