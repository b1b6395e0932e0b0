"""The trials a spoofing metric reads, validated once for all of them: CM trials (scores and
bona fide / spoof labels), ASV trials by class (target, nontarget, spoof, from arrays or an ASV
score file) and the per-attack split of CM trials.

Every metric module (:mod:`.detection`, :mod:`.challenge_metrics`, :mod:`.sasv_metrics`,
:mod:`.bootstrap`) takes its inputs through here, so a bad input is refused with the same
message whichever metric is asked.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Sequence
from typing import Any

import numpy as np

__all__ = ["ASV_CLASSES", "asv_classes", "per_attack", "read_asv_scores", "scores_labels", "target_vs_nontarget"]

ASV_CLASSES = ("target", "nontarget", "spoof")
"""The ASV trial classes of the tandem metrics (ASVspoof 2019 ASV keys)."""


def scores_labels(scores: Any, labels: Any, *, need_both: bool = True) -> tuple[np.ndarray, np.ndarray]:
    """Validated CM trials: ``(scores float64 [N], labels bool [N], True = bona fide)``.

    Labels are 1 / 0 (any numeric type) or bools; scores must be finite. ``need_both``: refuse a
    set without bona fide or without spoof trials (no error rate is defined then)."""
    s = np.asarray(scores, dtype=np.float64).reshape(-1)
    raw = np.asarray(labels).reshape(-1)
    if s.shape != raw.shape:
        raise ValueError(f"scores and labels must have the same length, got {s.size} scores and {raw.size} labels")
    if not np.isfinite(s).all():
        raise ValueError(f"scores must be finite numbers; {int((~np.isfinite(s)).sum())} are NaN or infinite")
    if raw.dtype == bool:
        y = raw
    else:
        try:
            numeric = raw.astype(np.float64)
        except (TypeError, ValueError):
            raise ValueError(f"labels must be 1 (bona fide) or 0 (spoof), got values of type {raw.dtype}") from None
        bad = ~np.isin(numeric, (0.0, 1.0))
        if bad.any():
            shown = ", ".join(str(v) for v in np.unique(raw[bad])[:5])
            raise ValueError(f"labels must be 1 (bona fide) or 0 (spoof), got {shown}")
        y = numeric == 1.0
    if need_both and (y.all() or not y.any()):
        missing = "spoof (label 0)" if y.all() else "bona fide (label 1)"
        raise ValueError(f"need both bona fide and spoof trials; there is no {missing} trial among {y.size}")
    return s, y


def per_attack(
    scores: Any, labels: Any, attacks: Sequence[Any] | np.ndarray, eer: Callable[[Any, Any], tuple[float, float]]
) -> dict[str, float]:
    """The EER (``eer(scores, labels)[0]``) of each attack's spoofs against *all* bona fide
    trials: ``{attack id (str): EER}`` sorted by id. ``attacks``: one id per trial (those of
    bona fide trials are ignored)."""
    s, y = scores_labels(scores, labels)
    ids = np.asarray(attacks, dtype=object).reshape(-1)
    if ids.size != s.size:
        raise ValueError(f"attacks must have one id per trial ({s.size}), got {ids.size}")
    names = np.array([str(a) for a in ids], dtype=object)
    result = {}
    for attack in sorted(set(names[~y])):
        keep = y | (names == attack)
        result[attack] = eer(s[keep], y[keep])[0]
    return result


def asv_classes(asv_scores: Any, asv_labels: Any) -> dict[str, np.ndarray]:
    """Validated ASV trials by class: ``{"target", "nontarget", "spoof": float64 scores}``, each
    class present. Labels are matched without case or surrounding blanks."""
    s = np.asarray(asv_scores, dtype=np.float64).reshape(-1)
    keys = np.array([str(k).strip().lower() for k in np.asarray(asv_labels, dtype=object).reshape(-1)])
    if s.shape != keys.shape:
        raise ValueError(f"asv_scores and asv_labels must have the same length, got {s.size} and {keys.size}")
    if not np.isfinite(s).all():
        raise ValueError("asv_scores must be finite numbers")
    unknown = sorted(set(keys) - set(ASV_CLASSES))
    if unknown:
        raise ValueError(f"ASV labels must be one of {', '.join(ASV_CLASSES)}; got {', '.join(unknown[:5])}")
    groups = {name: s[keys == name] for name in ASV_CLASSES}
    empty = [name for name, g in groups.items() if g.size == 0]
    if empty:
        raise ValueError(
            f"the t-DCF needs ASV scores of target, nontarget and spoof trials; none for {', '.join(empty)}"
        )
    return groups


def target_vs_nontarget(groups: dict[str, np.ndarray]) -> tuple[np.ndarray, np.ndarray]:
    """The trials of the ASV's own EER, whose threshold is its operating point in the t-DCF: the
    target then the nontarget scores of :func:`asv_classes`, with ``True`` for a target."""
    both = np.concatenate((groups["target"], groups["nontarget"]))
    is_target = np.concatenate((np.ones(groups["target"].size, bool), np.zeros(groups["nontarget"].size, bool)))
    return both, is_target


def read_asv_scores(path: str) -> tuple[np.ndarray, np.ndarray]:
    """Read an ASVspoof 2019 ASV score file: ``(scores float64, classes str)``.

    One trial per line, whitespace-separated, ``speaker_or_utterance class score`` — the
    class (``target``, ``nontarget`` or ``spoof``) is the second-to-last field and the
    score the last, so both the 3-column file of the ASVspoof 2019 package and the
    6-column one of its later t-DCF package read. Blank lines and lines starting with
    ``#`` are skipped.

    Raises:
        ValueError: a missing, unreadable, special (a FIFO) or oversized file (more than
            :data:`~modforge.core.safe_files.MAX_TEXT_TABLE_BYTES`), or a malformed line (named
            with its number, at most 200 characters of it quoted).
    """
    from ...core.safe_files import data_lines
    from ...core.text_safety import quoted

    path = os.path.expanduser(str(path))
    scores, classes = [], []
    for number, line in data_lines(path, what="ASV score file", error=ValueError):
        fields = line.split()
        where = f"{path}:{number}"
        if len(fields) < 3:
            raise ValueError(f"{where}: expected 'speaker_or_utterance class score', got {quoted(line.strip())}")
        key = fields[-2].lower()
        if key not in ASV_CLASSES:
            raise ValueError(f"{where}: class must be one of {', '.join(ASV_CLASSES)}, got {quoted(fields[-2])}")
        try:
            score = float(fields[-1])
        except ValueError:
            raise ValueError(f"{where}: the score {quoted(fields[-1])} is not a number") from None
        if not np.isfinite(score):
            raise ValueError(f"{where}: the score {quoted(fields[-1])} is not finite")
        scores.append(score)
        classes.append(key)
    missing = [name for name in ASV_CLASSES if name not in classes]
    if missing:
        raise ValueError(f"the ASV score file {path!r} has no {', '.join(missing)} trials (the t-DCF needs all three)")
    return np.asarray(scores, dtype=np.float64), np.asarray(classes)
