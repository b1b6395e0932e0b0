"""Arguments inferred from signatures and docstrings, and value coercion."""

from __future__ import annotations

import enum
from typing import Any, Literal, Optional

import pytest

from modforge.core.arguments import REQUIRED, signature_of
from modforge.core.coercion import coerce, coerce_cli, describe_type
from modforge.core.errors import ConfigValueError, MissingArgumentError, UnknownKeyError


class Mode(enum.Enum):
    FAST = "fast"
    SLOW = "slow"


class Level(enum.Enum):
    LOW = 1
    HIGH = 2


def google(in_dim: int, depth: int, width=1, name=None, ratio=0.5, flag=False, dims=(64, 64), free=None, text="x"):
    """A function documented Google style.

    Args:
        in_dim: input size, wired by the builder.
        depth (int): number of blocks.
        width: channel multiplier.
    """


class NumpyStyle:
    """A class documented NumPy style.

    Parameters
    ----------
    hidden : int
        Hidden units of the
        first layer.
    mode : Mode
        Speed.
    """

    def __init__(self, hidden: int = 8, mode: Mode = Mode.FAST, level: Level = Level.LOW, **kwargs):
        pass


def rest_style(alpha: float = 0.1, *extra, beta: Literal["a", "b"] = "a"):
    """reST style.

    :param alpha: the alpha.
    :param beta: the beta.
    """


def test_types_defaults_required_and_help_from_signature():
    sig = signature_of(google, injected=("in_dim",))
    by = {a.name: a for a in sig.args}
    assert by["in_dim"].injected and not by["in_dim"].required
    assert by["depth"].type is int and by["depth"].required and by["depth"].default is REQUIRED
    assert by["width"].type is int and by["width"].inferred and by["width"].default == 1
    assert by["ratio"].type is float and by["flag"].type is bool
    assert by["dims"].type == tuple[int, ...]
    assert by["text"].type is str
    assert by["name"].type is Any  # a None default accepts any value
    assert by["depth"].help == "number of blocks."
    assert by["width"].help == "channel multiplier."
    assert sig.summary == "A function documented Google style."
    assert sig.var_keyword is None


def test_no_annotation_no_default_is_str_like_mammoth():
    def f(x):
        pass

    arg = signature_of(f).args[0]
    assert arg.type is str and arg.required


def test_numpy_docstring_enum_choices_and_var_keyword_reported():
    sig = signature_of(NumpyStyle)
    assert [a.name for a in sig.args] == ["hidden", "mode", "level"]
    assert sig.get("hidden").help == "Hidden units of the first layer."
    assert sig.get("mode").choices == ("fast", "slow")
    assert sig.var_keyword == "kwargs"
    assert sig.validate({"anything": 1}) == {"anything": 1}  # passed through, not guessed


def test_rest_docstring_literal_choices_and_var_positional():
    sig = signature_of(rest_style)
    assert sig.get("alpha").help == "the alpha."
    assert sig.get("beta").choices == ("a", "b")
    assert sig.var_positional == "extra"


def test_annotated_none_default_means_optional():
    def f(x: int = None):  # noqa: RUF013 - the implicit Optional users write
        pass

    arg = signature_of(f).args[0]
    assert arg.coerce("none") is None and arg.coerce("3") == 3


def test_string_annotations_are_resolved():
    ns: dict[str, Any] = {}
    exec("from __future__ import annotations\ndef f(a: int = 1, b: 'list[float]' = None): pass", ns)
    sig = signature_of(ns["f"])
    assert sig.get("a").type is int
    assert sig.get("b").coerce([1, "2"]) == [1.0, 2.0]


@pytest.mark.parametrize(
    ("tp", "value", "expected"),
    [
        (int, "64", 64),
        (int, 64.0, 64),
        (float, "1e-3", 1e-3),
        (float, 3, 3.0),
        (str, 123, "123"),
        (bool, "true", True),
        (bool, "False", False),
        (bool, "yes", True),
        (bool, "no", False),
        (bool, "1", True),
        (bool, "0", False),
        (bool, 0, False),
        (Optional[int], "none", None),
        (Optional[int], "NULL", None),
        (Optional[int], None, None),
        (Optional[int], "5", 5),
        (Literal["relu", "gelu"], "gelu", "gelu"),
        (Mode, "fast", Mode.FAST),
        (Mode, "SLOW", Mode.SLOW),
        (Level, 2, Level.HIGH),
        (Level, "HIGH", Level.HIGH),
        (list[int], [1, "2"], [1, 2]),
        (tuple[int, ...], [1, 2], (1, 2)),
        (dict[str, int], {"a": "1"}, {"a": 1}),
        (dict[str, list[int]], {"a": [1, 2]}, {"a": [1, 2]}),
        (Any, {"x": [1]}, {"x": [1]}),
    ],
)
def test_coerce_accepts(tp, value, expected):
    assert coerce(value, tp) == expected


