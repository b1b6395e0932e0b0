"""What modforge trusts: a config file, a checkpoint's stored config and an artifact's metadata
never make it run code the user did not name. Every hostile route carries a payload that would
create a marker file; the marker must never appear, and each refusal is exit 2 with one line."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import torch
import yaml

from modforge.cli.main import main
from train_processes import run_warm

pytestmark = pytest.mark.hostile

CONFIG = Path(__file__).resolve().parents[1] / "configs" / "digits.yaml"


def evil_file(path: Path, marker: Path) -> Path:
    """A .py file whose import creates ``marker`` (and that registers nothing)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(f"import pathlib\npathlib.Path({str(marker)!r}).write_text('ran')\n")
    return path


def refused(result, marker: Path, *words: str) -> None:
    assert result.code == 2, result
    lines = result.err.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("error:"), result.err
    assert "Traceback" not in result.err
    for word in words:
        assert word in result.err, result.err
    assert not marker.exists(), "the payload ran"


def system_payload(marker: Path) -> dict:
    return {"plugins": ["os"], "backbone": {"type": "os:system", "args": {"command": f"touch {marker}"}}}


def payloads(marker: Path, elsewhere: Path) -> dict[str, dict]:
    """Hostile plug-in lists and types, by name."""
    evil = evil_file(elsewhere / "evil.py", marker)
    return {
        "os_system": system_payload(marker),
        "subprocess_call": {"plugins": ["subprocess"],
                            "backbone": {"type": "subprocess:call", "args": {"args": ["touch", str(marker)]}}},
        "absolute_file": {"plugins": [str(evil)], "backbone": "mlp"},
        "builtins_exec": {"plugins": ["builtins"],
                          "backbone": {"type": "builtins:exec", "args": {"source": f"open({str(marker)!r}, 'w')"}}},
    }  # fmt: skip


def hostile_config(config: dict, payload: dict) -> dict:
    config = json.loads(json.dumps(config))
    config["plugins"] = payload["plugins"]
    config.setdefault("model", {})["backbone"] = payload["backbone"]
    return config


# --------------------------------------------------------------- config files
@pytest.mark.parametrize("name", ["os_system", "subprocess_call", "absolute_file", "builtins_exec"])
@pytest.mark.parametrize("command", ["config", "train"])
def test_a_config_file_cannot_import_or_call_what_the_user_did_not_name(cli, tmp_path, name, command):
    marker = tmp_path / "MARKER"
    payload = payloads(marker, tmp_path / "elsewhere")[name]
    config = hostile_config(yaml.safe_load(CONFIG.read_text()), payload)
    path = tmp_path / "configs" / "hostile.yaml"
    path.parent.mkdir()
    path.write_text(yaml.safe_dump(config))
    refused(cli(command, str(path), "train.max_epochs=1"), marker, "plug-in")
    assert not any(m.startswith("modforge_plugin_evil") for m in sys.modules)


def test_a_relative_path_out_of_the_config_folder_is_refused_until_the_user_names_the_folder(cli, write, tmp_path):
    marker = tmp_path / "MARKER"
    evil_file(tmp_path / "evil.py", marker)
    write("configs/c.yaml", "plugins: [../evil.py]\nmodel: {backbone: mlp}\n")
    refused(cli("config", "configs/c.yaml"), marker, "does not lie beside the config", "--plugins")
    assert cli("config", "configs/c.yaml", "--plugins", str(tmp_path)).code == 0  # the user vouches for the folder
    assert marker.exists()  # now it was the user's choice


def test_an_installed_module_that_is_no_plugin_is_refused_by_name(cli, write, tmp_path, monkeypatch):
    marker = tmp_path / "MARKER"
    evil_file(tmp_path / "site" / "mf_test_installed.py", marker)
    monkeypatch.syspath_prepend(str(tmp_path / "site"))
    write("configs/c.yaml", "plugins: [mf_test_installed]\nmodel: {backbone: mlp}\n")
    refused(cli("config", "configs/c.yaml"), marker, "mf_test_installed", "entry point")
    assert "mf_test_installed" not in sys.modules
    assert cli("config", "configs/c.yaml", "--plugins", "mf_test_installed").code == 0  # named by the user


