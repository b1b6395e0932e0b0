"""Every key error an override causes is blamed on that override, never on the config file.

A mistyped key on the way to a value (``train.optimizr.args.lr``) creates a mapping the file
never had; a list item set on the command line changes the list the check reads as one value.
Both once named ``configs/digits.yaml:13``; each kind of error (unknown key, unknown section,
wrong type, bad value) must now say ``in override '...'``.
"""

from __future__ import annotations

import pytest

from modforge.core.config import load_config
from modforge.core.errors import ConfigError, UnknownKeyError
from modforge.experiment.schema import apply_overrides, validate_config
from run_configs import cnn, run_config

CONFIG = run_config("{type: digits, args: {as_image: true}, batch_size: 32}", cnn(8, 16), neck="global_avg_pool",
                    train=dict(max_epochs=2, optimizer="{type: adamw, args: {lr: 3.0e-3}}"))


def _error(write, override: str) -> ConfigError:
    cfg = load_config(write("c.yaml", CONFIG))
    with pytest.raises(ConfigError) as info:
        validate_config(apply_overrides(cfg, [override]))
    return info.value


@pytest.mark.parametrize(
    ("override", "path", "kind"),
    [
        ("train.optimizr.args.lr=1e-3", "train.optimizr", UnknownKeyError),  # unknown key, on the way
        ("trian.max_epochs=3", "trian", UnknownKeyError),  # unknown section
        ("model.bakbone.type=cnn", "model.bakbone", UnknownKeyError),  # unknown model slot
        ("train.max_epoch=3", "train.max_epoch", UnknownKeyError),  # unknown key, the last one
        ("train.max_epochs=abc", "train.max_epochs", ConfigError),  # wrong type
        ("train.max_epochs=-1", "train.max_epochs", ConfigError),  # bad value
        ("model.backbone.args.channels.0=abc", "model.backbone.args.channels", ConfigError),  # a list item's type
        ("model.backbone.args.channels.1=-3", "model.backbone.args.channels", ConfigError),  # a list item's value
    ],
)
def test_an_override_error_names_the_override(write, override: str, path: str, kind: type) -> None:
    error = _error(write, override)
    assert isinstance(error, kind)
    assert error.path == path
    assert error.source == f"override '{override}'", str(error)
    assert "c.yaml" not in str(error)


def test_a_file_error_still_names_its_line(write) -> None:
    """The blame moves only when the command line made the value: a bad item in the file, with an
    unrelated override beside it, is still the file's (and its line's)."""
    cfg = load_config(write("c.yaml", CONFIG.replace("channels: [8, 16]", "channels: [8, -16]")))
    with pytest.raises(ConfigError) as info:
        validate_config(apply_overrides(cfg, ["train.max_epochs=3", "model.losses.0=focal"]))
    assert info.value.path == "model.backbone.args.channels"
    assert info.value.source is not None and info.value.source.endswith("c.yaml:4")
