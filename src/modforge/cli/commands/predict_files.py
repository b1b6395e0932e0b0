"""``modforge predict ARTIFACT INPUT...`` — class and score for each input file (for a
spoofing model also the detection score: the bona fide logit minus the spoof logit, higher
= more bona fide; an audio file is cut as ``modforge test`` cut it).

A detector's artifact (metadata ``task: detection``) takes pictures and prints one JSON line
per picture, ``{"file": ..., "detections": [{"class", "score", "box": [x1, y1, x2, y2]}, ...]}``
with boxes in the picture's own pixels, best first; ``--out DIR`` also writes
``DIR/<stem>.png`` with the boxes drawn. Thresholds, top-k and NMS run here, after the
runtime (:mod:`modforge.tasks.detection.predict` says why).

Torch is imported only for torch-based artifacts: an ``.onnx`` artifact runs with numpy
and onnxruntime alone.
"""

from __future__ import annotations

import argparse
import textwrap
from pathlib import Path
from typing import Any

import numpy as np

from ...core.safe_files import ensure_folder
from ..common import CommandParser, add_plugins_option, load_cli_plugins, positive_int
from ..output import print_table

_TORCH_SUFFIXES = ("", ".pt", ".pth", ".ts")
HELP = (
    "run an exported model on .npy arrays, pictures or audio files; prints class and score per input "
    "(a detector: one JSON line of boxes per picture)"
)


def _parser(epilog: str | None = None) -> CommandParser:
    from .predict_help import GENERIC_INPUTS

    parser = CommandParser("predict", description=textwrap.fill(HELP, 79), epilog=epilog or GENERIC_INPUTS,
                           formatter_class=argparse.RawDescriptionHelpFormatter)  # fmt: skip
    parser.add_argument(
        "artifact",
        type=Path,
        metavar="ARTIFACT",
        help="an exported model (modforge export writes one: .onnx, .ts, .pt), or a run folder holding one "
        "export in RUN/exports (exported again first when its checkpoint has changed since)",
    )
    parser.add_argument(
        "inputs",
        type=Path,
        nargs="+",
        metavar="INPUT",
        help="the files to predict: .npy arrays, pictures or audio files (see below)",
    )
    parser.add_argument(
        "--top", type=positive_int, default=1, metavar="K", help="how many classes to show per input (default 1)"
    )
    parser.add_argument(
        "--invert",
        action="store_true",
        help="turn the pictures' grey levels over compared with what the artifact expects (light strokes on "
        "dark instead of dark on light, or the reverse); a picture that looks inverted gets a warning naming it",
    )
    parser.add_argument(
        "--out", type=Path, metavar="DIR", help="a detector: write DIR/<stem>.png, each picture with its boxes drawn"
    )
    add_plugins_option(parser)
    return parser


def _help_epilog(argv: list[str]) -> str | None:
    """With ``--help`` after an artifact (``predict ARTIFACT --help``): the generic input notes and
    what that artifact takes; None otherwise (or when it cannot be read: the generic notes only)."""
    from ...core.errors import ModforgeError
    from .predict_help import GENERIC_INPUTS, artifact_inputs

    if not any(arg in ("-h", "--help") for arg in argv):
        return None
    valued = {"--top", "--out"}  # their values are not the artifact; nor is a plug-in file
    named = next((arg for i, arg in enumerate(argv) if not arg.startswith("-") and not arg.endswith(".py")
                  and (i == 0 or argv[i - 1] not in valued)), None)  # fmt: skip
    if named is None or not Path(named).exists():
        return None
    try:
        _, metadata = load_artifact(Path(named))
    except (ModforgeError, OSError) as exc:
        return f"{GENERIC_INPUTS}\n\n({named} could not be read: {exc})"
    return f"{GENERIC_INPUTS}\n\n{artifact_inputs(metadata, named)}"


