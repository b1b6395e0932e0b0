"""Hostile or broken config files are refused quickly with one clear ConfigError.

Alias bombs, recursive aliases, absurd nesting, duplicate keys, and paths that are not
regular files (FIFOs, devices, sockets, symlink loops, huge files).  Anything that could
hang on a regression runs under a generous guard so the test fails instead of hanging;
no test asserts how fast anything is.
"""

from __future__ import annotations

import os
import socket
import subprocess
import threading
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from modforge.core.config import load_config
from modforge.core.errors import ConfigError, ConfigFileError, ConfigSyntaxError
from modforge.core.yaml_guard import MAX_CONFIG_BYTES, MAX_DEPTH, MAX_NODES, read_config_text, safe_yaml_load
from train_processes import run_warm

pytestmark = pytest.mark.hostile

GUARD_S = 60.0


def guarded(fn: Callable[[], Any], unblock: Callable[[], None] | None = None) -> Any:
    """Run ``fn`` in a daemon thread; fail (never hang) if it is still running after GUARD_S."""
    box: dict[str, Any] = {}

    def target() -> None:
        try:
            box["result"] = fn()
        except BaseException as exc:  # noqa: BLE001 - re-raised in the test's thread
            box["error"] = exc

    thread = threading.Thread(target=target, daemon=True)
    thread.start()
    thread.join(GUARD_S)
    if thread.is_alive():
        if unblock is not None:
            unblock()
        pytest.fail(f"still running after {GUARD_S:.0f}s (hung on hostile input)")
    if "error" in box:
        raise box["error"]
    return box.get("result")


def run_cli(*args: str, cwd: Path) -> subprocess.CompletedProcess:
    """``python -m modforge ARGS`` in a subprocess that is killed rather than left hanging (a warm child:
    :func:`train_processes.run_warm`)."""
    return run_warm(*args, cwd=cwd, timeout=120)


def billion_laughs(levels: int = 7, width: int = 10) -> str:
    """Each anchor is a list of ``width`` aliases of the previous: ``width**levels`` nodes."""
    lines = ["a: &a [" + ", ".join(["lol"] * width) + "]"]
    names = "abcdefghij"
    for prev, name in zip(names[: levels - 1], names[1:levels], strict=True):
        lines.append(f"{name}: &{name} [" + ", ".join([f"*{prev}"] * width) + "]")
    return "\n".join(lines) + "\n"


def one_line(err: str) -> bool:
    return err.endswith("\n") and err.count("\n") == 1 and "Traceback" not in err


# ---------------------------------------------------------------- alias expansion
def test_billion_laughs_is_refused_by_load_config(write):
    text = billion_laughs()
    assert len(text) < 1024  # a few hundred bytes that expand to 10**7 nodes
    path = write("bomb.yaml", text)
    with pytest.raises(ConfigSyntaxError) as info:
        guarded(lambda: load_config(path))
    message = str(info.value)
    assert f"{MAX_NODES:,} nodes" in message
    assert "bomb.yaml:" in message


def test_billion_laughs_is_a_one_line_cli_error(cli, write):
    write("bomb.yaml", billion_laughs())
    result = guarded(lambda: cli("config", "bomb.yaml"))
    assert result.code == 2, result
    assert one_line(result.err), result.err
    assert "bomb.yaml:" in result.err and "nodes" in result.err


def test_billion_laughs_in_a_base_file_is_refused(write):
    write("bomb.yaml", billion_laughs())
    child = write("child.yaml", "_base_: bomb.yaml\nseed: 1\n")
    with pytest.raises(ConfigSyntaxError, match=r"bomb\.yaml:\d+"):
        guarded(lambda: load_config(child))


def test_alias_bomb_in_a_mapping_key_position_is_counted(write):
    text = billion_laughs(levels=6) + "g: {? *f : 1}\n"
    with pytest.raises(ConfigSyntaxError, match="nodes"):
        guarded(lambda: load_config(write("keybomb.yaml", text)))


def test_moderate_alias_use_still_loads(write):
    path = write("aliases.yaml", billion_laughs(levels=4, width=5))  # 5**4 = 625 nodes at the end
    cfg = load_config(path)
    assert cfg.data["d"][0][0][0] == ["lol"] * 5
    assert len(cfg.data["d"]) == 5


def test_recursive_alias_is_refused(write):
    for text in ("a: &a [1, *a]\n", "a: &a {b: 1, c: *a}\n", "a: &a\n  b:\n    - *a\n"):
        path = write("loop.yaml", text)
        with pytest.raises(ConfigSyntaxError, match=r"recursive alias.*loop\.yaml:\d") as info:
            guarded(lambda path=path: load_config(path))
        assert "'*a'" in str(info.value)