@pytest.mark.parametrize(
    ("tp", "value", "message"),
    [
        (int, "abc", "expected int, got 'abc'"),
        (int, 1.5, "expected int, got 1.5"),
        (int, True, "expected int, got True"),
        (float, False, "expected float, got False"),
        (bool, "maybe", "expected bool, got 'maybe'"),
        (Optional[int], "x", "expected int or None, got 'x'"),
        (Literal["relu", "gelu"], "tanh", "expected one of 'relu', 'gelu', got 'tanh'"),
        (Mode, "medium", "expected one of 'fast', 'slow', got 'medium'"),
        (list[int], [1, "b"], "expected list of int, got [1, 'b'] (element [1] = 'b')"),
        (dict[str, int], "nope", "expected mapping of str to int, got 'nope'"),
    ],
)
def test_coerce_refuses_with_a_readable_message(tp, value, message):
    with pytest.raises(ConfigValueError) as info:
        coerce(value, tp)
    assert str(info.value) == message


@pytest.mark.parametrize(
    ("tp", "raw", "expected"),
    [
        (list[int], "1,2,3", [1, 2, 3]),
        (list[int], ["1,2", "3"], [1, 2, 3]),  # repeated flag
        (list[int], "[4, 5]", [4, 5]),
        (tuple[int, ...], "256,256", (256, 256)),
        (list[str], "a, b", ["a", "b"]),
        (list[int], "", []),
        (Optional[list[int]], "none", None),
        (dict[str, int], "{a: 1, b: 2}", {"a": 1, "b": 2}),
        (bool, "0", False),
        (bool, "true", True),
        (Any, "3", 3),
        (Any, "abc", "abc"),
        (Optional[float], "null", None),
        (int, ["1", "2"], 2),  # a repeated scalar flag: the last wins
        (int | str, "7", 7),
    ],
)
def test_coerce_cli(tp, raw, expected):
    assert coerce_cli(raw, tp) == expected


def test_describe_type():
    assert describe_type(Optional[int]) == "int or None"
    assert describe_type(list[int]) == "list of int"
    assert describe_type(tuple[int, ...]) == "tuple of int"
    assert describe_type(tuple[int, float]) == "tuple (int, float)"
    assert describe_type(dict[str, int]) == "mapping of str to int"
    assert describe_type(Literal["a", 1]) == "one of 'a', 1"
    assert describe_type(Any) == "any"


def test_validate_reports_unknown_missing_and_bad_values_with_paths():
    sig = signature_of(google, injected=("in_dim",))
    assert sig.validate({"depth": "3", "width": 2}, path="model.backbone.args") == {"depth": 3, "width": 2}
    with pytest.raises(UnknownKeyError) as info:
        sig.validate({"depht": 3}, path="model.backbone.args")
    assert str(info.value).startswith("model.backbone.args.depht: unknown argument 'depht'; did you mean 'depth'?")
    with pytest.raises(
        MissingArgumentError, match=r"^model.backbone.args.depth: required argument missing \(expected int\)"
    ):
        sig.validate({}, path="model.backbone.args")
    with pytest.raises(ConfigValueError, match=r"^model.backbone.args.depth: expected int, got 'abc' \(in x.yaml:3\)$"):
        sig.validate({"depth": "abc"}, path="model.backbone.args", origin_of=lambda p: "x.yaml:3")


def test_validate_plain_gives_yaml_friendly_values():
    sig = signature_of(NumpyStyle)
    assert sig.validate({"mode": "SLOW"}) == {"mode": Mode.SLOW}
    assert sig.validate({"mode": "SLOW"}, plain=True) == {"mode": "slow"}
