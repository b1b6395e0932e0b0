"""A run's signed copies of its plug-ins (issue 25, hole 4 and deliverable 5).

Every file of a copy is in the signed digest and only the verified source bytes run (a
planted ``.pyc`` never does); the signature covers the run it belongs to (a manifest and its
copies replayed into another folder, or borrowed through a link, load nothing); the signing
key is refused when others may read it, when another user owns it, and when it is a link to
nothing — before any run folder is made.

The plug-in package used here touches a marker file whenever it is imported: "the code did
not run" is "the marker is absent". Refusals on the command line are exit 2 and one line.
"""

from __future__ import annotations

import hashlib
import hmac
import json
import os
import py_compile
import shutil
import sys
from pathlib import Path

import pytest
import yaml

from modforge.cli.main import main
from modforge.core.errors import PluginError
from modforge.experiment.run_plugins import KEY_FILE, SigningKeyError, load_stored_plugins, snapshot_plugins

pytestmark = pytest.mark.hostile

CONFIG = Path(__file__).resolve().parents[1] / "configs" / "digits.yaml"
PACKAGE = "mf_copies_pkg"
PARTS = """
import pathlib
import torch.nn as nn
import modforge as mf

pathlib.Path({marker!r}).touch()  # imported: the plug-in's code ran


@mf.register_head("copies_head")
def copies_head(in_dim: int, num_classes: int):
    return nn.Linear(in_dim, num_classes)
"""


def forget_package() -> None:
    """Unload the plug-in package, as a fresh process would start (its registrations are
    restored away by conftest after each test)."""
    for name in [n for n in sys.modules if n == PACKAGE or n.startswith(PACKAGE + ".")]:
        del sys.modules[name]


def one_line_refusal(code: int, err: str, *words: str) -> None:
    assert code == 2, err
    lines = err.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("error:"), err
    assert "Traceback" not in err and "unexpected" not in err, err
    for word in words:
        assert word in err, err


def run_cli(capsys, *args: str) -> tuple[int, str]:
    forget_package()
    code = main(list(args))
    return code, capsys.readouterr().err


@pytest.fixture(scope="module")
def signed(tmp_path_factory) -> dict[str, Path]:
    """A project whose config names a plug-in package beside it, and one run trained with it
    (signed with the tests' key), both shared by this module's tests — which never change
    the run itself (each attack works on a copy or restores what it touched)."""
    root = tmp_path_factory.mktemp("copies")
    marker = root / "IMPORTED"
    package = root / "project" / "configs" / PACKAGE
    package.mkdir(parents=True)
    (package / "__init__.py").write_text("from . import parts  # noqa: F401\n")
    (package / "parts.py").write_text(PARTS.format(marker=str(marker)))
    (package / "__pycache__").mkdir()  # a bytecode cache beside the user's source...
    (package / "__pycache__" / "stale.cpython-311.pyc").write_bytes(b"stale")
    config = yaml.safe_load(CONFIG.read_text())
    config["plugins"] = [PACKAGE]
    config["model"]["head"] = "copies_head"
    config["train"].update({"max_epochs": 1, "progress": "never", "callbacks": []})
    config["train"].pop("scheduler", None)
    config_file = root / "project" / "configs" / "c.yaml"
    config_file.write_text(yaml.safe_dump(config))
    run = root / "run"
    forget_package()
    assert main(["train", str(config_file), "--run-dir", str(run)]) == 0
    forget_package()
    assert not (run / "plugins" / PACKAGE / "__pycache__").exists()  # ...which is not copied
    return {"root": root, "run": run, "marker": marker, "config": config_file}


@pytest.fixture
def home_with(tmp_path, monkeypatch):
    """``home_with(mode)``: a MODFORGE_HOME holding a copy of the tests' key with ``mode``."""
    original = Path(os.environ["MODFORGE_HOME"]) / KEY_FILE

    def _home(mode: int) -> Path:
        home = tmp_path / "home"
        home.mkdir(mode=0o700)
        key = home / KEY_FILE
        key.write_bytes(original.read_bytes())
        key.chmod(mode)
        monkeypatch.setenv("MODFORGE_HOME", str(home))
        return key

    return _home


def foreign_copy(signed: dict[str, Path], tmp_path: Path) -> Path:
    """Someone else's run folder: here, a byte-identical copy of the user's signed run."""
    run = tmp_path / "foreign-run"
    shutil.copytree(signed["run"], run, symlinks=True)
    signed["marker"].unlink(missing_ok=True)
    return run


