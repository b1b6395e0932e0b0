"""Which checkpoint an artifact was exported from, and whether that checkpoint has changed since.

``modforge export`` records ``source`` in the metadata: the checkpoint's name, its size, its
modification time and the SHA-256 of its bytes. ``modforge predict RUN`` compares it with the
run's checkpoint of that name: a resumed run that improved ``best.pt`` leaves an export made
from the old weights, and predict notices (:func:`stale_export`). hashlib only — predicting
with an ONNX artifact never imports torch.
"""

from __future__ import annotations

import dataclasses
import hashlib
from pathlib import Path
from typing import Any

__all__ = ["StaleExport", "file_digest", "run_of_artifact", "source_record", "stale_export"]


def file_digest(path: Path) -> str:
    """The SHA-256 of a file's bytes, read in blocks."""
    with open(path, "rb") as handle:
        return hashlib.file_digest(handle, "sha256").hexdigest()


def source_record(checkpoint: Path) -> dict[str, Any]:
    """What an artifact records about the checkpoint it was exported from."""
    checkpoint = Path(checkpoint)
    stat = checkpoint.stat()
    return {"checkpoint": checkpoint.name, "bytes": int(stat.st_size), "mtime_ns": int(stat.st_mtime_ns),
            "sha256": file_digest(checkpoint)}  # fmt: skip


def run_of_artifact(artifact: Path) -> Path | None:
    """The run folder an artifact sits in (``RUN/exports/<file>`` with ``RUN/checkpoints``), or None."""
    folder = Path(artifact).parent
    run = folder.parent
    return run if folder.name == "exports" and (run / "checkpoints").is_dir() else None


@dataclasses.dataclass(frozen=True)
class StaleExport:
    """An artifact made from an earlier content of ``checkpoint`` (``why`` says how that is known)."""

    artifact: Path
    checkpoint: Path
    why: str


def stale_export(artifact: Path, metadata: dict[str, Any], run: Path) -> StaleExport | None:
    """Whether ``artifact`` (of the run folder ``run``) was exported from an earlier content of its
    checkpoint. With a recorded ``source``: its size and digest against the checkpoint's now (the
    digest is computed only when size or time differ). An artifact exported before modforge recorded
    its source names its checkpoint in its file name (``best-onnx.onnx``: ``best.pt``): it is stale
    when that checkpoint is newer than it. None when fresh, or when the checkpoint is gone (there is
    nothing newer to export from)."""
    artifact, run = Path(artifact), Path(run)
    source = metadata.get("source")
    if isinstance(source, dict) and isinstance(source.get("sha256"), str) and isinstance(source.get("checkpoint"), str):
        checkpoint = run / "checkpoints" / Path(source["checkpoint"]).name
        if not checkpoint.is_file():
            return None
        stat = checkpoint.stat()
        if stat.st_size == source.get("bytes") and stat.st_mtime_ns == source.get("mtime_ns"):
            return None
        if stat.st_size == source.get("bytes") and file_digest(checkpoint) == source["sha256"]:
            return None
        return StaleExport(artifact, checkpoint, f"its content has changed since {artifact.name} was exported from it")
    engine = metadata.get("engine")
    stem = (
        artifact.stem.rsplit(f"-{engine}", 1)[0] if isinstance(engine, str) and f"-{engine}" in artifact.stem else None
    )
    checkpoint = run / "checkpoints" / f"{stem}.pt"
    if stem is None or not checkpoint.is_file():
        return None
    if checkpoint.stat().st_mtime_ns <= artifact.stat().st_mtime_ns:
        return None
    return StaleExport(artifact, checkpoint, f"it was written after {artifact.name} (which records no source digest)")