def test_undefined_alias_is_still_a_syntax_error(write):
    with pytest.raises(ConfigSyntaxError, match="undefined alias"):
        load_config(write("undef.yaml", "a: *nope\n"))


# ---------------------------------------------------------------- nesting depth
@pytest.mark.parametrize(
    "text",
    [
        "x: " + "[" * 1000 + "]" * 1000 + "\n",
        "x: " + "{a: " * 1000 + "1" + "}" * 1000 + "\n",
        "".join(" " * i + "k:\n" for i in range(1000)) + " " * 1000 + "1\n",
        "".join(" " * i + "- \n" for i in range(0, 2000, 2)),
    ],
    ids=["flow-lists", "flow-mappings", "block-mappings", "block-lists"],
)
def test_thousand_deep_nesting_is_a_config_error(write, text):
    path = write("deep.yaml", text)
    with pytest.raises(ConfigSyntaxError) as info:
        guarded(lambda: load_config(path))
    assert not isinstance(info.value.__context__, RecursionError)
    assert f"more than {MAX_DEPTH} levels" in str(info.value)
    assert "deep.yaml:" in str(info.value)


def test_thousand_deep_nesting_names_the_line(write):
    text = "".join(" " * i + "k:\n" for i in range(1000)) + " " * 1000 + "1\n"
    with pytest.raises(ConfigSyntaxError, match=rf"deep\.yaml:{MAX_DEPTH + 1}\b"):
        load_config(write("deep.yaml", text))


def test_thousand_deep_nesting_is_a_one_line_cli_error(cli, write):
    write("deep.yaml", "x: " + "[" * 1000 + "]" * 1000 + "\n")
    result = guarded(lambda: cli("config", "deep.yaml"))
    assert result.code == 2, result
    assert one_line(result.err), result.err
    assert "deep.yaml:1" in result.err


def test_nesting_at_the_cap_still_loads(write):
    lists = "x: " + "[" * (MAX_DEPTH - 1) + "7" + "]" * (MAX_DEPTH - 1) + "\n"  # + the top mapping
    cfg = load_config(write("lists.yaml", lists))
    value = cfg.data["x"]
    for _ in range(MAX_DEPTH - 2):
        value = value[0]
    assert value == [7]
    assert cfg.copy().data == cfg.data
    assert cfg.to_yaml()

    mappings = "".join(" " * i + "k:\n" for i in range(MAX_DEPTH - 1)) + " " * (MAX_DEPTH - 1) + "k: 1\n"
    cfg = load_config(write("maps.yaml", mappings))
    assert cfg.origins["k" + ".k" * (MAX_DEPTH - 1)].endswith(f"maps.yaml:{MAX_DEPTH}")


def test_one_level_past_the_cap_is_refused(write):
    text = "x: " + "[" * MAX_DEPTH + "]" * MAX_DEPTH + "\n"
    with pytest.raises(ConfigSyntaxError, match=f"more than {MAX_DEPTH} levels"):
        load_config(write("over.yaml", text))


def test_depth_through_aliases_is_counted(write):
    half = MAX_DEPTH // 2 + 2
    text = "a: &a " + "[" * half + "]" * half + "\nb: " + "[" * half + "*a" + "]" * half + "\n"
    with pytest.raises(ConfigSyntaxError, match=r"once aliases are expanded.*alias\.yaml:2"):
        load_config(write("alias.yaml", text))


# ---------------------------------------------------------------- duplicate keys
def test_duplicate_top_level_key_names_both_lines(write):
    path = write("dup.yaml", "seed: 0\nlr: 0.1\nmodel: x\n\n\n\nlr: 0.2\n")
    with pytest.raises(ConfigSyntaxError) as info:
        load_config(path)
    message = str(info.value)
    assert "duplicate key 'lr'" in message
    assert "first at line 2" in message and "dup.yaml:7" in message


def test_duplicate_nested_key_names_both_lines(write):
    text = """
        model:
          backbone:
            type: mlp
            width: 4
            type: cnn
        """
    with pytest.raises(ConfigSyntaxError, match=r"duplicate key 'type'.*first at line 3.*nested\.yaml:5"):
        load_config(write("nested.yaml", text))


def test_duplicate_key_inside_a_list_item(write):
    text = """
        losses:
          - {type: ce, weight: 1}
          - type: mse
            weight: 2
            weight: 3
        """
    with pytest.raises(ConfigSyntaxError, match=r"duplicate key 'weight'.*first at line 4.*items\.yaml:5"):
        load_config(write("items.yaml", text))


def test_duplicate_key_in_a_flow_mapping(write):
    with pytest.raises(ConfigSyntaxError, match=r"duplicate key 'a'.*flow\.yaml:1"):
        load_config(write("flow.yaml", "x: {a: 1, b: 2, a: 3}\n"))


