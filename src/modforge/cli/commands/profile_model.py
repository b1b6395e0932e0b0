"""``modforge profile CONFIG [flags] | RUN_DIR|CHECKPOINT`` — per part of the model: parameters,
forward FLOPs (and multiply-adds, papers' "FLOPs"), the activation memory of a training forward at
the batch size, and the forward latency per engine (:mod:`modforge.experiment.profile`)."""

from __future__ import annotations

import argparse
from pathlib import Path

from ..common import CommandParser, add_plugins_option, load_cli_plugins, positive_int
from ..config_args import resolve_config_from_cli
from ..output import print_table

HELP = "per part: parameters, FLOPs, activation memory at the batch size; forward latency per engine"
ENGINES = "eager,torchscript,compile,onnx"


def _shape(text: str) -> tuple[int, ...]:
    try:
        shape = tuple(int(part) for part in text.split(","))
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected sizes separated by commas (C,H,W), got {text!r}") from None
    if not shape or any(size < 1 for size in shape):
        raise argparse.ArgumentTypeError(f"every size must be at least 1, got {text!r}")
    return shape


def _own_options(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--input-shape", type=_shape, metavar="C,H,W",
                        help="profile the model section alone on a random batch of this sample shape (no data read)")
    parser.add_argument("--num-classes", type=positive_int, default=1000, metavar="N",
                        help="outputs of the model built for --input-shape (default 1000, as ImageNet)")
    _measuring_options(parser)


def _measuring_options(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--engines", default=ENGINES, metavar="NAMES",
                        help=f"engines whose forward latency is measured, comma-separated (default {ENGINES})")
    parser.add_argument("--repeats", type=positive_int, default=20, metavar="N",
                        help="timed forward passes per engine, after 3 warm-up passes (the median is shown)")


def _run_target(argv: list[str]) -> bool:
    """Whether the command profiles a run (its first argument is a folder or a checkpoint)."""
    first = next((a for a in argv if not a.startswith("-")), None)
    return first is not None and (Path(first).is_dir() or first.endswith(".pt"))


def run(argv: list[str]) -> int:
    from ...core.config import display_path
    from ...experiment.profile import profile_config, profile_run

    if _run_target(argv):
        parser = CommandParser("profile", description=HELP)
        parser.add_argument("target", metavar="RUN_DIR|CHECKPOINT")
        _measuring_options(parser)
        add_plugins_option(parser)
        ns = parser.parse_args(argv)
        load_cli_plugins(ns.plugins)
        engines = [e for e in ns.engines.split(",") if e]
        result, checkpoint = profile_run(Path(ns.target), engines=engines, repeats=ns.repeats)
        title = display_path(checkpoint)
    else:
        resolved = resolve_config_from_cli("profile", argv, description=HELP, add_arguments=_own_options)
        ns = resolved.args
        engines = [e for e in ns.engines.split(",") if e]
        result = profile_config(resolved.config, input_shape=ns.input_shape, num_classes=ns.num_classes,
                                engines=engines, repeats=ns.repeats)  # fmt: skip
        title = resolved.config.name
    shape = "×".join(str(s) for s in result.input_shape)
    rows = [
        ("  " * part.depth + part.name, f"{part.params:,}", _giga(part.flops), _giga(part.macs), _mib(part.activation_bytes))
        for part in result.parts
    ]
    rows.append(("total", f"{result.params:,}", _giga(result.flops), _giga(result.macs), _mib(result.activation_bytes)))
    print_table(("part", "parameters", "GFLOPs", "GMACs", "activations (MiB)"), rows,
                title=f"{title}: batch {result.batch_size} × {shape}")  # fmt: skip
    latency = [(item.engine, f"{item.median_ms:.3f}" if item.median_ms is not None else "—",
                str(item.runs) if item.median_ms is not None else item.note) for item in result.latency]  # fmt: skip
    print_table(("engine", "forward (ms, median)", "runs"), latency, title=f"latency, batch {result.batch_size}, {result.threads} thread(s)")
    _say_load()
    return 0


def _say_load() -> None:
    """The machine's load over the minute the latencies were timed in, beside its CPUs; a warning
    when other work kept it busy (the figures are then slower and noisier than idle)."""
    import logging

    from ...core.threads import load_note

    note, busy = load_note()
    if busy:
        logging.getLogger("modforge.cli").warning("latencies timed on a busy machine: %s", note)
    else:
        print(f"({note})")


def _giga(value: float) -> str:
    return f"{value / 1e9:.4g}"


def _mib(value: int) -> str:
    return f"{value / 2**20:.3g}"