def tree(folder: Path) -> dict[str, bytes]:
    """Every file below ``folder`` and its bytes."""
    return {p.relative_to(folder).as_posix(): p.read_bytes() for p in folder.rglob("*") if p.is_file()}


def plant_pyc(source: Path, marker: Path) -> Path:
    """An unchecked-hash ``.pyc`` for ``source`` whose code touches ``marker`` (Python's own
    file loader runs such a cache without looking at the source)."""
    evil = source.parent / f".{source.stem}-evil.py"
    evil.write_text(f"import pathlib\npathlib.Path({str(marker)!r}).touch()\n")
    import importlib.util

    cache = Path(importlib.util.cache_from_source(str(source)))
    py_compile.compile(str(evil), cfile=str(cache), dfile=str(source),
                       invalidation_mode=py_compile.PycInvalidationMode.UNCHECKED_HASH)  # fmt: skip
    evil.unlink()
    return cache


# --------------------------------------------------------------------- the user's own run still works
def test_the_users_own_run_loads_its_copies_from_the_verified_bytes_and_writes_no_cache(signed, capsys):
    signed["marker"].unlink(missing_ok=True)
    code, err = run_cli(capsys, "test", str(signed["run"]))
    assert code == 0, err
    assert signed["marker"].exists()  # the copy did run: the control for every "did not run" below
    assert sys.modules[PACKAGE].__file__ == str(signed["run"].resolve() / "plugins" / PACKAGE / "__init__.py")
    assert not list((signed["run"] / "plugins").rglob("__pycache__"))  # nothing written into the run folder
    forget_package()


# --------------------------------------------------------------------- hole 4: a planted .pyc
def test_a_planted_pyc_is_a_change_to_the_signed_copy_and_never_runs(signed, capsys, tmp_path):
    """Planted in the user's own run (a shared folder others can write to): the digest covers it."""
    marker = tmp_path / "PYC-RAN"
    signed["marker"].unlink(missing_ok=True)
    real_copy = signed["run"] / "plugins" / PACKAGE
    caches = [plant_pyc(real_copy / "__init__.py", marker), plant_pyc(real_copy / "parts.py", marker)]
    try:
        for route in (("test", str(signed["run"])), ("train", "--resume", str(signed["run"]), "train.max_epochs=2")):
            code, err = run_cli(capsys, *route)
            one_line_refusal(code, err, "changed since training", "not loaded")
            assert not marker.exists() and not signed["marker"].exists()
    finally:
        shutil.rmtree(real_copy / "__pycache__")
    assert not any(c.exists() for c in caches)


def test_only_the_verified_source_runs_a_cache_or_unverified_module_beside_it_never(tmp_path):
    """Even when a signed copy holds caches (they are in its digest), the package runs from the
    verified ``.py`` bytes: no cache is read, none written, and a name with no verified
    ``.py`` is no module — while Python's own loader would run the same planted cache."""
    from modforge.core.plugins import load_verified_copy

    marker = tmp_path / "PYC-RAN"
    copy = tmp_path / "run" / "plugins" / "mf_copies_verified"
    copy.mkdir(parents=True)
    (copy / "__init__.py").write_text("VALUE = 'source'\nfrom . import parts  # noqa: F401\n")
    (copy / "parts.py").write_text("PARTS = 'source'\n")
    plant_pyc(copy / "__init__.py", marker)
    plant_pyc(copy / "parts.py", marker)
    plant_pyc(copy / "sneaky.py", marker)  # a cache with no source: importable by Python's own finders
    control = tmp_path / "control" / "mf_copies_control"
    shutil.copytree(copy, control)
    control_marker = tmp_path / "CONTROL-RAN"
    plant_pyc(control / "__init__.py", control_marker)
    import importlib.util

    spec = importlib.util.spec_from_file_location("mf_copies_control", control / "__init__.py",
                                                  submodule_search_locations=[str(control)])  # fmt: skip
    spec.loader.exec_module(importlib.util.module_from_spec(spec))
    assert control_marker.exists()  # the planted cache is live for Python's own file loader

    files = {p.relative_to(copy).as_posix(): p.read_bytes() for p in copy.rglob("*") if p.is_file()}
    before = sorted(p.relative_to(copy).as_posix() for p in copy.rglob("*"))
    try:
        record = load_verified_copy("mf_copies_verified", copy, "a test", files)
        assert record.module.VALUE == "source" and sys.modules["mf_copies_verified.parts"].PARTS == "source"
        with pytest.raises(ModuleNotFoundError):
            import mf_copies_verified.sneaky  # noqa: F401
        assert not marker.exists()
        assert sorted(p.relative_to(copy).as_posix() for p in copy.rglob("*")) == before  # no cache written
    finally:
        for name in [n for n in sys.modules if n.startswith(("mf_copies_verified", "mf_copies_control"))]:
            del sys.modules[name]