def load_artifact(path: Path) -> tuple[Any, dict[str, Any]]:
    """``(runner, metadata)`` of any artifact; ONNX without importing torch.

    The engine is the one registered for the file's suffix (``.ts``, a plug-in engine's own
    suffix — load it with ``--plugins``); ``.pt`` (eager and compile share it) and unknown
    suffixes are torch artifacts whose metadata names their engine."""
    from ...engines.artifact import ARTIFACT_FORMAT
    from ...engines.base import EngineError

    if path.is_dir():
        path = artifact_of_run(path)
    if not path.is_file():
        raise EngineError(f"artifact not found: {path}")
    if path.suffix.lower() in (".pt", ".pth") and path.parent.name == "checkpoints":
        raise EngineError(f"{path} is a training checkpoint, not an artifact: export the run first "
                          f"(modforge export {path.parent.parent} --engine onnx), then predict with the file it writes")  # fmt: skip
    if path.suffix.lower() == ".onnx":
        from ...engines.onnx_runtime import OnnxRunner

        runner = OnnxRunner.from_file(path)
        metadata = runner.metadata
    else:
        from ...engines import build_engine, engine_for_suffix
        from ...engines.artifact import read_torch_artifact

        engine = engine_for_suffix(path.suffix)
        if engine is None:
            try:
                _, metadata = read_torch_artifact(path)
            except EngineError as exc:
                if path.suffix.lower() in _TORCH_SUFFIXES:
                    raise
                raise EngineError(
                    f"{path}: no registered engine writes '{path.suffix}' artifacts, and it is not a torch-based "
                    "artifact either; if a plug-in engine wrote it, name that plug-in with --plugins"
                ) from exc
            engine = metadata.get("engine", "eager")
        loaded, metadata = build_engine(engine, path="the artifact's engine").load(path)
        runner = _TorchRunner(loaded)
    if not isinstance(metadata, dict) or metadata.get("format") != ARTIFACT_FORMAT:
        raise EngineError(f"{path} is not a modforge artifact (no modforge metadata in it)")
    return runner, metadata


def artifact_of_run(folder: Path) -> Path:
    """The artifact ``modforge predict RUN`` means: the one file in ``RUN/exports/`` (several:
    an error listing them; none: an error saying how to make one)."""
    from ...engines.base import EngineError

    exports = folder / "exports"
    found = sorted(p for p in exports.iterdir() if p.is_file() and not p.name.startswith(".")) \
        if exports.is_dir() else []  # fmt: skip
    if len(found) == 1:
        return found[0]
    if found:
        raise EngineError(f"{folder} holds {len(found)} exports ({', '.join(p.name for p in found)}); "
                          f"name one: modforge predict {found[0]} ...")  # fmt: skip
    what = "a run folder" if (folder / "config.yaml").is_file() else "a folder"
    raise EngineError(
        f"{folder} is {what} without an exported artifact: make one with "
        f"modforge export {folder} --engine onnx (or eager, torchscript), then predict with it"
    )


def class_names(metadata: dict[str, Any], artifact: Path) -> list[str]:
    """The artifact's ``class_names`` (none: an empty list, classes shown by index), checked to
    be a list of strings or numbers. They are data: the table printer shows them as plain text
    (no control characters, markup literal) and a detector's JSON lines escape them."""
    from ...engines.base import EngineError

    names = metadata.get("class_names")
    if names is None:
        return []
    if not isinstance(names, list) or not all(
        isinstance(n, (str, int, float)) and not isinstance(n, bool) for n in names
    ):
        raise EngineError(f"{artifact}: its metadata's class_names is not a list of names (strings); "
                          f"got {type(names).__name__}")  # fmt: skip
    return [str(n) for n in names]


class _TorchRunner:
    """A torch-based runnable fed numpy arrays (what :func:`read_input` produces)."""

    def __init__(self, runnable: Any):
        self.runnable = runnable

    def __call__(self, batch: dict[str, Any]) -> dict[str, Any]:
        import torch

        with torch.no_grad():
            x = torch.from_numpy(
                np.array(batch["input"], copy=True)
            )  # a writable copy: torch warns on read-only arrays
            logits = self.runnable({"input": x})["logits"]
        return {"logits": logits.float().cpu().numpy()}


def _softmax(logits: np.ndarray) -> np.ndarray:
    shifted = logits - logits.max(axis=-1, keepdims=True)
    exp = np.exp(shifted)
    return exp / exp.sum(axis=-1, keepdims=True)