@pytest.mark.parametrize(
    ("first", "second"),
    [("1", "01"), ("true", "True"), ("1", "1.0"), ("null", "~"), ("'a'", "a")],
)
def test_keys_that_collapse_into_one_dict_key_are_duplicates(write, first, second):
    with pytest.raises(ConfigSyntaxError, match=r"duplicate key .*first at line 2.*keys\.yaml:3"):
        load_config(write("keys.yaml", f"x:\n  {first}: a\n  {second}: b\n"))


def test_keys_that_stay_distinct_are_not_duplicates(write):
    cfg = load_config(write("fine.yaml", "x:\n  1: a\n  '1': b\n  a: c\n  A: d\n"))
    assert cfg.data["x"] == {1: "a", "1": "b", "a": "c", "A": "d"}


def test_duplicate_key_is_a_one_line_cli_error(cli, write):
    write("dup.yaml", "seed: 0\nseed: 1\n")
    result = cli("config", "dup.yaml")
    assert result.code == 2, result
    assert one_line(result.err), result.err
    assert "duplicate key 'seed'" in result.err and "first at line 1" in result.err and "dup.yaml:2" in result.err


def test_duplicate_key_in_a_base_file_is_refused(write):
    write("base.yaml", "seed: 0\nseed: 1\n")
    with pytest.raises(ConfigSyntaxError, match=r"base\.yaml:2"):
        load_config(write("child.yaml", "_base_: base.yaml\n"))


def test_merge_key_still_merges_and_overrides(write):
    text = """
        defaults: &defaults
          lr: 0.1
          momentum: 0.9
        train:
          <<: *defaults
          lr: 0.01
        eval:
          <<: [*defaults, {batch: 8}]
        """
    cfg = load_config(write("merge.yaml", text))
    assert cfg.data["train"] == {"lr": 0.01, "momentum": 0.9}
    assert cfg.data["eval"] == {"lr": 0.1, "momentum": 0.9, "batch": 8}
    assert cfg.origins["train.lr"].endswith("merge.yaml:6")


def test_two_merge_keys_in_one_mapping_are_duplicates(write):
    text = "a: &a {x: 1}\nb: &b {y: 2}\nc:\n  <<: *a\n  <<: *b\n"
    with pytest.raises(ConfigSyntaxError, match=r"duplicate key '<<'.*\[\*a, \*b\]"):
        load_config(write("merge2.yaml", text))


def test_python_tags_are_still_refused(write):
    path = write("evil.yaml", "x: !!python/object/apply:os.system ['true']\n")
    with pytest.raises(ConfigSyntaxError, match=r"Python tags are refused.*evil\.yaml:1"):
        load_config(path)


# ---------------------------------------------------------------- what the path is
@pytest.mark.skipif(not hasattr(os, "mkfifo"), reason="no FIFOs here")
def test_fifo_is_refused_without_blocking(tmp_path):
    fifo = tmp_path / "pipe.yaml"
    os.mkfifo(fifo)

    def unblock() -> None:  # a reader stuck in open() returns once a writer opens and closes
        os.close(os.open(fifo, os.O_WRONLY | os.O_NONBLOCK))

    with pytest.raises(ConfigFileError, match=r"named pipe \(FIFO\).*pipe\.yaml"):
        guarded(lambda: load_config(fifo), unblock=unblock)


@pytest.mark.skipif(not hasattr(os, "mkfifo"), reason="no FIFOs here")
def test_fifo_is_a_one_line_cli_error_in_a_subprocess(tmp_path):
    os.mkfifo(tmp_path / "pipe.yaml")
    proc = run_cli("config", "pipe.yaml", cwd=tmp_path)
    assert proc.returncode == 2, proc
    assert one_line(proc.stderr), proc.stderr
    assert "FIFO" in proc.stderr and "pipe.yaml" in proc.stderr


@pytest.mark.skipif(not hasattr(os, "mkfifo"), reason="no FIFOs here")
def test_fifo_as_a_base_file_is_refused(tmp_path, write):
    os.mkfifo(tmp_path / "pipe.yaml")
    child = write("child.yaml", "_base_: pipe.yaml\n")

    def unblock() -> None:
        os.close(os.open(tmp_path / "pipe.yaml", os.O_WRONLY | os.O_NONBLOCK))

    with pytest.raises(ConfigFileError, match="FIFO"):
        guarded(lambda: load_config(child), unblock=unblock)


@pytest.mark.parametrize("device", ["/dev/zero", "/dev/null", "/dev/urandom"])
def test_character_devices_are_refused(device):
    if not os.path.exists(device):
        pytest.skip(f"no {device} here")
    with pytest.raises(ConfigFileError, match="character device"):
        guarded(lambda: load_config(device))


