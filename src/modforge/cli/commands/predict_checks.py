"""What ``modforge predict`` checks before it trusts an answer: that a run's export is as new as
the checkpoint it came from (else it is exported again), and that each picture looks like the
pictures the model was trained on (else one warning line per kind of difference, naming what
was done to the picture and what fixes it). Neither imports torch unless an export is redone."""

from __future__ import annotations

import logging
from pathlib import Path
from typing import Any

import numpy as np

from ...core.config import display_path

__all__ = ["fresh_artifact", "picture_warnings", "warn_if_stale", "with_inversion"]

log = logging.getLogger("modforge.cli")


def fresh_artifact(run: Path, artifact: Path, metadata: dict[str, Any]) -> bool:
    """For ``modforge predict RUN``: export ``artifact`` again when the checkpoint it was exported
    from has changed since (one line says so) — ``predict RUN`` names the run, so it predicts with
    the run's weights as they are now. A quantized artifact is refused instead, with the command
    that redoes it (its calibration choices are the user's). True when the artifact was rewritten."""
    from ...core.errors import ModforgeError
    from ...engines.artifact_source import stale_export
    from ...engines.base import EngineError

    stale = stale_export(artifact, metadata, run)
    if stale is None:
        return False
    shown, checkpoint = display_path(artifact), display_path(stale.checkpoint)
    engine = str(metadata.get("engine") or "onnx")
    quantization = metadata.get("quantization")
    if isinstance(quantization, dict):
        mode = quantization.get("mode", "int8")
        raise EngineError(f"{shown} was exported from an earlier {checkpoint} ({stale.why}); a quantized artifact "
                          f"is not redone behind your back — run modforge export {display_path(run)} --engine "
                          f"{engine} --quantize {mode} --force, then predict again")  # fmt: skip
    from ...experiment.export import export_run

    log.info("%s was exported from an earlier %s (%s): exporting it again from the run's current weights",
             shown, checkpoint, stale.why)  # fmt: skip
    args = metadata.get("engine_args") if isinstance(metadata.get("engine_args"), dict) else {}
    spec: Any = {"type": engine, "args": args} if args else engine
    try:
        export_run(run, spec, artifact, which=stale.checkpoint.stem, force=True)
    except ModforgeError as exc:  # e.g. the run's data are gone: the old export stays, named by the user if wanted
        raise EngineError(f"exporting {display_path(run)} again failed: {exc} — to predict with the earlier "
                          f"export anyway, name it: modforge predict {shown} ...") from None  # fmt: skip
    return True


def warn_if_stale(artifact: Path, metadata: dict[str, Any]) -> None:
    """For an artifact file named directly: one warning when it sits in a run's ``exports/`` and
    that run's checkpoint has changed since (the file is used as asked)."""
    from ...engines.artifact_source import run_of_artifact, stale_export

    run = run_of_artifact(artifact)
    stale = stale_export(artifact, metadata, run) if run is not None else None
    if stale is not None:
        log.warning("%s was exported from an earlier %s (%s); predicting with it as asked — modforge predict %s "
                    "exports the run again first", display_path(artifact), display_path(stale.checkpoint),
                    stale.why, display_path(run))  # fmt: skip


def with_inversion(metadata: dict[str, Any], invert: bool) -> tuple[dict[str, Any], bool]:
    """``metadata`` as ``read_input`` should use it — with ``--invert``, the picture's grey levels
    turned over compared with the artifact's way (``ink`` swapped) — and whether pictures are now
    inverted before the model sees them."""
    spec = metadata.get("input") or {}
    image = spec.get("image")
    if not isinstance(image, dict):
        return metadata, False
    ink = image.get("ink", "light")
    if invert:
        ink = "light" if ink == "dark" else "dark"
        metadata = {**metadata, "input": {**spec, "image": {**image, "ink": ink}}}
    return metadata, ink == "dark"


def picture_warnings(path: Path, batch: np.ndarray, metadata: dict[str, Any], *, inverted: bool, flipped: bool) -> None:
    """One warning line per kind of difference between the picture at ``path`` (``batch``: the
    model's input made of it) and the training pictures the artifact describes. An artifact
    exported before modforge recorded a contract gets the checks its picture entry allows
    (channels, size, constant) and a debug line; polarity needs the contract."""
    from ...engines.inputs import InputError, open_input_picture
    from ...engines.picture_contract import differences, inspect_picture, picture_space

    image = (metadata.get("input") or {}).get("image")
    if not isinstance(image, dict) or len(batch) != 1:
        return
    if not isinstance(image.get("contract"), dict):
        log.debug("the artifact records no input contract (exported before modforge recorded one): %s is checked "
                  "for its channels, size and constancy, not its polarity", path.name)  # fmt: skip
    try:
        with open_input_picture(path) as picture:
            found = inspect_picture(picture)
    except InputError as exc:  # read once already: a file changed meanwhile is not worth stopping for
        log.debug("%s: not compared with the training pictures (%s)", path.name, exc)
        return
    values = picture_space(batch[0], image)
    for difference in differences(path.name, found, values, image, inverted=inverted, flipped=flipped):
        log.warning("%s", difference.message)
