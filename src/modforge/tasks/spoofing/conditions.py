"""ASVspoof 2021 per-condition and per-subset report, as the official eval-package prints it.

The 2021 keys (``trial_metadata.txt``) give every trial its codec, transmission or source,
attack, trim flag and subset (``progress`` / ``eval`` / ``hidden``). The organisers' package
(asvspoof-challenge/2021 ``eval-package/main.py`` @ 9b33f5e, ``compute_decomposed_mintdcf_eer``)
prints, for one subset, a table whose rows are one factor and columns another, each with a
``Pooled`` entry:

* LA: rows attack A07–A19 (a spoof-only factor: the cell's spoofs of that attack against
  *all* of the cell's bona fide trials), columns codec C1–C7 (``none`` … ``opus``: bona fide
  and spoofs both filtered); EER and min t-DCF.
* DF: rows vocoder family (traditional, waveform concatenation, neural AR, neural non-AR,
  unknown; spoof-only), columns compression C1–C9 (``nocodec`` … ``oggm4a``); EER only.

Other corpora give their own layout (:func:`attack_by_condition`): the synthetic corpus reports
its eval attacks × transmission ``channel`` (none, telephone, reverb, noise) the same way.

The ``Pooled``/``Pooled`` cell is the pooled EER (min t-DCF) of the subset. A cell without
bona fide or spoofed trials is NaN (the package leaves it blank). EERs are the package's
``compute_eer`` (:func:`.challenge_metrics.eer`); kept as fractions here, printed in % by
:func:`format_report` as the package does (``1.2f``; min t-DCF ``1.4f``).

**min t-DCF (LA) is the revised t-DCF of ASVspoof 2021**, not the 2019 one of
:func:`.challenge_metrics.min_tdcf`: per cell the package takes the ASV scores of the same
subset and condition (target/nontarget filtered by a "both" factor, spoofs by both factors),
sets the ASV threshold at their EER, derives ``C0 = Ptar Cmiss Pmiss_asv + Pnon Cfa Pfa_asv``,
``C1 = Ptar Cmiss − C0``, ``C2 = Pspoof Cfa_spoof Pfa_spoof_asv`` and minimises
``(C0 + C1 Pmiss_cm + C2 Pfa_cm) / (C0 + min(C1, C2))`` over the trial-by-trial CM curve.
That arithmetic is :func:`tdcf_2021_coefficients` / :func:`min_tdcf_2021` below, in the
package's operation order, so the values are its own to the last bit.
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Mapping, Sequence
from typing import Any, Optional

import numpy as np

from .challenge_metrics import eer
from .curves import asv_rates
from .sasv_metrics import normalised_min_tdcf, tdcf_2021_costs
from .trials import target_vs_nontarget

__all__ = [
    "DF_LAYOUT",
    "LA_LAYOUT",
    "POOLED",
    "SUBSETS",
    "ConditionLayout",
    "Factor",
    "attack_by_condition",
    "condition_report",
    "format_report",
    "layout_for",
    "min_tdcf_2021",
    "tdcf_2021_coefficients",
    "text_table",
]

POOLED = "Pooled"
SUBSETS = ("eval", "progress", "hidden")
"""The subsets of the 2021 keys, in the order the report lists them."""

P_SPOOF = 0.05
COST_MODEL = {  # eval-package config.py: the ASVspoof 2021 ranking's cost model
    "Pspoof": P_SPOOF, "Ptar": (1 - P_SPOOF) * 0.99, "Pnon": (1 - P_SPOOF) * 0.01,
    "Cmiss": 1, "Cfa": 10, "Cfa_spoof": 10,
}  # fmt: skip


@dataclasses.dataclass(frozen=True)
class Factor:
    """One axis of the table: the trial column it reads, its values and printed tags (the
    last being ``Pooled``), and whether it filters only spoofs (an attack, a vocoder)."""

    column: str
    values: tuple[str, ...]
    tags: tuple[str, ...]
    spoof_only: bool


@dataclasses.dataclass(frozen=True)
class ConditionLayout:
    """A track's table: rows, columns, and whether min t-DCF is reported."""

    track: str
    rows: Factor
    cols: Factor
    tdcf: bool


_ATTACKS = tuple(f"A{i:02d}" for i in range(7, 20)) + (POOLED,)
LA_LAYOUT = ConditionLayout(
    "LA",
    Factor("attack", _ATTACKS, _ATTACKS, True),
    Factor("codec", ("none", "alaw", "pstn", "g722", "ulaw", "gsm", "opus", POOLED),
           ("C1", "C2", "C3", "C4", "C5", "C6", "C7", POOLED), False),
    tdcf=True,
)  # fmt: skip
DF_LAYOUT = ConditionLayout(
    "DF",
    Factor("vocoder", ("traditional_vocoder", "waveform_concatenation", "neural_vocoder_autoregressive",
                       "neural_vocoder_nonautoregressive", "unknown", POOLED),
           ("Traditional", "Wav.Concat.", "Neural AR", "Neural non-AR", "Unknown", POOLED), True),
    Factor("codec", ("nocodec", "low_mp3", "high_mp3", "low_m4a", "high_m4a", "low_ogg", "high_ogg", "mp3m4a",
                     "oggm4a", POOLED), ("C1", "C2", "C3", "C4", "C5", "C6", "C7", "C8", "C9", POOLED), False),
    tdcf=False,
)  # fmt: skip


