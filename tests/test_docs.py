"""The documentation site builds with ``--strict`` (no broken link, no missing reference), and
the built HTML reads as rendered (no Markdown or anchor syntax left as text, every image there;
a few pages laid out in headless Chromium where one is installed: tests/rendered_site.py), its
part reference lists exactly what the registries hold, every YAML block in it is valid YAML
(and every complete config in it validates), and the README — the door, at most 250 lines —
runs as written: its plug-in file and its tour commands."""

from __future__ import annotations

import importlib.util
import os
import re
import shlex
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

import rendered_site
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


@pytest.fixture(scope="module")
def built_site(tmp_path_factory) -> Path:
    """The site, built once with ``--strict`` and offline (a bare PATH and HOME), for the tests that read it.

    Of this process's environment only what says how to share the cores goes along (the hook
    trains the demo for the getting-started curves): ``OMP_WAIT_POLICY`` (tests/conftest.py's
    PASSIVE — without it the build's two torch threads spin while the other test worker holds a
    core: measured 25 CPU-s instead of 6 for the hook's run) and xdist's worker count (the
    product's thread default divides the cores by it). Neither touches what the site shows."""
    pytest.importorskip("mkdocs")
    pytest.importorskip("material")
    home = tmp_path_factory.mktemp("site-build")
    sharing = {k: os.environ[k] for k in ("OMP_WAIT_POLICY", "PYTEST_XDIST_WORKER_COUNT") if k in os.environ}
    done = subprocess.run([sys.executable, "-m", "mkdocs", "build", "--strict", "-d", str(home / "site")],
                          cwd=ROOT, capture_output=True, text=True, timeout=300,
                          env={"NO_MKDOCS_2_WARNING": "1", "PATH": "/usr/bin:/bin", "HOME": str(home), **sharing})  # fmt: skip
    if done.returncode != 0:
        pytest.fail(f"mkdocs build --strict failed:\n{done.stderr[-3000:]}")
    return home / "site"


@pytest.mark.slow
def test_the_site_builds_strictly_offline(built_site):
    for page in ("index.html", "reference/parts/index.html", "reference/cli/index.html", "reference/config/index.html",
                 "reference/api/index.html", "benchmarks/detection/index.html", "porting/mammoth/index.html"):  # fmt: skip
        assert (built_site / page).is_file(), page
    assert (built_site / "stylesheets" / "reference.css").is_file()
    # the build's own code is not published (mkdocs.yml's exclude_docs)
    assert not [str(p.relative_to(built_site)) for p in built_site.rglob("*.py*")]


@pytest.mark.slow
def test_the_built_pages_show_no_leftover_syntax_and_every_image_is_there(built_site):
    """Every page as a reader sees it: no literal ``{#anchor}``/``{: attrs}``, ``**bold**``, code
    fence, ``[text](link)``, Markdown heading, template tag or placeholder in its prose (outside
    code), no ``\\|`` in its tables' code; every image and stylesheet it loads is in the site."""
    pages = rendered_site.pages(built_site)
    assert len(pages) >= 40
    parts = next(page for page in pages if page.path == built_site / "reference/parts/index.html")
    assert "Registered parts" in parts.text and len(parts.table_code) > 1000  # the reader did read the page
    problems = [
        f"{page.path.relative_to(built_site)}: {find}" for page in pages for find in rendered_site.leftovers(page)
    ]
    assert not problems, "\n".join(problems[:30])
    missing = {str(page.path.relative_to(built_site)): rendered_site.missing_files(built_site, page) for page in pages}
    assert not {page: refs for page, refs in missing.items() if refs}
    assert sum(len(page.images) for page in pages) >= 2  # the getting-started curves and the model-flow diagram


@pytest.mark.slow
def test_every_part_heading_has_its_anchor_in_the_built_page(built_site):
    """The parts page's ``{#kind-name}`` became each heading's id and its table-of-contents link."""
    page = (built_site / "reference/parts/index.html").read_text()
    for kind, registry in REGISTRIES.items():
        for name in registry.list():
            anchor = f"{kind}-{name.replace('_', '-')}"
            assert f'id="{anchor}"' in page and f'href="#{anchor}"' in page, anchor


