"""``modforge describe KIND NAME`` — a part's arguments, docstring and origin;
``modforge describe model CONFIG [--diagram OUT.svg]`` — the model a config builds: its stages,
the batch keys between them and its losses, as a table and (``--diagram``) a picture."""

from __future__ import annotations

from pathlib import Path

from ...components.layouts import Layout
from ...core.arguments import REQUIRED, ArgSpec
from ...core.errors import UsageError
from ...core.registries import REGISTRIES, registry_for
from ..common import CommandParser, add_plugins_option, load_cli_plugins
from ..output import console, print_table

HELP = "show one part's arguments, types, defaults, help and where it is defined"


def _parser() -> CommandParser:
    parser = CommandParser("describe", description=HELP)
    parser.add_argument("kind", help=f"one of: {', '.join(REGISTRIES)}")
    parser.add_argument("name", help="the registered name (for kind 'model': a registered model, or a config file)")
    parser.add_argument("--diagram", metavar="OUT", help="with 'model CONFIG': also draw the model's flow to OUT "
                        "(.svg, .png or .pdf)")  # fmt: skip
    add_plugins_option(parser)
    return parser


def _is_config(kind: str, name: str) -> bool:
    return kind == "model" and Path(name).suffix.lower() in (".yaml", ".yml")


def describe_config_model(config: str, diagram: str | None) -> int:
    """The model ``config`` builds (its data decides the input size and classes): stages and
    losses as tables, and its flow drawn to ``diagram``."""
    from ...core.config import display_path, load_config
    from ...core.safe_files import save_figure
    from ...experiment import validate_config
    from ...experiment.runner import Experiment
    from ...model.diagram import draw_model_flow, flow_edges

    if diagram is not None and Path(diagram).suffix.lower() not in (".svg", ".png", ".pdf"):
        raise UsageError(f"--diagram {diagram}: expected a file ending in .svg, .png or .pdf")
    cfg = validate_config(load_config(config))
    model = Experiment.build(cfg, init_weights=False).model
    reads = {target: key for _, target, key in flow_edges(model)}
    print_table(("stage", "kind", "type", "reads", "in", "out", "out_dim"),
                [(s.name, s.kind, s.type, reads.get(s.name, ""), str(s.in_layout), str(s.out_layout), s.out_dim)
                 for s in model.stage_info], title=f"model of {display_path(config)}")  # fmt: skip
    if model.loss_info:
        print_table(("loss", "type", "weight", "reads", "target"),
                    [(i.key, i.type, i.weight, i.input_key, i.target_key) for i in model.loss_info])  # fmt: skip
    if diagram is not None:
        import matplotlib.pyplot as plt

        figure = draw_model_flow(model, title=f"{display_path(config)}")
        save_figure(figure, diagram)
        plt.close(figure)
        console().print(f"diagram: {display_path(diagram)}", markup=False)
    return 0


def _default(arg: ArgSpec) -> str:
    if arg.injected:
        return "(set by the builder)"
    if arg.default is REQUIRED:
        return "—"
    return repr(arg.default)


def _part_contract(obj: object) -> list[str]:
    """Layouts and the out_dim rule of a model part (nothing for other kinds)."""
    lines = []
    accepts = getattr(obj, "accepts", None)
    if accepts:
        lines.append("input layouts: " + "; ".join(str(Layout(a)) for a in accepts))
    produces = getattr(obj, "produces", None)
    if isinstance(produces, (str, Layout)):
        lines.append(f"output layout: {Layout(produces)}")
    rule = getattr(obj, "out_dim_rule", "")
    if rule:
        lines.append(f"out_dim: {rule}")
    input_key = getattr(obj, "input_key", None)
    if isinstance(input_key, str):
        lines.append(f"reads: batch['{input_key}'] and batch['{getattr(obj, 'target_key', 'label')}']")
    return lines


def run(argv: list[str]) -> int:
    ns = _parser().parse_args(argv)
    load_cli_plugins(ns.plugins)
    if _is_config(ns.kind, ns.name):
        return describe_config_model(ns.name, ns.diagram)
    if ns.diagram is not None:
        raise UsageError("--diagram draws the model of a config: modforge describe model CONFIG --diagram OUT.svg")
    registry = registry_for(ns.kind)
    entry = registry.entry(ns.name)
    sig = entry.signature
    out = console()
    what = "class" if entry.is_class else "function"
    text = [f"{entry.kind} '{entry.name}' ({what} {entry.qualname})"]
    if sig.summary:
        text.append(sig.summary)
    text.append(f"defined in: {entry.location}")
    text += _part_contract(entry.obj)
    text.append("")
    out.print("\n".join(text), markup=False)
    rows = [(a.name, a.type_name, _default(a), "yes" if a.required else "no", a.help) for a in sig.args]
    if rows:
        print_table(("argument", "type", "default", "required", "help"), rows)
    else:
        out.print("no arguments")
    if sig.var_keyword:
        out.print(
            f"**{sig.var_keyword}: further keyword arguments are accepted and passed through unvalidated", markup=False
        )
    if sig.var_positional:
        out.print(f"*{sig.var_positional}: extra positional arguments cannot be set from a config", markup=False)
    rest = _rest_of_doc(sig.doc, bool(rows))
    if rest:
        out.print("")
        out.print(rest, markup=False)
    return 0


_ARG_HEADERS = ("Args:", "Arguments:", "Parameters:", "Keyword Args:", "Keyword Arguments:")


def _rest_of_doc(doc: str, tabled: bool) -> str:
    """The docstring less what is already printed: its first paragraph (the summary line above)
    and, when the arguments table is shown, its ``Args:`` section (the table's help column)."""
    paragraphs = (doc or "").strip().split("\n\n", 1)
    lines = paragraphs[1].splitlines() if len(paragraphs) > 1 else []
    kept: list[str] = []
    in_args = False
    for line in lines:
        if tabled and line.strip() in _ARG_HEADERS and not line.startswith((" ", "\t")):
            in_args = True
            continue
        if in_args and (not line.strip() or line.startswith((" ", "\t"))):
            continue
        in_args = False
        kept.append(line)
    return "\n".join(kept).strip()
