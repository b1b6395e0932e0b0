"""Score tables: one detection score per file, written as an ASVspoof-style score file.

A model scores batches; a file scored in windows gets several rows with the same
``index`` — its score is their mean. The score file has one line per file,
``utt_id score label attack`` (label ``bonafide``/``spoof``; attack ``-`` for bona fide;
blanks inside an attack name become ``_``; an utterance id may hold blanks),
sorted as the split lists them, scores printed with 8 significant digits.
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Sequence
from pathlib import Path

import numpy as np
import torch

__all__ = ["ScoreTable", "read_score_file"]


@dataclasses.dataclass
class ScoreTable:
    """Per-file scores of one split.

    Attributes:
        utt_ids, attacks: per file, in split order.
        scores: float64 [N], higher = more bona fide.
        labels: int [N], 1 bona fide, 0 spoof.
        conditions: per-trial key columns, ``{column: [value per file]}`` (ASVspoof 2021's
            codec, subset…), from the utterances' ``conditions``; None when they carry none.
            Not written to the score file.
    """

    utt_ids: list[str]
    scores: np.ndarray
    labels: np.ndarray
    attacks: list[str]
    conditions: dict[str, list[str]] | None = None

    @classmethod
    def from_outputs(cls, outputs: dict[str, torch.Tensor], utterances: Sequence) -> ScoreTable:
        """Average the rows of each file (``index``) into one score; ``utterances[i]`` names file i."""
        index = outputs["index"].long().reshape(-1)
        score = outputs["score"].double().reshape(-1)
        if len(index) != len(score):
            raise ValueError(f"{len(score)} scores for {len(index)} batch rows: the model must score every row")
        present = torch.unique(index)
        sums = torch.zeros(len(utterances), dtype=torch.float64).index_add_(0, index, score)
        counts = torch.zeros(len(utterances), dtype=torch.float64).index_add_(0, index, torch.ones_like(score))
        order = present.tolist()
        means = (sums[present] / counts[present]).numpy()
        picked = [utterances[i] for i in order]
        return cls(
            [u.utt_id for u in picked],
            means,
            np.array([u.label for u in picked], dtype=np.int64),
            [u.attack for u in picked],
            _conditions(picked),
        )

    def __len__(self) -> int:
        return len(self.utt_ids)

    def write(self, path: Path) -> Path:
        """Write ``utt_id score label attack`` lines to ``path`` (atomically: temp file + rename)."""
        from ...core.safe_files import atomic_open

        path = Path(path)
        with atomic_open(path, "w") as handle:
            for utt, score, label, attack in zip(self.utt_ids, self.scores, self.labels, self.attacks, strict=True):
                attack = "_".join(str(attack).split()) or "-"  # one field: the last of the line
                handle.write(f"{utt} {score:.8g} {'bonafide' if label == 1 else 'spoof'} {attack}\n")
        return path


def _conditions(utterances: Sequence) -> dict[str, list[str]] | None:
    """Column-wise key columns of utterances that carry ``conditions`` (``-`` where one lacks a column)."""
    rows = [getattr(u, "conditions", None) for u in utterances]
    if not rows or not all(rows):
        return None
    names = list(dict.fromkeys(k for row in rows for k in row))
    return {name: [str(row.get(name, "-")) for row in rows] for name in names}


def _number(text: str) -> float | None:
    try:
        return float(text)
    except ValueError:
        return None


def read_score_file(path: str | Path) -> ScoreTable:
    """Read a CM score file: modforge's (:meth:`ScoreTable.write`: ``utt_id score label attack``)
    or the ASVspoof 2019 organisers' (``utt_id attack label score``, e.g. ``LA_E_2834763 A11
    spoof -3.2``), told apart line by line by which field is the number — to compare systems, or
    to score another toolkit's output with ``modforge score``. The file must be a regular file of at
    most :data:`~modforge.core.safe_files.MAX_TEXT_TABLE_BYTES`; an error quotes at most 200
    characters of a line."""
    from ...core.errors import UsageError
    from ...core.safe_files import data_lines
    from ...core.text_safety import quoted

    path = Path(path)
    utts, scores, labels, attacks = [], [], [], []
    for number, line in data_lines(path, what="score file"):
        fields = line.rsplit(maxsplit=3)  # an utterance id may hold spaces (a manifest path); the rest may not
        if len(fields) != 4 or fields[2] not in ("bonafide", "spoof"):
            raise UsageError(f"{path}:{number}: expected 'utt_id score bonafide|spoof attack' (modforge) or "
                             f"'utt_id attack bonafide|spoof score' (ASVspoof 2019), got {quoted(line.strip())}")  # fmt: skip
        score, attack = _number(fields[1]), fields[3]
        if score is None:  # the organisers' order: the score last
            score, attack = _number(fields[3]), fields[1]
        if score is None or not math.isfinite(score):
            raise UsageError(f"{path}:{number}: no finite score in {quoted(line.strip())}")
        utts.append(fields[0])
        scores.append(score)
        labels.append(1 if fields[2] == "bonafide" else 0)
        attacks.append(attack)
    if not utts:
        raise UsageError(f"{path}: no scores in the file")
    return ScoreTable(utts, np.array(scores, dtype=np.float64), np.array(labels, dtype=np.int64), attacks)