def test_dev_zero_as_a_base_file_is_refused(write):
    if not os.path.exists("/dev/zero"):
        pytest.skip("no /dev/zero here")
    child = write("child.yaml", "_base_: /dev/zero\n")
    with pytest.raises(ConfigFileError, match="character device"):
        guarded(lambda: load_config(child))


@pytest.mark.skipif(not hasattr(socket, "AF_UNIX"), reason="no unix sockets here")
def test_socket_is_refused(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)  # keep the bound path short
    with socket.socket(socket.AF_UNIX) as sock:
        sock.bind("sock.yaml")
        with pytest.raises(ConfigFileError, match="a socket"):
            guarded(lambda: load_config(tmp_path / "sock.yaml"))


def test_symlink_loop_is_refused_by_the_reader(tmp_path):
    (tmp_path / "a.yaml").symlink_to(tmp_path / "b.yaml")
    (tmp_path / "b.yaml").symlink_to(tmp_path / "a.yaml")
    with pytest.raises(ConfigFileError, match="symlink loop"):
        read_config_text(tmp_path / "a.yaml", "a.yaml")


def test_symlink_loop_is_refused_by_load_config_and_the_cli(tmp_path, cli):
    (tmp_path / "a.yaml").symlink_to(tmp_path / "b.yaml")
    (tmp_path / "b.yaml").symlink_to(tmp_path / "a.yaml")
    with pytest.raises(ConfigFileError, match="symlink loop"):
        load_config(tmp_path / "a.yaml")
    result = cli("config", str(tmp_path / "a.yaml"))
    assert result.code == 2 and "symlink loop" in result.err and len(result.err.strip().splitlines()) == 1


def test_an_alias_bomb_or_deep_nesting_typed_as_an_override_is_refused(write, cli):
    levels = ["&l0 [" + ",".join(["1"] * 10) + "]"]
    levels += [f"&l{i} [" + ",".join([f"*l{i - 1}"] * 10) + "]" for i in range(1, 8)]  # 10^8 once expanded
    config = write("c.yaml", "seed: 1\n")
    for override, limit in ((f"seed=[{','.join(levels)}]", "nodes"), ("seed=" + "[" * 200 + "]" * 200, "levels")):
        result = cli("config", str(config), override)
        assert result.code == 2 and limit in result.err and len(result.err.strip().splitlines()) == 1, result


def test_symlink_to_a_real_file_loads(write, tmp_path):
    real = write("real/config.yaml", "seed: 3\n")
    link = tmp_path / "link.yaml"
    link.symlink_to(real)
    assert load_config(link).data == {"seed": 3}
    child = write("child.yaml", "_base_: link.yaml\nlr: 1\n")
    assert load_config(child).data == {"seed": 3, "lr": 1}


def test_dangling_symlink_is_not_found(tmp_path):
    (tmp_path / "gone.yaml").symlink_to(tmp_path / "missing.yaml")
    with pytest.raises(ConfigFileError, match="not found"):
        load_config(tmp_path / "gone.yaml")


def test_huge_file_is_refused_before_reading(tmp_path):
    path = tmp_path / "huge.yaml"
    with open(path, "wb") as f:  # sparse: costs no disk
        f.truncate(MAX_CONFIG_BYTES + 1)
    with pytest.raises(ConfigFileError, match=r"too large.*16 MiB.*huge\.yaml"):
        load_config(path)


def test_huge_base_file_is_refused(tmp_path, write):
    with open(tmp_path / "huge.yaml", "wb") as f:
        f.truncate(MAX_CONFIG_BYTES + 1)
    with pytest.raises(ConfigFileError, match="too large"):
        load_config(write("child.yaml", "_base_: huge.yaml\n"))


def test_directory_and_missing_file_messages_are_kept(tmp_path):
    (tmp_path / "dir.yaml").mkdir()
    with pytest.raises(ConfigFileError, match="got a directory"):
        load_config(tmp_path / "dir.yaml")
    with pytest.raises(ConfigFileError, match="config file not found"):
        load_config(tmp_path / "nope.yaml")


def test_safe_yaml_load_returns_the_unflattened_tree_and_the_data():
    node, data = safe_yaml_load("a: &a {x: 1}\nb:\n  <<: *a\n  y: 2\n", "t.yaml")
    assert data == {"a": {"x": 1}, "b": {"x": 1, "y": 2}}
    b_keys = [key.value for key, _ in node.value[1][1].value]
    assert b_keys == ["<<", "y"]  # line recording sees the file as written
    assert safe_yaml_load("", "t.yaml") == (None, None)
    assert isinstance(ConfigSyntaxError("x"), ConfigError)