def attack_by_condition(name: str, attacks: Sequence[str], column: str, conditions: Sequence[str]) -> ConditionLayout:
    """A layout like LA's for another corpus: rows its ``attacks`` (spoof-only), columns the values of
    key column ``column`` (bona fide and spoofs both filtered), tags the values themselves; no t-DCF.
    The synthetic corpus's eval split uses it with its transmission ``channel``."""
    rows, cols = (*attacks, POOLED), (*conditions, POOLED)
    return ConditionLayout(name, Factor("attack", rows, rows, True), Factor(column, cols, cols, False), tdcf=False)


def layout_for(track: str | ConditionLayout | Mapping[str, Any]) -> ConditionLayout:
    """The layout of track ``la`` or ``df`` (any case); a :class:`ConditionLayout` is its own; a
    dataset's ``{"name", "attacks", "column", "values"}`` is :func:`attack_by_condition`'s."""
    if isinstance(track, ConditionLayout):
        return track
    if isinstance(track, Mapping):
        return attack_by_condition(track["name"], track["attacks"], track["column"], track["values"])
    layouts = {"LA": LA_LAYOUT, "DF": DF_LAYOUT}
    try:
        return layouts[str(track).upper()]
    except KeyError:
        raise ValueError(f"unknown ASVspoof 2021 track {track!r} (expected la or df)") from None


def tdcf_2021_coefficients(tar: np.ndarray, non: np.ndarray, spoof: np.ndarray) -> tuple[float, float, float]:
    """``(C0, C1, C2)`` of the 2021 t-DCF from ASV target, nontarget and spoof scores
    (``eval_wrapper.get_tDCF_C012_from_asv_scores``); NaNs when one of the three is empty."""
    tar, non, spoof = (np.asarray(a, dtype=np.float64) for a in (tar, non, spoof))
    if not (tar.size and non.size and spoof.size):
        return math.nan, math.nan, math.nan
    groups = {"target": tar, "nontarget": non, "spoof": spoof}
    rates = asv_rates(groups, eer(*target_vs_nontarget(groups))[1])
    cm = COST_MODEL
    return tdcf_2021_costs(rates["p_miss"], rates["p_fa"], rates["p_fa_spoof"], p_target=cm["Ptar"], p_nontarget=cm["Pnon"],
                           p_spoof=cm["Pspoof"], c_miss=cm["Cmiss"], c_fa=cm["Cfa"], c_fa_spoof=cm["Cfa_spoof"])  # fmt: skip


def min_tdcf_2021(scores: Any, labels: Any, c0: float, c1: float, c2: float) -> float:
    """Normalised min t-DCF of ASVspoof 2021 (``eval_wrapper.get_mintDCF_eer``) given C0–C2 (NaN
    when they are: a cell without ASV trials of every class)."""
    if math.isnan(c0) or math.isnan(c1) or math.isnan(c2):
        return math.nan
    return normalised_min_tdcf(scores, labels, c0, c1, c2)


def _select(column: Sequence[str] | None, value: str, count: int) -> np.ndarray:
    if value == POOLED:
        return np.ones(count, bool)
    if column is None:
        return np.zeros(count, bool)
    return np.asarray(column, dtype=object) == value


def _cell_masks(columns: Mapping[str, Sequence[str]], count: int, layout: ConditionLayout, row: str, col: str):
    """(bona fide filter, spoof filter) of one cell, over ``count`` trials."""
    bona, spoof = np.ones(count, bool), np.ones(count, bool)
    for factor, value in ((layout.rows, row), (layout.cols, col)):
        chosen = _select(columns.get(factor.column), value, count)
        spoof &= chosen
        if not factor.spoof_only:
            bona &= chosen
    return bona, spoof


def _subset_table(
    scores: np.ndarray, labels: np.ndarray, columns: Mapping[str, Sequence[str]], layout: ConditionLayout,
    asv: Optional[tuple[np.ndarray, np.ndarray, Mapping[str, Sequence[str]]]],
) -> dict[str, Any]:
    n = scores.size
    eers: dict[str, dict[str, float]] = {}
    tdcfs: dict[str, dict[str, float]] = {}
    for row, row_tag in zip(layout.rows.values, layout.rows.tags, strict=True):
        eers[row_tag], tdcfs[row_tag] = {}, {}
        for col, col_tag in zip(layout.cols.values, layout.cols.tags, strict=True):
            bona_f, spoof_f = _cell_masks(columns, n, layout, row, col)
            keep = (bona_f & (labels == 1)) | (spoof_f & (labels == 0))
            s, y = scores[keep], labels[keep]
            complete = bool((y == 1).any() and (y == 0).any())
            eers[row_tag][col_tag] = eer(s, y)[0] if complete else math.nan
            if asv is not None:
                a_scores, a_labels, a_columns = asv
                a_bona, a_spoof = _cell_masks(a_columns, a_scores.size, layout, row, col)
                coeffs = tdcf_2021_coefficients(
                    a_scores[a_bona & (a_labels == "target")], a_scores[a_bona & (a_labels == "nontarget")],
                    a_scores[a_spoof & (a_labels == "spoof")],
                )
                tdcfs[row_tag][col_tag] = min_tdcf_2021(s, y, *coeffs) if complete else math.nan
    out: dict[str, Any] = {"trials": n, "eer": eers}
    if asv is not None:
        out["min_tdcf"] = tdcfs
    return out