BROWSER_PAGES = [("reference/parts/", 900), ("reference/config/", 900), ("getting-started/", 1280)]


@pytest.mark.slow
@pytest.mark.skipif(rendered_site.browser() is None, reason="no Chromium installed (Debian: apt-get install chromium)")
def test_pages_render_in_a_browser(built_site, tmp_path):
    """A few pages in headless Chromium, as a reader's browser lays them out: no name in a table
    broken mid-word (``with_energ y``), no anchor shown as text, every image loaded, the site's
    stylesheet applied; and the screenshot of them is a picture of each, not a blank frame."""
    import numpy as np
    from PIL import Image

    shot = tmp_path / "pages.png"
    report = rendered_site.render(rendered_site.browser(), built_site, BROWSER_PAGES, shot)
    for (page, _), seen in zip(BROWSER_PAGES, report, strict=True):
        assert seen["title"].endswith("- modforge") and seen["table_codes"] > 0, seen
        assert seen["broken_count"] == 0, (page, seen["broken"])
        assert not seen["literal_anchors"] and not seen["unloaded"], seen
        assert seen["table_code_word_break"] == "keep-all", seen  # docs/stylesheets/reference.css reached the page
    assert next(seen for seen in report if seen["page"] == "getting-started/")["images"] >= 1
    pixels = np.asarray(Image.open(shot).convert("L"), dtype=np.float32)
    assert pixels.shape == (rendered_site.FRAME_HEIGHT * len(BROWSER_PAGES), max(w for _, w in BROWSER_PAGES))
    for i, (page, width) in enumerate(BROWSER_PAGES):
        frame = pixels[i * rendered_site.FRAME_HEIGHT : (i + 1) * rendered_site.FRAME_HEIGHT, :width]
        assert frame.std() > 10 and (frame < 128).mean() > 0.005, f"{page}: the screenshot shows a blank page ({shot})"


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


def test_the_config_reference_lists_every_section_slot_and_train_key():
    pytest.importorskip("mkdocs")
    from modforge.core.arguments import signature_of
    from modforge.experiment.schema import PART_SLOTS, SECTIONS
    from modforge.experiment.settings import TrainSettings

    page = _hooks().config_page()
    for name in (*SECTIONS, "continual", *(slot.path for slot in PART_SLOTS)):
        assert f"| `{name}` |" in page, name
    for arg in signature_of(TrainSettings).args:
        assert f"| `{arg.name}` |" in page, arg.name
    for name in REGISTRIES["extension"].list():  # run extensions are train: keys too
        assert f"| `{name}` | extension |" in page, name


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
    for must in (
        "make demo",
        "make test",
        "make docs",
        "## Dependencies",
        "docs/getting-started.md",
        ". .venv/bin/activate",
    ):  # a new user's next command must find modforge
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
    assert len(commands) == 6 and all(argv[0] == "modforge" for argv in commands)
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

    parts = next(body for page, body in PYTHON_BLOCKS if page.name == "parts.md")
    flow = next(body for page, body in PYTHON_BLOCKS if page.name == "model-flow.md")
    with registries_restored():
        exec(parts, {"__name__": "docs_example"})
        net = mf.BACKBONES.build({"type": "wide_mlp", "args": {"width": 2}}, in_dim=5)
        assert net.out_dim == 256
        space: dict = {"__name__": "docs_example"}
        exec(flow, space)
        assert tuple(space["logits"].shape) == (4, 10) and len(space["layers"]) >= 3


# --------------------------------------------------------------------------- the commands the pages show
NOT_RUN_HERE = {  # commands the docs show that need what a test machine has not: each says why
    "sweep-report": "needs a finished sweep folder (the sweep commands beside it run as --dry-run)",
    "score": "needs score files of other systems (tests/test_score_command.py runs it on fabricated ones)",
}
REAL_DATA = (
    "/data/",
    "corpora/",
    "spoofing/",
    "detection/",
    "vision/",
)  # configs and paths whose data this machine lacks