def test_every_file_of_a_package_is_copied_and_signed_but_caches(tmp_path):
    """The digest covers every file of the copy (a data file too); caches are not copied."""
    from modforge.core.plugins import load_plugin

    package = tmp_path / "src" / "mf_copies_digest"
    (package / "sub").mkdir(parents=True)
    (package / "__init__.py").write_text("")
    (package / "sub" / "table.csv").write_text("a,b\n")
    (package / "__pycache__").mkdir()
    (package / "__pycache__" / "x.cpython-311.pyc").write_bytes(b"junk")
    try:
        load_plugin(str(package))
        run = tmp_path / "run"
        run.mkdir()
        (entry, record), = snapshot_plugins([str(package)], run).items()
        copied = sorted(p.relative_to(run / "plugins" / record["copy"]).as_posix()
                        for p in (run / "plugins" / record["copy"]).rglob("*") if p.is_file())  # fmt: skip
        assert copied == ["__init__.py", "sub/table.csv"]
        (run / "plugins" / record["copy"] / "sub" / "table.csv").write_text("a,b\n1,2\n")  # a non-.py change
        sys.modules.pop("mf_copies_digest", None)
        with pytest.raises(PluginError, match="changed since training"):
            load_stored_plugins([entry], run_dir=run, what="the run's config")
    finally:
        sys.modules.pop("mf_copies_digest", None)


# --------------------------------------------------------------------- the run's identity
def test_a_signed_manifest_and_its_copies_replayed_into_another_run_load_nothing(signed, capsys, tmp_path):
    run = foreign_copy(signed, tmp_path)
    before = tree(run)
    for route in (("test", str(run)), ("train", "--resume", str(run), "train.max_epochs=2")):
        code, err = run_cli(capsys, *route)
        one_line_refusal(code, err, "was signed for the run folder", "not loaded", "--plugins")
        assert not signed["marker"].exists()
    assert tree(run) == before  # nothing written into the foreign run either


def test_a_manifest_signed_the_old_way_over_the_entries_only_is_refused(signed, capsys, tmp_path):
    run = foreign_copy(signed, tmp_path)
    manifest = json.loads((run / "plugins" / "manifest.json").read_text())
    key = (Path(os.environ["MODFORGE_HOME"]) / KEY_FILE).read_bytes()
    entries = manifest["entries"]
    old = {"entries": entries, "hmac": hmac.new(key, json.dumps(entries, sort_keys=True).encode(),
                                                hashlib.sha256).hexdigest()}  # fmt: skip
    (run / "plugins" / "manifest.json").write_text(json.dumps(old))
    code, err = run_cli(capsys, "test", str(run))
    one_line_refusal(code, err, "older modforge", "not loaded")
    assert not signed["marker"].exists()


def test_a_symlinked_plugins_folder_does_not_borrow_the_users_signed_copies(signed, capsys, tmp_path):
    run = foreign_copy(signed, tmp_path)
    shutil.rmtree(run / "plugins")
    (run / "plugins").symlink_to(signed["run"] / "plugins")
    code, err = run_cli(capsys, "test", str(run))
    one_line_refusal(code, err)
    assert not signed["marker"].exists()
    forget_package()  # below the command's own folder check: the copies' reader refuses the link itself
    with pytest.raises(PluginError, match="plugins is a symbolic link"):
        load_stored_plugins([PACKAGE], run_dir=run, what="a stranger's checkpoint")
    assert not signed["marker"].exists()


def test_links_inside_the_copy_folder_are_never_followed(signed, tmp_path):
    """In the user's own run, a manifest or copy file replaced by a link — even to the very
    same bytes — is refused: the copies are read without following links."""
    plugins = signed["run"] / "plugins"
    signed["marker"].unlink(missing_ok=True)
    for name in ("manifest.json", f"{PACKAGE}/parts.py"):
        original = plugins / name
        saved = tmp_path / Path(name).name
        shutil.move(original, saved)
        original.symlink_to(saved)
        forget_package()
        try:
            with pytest.raises(PluginError, match="is a symbolic link"):
                load_stored_plugins([PACKAGE], run_dir=signed["run"], what="the run's config")
        finally:
            original.unlink()
            shutil.move(saved, original)
        assert not signed["marker"].exists()