def test_a_type_may_not_reach_an_object_a_plugin_imported_from_elsewhere(cli, write, tmp_path):
    marker = tmp_path / "MARKER"
    write("configs/parts.py", "from os import system\nfrom subprocess import call\n")
    for kind, args in (("system", {"command": f"touch {marker}"}), ("call", {"args": ["touch", str(marker)]})):
        config = {"plugins": ["parts.py"], "model": {"backbone": {"type": f"parts.py:{kind}", "args": args}}}
        write("configs/c.yaml", yaml.safe_dump(config))
        refused(cli("config", "configs/c.yaml"), marker)


def test_a_type_path_to_a_class_that_is_no_module_is_refused_unbuilt(cli, write, tmp_path):
    marker = tmp_path / "MARKER"
    write("configs/parts.py", f"import os\nclass Runner:\n    def __init__(self, in_dim: int, command: str = 'touch {marker}'):\n"
          "        os.system(command)\n")  # fmt: skip
    write("configs/c.yaml", "plugins: [parts.py]\nmodel: {backbone: {type: 'parts.py:Runner'}}\n")
    refused(cli("config", "configs/c.yaml"), marker, "is a class but not a Module")


def test_plugins_beside_the_config_files_and_packages_are_imported(cli, write):
    write("configs/head.py", "import modforge as mf\nimport torch.nn as nn\n@mf.register_head('beside_head')\n"
          "def beside_head(in_dim: int, num_classes: int):\n    return nn.Linear(in_dim, num_classes)\n")  # fmt: skip
    write("configs/mf_test_beside_pkg/__init__.py", "")
    write("configs/mf_test_beside_pkg/parts.py", "import torch.nn as nn\nclass Net(nn.Module):\n"
          "    def __init__(self, in_dim: int, width: int = 3):\n        super().__init__()\n")  # fmt: skip
    write("configs/c.yaml", "plugins: [head.py, mf_test_beside_pkg]\n"
          "model: {backbone: {type: 'mf_test_beside_pkg.parts:Net', args: {width: 5}}, head: beside_head}\n")
    result = cli("config", "configs/c.yaml")
    assert result.code == 0, result.err
    assert yaml.safe_load(result.out)["model"]["backbone"]["args"] == {"width": 5}


# --------------------------------------------------------------- stored configs
@pytest.fixture(scope="module")
def clean_run(tmp_path_factory) -> Path:
    folder = tmp_path_factory.mktemp("trust") / "run"
    assert main(["train", str(CONFIG), "train.max_epochs=2", "train.progress=never", "--run-dir", str(folder)]) == 0
    return folder


def poisoned_run(clean_run: Path, tmp_path: Path, payload: dict) -> Path:
    """A copy of a trained run whose stored configs (checkpoints and config.yaml) carry ``payload``."""
    run = tmp_path / "shared-run"
    shutil.copytree(clean_run, run)
    for checkpoint in (run / "checkpoints").glob("*.pt"):
        if checkpoint.is_symlink():
            continue
        state = torch.load(checkpoint, weights_only=True)
        state["config"] = hostile_config(state["config"], payload)
        torch.save(state, checkpoint)
    config = yaml.safe_load((run / "config.yaml").read_text())
    (run / "config.yaml").write_text(yaml.safe_dump(hostile_config(config, payload)))
    return run


@pytest.mark.parametrize("name", ["os_system", "absolute_file"])
def test_a_stored_config_never_runs_code_on_any_command(cli, clean_run, tmp_path, name):
    marker = tmp_path / "MARKER"
    run = poisoned_run(clean_run, tmp_path, payloads(marker, tmp_path / "elsewhere")[name])
    lone = tmp_path / "lone.pt"
    shutil.copy(run / "checkpoints" / "last.pt", lone)
    routes = [
        ("test", str(run)),
        ("test", str(run), "--checkpoint", "last"),
        ("test", str(run / "checkpoints" / "best.pt")),
        ("test", str(lone)),
        ("train", "--resume", str(run)),
        ("train", "--resume", str(lone), "--run-dir", str(tmp_path / "resumed")),
        ("export", str(run), "--engine", "onnx", "--out", str(tmp_path / "x.onnx")),
    ]
    for route in routes:
        refused(cli(*route), marker, "not loaded", "--plugins")
    assert not (tmp_path / "x.onnx").exists()


