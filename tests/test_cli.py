"""The command line: list, describe, config, part flags, exit statuses."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

import modforge as mf

PARTS = '''
from typing import Literal, Optional
import torch.nn as nn
import modforge as mf


@mf.register_backbone("cli_mlp")
class CliMLP(nn.Module):
    """An MLP for CLI tests.

    Args:
        hidden_dims: sizes of the hidden layers.
        act: activation function.
        pretrained: load weights.
        seed: clashes with the command's --seed.
        extra: a None default.
    """

    def __init__(self, in_dim: int, hidden_dims: tuple[int, ...] = (32,), act: Literal["relu", "gelu"] = "relu",
                 pretrained: bool = True, seed: Optional[int] = None, extra=None, dropout: float = 0.0):
        super().__init__()


@mf.register_backbone("cli_cnn")
def cli_cnn(in_dim: int, channels: int = 8, dropout: float = 0.0):
    """A function backbone."""
    return nn.Identity()


@mf.register_head("cli_head")
def cli_head(in_dim: int, num_classes: int, dropout: float = 0.1):
    """A head."""
    return nn.Linear(in_dim, num_classes)
'''


@pytest.fixture
def project(write):
    write("configs/parts.py", PARTS)
    write(
        "configs/base.yaml",
        """
        seed: 0
        model:
          backbone: {type: cli_mlp, args: {hidden_dims: [64, 64]}}
          head: cli_head
    """,
    )
    return write("configs/exp.yaml", "_base_: base.yaml\nplugins: [parts.py]\n")


def resolved(result) -> dict:
    assert result.code == 0, result
    return yaml.safe_load(result.out)


def test_version_and_help(cli):
    assert cli("--version").code == 0
    res = cli("--help")
    assert res.code == 0 and "list" in res.out and "describe" in res.out


def test_no_command_and_unknown_command_exit_2(cli):
    assert cli().code == 2
    res = cli("trian")
    assert res.code == 2 and "invalid choice: 'trian'" in res.err and res.err.count("\n") == 1


def test_list_all_kinds_shows_builtins(cli):
    res = cli("list")
    assert res.code == 0
    assert "optimizer" in res.out and "adamw" in res.out and "step_lr" in res.out


def test_list_kind_pattern_and_plugins(cli, write):
    write("parts.py", PARTS)
    res = cli("list", "backbone", "cli_*", "--plugins", "parts.py")
    assert res.code == 0
    lines = [line for line in res.out.splitlines() if line.startswith("backbone")]
    assert len(lines) == 2 and "cli_cnn" in lines[0] and "cli_mlp" in lines[1]
    assert "parts.py" in lines[0] and "A function backbone." in lines[0]
    assert "adamw" in cli("list", "adam*").out  # a lone wildcard searches every kind
    assert "no registered backbone parts matching 'zzz*'" in cli("list", "backbone", "zzz*").out


def test_list_unknown_kind_is_a_usage_error(cli):
    res = cli("list", "backbon")
    assert res.code == 2 and "no kind of part named 'backbon'; did you mean 'backbone'?" in res.err


def test_describe_shows_signature_docs_and_origin(cli, write):
    write("parts.py", PARTS)
    res = cli("describe", "backbone", "cli_mlp", "--plugins", "parts.py")
    assert res.code == 0
    out = res.out
    assert "backbone 'cli_mlp'" in out and "An MLP for CLI tests." in out
    assert "parts.py:" in out  # where it is defined
    row = next(line for line in out.splitlines() if line.startswith("hidden_dims"))
    assert "tuple of int" in row and "(32,)" in row and "sizes of the hidden layers." in row
    assert "(set by the builder)" in next(line for line in out.splitlines() if line.startswith("in_dim"))
    assert "one of 'relu', 'gelu'" in out


SHAPE_NECK = '''
import modforge as mf


@mf.register_neck("shape_neck")
def shape_neck(in_dim: int, **kwargs):
    """Pools [B, T, D] to [bold][B, D]."""
    return None
'''


def test_describe_prints_docstring_brackets_verbatim(cli, write):
    write("shape.py", SHAPE_NECK)
    res = cli("describe", "neck", "shape_neck", "--plugins", "shape.py")
    assert res.code == 0 and "Pools [B, T, D] to [bold][B, D]." in res.out
    assert "**kwargs: further keyword arguments are accepted" in res.out


def test_describe_unknown_name_suggests(cli):
    res = cli("describe", "optimizer", "adamm")
    assert res.code == 2
    assert "no optimizer named 'adamm'; did you mean" in res.err and "'adam'" in res.err


def test_describe_builtin_optimizer(cli):
    res = cli("describe", "optimizer", "sgd")
    assert res.code == 0 and "(set by the builder)" in res.out and "momentum" in res.out


def test_config_resolves_base_plugins_and_prints_yaml(cli, project):
    cfg = resolved(cli("config", str(project)))
    assert cfg["model"]["backbone"] == {"type": "cli_mlp", "args": {"hidden_dims": [64, 64]}}
    assert cfg["model"]["head"] == {"type": "cli_head", "args": {}}
    assert cfg["plugins"][0].endswith("parts.py") and os.path.isabs(cfg["plugins"][0])


def test_part_flags_mammoth_style(cli, project):
    cfg = resolved(
        cli(
            "config",
            str(project),
            "--hidden-dims",
            "256,256",
            "--act",
            "gelu",
            "--pretrained",
            "0",
            "--extra",
            "7",
            "model.head.args.dropout=0.5",
            "--seed",
            "3",
        )
    )
    args = cfg["model"]["backbone"]["args"]
    assert args == {"hidden_dims": [256, 256], "act": "gelu", "pretrained": False, "extra": 7}
    assert cfg["model"]["head"]["args"] == {"dropout": 0.5}
    assert cfg["seed"] == 3


def test_bool_flag_spellings(cli, project):
    for argv, expected in [
        (["--pretrained"], True),
        (["--no-pretrained"], False),
        (["--pretrained", "no"], False),
        (["--pretrained", "1"], True),
        (["--backbone.pretrained", "false"], False),
    ]:
        cfg = resolved(cli("config", str(project), *argv))
        assert cfg["model"]["backbone"]["args"]["pretrained"] is expected, argv


def test_list_flag_repeated_and_underscore_alias(cli, project):
    cfg = resolved(cli("config", str(project), "--hidden_dims", "1", "--hidden-dims", "2,3"))
    assert cfg["model"]["backbone"]["args"]["hidden_dims"] == [1, 2, 3]


def test_choosing_another_part_switches_its_flags(cli, project):
    res = cli("config", str(project), "--backbone", "cli_cnn", "--channels", "16")
    cfg = resolved(res)
    assert cfg["model"]["backbone"] == {"type": "cli_cnn", "args": {"channels": 16}}
    assert "--backbone cli_cnn: model.backbone 'cli_mlp' → 'cli_cnn': dropped hidden_dims" in res.err
    assert res.err.count("warning:") == 1
    bad = cli("config", str(project), "--backbone", "cli_cnn", "--hidden-dims", "3")
    assert bad.code == 2 and "unrecognized arguments: --hidden-dims 3" in bad.err


def test_outer_flag_wins_with_a_warning(cli, project):
    res = cli("config", str(project), "--seed", "5")
    cfg = resolved(res)
    assert cfg["seed"] == 5 and "seed" not in cfg["model"]["backbone"]["args"]
    assert "--seed is the command's own option, not the backbone 'cli_mlp' argument 'seed'" in res.err
    assert "model.backbone.args.seed=VALUE" in res.err and res.err.count("warning:") == 1
    quiet = cli("config", str(project), "--hidden-dims", "4")  # --seed unused: nothing to warn about
    assert quiet.code == 0 and quiet.err == ""
    cfg = resolved(cli("config", str(project), "--backbone.seed", "9"))
    assert cfg["model"]["backbone"]["args"]["seed"] == 9


def test_part_argument_named_plugins_never_crashes(cli, write):
    write(
        "p.py",
        """
