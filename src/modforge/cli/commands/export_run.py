"""``modforge export RUN_DIR|CHECKPOINT --engine NAME [--engine-args K=V ...] [--out PATH|DIR]`` —
write a trained model as a self-describing artifact of an engine (onnx, torchscript, eager,
compile, or a plug-in's engine: the run's own plug-ins are loaded as ``modforge test`` loads them)."""

from __future__ import annotations

import argparse
from pathlib import Path
from typing import Any

from ...core.config import display_path
from ..common import (
    CommandParser,
    add_checkpoint_option,
    add_key_values_option,
    add_plugins_option,
    key_values,
    load_cli_plugins,
)
from ..output import print_table

HELP = "write a run's model as an engine artifact (model + metadata), checked against eager"


def _parser() -> CommandParser:
    parser = CommandParser("export", description=HELP)
    parser.add_argument("target", metavar="RUN_DIR|CHECKPOINT")
    parser.add_argument("--engine", required=True, help="onnx, torchscript, eager or compile (any registered engine)")
    add_key_values_option(parser, "--engine-args", "the engine's options, values read as YAML (e.g. strategy=trace; "
                          "see 'modforge describe engine NAME')")  # fmt: skip
    parser.add_argument(
        "--out",
        metavar="PATH|DIR",
        help="the artifact's path, or a folder to write it into (default: RUN_DIR/exports/<checkpoint>-<engine><suffix>)",
    )
    parser.add_argument(
        "--quantize",
        choices=("int8", "int8-dynamic"),
        help="write an int8 graph (--engine onnx): int8 = static, calibrated on the run's validation data; "
        "int8-dynamic = weights only, activations per batch. The report compares it with fp32 on the test split",
    )
    parser.add_argument(
        "--calibration-batches",
        type=int,
        default=8,
        metavar="N",
        help="validation batches that calibrate a static int8 graph (default 8)",
    )
    parser.add_argument(
        "--calibration",
        choices=("auto", "minmax", "percentile", "entropy"),
        default="auto",
        help="how a static int8 graph's activation ranges are calibrated: auto (default) tries minmax, entropy, "
        "percentile, then the first and last layers in float32, and keeps the first that passes the check",
    )
    parser.add_argument(
        "--per-channel",
        action=argparse.BooleanOptionalAction,
        default=True,
        help="int8 weights with one scale per output channel (default) or per tensor (--no-per-channel)",
    )
    parser.add_argument(
        "--keep-float",
        type=_float_ends,
        metavar="first,last",
        help="keep the first and/or last Conv/Gemm/MatMul layers in float32 (default: none, or as auto finds)",
    )
    parser.add_argument(
        "--max-loss",
        type=float,
        default=1.0,
        metavar="POINTS",
        help="the int8 graph may lose at most this many points of the validation metric (accuracy, a detector's "
        "mAP ×100) against fp32, else nothing is written (default 1)",
    )
    add_checkpoint_option(parser)
    parser.add_argument("--force", action="store_true", help="replace an existing file at --out")
    add_plugins_option(parser)
    return parser


def _float_ends(text: str) -> tuple[str, ...]:
    """``--keep-float first,last`` as a tuple of ends."""
    ends = tuple(part.strip() for part in text.split(",") if part.strip())
    if not ends or not set(ends) <= {"first", "last"}:
        raise argparse.ArgumentTypeError(f"expected first, last or first,last, got {text!r}")
    return ends


def engine_spec(name: str, texts: list[str]) -> Any:
    """``--engine NAME --engine-args k=v ...`` as an engine spec (a name, or ``{type, args}``)."""
    return {"type": name, "args": key_values(texts, "--engine-args")} if texts else name


def run(argv: list[str]) -> int:
    from ...experiment.export import export_run
    from ...experiment.int8_check import Int8Options

    ns = _parser().parse_args(argv)
    load_cli_plugins(ns.plugins)
    spec = engine_spec(ns.engine, ns.engine_args)
    int8 = Int8Options(ns.calibration, ns.per_channel, ns.keep_float, ns.calibration_batches, ns.max_loss)
    result = export_run(Path(ns.target), spec, ns.out, which=ns.checkpoint, force=ns.force, quantize=ns.quantize,
                        calibration_batches=ns.calibration_batches, int8=int8)  # fmt: skip
    rows = [
        ("artifact", display_path(result.path)),
        ("engine", result.engine),
        ("from", display_path(result.checkpoint)),
        ("input", f"{result.metadata['input']['layout']} {result.metadata['input']['shape']}"),
        ("max |Δ| vs eager", f"{result.max_abs_diff:.2e} (outputs up to {result.output_scale:.3g})"),
    ]
    if result.task_report is not None:  # the task's own check (a detector: what predict will make of it)
        rows.extend(result.task_report.rows())
    if result.quantization is not None:  # the int8 graph against the fp32 one it was made from
        rows[-1] = ("max |Δ| vs eager", f"{rows[-1][1]} (the fp32 graph, before quantization)")
        rows.extend(result.quantization.rows())
    print_table(("", ""), rows, title="exported")
    return 0