def test_an_artifacts_metadata_never_runs_code(cli, clean_run, tmp_path):
    from modforge.engines.artifact import read_torch_artifact, write_torch_artifact

    marker = tmp_path / "MARKER"
    artifact = tmp_path / "model.pt"
    assert cli("export", str(clean_run), "--engine", "eager", "--out", str(artifact)).code == 0
    payload, metadata = read_torch_artifact(artifact)
    evil = evil_file(tmp_path / "elsewhere" / "evil.py", marker)
    attacks = [
        {**metadata, "model": {"plugins": ["os"], "model": {"backbone": system_payload(marker)["backbone"]}}},
        {**metadata, "config": {**metadata["config"], "plugins": [str(evil)]}},
        {**metadata, "model": {**metadata["model"], "backbone": system_payload(marker)["backbone"]},
         "config": {**metadata["config"], "plugins": ["os"]}},
    ]  # fmt: skip
    sample = tmp_path / "x.npy"
    import numpy as np

    np.save(sample, np.zeros((1, 1, 8, 8), dtype="float32"))
    for attack in attacks:
        write_torch_artifact(payload, artifact, attack)
        refused(cli("predict", str(artifact), str(sample)), marker, "plug-in")


# ---------------------------------------------- the run's own copies of its plug-ins
HEAD = """
import torch.nn as nn
import modforge as mf


@mf.register_head("trust_head")
def trust_head(in_dim: int, num_classes: int):
    return nn.Linear(in_dim, num_classes)
"""


def modforge(*args: str, cwd: Path) -> subprocess.CompletedProcess:
    """A process of its own: nothing loaded but what the command itself loads — no plug-in, no copy of one.
    A warm child (:func:`train_processes.run_warm`): forked from a server that imported torch and modforge's
    built-in parts only, so without a fresh interpreter's seconds of imports."""
    return run_warm(*args, cwd=cwd, timeout=600)


def train_project(project: Path, monkeypatch, capsys, config: dict) -> Path:
    """``config`` for one quiet epoch on one thread (two workers share the cores) and no scheduler, written
    to ``project/configs/c.yaml`` and trained into ``project/run`` by ``modforge train`` in this process
    from ``project`` (the run the checks below read, made without a child's seconds of imports; what a
    run then loads is checked in fresh processes). Returns the run folder."""
    config["train"].update({"max_epochs": 1, "progress": "never", "num_threads": 1})
    config["train"].pop("scheduler", None)
    (project / "configs" / "c.yaml").write_text(yaml.safe_dump(config))
    monkeypatch.chdir(project)
    code = main(["train", "configs/c.yaml", "--run-dir", str(project / "run")])
    assert code == 0, capsys.readouterr().err
    return project / "run"


@pytest.mark.slow
def test_a_run_imports_its_own_copy_of_its_plugins_only_while_the_copy_is_unchanged(tmp_path, monkeypatch, capsys):
    project = tmp_path / "project"
    (project / "configs").mkdir(parents=True)
    (project / "configs" / "head.py").write_text(HEAD)
    config = yaml.safe_load(CONFIG.read_text())
    config.update({"plugins": ["head.py"]})
    config["model"]["head"] = "trust_head"
    run = train_project(project, monkeypatch, capsys, config)
    manifest = json.loads((run / "plugins" / "manifest.json").read_text())
    (entry, record), = manifest["entries"].items()
    assert len(manifest["hmac"]) == 64  # signed with this user's key
    assert entry.endswith("head.py") and (run / "plugins" / record["copy"]).read_text() == HEAD
    (project / "configs" / "head.py").unlink()  # the original is gone: the run's copy is what it trained with
    tested = modforge("test", str(run), cwd=project)
    assert tested.returncode == 0, tested.stderr
    copy = run / "plugins" / record["copy"]
    copy.write_text(HEAD + "\nimport pathlib\npathlib.Path('MARKER').write_text('ran')\n")
    tampered = modforge("test", str(run), cwd=project)
    assert tampered.returncode == 2 and "changed since training" in tampered.stderr, tampered.stderr
    assert "not loaded" in tampered.stderr and not (project / "MARKER").exists()
    (project / "mine.py").write_text(HEAD)
    given = modforge("test", str(run), "--plugins", "mine.py", cwd=project)  # the user names the code: fine
    assert given.returncode == 0 and "building with the plug-ins you gave instead (" in given.stderr, given.stderr
    assert not (project / "MARKER").exists()