def run(argv: list[str]) -> int:
    from ...engines.inputs import IMAGE_SUFFIXES, read_input
    from .predict_checks import fresh_artifact, picture_warnings, warn_if_stale, with_inversion

    ns = _parser(_help_epilog(argv)).parse_args(argv)
    load_cli_plugins(ns.plugins)  # an eager artifact of a plug-in part rebuilds it (its metadata names them)
    runner, metadata = load_artifact(ns.artifact)
    if ns.artifact.is_dir():  # predict RUN: the run's weights as they are now
        if fresh_artifact(ns.artifact, artifact_of_run(ns.artifact), metadata):
            runner, metadata = load_artifact(ns.artifact)
    else:
        warn_if_stale(ns.artifact, metadata)
    if ns.invert and (metadata.get("task") == "detection" or not (metadata.get("input") or {}).get("image")):
        from ...core.errors import UsageError

        what = "a detector, which takes pictures as they are" if metadata.get("task") == "detection" else \
            "not a model of pictures"  # fmt: skip
        raise UsageError(f"--invert turns a picture classifier's pictures over; {ns.artifact} is {what}")
    if metadata.get("task") == "detection":
        return _detect(ns.inputs, ns.out, runner, metadata, ns.artifact)
    if ns.out is not None:
        from ...core.errors import UsageError

        raise UsageError(f"--out draws detected boxes; {ns.artifact} is not a detector (it classifies its inputs)")
    metadata, inverted = with_inversion(metadata, ns.invert)
    names = class_names(metadata, ns.artifact)
    detection = names == ["spoof", "bonafide"]  # a spoofing model: also the detection score
    rows = []
    for path in ns.inputs:
        batch, labels = read_input(path, metadata)
        if path.suffix.lower() in IMAGE_SUFFIXES:
            picture_warnings(path, batch, metadata, inverted=inverted, flipped=ns.invert)
        logits = runner({"input": batch})["logits"]
        logits = np.asarray(logits.numpy() if hasattr(logits, "numpy") else logits, dtype=np.float64)
        if len(labels) > 1 and len(set(labels)) == 1:  # one audio file scored in windows: their mean
            logits, labels = logits.mean(axis=0, keepdims=True), labels[:1]
        for label, row_logits, row in zip(labels, logits, _softmax(logits), strict=True):
            best = np.argsort(-row)[: ns.top]
            shown = ", ".join(f"{names[i] if i < len(names) else i}" for i in best)
            cells = [label, shown, ", ".join(f"{row[i]:.4f}" for i in best)]
            if detection:
                cells.append(f"{row_logits[1] - row_logits[0]:.4f}")
            rows.append(tuple(cells))
    columns = ("input", "class", "score") + (("bona fide log-odds",) if detection else ())
    print_table(columns, rows, title=str(ns.artifact))  # every cell and the title shown as plain text
    return 0


def json_line(path: Path, records: list[dict[str, Any]]) -> str:
    """One picture's detections as the JSON line ``predict`` prints. ASCII only: a file or class
    name's control characters (and any non-ASCII) are ``\\u`` escapes, never raw bytes on the terminal."""
    import json

    return json.dumps({"file": str(path), "detections": records}, ensure_ascii=True)


def _detect(inputs: list[Path], out: Path | None, runner: Any, metadata: dict[str, Any], artifact: Path) -> int:
    """A detector's predictions: one JSON line per picture (see the module doc), and with ``out``
    each picture with its boxes drawn. Inputs are checked before any is run (present, a
    picture's suffix, distinct names under ``out``)."""
    from ...core.errors import UsageError
    from ...engines.inputs import IMAGE_SUFFIXES, InputError
    from ...tasks.detection.predict import detection_records, draw_detections, postprocess, prepare_picture

    for path in inputs:
        if not path.is_file():
            raise InputError(f"input not found: {path}")
        if path.suffix.lower() not in IMAGE_SUFFIXES:
            raise InputError(f"{path}: unsupported input type '{path.suffix}'; a detector takes pictures "
                             f"({', '.join(IMAGE_SUFFIXES)})")  # fmt: skip
    if out is not None:
        stems: dict[str, Path] = {}
        for path in inputs:
            other = stems.setdefault(path.stem, path)
            if other != path:
                raise UsageError(f"--out {out}: {other} and {path} would both be drawn as {out / (path.stem + '.png')}; "
                                 "predict them into different folders")  # fmt: skip
        if out.exists() and not out.is_dir():
            raise UsageError(f"--out {out}: exists and is not a folder")
        ensure_folder(out, named=True)
    spec = metadata.get("input") or {}
    normalisation = spec.get("normalisation") or {}
    settings = metadata.get("postprocess") or {}
    names = class_names(metadata, artifact)
    for path in inputs:
        picture = prepare_picture(path, normalisation)
        outputs = runner({"input": picture.input})["logits"]
        outputs = np.asarray(outputs.numpy() if hasattr(outputs, "numpy") else outputs, dtype=np.float32)
        rows = postprocess(outputs, np.asarray([picture.image_size]), settings)
        records = detection_records(rows, picture.scale, names)
        print(json_line(path, records), flush=True)
        if out is not None:
            draw_detections(picture.original, records, out / f"{path.stem}.png", names)
    return 0
