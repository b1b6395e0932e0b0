"""MkDocs hook: the reference pages that are generated from the code, and the benchmark pages.

- ``reference/parts.md``: every registered part of every kind, with its arguments (type,
  default, help) and docstring summary — read from the registries, so it cannot go stale;
- ``reference/cli.md``: every ``modforge`` command's ``--help``;
- ``reference/config.md``: the config's sections, the part slots and every ``train:``/``data:`` key;
- ``benchmarks/*.md``: the pages in ``benchmarks/`` (the overview from its README);
- ``assets/first-run/*.png``: the plots of a short run of the demo, trained while the site is built;
- ``assets/model-flow/digits.svg``: the demo config's model flow (``modforge describe model CONFIG --diagram``).

``tests/test_docs.py`` compares the parts page with the registries and builds the site with ``--strict``.
"""

from __future__ import annotations

import contextlib
import io
import os
import re
from pathlib import Path

from mkdocs.structure.files import File

ROOT = Path(__file__).resolve().parents[2]
CODE_SPAN = re.compile(r"(?<!`)(`+)(?!`)(.+?)(?<!`)\1(?!`)")  # Markdown's: a run of backticks, closed by one as long


def _cell(text: object) -> str:
    """One table cell: one line, ``|`` escaped, and every code span without a space (a name, a
    flag, a value) marked ``mf-name`` so the site's CSS keeps it on one line (docs/stylesheets)."""
    flat = " ".join(str(text).split()).replace("|", "\\|")
    return CODE_SPAN.sub(_unbroken, flat)


def _unbroken(span: re.Match) -> str:
    code = span.group(0)
    return code if any(c.isspace() for c in span.group(2)) else code + "{: .mf-name }"


def parts_page() -> str:
    """Markdown: one section per registry kind, one table row per argument of each part."""
    from modforge.core.arguments import REQUIRED
    from modforge.core.registries import REGISTRIES

    lines = [
        "# Registered parts",
        "",
        "Every part modforge registers, by kind, generated from the registries when the site is built "
        "(`modforge list KIND` and `modforge describe KIND NAME` show the same on the command line).",
        "",
    ]
    for kind, registry in REGISTRIES.items():
        names = registry.list()
        lines += [f"## {kind}", "", f"{len(names)} registered: " + ", ".join(f"`{n}`" for n in names), ""]
        for name in names:
            entry = registry.entry(name)
            sig = entry.signature
            lines += [f"### `{name}` {{#{kind}-{name.replace('_', '-')}}}", ""]
            if sig.summary:
                lines += [_cell(sig.summary), ""]
            args = [a for a in sig.args if not a.injected]
            if args:
                lines += ["| argument | type | default | help |", "|---|---|---|---|"]
                for arg in args:
                    default = "required" if arg.default is REQUIRED else f"`{arg.default!r}`"
                    lines.append(f"| `{arg.name}` | `{_cell(arg.type_name)}` | {_cell(default)} | {_cell(arg.help)} |")
                lines.append("")
    return "\n".join(lines) + "\n"


def cli_page() -> str:
    """Markdown: the ``--help`` of every ``modforge`` command, as the command line prints it."""
    from modforge.cli.main import COMMANDS, main

    lines = ["# Commands", "", "Every `modforge` command's `--help`, generated when the site is built.", ""]
    os.environ.setdefault("COLUMNS", "100")
    for command in ["", *COMMANDS]:
        out = io.StringIO()
        with contextlib.redirect_stdout(out), contextlib.suppress(SystemExit):
            main([command, "--help"] if command else ["--help"])
        shown = f"modforge {command}".strip()
        lines += [f"## `{shown}`", "", "```text", out.getvalue().rstrip(), "```", ""]
    return "\n".join(lines) + "\n"


def _argument_rows(cls) -> list[str]:
    from modforge.core.arguments import REQUIRED, signature_of

    rows = ["| key | type | default | meaning |", "|---|---|---|---|"]
    for arg in signature_of(cls).args:
        default = "required" if arg.default is REQUIRED else f"`{arg.default!r}`"
        rows.append(f"| `{arg.name}` | `{_cell(arg.type_name)}` | {_cell(default)} | {_cell(arg.help)} |")
    return rows