# ------------------------------------------------------- found by the security review
def test_a_base_file_elsewhere_vouches_for_no_plugin(cli, write, tmp_path):
    marker = tmp_path / "MARKER"
    evil_file(tmp_path / "planted" / "evil.py", marker)
    write("planted/base.yaml", "plugins: [evil.py]\n")
    write("mine/cfg.yaml", f"_base_: {tmp_path / 'planted' / 'base.yaml'}\nmodel: {{backbone: mlp}}\n")
    refused(cli("config", "mine/cfg.yaml"), marker, "does not lie beside the config")
    write("mine/shared/base.yaml", "plugins: [parts.py]\n")  # a base inside the config's own tree still vouches
    write("mine/shared/parts.py", "VALUE = 1\n")
    write("mine/ok.yaml", "_base_: shared/base.yaml\nmodel: {backbone: mlp}\n")
    assert cli("config", "mine/ok.yaml").code == 0


def test_another_users_run_folder_is_data_its_copies_are_not_imported(cli, tmp_path, monkeypatch):
    """A run folder carries its own signed manifest; one signed with another key (or not
    signed, or edited) vouches for nothing: the copies are not imported."""
    marker = tmp_path / "MARKER"
    run = tmp_path / "X"
    (run / "checkpoints").mkdir(parents=True)
    (run / "plugins").mkdir()
    evil = evil_file(run / "plugins" / "evil.py", marker)
    import hashlib

    entries = {"evil": {"copy": "evil.py", "sha256": hashlib.sha256(evil.read_bytes()).hexdigest()}}
    for signature in (None, "0" * 64):
        (run / "plugins" / "manifest.json").write_text(json.dumps({"entries": entries, "hmac": signature}))
        from modforge.experiment.run_plugins import load_stored_plugins

        with pytest.raises(Exception, match="not loaded"):
            load_stored_plugins(["evil"], run_dir=run, what="a stranger's checkpoint")
        assert not marker.exists()


def test_a_submodule_is_never_imported_through_a_type_path_into_an_installed_package(cli, tmp_path):
    marker = tmp_path / "MARKER"
    site = tmp_path / "site" / "mf_test_goodpkg"
    site.mkdir(parents=True)
    (site / "__init__.py").write_text("")
    evil_file(site / "__main__.py", marker)
    evil_file(site / "tool.py", marker)
    sys.path.insert(0, str(tmp_path / "site"))
    try:
        from modforge.core.errors import UsageError
        from modforge.core.plugins import import_object, load_plugin

        load_plugin("mf_test_goodpkg")  # the user named the package, not its submodules
        for name in ("mf_test_goodpkg.__main__:x", "mf_test_goodpkg.tool:x"):
            with pytest.raises(UsageError):
                import_object(name, kind="backbone", allowed_modules=["mf_test_goodpkg"])
        assert not marker.exists() and "mf_test_goodpkg.tool" not in sys.modules
    finally:
        sys.path.remove(str(tmp_path / "site"))


def test_a_file_beside_a_config_never_shadows_an_installed_module_or_leads_out_by_a_symlink(cli, write, tmp_path):
    marker = tmp_path / "MARKER"
    evil_file(tmp_path / "configs" / "yaml.py", marker)
    evil_file(tmp_path / "elsewhere" / "evil.py", marker)
    (tmp_path / "configs" / "lnk.py").symlink_to(tmp_path / "elsewhere" / "evil.py")
    for name in ("yaml", "lnk"):
        write("configs/c.yaml", f"plugins: [{name}]\nmodel: {{backbone: mlp}}\n")
        refused(cli("config", "configs/c.yaml"), marker, name)


