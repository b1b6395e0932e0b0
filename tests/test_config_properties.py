"""Property: any malformed config gives a located ConfigError — never another exception."""

from __future__ import annotations

import tempfile
from pathlib import Path

import pytest
import torch.nn as nn
import yaml
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import modforge as mf
from modforge.core.config import load_config
from modforge.core.errors import ConfigCycleError, ConfigError
from modforge.experiment import validate_config

SETTINGS = settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])


@pytest.fixture
def part():
    @mf.register_backbone("prop_net")
    class PropNet(nn.Module):
        def __init__(self, in_dim: int, depth: int, width: int = 8, act: str = "relu", drop: float = 0.0):
            super().__init__()

    @mf.register_loss("prop_loss")
    def prop_loss(scale: float = 1.0):
        return nn.MSELoss()


def check(text: str, files: dict[str, str] | None = None) -> ConfigError | None:
    """Load and validate ``text``; return the ConfigError (or None when valid)."""
    with tempfile.TemporaryDirectory() as tmp:
        for name, body in (files or {}).items():
            (Path(tmp) / name).write_text(body)
        path = Path(tmp) / "main.yaml"
        path.write_text(text)
        try:
            validate_config(load_config(path))
        except ConfigError as exc:
            assert exc.where, f"no location in {exc!r}"
            assert "\n" not in str(exc)
            return exc
    return None


scalars = st.one_of(st.none(), st.booleans(), st.integers(), st.floats(allow_nan=False), st.text(max_size=8))
values = st.recursive(
    scalars,
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=6), inner, max_size=3),
    max_leaves=6,
)
bad_arg_values = {
    "depth": st.one_of(
        st.text(min_size=1, max_size=5).filter(lambda s: not s.strip().lstrip("+-").isdigit()),
        st.floats(allow_nan=False).filter(lambda f: not f.is_integer()),
        st.booleans(),
        st.lists(st.integers(), max_size=2),
    ),
    "width": st.one_of(st.just("wide"), st.booleans(), st.dictionaries(st.text(max_size=3), st.integers(), max_size=2)),
    "drop": st.one_of(st.just("lots"), st.lists(st.floats(), max_size=2), st.booleans()),
}


@st.composite
def malformed_model(draw) -> dict:
    """A model section with at least one injected fault."""
    fault = draw(
        st.sampled_from(
            ["bad_value", "unknown_key", "unknown_name", "missing_required", "bad_shape", "extra_key", "bad_loss"]
        )
    )
    args: dict = {"depth": draw(st.integers(1, 5))}
    backbone: object = {"type": "prop_net", "args": args}
    losses: object = [{"type": "prop_loss", "weight": 1.0}]
    if fault == "bad_value":
        key = draw(st.sampled_from(sorted(bad_arg_values)))
        args[key] = draw(bad_arg_values[key])
    elif fault == "unknown_key":
        args[draw(st.text(min_size=1, max_size=8).filter(lambda k: k not in {"depth", "width", "act", "drop"}))] = draw(
            values
        )
    elif fault == "unknown_name":
        backbone["type"] = draw(
            st.text(min_size=1, max_size=10).filter(lambda n: n.strip() and n.strip() != "prop_net")
        )
    elif fault == "missing_required":
        del args["depth"]
    elif fault == "bad_shape":
        backbone = draw(
            st.one_of(
                st.integers(), st.lists(scalars, max_size=2), st.just(""), st.dictionaries(st.just("args"), values)
            )
        )
    elif fault == "extra_key":
        backbone[draw(st.text(min_size=1, max_size=6).filter(lambda k: k not in {"type", "args"}))] = draw(values)
    else:
        losses = draw(
            st.one_of(
                st.just([{"type": "prop_loss", "weight": "heavy"}]),
                st.lists(st.integers(), min_size=1, max_size=2),
                st.just([{"type": "nope_loss"}]),
                st.just([{"type": "prop_loss", "args": {"scale": "big"}}]),
            )
        )
    return {"model": {"backbone": backbone, "losses": losses}}


@SETTINGS
@given(model=malformed_model())
def test_malformed_model_sections_always_give_a_located_config_error(part, model):
    assert check(yaml.safe_dump(model)) is not None


@SETTINGS
@given(doc=st.dictionaries(st.text(max_size=8), values, max_size=4))
def test_random_documents_never_raise_anything_but_config_error(part, doc):
    check(yaml.safe_dump(doc))


@SETTINGS
@given(text=st.text(max_size=60))
def test_random_text_never_raises_anything_but_config_error(part, text):
    check(text)


@SETTINGS
@given(
    text=st.sampled_from(
        [
            "a: [1, 2",
            "a: {b: 1",
            "a: 'x",
            "\t- x",
            "a: *nope",
            "a: !!python/name:os.system ''",
            "a: b: c",
            "- [",
            "? [a]\n: 1\n: 2",
            "%YAML 9.9\n---\na: 1",
        ]
    )
)
def test_broken_yaml_gives_a_config_error(part, text):
    assert check(text) is not None


@SETTINGS
@given(edges=st.lists(st.lists(st.integers(0, 3), max_size=3), min_size=4, max_size=4))
def test_base_graphs_load_or_report_a_cycle(part, edges):
    """Four files whose _base_ lists form a random graph: cycle ⇔ ConfigCycleError."""
    files = {}
    for i, bases in enumerate(edges):
        body = {"seed": i}
        files[f"f{i}.yaml"] = yaml.safe_dump({"_base_": [f"f{b}.yaml" for b in bases], **body} if bases else body)

    def reaches_cycle(node: int, stack: tuple[int, ...]) -> bool:
        if node in stack:
            return True
        return any(reaches_cycle(nxt, (*stack, node)) for nxt in edges[node])

    err = check("_base_: f0.yaml\n", files)
    if reaches_cycle(0, ()):
        assert isinstance(err, ConfigCycleError)
    else:
        assert err is None