def documented_commands() -> list[tuple[str, list[str]]]:
    """Every ``modforge`` command line in a bash block of the README and the pages (the porting
    guide's run blocks run in its own test), with where it was shown."""
    found = []
    for page in [README, *PAGES]:
        if page.parent.name == "porting":
            continue
        for lang, body in FENCE.findall(page.read_text()):
            if lang != "bash":
                continue
            for line in body.replace("\\\n", " ").splitlines():
                for part in line.split(";"):
                    argv = shlex.split(part, comments=True)
                    if argv and argv[0] == "modforge":
                        found.append((str(page.relative_to(ROOT)), argv[1:]))
    return found


@pytest.fixture(scope="module")
def workspace(tmp_path_factory) -> Path:
    """A folder where the docs' commands run: the repo's configs, the parts page's plug-in, a
    finished one-epoch digits run named like the pages' ``<stamp>``, and inputs to predict."""
    import numpy as np
    from PIL import Image

    from registry_state import registries_restored

    home = tmp_path_factory.mktemp("docs-commands")
    (home / "configs").symlink_to(ROOT / "configs")
    parts = next(body for page, body in _blocks("python") if page.name == "parts.md")
    (home / "my_parts.py").write_text(parts)
    cwd = os.getcwd()
    os.chdir(home)
    try:
        with registries_restored():
            assert main(["train", "configs/digits.yaml", "--run-dir", "runs/digits/stamp", "train.max_epochs=1"]) == 0
    finally:
        os.chdir(cwd)
    Image.fromarray((np.random.default_rng(0).random((8, 8)) * 255).astype("uint8")).save(home / "digit.png")
    np.save(home / "samples.npy", np.random.default_rng(1).random((3, 1, 8, 8), dtype=np.float32))
    return home


def _runnable(argv: list[str]) -> list[str] | None:
    """The command as the test runs it: one epoch where it trains on the bundled digits, only
    checked (``--print-config``, ``--dry-run``) where it would need data or hours; None: not run."""
    if argv[0] in NOT_RUN_HERE:
        return None
    argv = [a.replace("<stamp>", "stamp").replace("<timestamp>", "stamp") for a in argv]
    if "--nproc" in argv:  # torchrun's processes: tests/test_distributed_runs.py; the rest of the line is checked
        i = argv.index("--nproc")
        argv = argv[:i] + argv[i + 2 :]
    text = " ".join(argv)
    if argv[0] == "sweep":
        return [*argv, "--dry-run", "--sweep-dir", "runs/sweeps/docs"] if "--dry-run" not in argv else argv
    if argv[0] in ("train", "kfold") or (argv[0] == "test" and argv[1].endswith(".yaml")):
        if argv[0] == "kfold" or any(marker in text for marker in REAL_DATA):
            return [*argv, "--print-config"]
        if argv[0] != "train":
            return argv
        if "--epochs" in argv:  # the flag wins over a dotted override: it is set to one epoch itself
            argv[argv.index("--epochs") + 1] = "1"
        short = ["continual.epochs_per_task=1"] if "continual" in text else ["train.max_epochs=1"]
        fresh = argv[1].endswith(".yaml") and "--run-dir" not in argv
        target = Path("runs", Path(argv[1]).stem, "stamp")  # where the pages' <stamp> of this config points
        return [*argv, *short, *(["--run-dir", str(target)] if fresh and not target.exists() else [])]
    if argv[0] == "data":
        return None if "--help" in argv else [argv[0], argv[1], "--help"]  # the makers: tests/test_*corpus*, shapes
    return argv


COMMANDS = documented_commands()


def _weights_absent(arg: str) -> bool:
    """Whether ``arg`` is a config of the repo whose ``model.init`` names a file that is not there."""
    path = Path(arg)
    if path.suffix != ".yaml" or not path.is_file():
        return False
    init = ((yaml.safe_load(path.read_text()) or {}).get("model") or {}).get("init")
    return isinstance(init, dict) and not (path.resolve().parent / init["path"]).is_file()