def test_diamond_inheritance_is_read_once_per_file(write):
    from modforge.core.config import load_config

    for i in range(30):
        write(f"b{i}.yaml", f"_base_: [b{i + 1}.yaml, b{i + 1}.yaml]\nk{i}: {i}\n")
    write("b30.yaml", "seed: 1\n")
    cfg = load_config(write("top.yaml", "_base_: b0.yaml\n"))  # 2**30 paths through the diamond, 31 files
    assert cfg.data["seed"] == 1 and cfg.data["k29"] == 29


def test_malformed_stored_configs_and_metadata_are_one_clear_error(cli, clean_run, tmp_path):
    from modforge.engines.artifact import read_torch_artifact, write_torch_artifact

    marker = tmp_path / "MARKER"
    for change in ({"plugins": 5}, {"data": "x"}, {"plugins": ["\x1b[31mRED\x1b[0m"]}):
        run = tmp_path / f"run{len(list(tmp_path.iterdir()))}"
        shutil.copytree(clean_run, run)
        for checkpoint in (run / "checkpoints").glob("*.pt"):
            state = torch.load(checkpoint, weights_only=True)
            state["config"].update(change)
            torch.save(state, checkpoint)
        result = cli("test", str(run))
        refused(result, marker)
        assert "\x1b" not in result.err
    artifact = tmp_path / "model.pt"
    assert cli("export", str(clean_run), "--engine", "eager", "--out", str(artifact)).code == 0
    payload, metadata = read_torch_artifact(artifact)
    import numpy as np

    np.save(tmp_path / "x.npy", np.zeros((1, 1, 8, 8), dtype="float32"))
    for change in ({"build": "x"}, {"build": {"base_dir": "/tmp"}}, {"input": "x"}):
        write_torch_artifact(payload, artifact, {**metadata, **change})
        refused(cli("predict", str(artifact), str(tmp_path / "x.npy")), marker)


PACKAGE_PARTS = """
import torch.nn as nn
import modforge as mf


@mf.register_head("pkg_head")
def pkg_head(in_dim: int, num_classes: int):
    return nn.Linear(in_dim, num_classes)


class Tiny(nn.Module):
    def __init__(self, in_dim: int, width: int = 4):
        super().__init__()
        self.fc = nn.Linear(in_dim, width)

    def forward(self, x):
        return self.fc(x.flatten(1))
"""


@pytest.mark.slow
def test_runs_with_packages_file_type_paths_and_the_users_own_plugins_test_and_resume(tmp_path, monkeypatch, capsys):
    project = tmp_path / "project"
    (project / "configs" / "mf_test_runpkg").mkdir(parents=True)
    (project / "configs" / "mf_test_runpkg" / "__init__.py").write_text("")
    (project / "configs" / "mf_test_runpkg" / "parts.py").write_text(PACKAGE_PARTS)
    (project / "configs" / "tiny.py").write_text(PACKAGE_PARTS.replace("pkg_head", "file_head"))
    config = yaml.safe_load(CONFIG.read_text())
    config["plugins"] = ["mf_test_runpkg", "mf_test_runpkg.parts", "tiny.py"]
    config["data"]["args"] = {"as_image": False}
    config["model"] = {"backbone": {"type": "tiny.py:Tiny", "args": {"width": 6}}, "head": "pkg_head",
                       "losses": ["cross_entropy"]}
    run = train_project(project, monkeypatch, capsys, config)
    manifest = json.loads((run / "plugins" / "manifest.json").read_text())["entries"]
    assert len({record["copy"] for record in manifest.values()}) == 2  # the package copied once, the file once
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    tested = modforge("test", str(run), cwd=elsewhere)  # the stored file type path is absolute
    assert tested.returncode == 0, tested.stderr
    resumed = modforge("train", "--resume", str(run), "train.max_epochs=2", cwd=elsewhere)
    assert resumed.returncode == 0, resumed.stderr
    given = modforge("test", str(run), "--plugins", str(project / "configs" / "tiny.py"),
                     str(project / "configs" / "mf_test_runpkg"), cwd=elsewhere)  # fmt: skip
    assert given.returncode == 0, given.stderr  # the user's own code: the run's copies stay unloaded
