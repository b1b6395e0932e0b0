"""The documentation site builds with ``--strict`` (no broken link, no missing reference), its
part reference lists exactly what the registries hold, every YAML block in it is valid YAML
(and every complete config in it validates), and the README — the door, at most 250 lines —
runs as written: its plug-in file and its tour commands."""

from __future__ import annotations

import importlib.util
import re
import shlex
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from modforge.cli.main import main
from modforge.core.config import load_config
from modforge.core.registries import REGISTRIES
from modforge.experiment import validate_config

ROOT = Path(__file__).resolve().parents[1]
README = ROOT / "README.md"
PAGES = sorted((ROOT / "docs").rglob("*.md"))
FENCE = re.compile(r"^```(\w*)\n(.*?)^```", re.S | re.M)


def _hooks():
    spec = importlib.util.spec_from_file_location("docs_reference_hook", ROOT / "docs" / "hooks" / "reference.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def _blocks(language: str) -> list[tuple[Path, str]]:
    return [(page, body) for page in [README, *PAGES] for lang, body in FENCE.findall(page.read_text())
            if lang == language]  # fmt: skip


@pytest.mark.slow
def test_the_site_builds_strictly_offline(tmp_path):
    pytest.importorskip("mkdocs")
    pytest.importorskip("material")
    done = subprocess.run([sys.executable, "-m", "mkdocs", "build", "--strict", "-d", str(tmp_path / "site")],
                          cwd=ROOT, capture_output=True, text=True, timeout=300,
                          env={"NO_MKDOCS_2_WARNING": "1", "PATH": "/usr/bin:/bin", "HOME": str(tmp_path)})  # fmt: skip
    assert done.returncode == 0, done.stderr[-3000:]
    for page in ("index.html", "reference/parts/index.html", "reference/cli/index.html",
                 "reference/api/index.html", "benchmarks/detection/index.html", "porting/mammoth/index.html"):  # fmt: skip
        assert (tmp_path / "site" / page).is_file(), page


def test_the_part_reference_lists_every_registered_part():
    pytest.importorskip("mkdocs")
    page = _hooks().parts_page()
    listed = set(re.findall(r"^### `([^`]+)` \{#([^}]+)\}", page, re.M))  # (name, anchor)
    shown = {name for name, _ in listed}
    expected = {(kind, name) for kind, registry in REGISTRIES.items() for name in registry.list()}
    assert {name for _, name in expected} <= shown
    assert len(listed) == len(expected)
    for kind in REGISTRIES:
        assert f"\n## {kind}\n" in page


def test_the_command_reference_shows_every_command():
    pytest.importorskip("mkdocs")
    from modforge.cli.main import COMMANDS

    page = _hooks().cli_page()
    for command in COMMANDS:
        assert f"## `modforge {command}`" in page and f"usage: modforge {command}" in page, command


def test_every_yaml_block_is_yaml_and_every_complete_config_validates(tmp_path):
    checked = 0
    for page, body in _blocks("yaml"):
        try:
            data = yaml.safe_load(body)
        except yaml.YAMLError as exc:
            pytest.fail(f"{page.relative_to(ROOT)}: a YAML block does not parse: {exc}")
        if isinstance(data, dict) and {"data", "model"} <= set(data) and "_base_" not in data and "plugins" not in data:
            validate_config(load_config(data))
            checked += 1
    assert checked >= 1  # the docs show a complete config, and it is checked (the guide's configs run in its own test)


def test_the_readme_is_the_door():
    text = README.read_text()
    assert text.count("\n") <= 250
    for must in ("make demo", "make test", "make docs", "## Dependencies", "docs/getting-started.md"):
        assert must in text, must


def test_the_readme_tour_runs_as_written(tmp_path, monkeypatch, capsys):
    """The tour's plug-in file, written as shown, and each of its commands (one epoch; ``<stamp>``
    is the run the tour's train command made)."""
    (python,) = [body for page, body in _blocks("python") if page == README]
    (tmp_path / "my_parts.py").write_text(python)
    (bash,) = [body for page, body in _blocks("bash") if page == README and "--plugins my_parts.py" in body]
    monkeypatch.chdir(tmp_path)
    lines = bash.replace("\\\n", " ").replace("configs/", f"{ROOT}/configs/").splitlines()
    commands = [shlex.split(part, comments=True) for line in lines for part in line.split(";")]
    commands = [argv for argv in commands if argv]
    assert len(commands) == 5 and all(argv[0] == "modforge" for argv in commands)
    for argv in commands:
        args = [a.replace("<stamp>", "tour") for a in argv[1:]]
        if args[0] == "train":
            args += ["--run-dir", "runs/digits/tour", "train.max_epochs=1"]
        assert main(args) == 0, (args, capsys.readouterr().err)
    assert (tmp_path / "runs/digits/tour/summary.json").is_file()


# Python blocks run as written, each in a fresh namespace (the porting guide's file blocks run in its own test)
PYTHON_BLOCKS = [(page, body) for page, body in _blocks("python") if page.parent.name != "porting"]


@pytest.mark.parametrize(("page", "body"), PYTHON_BLOCKS,
                         ids=[f"{p.relative_to(ROOT)}:{i}" for i, (p, _) in enumerate(PYTHON_BLOCKS)])  # fmt: skip
def test_every_python_block_runs_as_written(page, body, tmp_path, monkeypatch):
    from registry_state import registries_restored

    monkeypatch.chdir(tmp_path)
    with registries_restored():
        exec(compile(body, f"{page.relative_to(ROOT)} (a python block)", "exec"), {"__name__": "docs_example"})


def test_the_python_blocks_register_what_they_say(tmp_path, monkeypatch):
    """The examples define real parts: running the parts page's first block makes tiny_mlp and
    wide_mlp buildable, and the model-flow block's model returns logits of the promised shape."""
    import modforge as mf
    from registry_state import registries_restored

    pages = dict.fromkeys(p for p, _ in PYTHON_BLOCKS)
    parts = next(body for page, body in PYTHON_BLOCKS if page.name == "parts.md")
    flow = next(body for page, body in PYTHON_BLOCKS if page.name == "model-flow.md")
    assert pages
    with registries_restored():
        exec(parts, {"__name__": "docs_example"})
        net = mf.BACKBONES.build({"type": "wide_mlp", "args": {"width": 2}}, in_dim=5)
        assert net.out_dim == 256
        space: dict = {"__name__": "docs_example"}
        exec(flow, space)
        assert tuple(space["logits"].shape) == (4, 10) and len(space["layers"]) >= 3