def test_a_malformed_or_hostile_manifest_is_refused_in_one_line_and_runs_nothing(signed, tmp_path):
    """Garbage (deeply nested JSON, a non-ASCII signature) is "not signed by you", never an
    unexpected error; and even a manifest signed with the user's key cannot name a copy
    outside the run's plug-in folder."""
    from modforge.experiment.run_plugins import FORMAT, _signature

    run = signed["run"]
    manifest_file = run / "plugins" / "manifest.json"
    saved = manifest_file.read_bytes()
    outside = tmp_path / "evil.py"
    outside.write_text(f"import pathlib\npathlib.Path({str(signed['marker'])!r}).touch()\n")
    sha = hashlib.sha256(outside.read_bytes()).hexdigest()
    key = (Path(os.environ["MODFORGE_HOME"]) / KEY_FILE).read_bytes()
    identity = {"format": FORMAT, "run": "0" * 32, "folder": str(run.resolve())}
    hostile = [("[" * 100_000 + "]" * 100_000, "cannot be read as a manifest"),
               (json.dumps({**identity, "entries": {}, "hmac": "\u00e9" * 64}), "not signed by you")]  # fmt: skip
    for copy in (os.path.relpath(outside, run / "plugins"), str(outside), "..", "manifest.json"):
        entries = {PACKAGE: {"copy": copy, "sha256": sha}}
        hostile.append((json.dumps({**identity, "entries": entries, "hmac": _signature(key, identity, entries)}),
                        "malformed"))  # fmt: skip
    signed["marker"].unlink(missing_ok=True)
    try:
        for text, words in hostile:
            manifest_file.write_text(text)
            forget_package()
            with pytest.raises(PluginError, match=words):
                load_stored_plugins([PACKAGE], run_dir=run, what="the run's config")
            assert not signed["marker"].exists()
    finally:
        manifest_file.write_bytes(saved)


# --------------------------------------------------------------------- the signing key
def test_a_key_others_may_read_is_refused_like_ssh_before_anything_is_made(signed, capsys, tmp_path, home_with):
    key = home_with(0o644)
    new_run = tmp_path / "new-run"
    code, err = run_cli(capsys, "train", str(signed["config"]), "--run-dir", str(new_run))
    one_line_refusal(code, err, f"permissions 0644 for {key} are too open", "chmod 600")
    assert not new_run.exists()
    signed["marker"].unlink(missing_ok=True)
    code, err = run_cli(capsys, "test", str(signed["run"]))
    one_line_refusal(code, err, "too open")
    assert not signed["marker"].exists()
    key.chmod(0o600)  # the same key, private again: the user's run loads its copies
    code, err = run_cli(capsys, "test", str(signed["run"]))
    assert code == 0, err
    forget_package()


def test_a_key_owned_by_another_user_is_refused(signed, tmp_path, home_with, monkeypatch):
    key = home_with(0o600)
    if os.getuid() == 0:
        os.chown(key, 65534, -1)
    else:
        real = os.getuid()
        monkeypatch.setattr(os, "getuid", lambda: real + 1)
    signed["marker"].unlink(missing_ok=True)
    forget_package()
    with pytest.raises(SigningKeyError, match="owned by another user"):
        load_stored_plugins([PACKAGE], run_dir=signed["run"], what="the run's config")
    assert not signed["marker"].exists()


def test_a_dangling_or_missing_key_is_one_error_before_any_run_folder_is_made(signed, capsys, tmp_path, monkeypatch):
    home = tmp_path / "home"
    home.mkdir(mode=0o700)
    (home / KEY_FILE).symlink_to(tmp_path / "gone.key")
    monkeypatch.setenv("MODFORGE_HOME", str(home))
    new_run = tmp_path / "new-run"
    code, err = run_cli(capsys, "train", str(signed["config"]), "--run-dir", str(new_run))
    one_line_refusal(code, err, "symbolic link", "does not exist")
    assert not new_run.exists() and not (tmp_path / "gone.key").exists()
    code, err = run_cli(capsys, "test", str(signed["config"]), "--run-dir", str(new_run))
    one_line_refusal(code, err, "symbolic link")
    assert not new_run.exists()
    monkeypatch.setenv("MODFORGE_HOME", str(tmp_path / "no-such-home"))
    code, err = run_cli(capsys, "train", str(signed["config"]), "--run-dir", str(new_run))
    one_line_refusal(code, err, "MODFORGE_HOME", "not an existing folder")
    assert not new_run.exists() and not (tmp_path / "no-such-home").exists()
