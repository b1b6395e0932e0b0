"""Generated hostile configs — as files and as stored configs — never import a module nobody
vouched for and never run a payload, whatever mix of plug-in names and import paths they hold."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest
import yaml
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import modforge as mf
from modforge.core.errors import UsageError
from modforge.engines.artifact import rebuild_model
from modforge.experiment import validate_config
from modforge.experiment.run_plugins import load_stored_plugins

pytestmark = pytest.mark.hostile

# modules whose import would be the attack (or a symptom of it); none is imported by modforge
NEVER_IMPORTED = ["this", "tabnanny", "pty", "mf_test_evil_installed", "mf_test_evil_pkg"]
STANDARD = ["os", "subprocess", "builtins", "importlib", "shutil", "runpy", "pickle", "ctypes", "code", *NEVER_IMPORTED[:3]]


@pytest.fixture(scope="module")
def arena(tmp_path_factory) -> dict[str, Path]:
    """Evil code in every place a config might point: outside the config's folder, an installed
    module that is no plug-in, a package on sys.path; and an empty folder for the configs."""
    root = tmp_path_factory.mktemp("arena")
    marker = root / "MARKER"
    payload = f"import pathlib\npathlib.Path({str(marker)!r}).write_text('ran')\n"
    (root / "outside").mkdir()
    (root / "outside" / "evil.py").write_text(payload)
    (root / "site" / "mf_test_evil_pkg").mkdir(parents=True)
    (root / "site" / "mf_test_evil_pkg" / "__init__.py").write_text(payload)
    (root / "site" / "mf_test_evil_installed.py").write_text(payload)
    (root / "configs").mkdir()
    return {"root": root, "marker": marker, "evil": root / "outside" / "evil.py", "site": root / "site",
            "configs": root / "configs"}  # fmt: skip


def plugin_names(arena: dict[str, Path]) -> st.SearchStrategy[str]:
    evil = arena["evil"]
    return st.sampled_from([*STANDARD, "mf_test_evil_installed", "mf_test_evil_pkg", str(evil), "../outside/evil.py",
                            str(evil.parent), "modforge.train.checkpoint", "numpy", "yaml"])  # fmt: skip


def import_paths(arena: dict[str, Path]) -> st.SearchStrategy[str]:
    modules = st.sampled_from([*STANDARD, "mf_test_evil_pkg", "mf_test_evil_installed", str(arena["evil"]),
                               "modforge.train.checkpoint", "numpy"])  # fmt: skip
    objects = st.sampled_from(["system", "call", "exec", "run_path", "rmtree", "import_module", "atomic_save", "load",
                               "Popen", "CDLL", "getoutput"])  # fmt: skip
    separator = st.sampled_from([":", "."])
    return st.builds(lambda m, s, o: f"{m}{s}{o}", modules, separator, objects)


def configs(arena: dict[str, Path]) -> st.SearchStrategy[dict]:
    marker = str(arena["marker"])
    args = st.sampled_from([{}, {"command": f"touch {marker}"}, {"args": ["touch", marker]},
                            {"source": f"open({marker!r}, 'w')"}, {"path": marker}])  # fmt: skip
    part = st.one_of(st.just("mlp"), st.builds(lambda t, a: {"type": t, "args": a}, import_paths(arena), args))
    slot = st.sampled_from(["backbone", "head", "neck"])
    return st.builds(
        lambda plugins, slot, part: {"plugins": plugins, "model": {"backbone": "mlp", slot: part}},
        st.lists(plugin_names(arena), max_size=3),
        slot,
        part,
    )


def attempt(build) -> None:
    try:
        build()
    except UsageError:
        pass  # refused: that is the point; any other exception is a bug the test reports


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(data=st.data())
def test_no_generated_config_imports_what_nobody_vouched_for(arena, monkeypatch, data):
    monkeypatch.syspath_prepend(str(arena["site"]))
    config = data.draw(configs(arena))
    before = set(sys.modules)
    path = arena["configs"] / "generated.yaml"
    path.write_text(yaml.safe_dump(config))

    def from_file():
        cfg = validate_config(mf.load_config(path))
        mf.build_model(cfg, in_dim=4, num_classes=3)

    def stored():
        entries = load_stored_plugins(config["plugins"], run_dir=arena["configs"], what="a stored config")
        mf.build_model({**config, "plugins": entries}, in_dim=4, num_classes=3)

    def artifact():
        rebuild_model({"model": config["model"], "config": config, "build": {"in_dim": 4, "num_classes": 3}})

    for route in (from_file, stored, artifact, lambda: mf.build_model(config, in_dim=4, num_classes=3)):
        attempt(route)
    assert not arena["marker"].exists(), f"payload ran for {config}"
    imported = set(sys.modules) - before
    assert not imported & set(NEVER_IMPORTED), (config, imported)
    assert not any(name.startswith("modforge_plugin_evil") for name in imported), (config, imported)
