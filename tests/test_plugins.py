"""Plug-ins: .py files, modules, config 'plugins:' lists and the entry-point group."""

from __future__ import annotations

import sys

import pytest

import modforge as mf
from modforge.core import plugins as plugin_mod
from modforge.core.errors import PluginError

PART = """
import torch.nn as nn
import modforge as mf

@mf.register_backbone("{name}")
class Part(nn.Module):
    '''A plug-in part.'''
    def __init__(self, in_dim: int, width: int = 4):
        super().__init__()
"""


def test_file_plugin_registers_and_loading_twice_is_harmless(write):
    path = write("my_parts.py", PART.format(name="file_part"))
    module = mf.load_plugins([str(path)])[0]
    assert "file_part" in mf.BACKBONES
    assert mf.load_plugins([str(path)])[0] is module  # cached: no duplicate registration
    assert mf.BACKBONES.entry("file_part").origin.endswith("my_parts.py")


def test_module_plugin(write, tmp_path, monkeypatch):
    write("mf_test_mod_plugin.py", PART.format(name="module_part"))
    monkeypatch.syspath_prepend(str(tmp_path))
    mf.load_plugins(["mf_test_mod_plugin"])
    assert mf.BACKBONES.entry("module_part").module == "mf_test_mod_plugin"


def test_failing_plugins_name_the_plugin_and_the_cause(write, tmp_path):
    broken = write("broken.py", "import not_a_real_module_xyz\n")
    with pytest.raises(PluginError) as info:
        mf.load_plugins([str(broken)], origin="plugins: in x.yaml")
    msg = str(info.value)
    assert "plug-in '" in msg and "broken.py" in msg and "(from plugins: in x.yaml)" in msg
    assert "ModuleNotFoundError: No module named 'not_a_real_module_xyz'" in msg
    with pytest.raises(
        PluginError, match=r"plug-in 'no_such_plugin_mod' \(from --plugins\) failed to import: ModuleNotFoundError"
    ):
        mf.load_plugins(["no_such_plugin_mod"])
    with pytest.raises(PluginError, match=r"plug-in file 'missing.py' not found"):
        mf.load_plugins(["missing.py"], base_dir=tmp_path)
    raising = write("raising.py", "raise RuntimeError('boom')\n")
    with pytest.raises(PluginError, match="RuntimeError: boom"):
        mf.load_plugins([str(raising)])
    assert not any(name.startswith("modforge_plugin_raising") for name in sys.modules)


def test_plugin_that_registers_a_duplicate_name(write):
    first = write("first.py", PART.format(name="dup_part"))
    second = write("second.py", PART.format(name="dup_part"))
    mf.load_plugins([str(first)])
    with pytest.raises(
        PluginError, match=r"DuplicateComponentError: backbone 'dup_part' is already registered by .*first.py"
    ):
        mf.load_plugins([str(second)])


@pytest.fixture
def entry_point_dist(write, tmp_path, monkeypatch):
    """A fake installed distribution exposing a modforge.plugins entry point."""

    def make(body: str, target: str = "mf_test_ep_pkg") -> None:
        write(f"{target}/__init__.py", body)
        write("mf_test_ep_dist-0.1.dist-info/METADATA", "Metadata-Version: 2.1\nName: mf-test-ep-dist\nVersion: 0.1\n")
        write("mf_test_ep_dist-0.1.dist-info/entry_points.txt", f"[modforge.plugins]\ndemo = {target}\n")
        monkeypatch.syspath_prepend(str(tmp_path))

    yield make
    for name in [n for n in sys.modules if n.startswith("mf_test_ep_pkg")]:
        del sys.modules[name]


def test_entry_point_plugins_are_found(entry_point_dist):
    entry_point_dist(PART.format(name="ep_part"))
    assert "demo" in plugin_mod.load_entry_point_plugins(force=True)
    assert "ep_part" in mf.BACKBONES


def test_entry_point_failure_names_distribution_and_escape_hatch(entry_point_dist, monkeypatch):
    entry_point_dist("raise ImportError('needs libfoo')\n")
    with pytest.raises(PluginError) as info:
        plugin_mod.load_entry_point_plugins(force=True)
    msg = str(info.value)
    assert "entry point 'demo = mf_test_ep_pkg' of mf-test-ep-dist failed to load" in msg
    assert "needs libfoo" in msg and "MODFORGE_NO_ENTRY_POINTS=1" in msg
    monkeypatch.setenv("MODFORGE_NO_ENTRY_POINTS", "1")
    assert plugin_mod.load_entry_point_plugins(force=True) == []


def test_registries_load_entry_points_lazily(entry_point_dist, monkeypatch):
    entry_point_dist(PART.format(name="lazy_ep_part"))
    monkeypatch.setattr(plugin_mod, "_entry_points_loaded", False)
    monkeypatch.setattr(mf.BACKBONES, "_loaded", False)
    assert "lazy_ep_part" in mf.BACKBONES  # the first query loads them