def config_page() -> str:
    """Markdown: the top-level sections, the part slots and the ``train:``/``data:`` keys, read from the code."""
    from modforge.data.loader import LoaderSettings
    from modforge.experiment.schema import PART_SLOTS, SECTIONS
    from modforge.experiment.settings import TrainSettings
    from modforge.tasks.base import sectioned_tasks

    owned = sectioned_tasks(reserved=SECTIONS)
    lines = ["# Config schema", "",
             "Generated from the code when the site is built. A config is YAML (safe loader) with these "
             "top-level sections; anything else is an error naming the key and the closest valid one.", "",
             "| section | what |", "|---|---|",
             "| `plugins` | `.py` files and packages beside the config (or installed entry points) imported first |",
             "| `seed` | the run's seed (data splits, initialisation, per-sample randomness) |",
             "| `task` | a registered task (default: the dataset's, else classification) |",
             "| `data` | `{type, args}` of a registered dataset plus the loader keys below |",
             "| `model` | the stages (`frontend`, `backbone`, `neck`, `head`, or `stages:`), `losses`, `init` |",
             "| `train` | how to train: the keys below |"]  # fmt: skip
    lines += [
        f"| `{section}` | owned by the `{getattr(task, 'name', task.__name__)}` task |"
        for section, task in sorted(owned.items())
    ]
    lines += [
        "",
        "## Part slots",
        "",
        "Each names a registered part: a bare name, or `{type, args}`.",
        "",
        "| path | kind | command-line flag | list | extra keys |",
        "|---|---|---|---|---|",
    ]
    for slot in PART_SLOTS:
        flag = f"`--{slot.flag}`" if slot.flag else "—"
        lines.append(f"| `{slot.path}` | [{slot.kind}](parts.md#{slot.kind}) | {flag} | {'yes' if slot.many else 'no'} | "
                     f"{', '.join(f'`{e}`' for e in slot.extras) or '—'} |")  # fmt: skip
    from modforge.core.registries import EXTENSIONS

    extensions = [f"| `{name}` | extension | `null` (off) | {_cell(EXTENSIONS.entry(name).summary)} "
                  f"([its arguments](parts.md#extension-{name.replace('_', '-')}), [run extensions](../concepts/extensions.md)) |"
                  for name in EXTENSIONS.list()]  # fmt: skip
    lines += ["", "## `train:`", "", *_argument_rows(TrainSettings), *extensions, "",
              "## `data:`", "", "`type` and `args` name the dataset ([its arguments](parts.md#dataset)); "
              "the DataLoader keys sit beside them:", "", *_argument_rows(LoaderSettings), ""]  # fmt: skip
    return "\n".join(lines) + "\n"


def benchmark_pages() -> dict[str, str]:
    """``benchmarks/<name>.md`` pages: each results page, and the overview (``index.md``)."""
    pages = {"benchmarks/index.md": (ROOT / "benchmarks" / "README.md").read_text()}
    for page in sorted((ROOT / "benchmarks").glob("*.md")):
        if page.name != "README.md":
            pages[f"benchmarks/{page.name}"] = page.read_text()
    return pages


def first_run_pictures() -> dict[str, bytes]:
    """The plots of the demo config trained for three epochs (a few seconds), for the getting-started page."""
    import tempfile

    from modforge.cli.main import main

    with tempfile.TemporaryDirectory(prefix="modforge-docs-") as tmp:
        run = Path(tmp) / "run"
        out = io.StringIO()
        with contextlib.redirect_stdout(out), contextlib.redirect_stderr(out):
            code = main(["train", str(ROOT / "configs" / "digits.yaml"), "--run-dir", str(run), "train.max_epochs=3",
                         "train.progress=never"])  # fmt: skip
        if code != 0:
            raise RuntimeError(f"the demo run for the getting-started page failed:\n{out.getvalue()}")
        return {f"assets/first-run/{png.name}": png.read_bytes() for png in sorted(run.glob("*.png"))}


def model_flow_picture() -> dict[str, bytes]:
    """The demo config's model-flow diagram, as ``modforge describe model configs/digits.yaml --diagram`` draws it."""
    import tempfile

    from modforge.cli.main import main

    with tempfile.TemporaryDirectory(prefix="modforge-docs-") as tmp:
        out, svg = io.StringIO(), Path(tmp) / "digits.svg"
        with contextlib.redirect_stdout(out), contextlib.redirect_stderr(out):
            code = main(["describe", "model", str(ROOT / "configs" / "digits.yaml"), "--diagram", str(svg)])
        if code != 0:
            raise RuntimeError(f"the model-flow diagram failed:\n{out.getvalue()}")
        return {"assets/model-flow/digits.svg": svg.read_bytes()}


def _pipes_in_table_code(line: str) -> str:
    return CODE_SPAN.sub(lambda span: span.group(0).replace("\\|", "|"), line) if line.startswith("|") else line


def on_page_markdown(markdown: str, page, config, files) -> str:
    """A ``\\|`` inside a code span of a table row becomes ``|``: the pages are written for
    GitHub's tables, which need the escape even in code, while Python-Markdown's tables already
    read a pipe in a code span as text and would show the backslash (``auto\\|gloo``)."""
    return "\n".join(_pipes_in_table_code(line) for line in markdown.split("\n"))


def on_files(files, config):
    """Add the generated pages to the site (mkdocs ≥ 1.6 ``File.generated``)."""
    generated = {
        "reference/parts.md": parts_page(),
        "reference/cli.md": cli_page(),
        "reference/config.md": config_page(),
        **benchmark_pages(),
        **first_run_pictures(),
        **model_flow_picture(),
    }
    for uri, content in generated.items():
        files.append(File.generated(config, uri, content=content))
    return files