import modforge as mf
@mf.register_head("plug_head")
def plug_head(in_dim: int, num_classes: int, plugins: list[str] = ()):
    return None
""",
    )
    write("c.yaml", "plugins: [p.py]\nmodel: {backbone: mlp, head: plug_head}\n")
    res = cli("config", "c.yaml", "--head.plugins", "a,b", "--plugins", "p.py")
    cfg = resolved(res)
    assert cfg["model"]["head"]["args"] == {"plugins": ["a", "b"]}
    assert "--plugins is the command's own option, not the head 'plug_head' argument 'plugins'" in res.err


def test_print_config_flag_is_accepted(cli, project):
    cfg = resolved(cli("config", str(project), "--print-config", "--hidden-dims", "4"))
    assert cfg["model"]["backbone"]["args"]["hidden_dims"] == [4]


def test_argument_shared_by_two_parts_gets_qualified_flags_only(cli, project):
    res = cli("config", str(project), "--backbone", "cli_cnn", "--head.dropout", "0.2", "--backbone.dropout", "0.3")
    cfg = resolved(res)
    assert cfg["model"]["head"]["args"] == {"dropout": 0.2}
    assert cfg["model"]["backbone"]["args"] == {"dropout": 0.3}
    ambiguous = cli("config", str(project), "--backbone", "cli_cnn", "--dropout", "0.2")
    assert ambiguous.code == 2 and "unrecognized arguments: --dropout" in ambiguous.err


def test_flag_errors_are_one_line_naming_the_flag(cli, project):
    res = cli("config", str(project), "--act", "tanh")
    assert res.code == 2
    assert res.err.strip().splitlines()[-1] == "error: --act: expected one of 'relu', 'gelu', got 'tanh'"
    res = cli("config", str(project), "--hidden-dims", "a,b")
    assert res.code == 2 and "--hidden-dims: expected tuple of int" in res.err
    res = cli("config", str(project), "--hiden-dims", "3")
    assert res.code == 2 and "did you mean: --hiden-dims → --hidden-dims?" in res.err


def test_unknown_part_by_flag_and_bad_override(cli, project):
    res = cli("config", str(project), "--backbone", "cli_mlpp")
    assert res.code == 2 and "--backbone: no backbone named 'cli_mlpp'; did you mean 'cli_mlp'?" in res.err
    res = cli("config", str(project), "model.backbone.args.hidden_dimz=3")
    assert res.code == 2 and "unknown argument 'hidden_dimz'; did you mean 'hidden_dims'?" in res.err
    assert "override 'model.backbone.args.hidden_dimz=3'" in res.err


def test_missing_config_file_and_missing_plugin(cli, write):
    res = cli("config", "nope.yaml")
    assert res.code == 2 and "nope.yaml" in res.err and "not found" in res.err
    cfg = write("c.yaml", "plugins: [gone.py]\n")
    res = cli("config", str(cfg))
    assert res.code == 2 and "gone.py' not found" in res.err and "from plugins: in c.yaml:1" in res.err


def test_help_lists_the_chosen_parts_flags(cli, project):
    res = cli("config", str(project), "--help")
    assert res.code == 0
    assert (
        "backbone 'cli_mlp' arguments" in res.out
        and "--hidden-dims" in res.out
        and "sizes of the hidden layers" in res.out
    )
    assert "head 'cli_head' arguments" in res.out
    assert cli("config", "--help").code == 0  # no config given: the fixed options only


def test_flags_may_come_before_the_config(cli, project):
    cfg = resolved(cli("config", "--hidden-dims", "8", str(project), "model.head.args.dropout=0.2"))
    assert cfg["model"]["backbone"]["args"]["hidden_dims"] == [8]
    assert cfg["model"]["head"]["args"]["dropout"] == 0.2


def test_unexpected_errors_exit_1_with_one_line(cli, monkeypatch):
    from modforge.cli.commands import list_parts

    def boom(argv):
        raise RuntimeError("kaput")

    monkeypatch.setattr(list_parts, "run", boom)
    res = cli("list")
    assert res.code == 1
    assert res.err == (
        "error: unexpected RuntimeError: kaput "
        "(add --debug anywhere on the command line, or set MODFORGE_DEBUG=1, for the traceback)\n"
    )


def _venv_bin(name: str) -> str:
    return str(Path(sys.executable).parent / name)


@pytest.mark.slow
def test_console_script_and_python_dash_m(tmp_path, monkeypatch, capsys):
    """Both entry points run a command in a process of their own; the error route of ``python -m
    modforge`` (its ``__main__`` passing main's status to ``sys.exit``) is run in this process,
    as ``-m`` runs it: the message and status are main's, not the fresh interpreter's."""
    import runpy

    for cmd in (
        [_venv_bin("modforge"), "list", "optimizer", "sgd"],
        [sys.executable, "-m", "modforge", "list", "optimizer", "sgd"],
    ):
        proc = subprocess.run(cmd, capture_output=True, text=True, cwd=tmp_path, timeout=120)
        assert proc.returncode == 0, proc.stderr
        assert "sgd" in proc.stdout
    monkeypatch.chdir(tmp_path)
    monkeypatch.setattr(sys, "argv", ["modforge", "describe", "optimizer", "nope"])
    with pytest.raises(SystemExit) as exit_:
        runpy.run_module("modforge", run_name="__main__", alter_sys=True)
    err = capsys.readouterr().err
    assert exit_.value.code == 2 and err.startswith("error: no optimizer named 'nope'") and "Traceback" not in err
    assert mf.__version__ in subprocess.run([_venv_bin("modforge"), "--version"], capture_output=True, text=True).stdout
