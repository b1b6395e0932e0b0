"""Writing a generated data set to disk safely — shared by the synthetic spoofing corpus and
the synthetic shapes set.

A set is written into a staging folder beside its target and moved into place only when
complete (:func:`publish`), so an interrupted run leaves no half-written set; an existing
folder is replaced only when asked and only when it holds nothing but an earlier set of the
same kind (:func:`check_target`), and a failed replacement puts the earlier set back.
"""

from __future__ import annotations

import shutil
import tempfile
from collections.abc import Collection, Sequence
from pathlib import Path

__all__ = ["check_target", "publish", "split_counts"]


def split_counts(total: int, fractions: Sequence[float]) -> list[int]:
    """``total`` items divided by ``fractions`` (rounded; the last split takes the rest)."""
    counts = [int(round(total * f)) for f in fractions[:-1]]
    counts.append(total - sum(counts))
    return counts


def check_target(out: Path, overwrite: bool, *, entries: Collection[str], what: str) -> None:
    """Refuse an output folder that is a file, that is not empty (unless ``overwrite``), or
    that holds anything but the ``entries`` of an earlier ``what`` (even with ``overwrite``).

    Raises:
        ValueError: naming the folder and what to do.
    """
    if out.exists() and not out.is_dir():
        raise ValueError(f"output path {out} exists and is not a directory")
    if not out.is_dir():
        return
    present = sorted(p.name for p in out.iterdir())
    if not present:
        return
    if not overwrite:
        raise ValueError(
            f"output directory {out} is not empty ({len(present)} entries); choose an empty or new directory, "
            f"or pass overwrite=True to replace a {what} made earlier"
        )
    foreign = [name for name in present if name not in entries]
    if foreign:
        raise ValueError(
            f"output directory {out} holds files that are not part of a {what} ({', '.join(foreign[:5])}); "
            "refusing to replace it even with overwrite=True"
        )


def publish(staging: Path, out: Path) -> None:
    """Move the finished staging folder to ``out``, replacing an empty folder or an earlier set."""
    if not out.exists():
        staging.rename(out)
        return
    if not any(out.iterdir()):
        out.rmdir()
        staging.rename(out)
        return
    retired = Path(tempfile.mkdtemp(prefix=f".{out.name}.old-", dir=out.parent))
    retired.rmdir()
    out.rename(retired)
    try:
        staging.rename(out)
    except OSError:
        retired.rename(out)  # put the earlier set back: a failed overwrite loses nothing
        raise
    shutil.rmtree(retired, ignore_errors=True)
