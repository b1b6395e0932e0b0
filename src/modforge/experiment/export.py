"""Export a trained run to an engine's format: one self-describing artifact file, checked
against eager on a real batch before it is reported as written."""

from __future__ import annotations

import dataclasses
import os
from pathlib import Path
from typing import Any

import torch

from ..core.errors import UsageError
from ..data.loader import make_loader
from ..engines import EngineError, build_engine
from ..engines.artifact import make_metadata
from .runner import load_trained

__all__ = ["PARITY_TOLERANCE", "ExportResult", "export_run"]

PARITY_TOLERANCE = 1e-5  # max |Δ| vs eager, relative to the output's scale (at least 1)


@dataclasses.dataclass
class ExportResult:
    """What :func:`export_run` wrote and how close the artifact is to eager."""

    path: Path
    checkpoint: Path
    engine: str
    max_abs_diff: float
    output_scale: float
    metadata: dict[str, Any]


def export_run(target: Path, engine_spec: Any, out: str | Path | None = None, *, which: str = "best",
               force: bool = False) -> ExportResult:
    """Write the model of a run folder or checkpoint as an artifact of ``engine_spec``.

    The run's own plug-ins are loaded first (its verified copies, installed entry points or
    ``--plugins``, as for ``modforge test``), so a plug-in engine or part is found.
    ``engine_spec`` is a name or ``{type, args}`` (the engine's options). ``out`` is the
    artifact's path, or an existing folder (or one ending in ``/``) to write it into under
    its default name. Refuses to overwrite an existing file unless ``force``; the artifact
    holds the metadata of :func:`~modforge.engines.artifact.make_metadata` (model config,
    input layout and shape, class names, normalisation, versions, resolved config).
    """
    exp, checkpoint = load_trained(Path(target), which)
    cfg = exp.cfg
    engine = build_engine(engine_spec, path="--engine", allowed_modules=cfg.plugins, base_dir=str(cfg.base_dir))
    _refuse_other_classifiers(exp)
    run_dir = checkpoint.parent.parent if checkpoint.parent.name == "checkpoints" else checkpoint.parent
    path = _artifact_path(out, run_dir / "exports", f"{checkpoint.stem}-{engine.name}", engine)
    if path.exists() and not force:
        raise UsageError(f"{path} exists; choose another --out or pass --force to replace it")
    splits = exp.splits
    source = splits.test or splits.val or splits.train
    batch = next(iter(make_loader(source, dataclasses.replace(exp.loader, num_workers=0), train=False)))
    model = exp.model.eval()
    metadata = make_metadata(
        engine=engine.name,
        model=exp.cfg.to_dict().get("model", {}),
        build={"in_dim": splits.in_dim, "num_classes": splits.num_classes},
        input_shape=list(splits.input_shape),
        input_layout=splits.layout.value,
        class_names=list(splits.class_names),
        normalisation=splits.normalisation,
        config=exp.cfg.to_dict(),
    )
    metadata["input"]["image"] = splits.image
    metadata["engine_args"] = {k: v for k, v in vars(engine).items() if k != "registered_as"}
    runnable = engine.prepare(model, batch, train=False)
    written = engine.save(runnable, path, metadata)
    loaded, _ = engine.load(written)
    with torch.no_grad():
        reference = model(batch["input"])
        got = torch.as_tensor(loaded({"input": batch["input"]})["logits"])
    diff = float((got - reference).abs().max()) if got.shape == reference.shape else float("inf")
    scale = float(reference.abs().max())
    if not diff <= PARITY_TOLERANCE * max(1.0, scale):
        written.unlink(missing_ok=True)
        raise EngineError(
            f"the {engine.name} artifact does not reproduce the model (max |Δ| {diff:.3g} on outputs up to "
            f"{scale:.3g}, shapes {list(got.shape)} vs {list(reference.shape)}); nothing was written"
        )
    return ExportResult(written, checkpoint, engine.name, diff, scale, metadata)


def _artifact_path(out: str | Path | None, folder: Path, stem: str, engine: Any) -> Path:
    """Where the artifact goes: ``folder/stem+suffix`` by default; inside ``out`` when it is
    a folder (existing, or written with a trailing ``/``); else ``out`` itself, which must end
    in the engine's suffix (a path without one gets it appended)."""
    if out is None:
        return folder / f"{stem}{engine.suffix}"
    text = str(out)
    path = Path(out)
    if path.is_dir() or text.endswith(("/", os.sep)):
        return path / f"{stem}{engine.suffix}"
    if path.exists() and not path.is_file():
        raise UsageError(f"--out {text}: exists and is neither a folder nor a file")
    if engine.suffix and path.suffix != engine.suffix:
        if path.suffix:
            raise UsageError(
                f"--out {text}: an artifact of engine '{engine.name}' ends in {engine.suffix} "
                "(modforge predict recognises artifacts by their suffix); give a file ending in it, or a folder"
            )
        path = path.with_name(path.name + engine.suffix)
    return path


def _refuse_other_classifiers(exp: Any) -> None:
    """An artifact reproduces the model's logits; a continual method that classifies another
    way (iCaRL: nearest mean of exemplars) would be exported as a different, worse classifier."""
    continual = exp.cfg.data.get("continual")
    if not continual:
        return
    from ..continual.algorithms.base import Algorithm
    from ..core.registries import ALGORITHMS

    spec = continual.get("algorithm") or "sgd"
    name = spec if isinstance(spec, str) else spec.get("type", "sgd")
    cfg = exp.cfg
    algorithm, _ = ALGORITHMS.resolve(str(name), allowed_modules=cfg.plugins, base_dir=str(cfg.base_dir),
                                      path="continual.algorithm", source=cfg.where("continual.algorithm"))
    if getattr(algorithm, "class_scores", Algorithm.class_scores) is not Algorithm.class_scores:
        raise UsageError(
            f"this continual run's method '{name}' does not classify by the model's logits (it uses its own "
            "scores, e.g. the nearest mean of exemplars), and an artifact holds only the model: its predictions "
            "would differ from the run's. Evaluate the run with `modforge test RUN` instead"
        )