@pytest.mark.slow
def test_every_documented_command_runs(workspace, tmp_path, monkeypatch, capsys):
    """Each ``modforge`` line of the docs, page by page in a fresh copy of the workspace, in
    order (later lines use what earlier ones made: ``runs/long``, its exports): exit 0."""
    import shutil

    import torch

    from registry_state import registries_restored

    assert len(COMMANDS) >= 40
    ran, skipped = 0, []
    for n, page in enumerate(dict.fromkeys(where for where, _ in COMMANDS)):
        shutil.copytree(workspace, tmp_path / str(n), symlinks=True)
        monkeypatch.chdir(tmp_path / str(n))
        for where, argv in COMMANDS:
            args = _runnable(argv) if where == page else None
            if args is None:
                continue
            if any(_weights_absent(a) for a in args):  # published weights (../shared beside the project) absent
                skipped.append(" ".join(args))
                continue
            reads = [a for i, a in enumerate(args) if i == 0 or args[i - 1] != "--run-dir"]
            made_elsewhere = [a for a in reads if a.startswith("runs/") and "/stamp" in a and not Path(a).exists()]
            if made_elsewhere:  # a run of a config whose data this machine lacks (trained above only as --print-config)
                skipped.append(" ".join(args))
                continue
            with registries_restored():
                code = main(args)
            torch.set_num_threads(1)  # digits.yaml trains on 2 threads: the next command shares the cores again
            err = capsys.readouterr().err
            assert code == 0, f"{where}: modforge {' '.join(args)}\n{err[-2000:]}"
            ran += 1
    assert all(any(name in line for name in ("runs/lfcc_lcnn/", "runs/shapes_fcos/", "aasist_")) for line in skipped), \
        skipped  # fmt: skip
    assert ran >= len(COMMANDS) - len(skipped) - len(NOT_RUN_HERE) - 2


@pytest.mark.slow
def test_the_run_extension_example_trains_checkpoints_and_resumes_bit_for_bit(tmp_path, monkeypatch):
    """docs/concepts/extensions.md's own extension (stochastic weight averaging through
    torch.optim.swa_utils), written as shown, with its config as shown: it trains, validates and
    tests its average, keeps it in every checkpoint, and a run resumed after epoch 2 ends bitwise
    equal to the whole run — the average and its BatchNorm statistics included."""
    import json

    import torch

    from modforge.model.formats import inference_weights
    from registry_state import registries_restored

    page = ROOT / "docs" / "concepts" / "extensions.md"
    (plugin,) = [body for where, body in _blocks("python") if where == page and "register_extension" in body]
    (config,) = [body for where, body in _blocks("yaml") if where == page and "swa:" in body]
    (tmp_path / "my_swa.py").write_text(plugin)
    (tmp_path / "swa.yaml").write_text(config.replace("configs/", f"{ROOT}/configs/"))
    monkeypatch.chdir(tmp_path)
    quiet = ["train.progress=never", "train.callbacks=[]"]
    with registries_restored():
        assert main(["train", "swa.yaml", "--run-dir", "whole", *quiet]) == 0
    with registries_restored():
        resumed = sorted((tmp_path / "whole" / "checkpoints").glob("epoch0002-*.pt"))[-1]
        assert main(["train", "--resume", str(resumed), "--run-dir", "resumed"]) == 0
    whole = torch.load(tmp_path / "whole" / "checkpoints" / "last.pt", weights_only=True)
    again = torch.load(tmp_path / "resumed" / "checkpoints" / "last.pt", weights_only=True)
    assert whole["swa"]["averaged"] == again["swa"]["averaged"] == 2  # epochs 2 and 3
    assert whole["evaluated_weights"] == "swa" and inference_weights(whole) is whole["swa"]["average"]
    for name, value in whole["model"].items():
        assert torch.equal(again["model"][name], value), name
    for name, value in whole["swa"]["average"].items():
        assert torch.equal(again["swa"]["average"][name], value), name
    averaged = whole["swa"]["average"]
    assert any(not torch.equal(averaged[k], v) for k, v in whole["model"].items() if "running_mean" not in k)
    bn = [k for k in averaged if k.endswith("running_mean")]
    assert bn and any(not torch.equal(averaged[k], whole["model"][k]) for k in bn)  # update_bn's statistics
    summary = json.loads((tmp_path / "whole" / "summary.json").read_text())
    assert summary["epochs"] == 3 and "accuracy" in summary["test"] and summary["evaluated"] == "checkpoints/best.pt"