def condition_report(
    scores: Any, labels: Any, columns: Mapping[str, Sequence[str]], track: str | ConditionLayout | Mapping[str, Any], asv: Any = None,
) -> dict[str, Any]:
    """The per-subset condition tables of an ASVspoof 2021 score set.

    Args:
        scores: CM score per trial (higher = bona fide).
        labels: 1 bona fide, 0 spoof per trial.
        columns: per-trial key columns (``subset``, ``attack``, ``codec``, ``vocoder``,
            …) — :attr:`.scores.ScoreTable.conditions`.
        track: ``la`` or ``df``, or another corpus's layout (:func:`layout_for`).
        asv: for LA's min t-DCF, the release's ASV trials: an object with ``scores``
            (float [M]), ``labels`` (``target``/``nontarget``/``spoof`` per trial) and
            ``columns`` (the same key columns, ``subset`` included); None: no t-DCF.

    Returns:
        ``{"track", "rows", "columns", "subsets": {subset: {"trials", "eer": {row: {col: x}},
        "min_tdcf": …}}}`` for each of eval, progress, hidden present in ``columns["subset"]``
        (one ``all`` entry when the trials carry no subset). EERs are fractions.
    """
    layout = layout_for(track)
    s = np.asarray(scores, dtype=np.float64).reshape(-1)
    y = np.asarray(labels).astype(np.int64).reshape(-1)
    subsets = columns.get("subset")
    use_asv = asv is not None and layout.tdcf
    asv_subsets = None
    if use_asv:
        a_scores = np.asarray(asv.scores, dtype=np.float64)
        a_labels = np.asarray(asv.labels, dtype=object)
        asv_subsets = np.asarray(asv.columns.get("subset", ["all"] * a_scores.size), dtype=object)
    names = [x for x in SUBSETS if subsets is not None and x in set(subsets)] if subsets is not None else ["all"]
    tables: dict[str, Any] = {}
    for name in names:
        pick = np.ones(s.size, bool) if subsets is None else np.asarray(subsets, dtype=object) == name
        cols = {k: [v for v, p in zip(vals, pick, strict=True) if p] for k, vals in columns.items()}
        asv_part = None
        if use_asv:
            a_pick = asv_subsets == name if subsets is not None else np.ones(a_scores.size, bool)
            a_cols = {k: np.asarray(v, dtype=object)[a_pick] for k, v in asv.columns.items()}
            asv_part = (a_scores[a_pick], a_labels[a_pick], a_cols)
        tables[name] = _subset_table(s[pick], y[pick], cols, layout, asv_part)
    return {"track": layout.track, "rows": layout.rows.column, "columns": layout.cols.column, "subsets": tables}


def text_table(values: Mapping[str, Mapping[str, float]], scale: float = 1.0, fmt: str = "1.2f") -> str:
    """One ``{row: {col: value}}`` table as the eval-package's ``table_API.print_table`` prints
    its text table: values times ``scale`` in ``fmt``, NaN cells blank, every cell centred to
    the widest tag or number (``nan`` counted), cells joined by one space."""
    row_tags = list(values)
    col_tags = list(next(iter(values.values())))
    grid = [[float(values[r][c]) * scale for c in col_tags] for r in row_tags]
    row_width = max(len(t) for t in row_tags)
    width = max([len(t) for t in col_tags] + [len(format(v, fmt)) for line in grid for v in line])
    lines = [" ".join([f"{'':^{row_width}}"] + [f"{t:^{width}}" for t in col_tags])]
    for tag, line in zip(row_tags, grid, strict=True):
        cells = [f"{'' if math.isnan(v) or math.isinf(v) else format(v, fmt):^{width}}" for v in line]
        lines.append(" ".join([f"{tag:^{row_width}}"] + cells))
    return "\n".join(lines) + "\n"


def format_report(report: Mapping[str, Any]) -> str:
    """The report as plain-text tables, one per subset and measure: EER in % (``1.2f``) and
    min t-DCF (``1.4f``), the package's number formats; empty cells where it prints none."""
    parts = []
    for name, table in report["subsets"].items():
        if "min_tdcf" in table:
            parts.append(f"== {report['track']} {name}: min t-DCF ({table['trials']} trials)\n")
            parts.append(text_table(table["min_tdcf"], 1.0, "1.4f"))
        parts.append(f"== {report['track']} {name}: EER % ({table['trials']} trials)\n")
        parts.append(text_table(table["eer"], 100.0, "1.2f"))
    return "".join(parts)
