"""Reading the lists that say which audio file is bona fide and which is spoofed.

Four formats, one result — a list of :class:`Utterance`:

==================  ==========================================================  =================
format              one line                                                    audio file
==================  ==========================================================  =================
``asvspoof2019``    ``LA_0079 LA_T_1138215 - A01 spoof``                        ``<utt>.<ext>``
                    (speaker, utterance, unused, attack or ``-``, key)
``asvspoof5``       ``T_4850 T_0000000000 F - - - AC3 A05 spoof -``             ``<utt>.<ext>``
                    (speaker, utterance, gender, codec, codec quality, codec
                    seed, attack tag, attack label, key, unused)
``manifest``        CSV/Parquet with ``path,label[,id][,attack][,speaker]``     ``path``
                    (DeepFense's manifest; label ``bonafide``/``spoof`` or 1/0)
``in_the_wild``     ``meta.csv``: ``file,speaker,label`` (label ``bona-fide`` /  ``file``
                    ``spoof``)
==================  ==========================================================  =================

Labels: 1 = bona fide, 0 = spoof. A malformed line is a :class:`ProtocolError` naming the
file and line number; with ``skip_bad=True`` such lines are counted and skipped instead
(:class:`ParseReport` says how many, and the first few reasons).
"""

from __future__ import annotations

import csv
import dataclasses
from collections.abc import Callable, Iterable, Iterator
from pathlib import Path
from typing import TypeVar

from ...core.errors import UsageError
from ...core.safe_files import UnsafePathError, data_lines, open_bounded_file, open_text_table, relative_name
from ...core.text_safety import quoted

__all__ = [
    "BONAFIDE",
    "SPOOF",
    "KeyedUtterance",
    "ParseReport",
    "ProtocolError",
    "Utterance",
    "parse_label",
    "read_asvspoof2019",
    "read_asvspoof5",
    "read_in_the_wild",
    "read_manifest",
]

BONAFIDE, SPOOF = 1, 0
T = TypeVar("T")  # one entry of a protocol or table: a line's fields, a row
U = TypeVar("U", bound="Utterance")
_LABELS = {
    "bonafide": BONAFIDE, "bona-fide": BONAFIDE, "bona_fide": BONAFIDE, "bona fide": BONAFIDE, "genuine": BONAFIDE,
    "real": BONAFIDE, "1": BONAFIDE, "spoof": SPOOF, "fake": SPOOF, "deepfake": SPOOF, "0": SPOOF,
}  # fmt: skip


class ProtocolError(UsageError):
    """A protocol or manifest line that cannot be read (located by file and line)."""


@dataclasses.dataclass(frozen=True)
class Utterance:
    """One labelled audio file.

    Attributes:
        utt_id: the utterance's name (unique within a split).
        path: the audio file.
        label: 1 bona fide, 0 spoof.
        attack: the attack's name (``-`` for bona fide, ``spoof`` when the format has none).
        speaker: the speaker's id, or ``-``.
        source: ``file:line`` the entry came from, for messages.
    """

    utt_id: str
    path: Path
    label: int
    attack: str = "-"
    speaker: str = "-"
    source: str = ""


@dataclasses.dataclass(frozen=True)
class KeyedUtterance(Utterance):
    """An :class:`Utterance` with key columns beyond its label and attack (ASVspoof 2021's codec and
    subset, the synthetic corpus's channel…), ``{column: value}``, for per-condition reports."""

    conditions: dict = dataclasses.field(default_factory=dict, compare=False, hash=False)


@dataclasses.dataclass
class ParseReport:
    """What ``skip_bad`` left out."""

    skipped: int = 0
    reasons: list[str] = dataclasses.field(default_factory=list)

    def add(self, reason: str) -> None:
        self.skipped += 1
        if len(self.reasons) < 5:
            self.reasons.append(reason)

    def __str__(self) -> str:
        if not self.skipped:
            return "nothing skipped"
        more = " ..." if self.skipped > len(self.reasons) else ""
        return f"skipped {self.skipped} bad entries: " + "; ".join(self.reasons) + more


def parse_label(text: str) -> int:
    """``bonafide``/``bona-fide``/``genuine``/``real``/``1`` → 1; ``spoof``/``fake``/``0`` → 0."""
    try:
        return _LABELS[str(text).strip().lower()]
    except KeyError:
        raise ValueError(f"unknown label {quoted(text)} (expected bonafide/bona-fide/1 or spoof/fake/0)") from None


def _lines(path: Path) -> Iterator[tuple[int, list[str]]]:
    """``(line number, fields)`` of a protocol's lines (blank ones and ``#`` comments skipped), read from a
    regular file of at most :data:`~modforge.core.safe_files.MAX_TEXT_TABLE_BYTES`."""
    for number, line in data_lines(path, what="protocol file", error=ProtocolError):
        yield number, line.split()


def _name(name: str, what: str) -> str:
    """A file name from a protocol or metadata file, as a ``ValueError`` (located and counted by
    :func:`_collect`) when it would climb out of the audio folder."""
    try:
        return relative_name(name, what)
    except UnsafePathError as exc:
        raise ValueError(str(exc)) from None


def _audio_path(audio_dir: Path, name: str, ext: str) -> Path:
    candidate = audio_dir / _name(name, "file name")
    return candidate if candidate.suffix and ext in ("", candidate.suffix.lstrip(".")) else audio_dir / f"{name}.{ext}"


def _collect(
    path: Path, numbered: Iterable[tuple[int, T]], parse: Callable[[T, str], U], skip_bad: bool,
    report: ParseReport | None,
) -> list[U]:
    """Parse each ``(line number, entry)`` of the file ``path`` with ``parse(entry, "path:line")``; a failure
    raises (located) or, with ``skip_bad``, is counted."""
    out, seen = [], {}
    for number, entry in numbered:
        where = f"{path}:{number}"
        try:
            utt = parse(entry, where)
            if utt.utt_id in seen:
                raise ValueError(f"utterance {quoted(utt.utt_id)} already listed at {seen[utt.utt_id]}")
            seen[utt.utt_id] = where
            out.append(utt)
        except (ValueError, IndexError) as exc:
            if not skip_bad:
                raise ProtocolError(f"{where}: {exc}") from None
            if report is not None:
                report.add(f"{where}: {exc}")
    return out


def _need(fields: list[str], count: int, layout: str) -> None:
    if len(fields) < count:
        raise ValueError(f"expected {count} fields ({layout}), got {len(fields)}: {quoted(' '.join(fields))}")


def read_asvspoof2019(
    protocol: str | Path, audio_dir: str | Path, *, ext: str = "flac", skip_bad: bool = False,
    report: ParseReport | None = None,
) -> list[Utterance]:
    """ASVspoof 2019 LA/PA countermeasure protocol: ``speaker utt - attack key``."""
    protocol, audio_dir = Path(protocol), Path(audio_dir)

    def parse(fields: list[str], where: str) -> Utterance:
        _need(fields, 5, "speaker utt - attack key")
        speaker, utt, _, attack, key = fields[:5]
        label = parse_label(key)
        attack = "-" if label == BONAFIDE else (attack if attack != "-" else "spoof")
        return Utterance(utt, _audio_path(audio_dir, utt, ext), label, attack, speaker, where)

    return _collect(protocol, _lines(protocol), parse, skip_bad, report)


def read_asvspoof5(
    protocol: str | Path, audio_dir: str | Path, *, ext: str = "flac", skip_bad: bool = False,
    report: ParseReport | None = None,
) -> list[Utterance]:
    """ASVspoof 5 protocol (``ASVspoof5.train.tsv`` ...; whitespace-separated): speaker,
    file, gender, codec, codec quality, codec seed, attack tag, attack label, key, unused.
    The attack is the attack label (``A01``...); ``-`` for bona fide."""
    protocol, audio_dir = Path(protocol), Path(audio_dir)
    layout = "speaker file gender codec codec_q codec_seed attack_tag attack_label key"

    def parse(fields: list[str], where: str) -> Utterance:
        _need(fields, 9, layout)
        label = parse_label(fields[8])
        attack = "-" if label == BONAFIDE else (fields[7] if fields[7] != "-" else "spoof")
        return Utterance(fields[1], _audio_path(audio_dir, fields[1], ext), label, attack, fields[0], where)

    return _collect(protocol, _lines(protocol), parse, skip_bad, report)


def _table_rows(path: Path, required: tuple[str, ...]) -> Iterator[tuple[int, dict[str, str]]]:
    """``(line, row)`` pairs of a CSV (or Parquet) table that has the ``required`` columns."""
    if path.suffix.lower() in (".parquet", ".pq"):
        try:
            import pandas as pd
        except ImportError:
            raise ProtocolError(f"reading {path} needs pandas and pyarrow (pip install pandas pyarrow)") from None
        with open_bounded_file(path, what="manifest", error=ProtocolError) as binary:
            try:
                frame = pd.read_parquet(binary)
            except Exception as exc:
                raise ProtocolError(f"cannot read Parquet manifest {path}: {str(exc)[:200]}") from None
        _require_columns(path, [str(c) for c in frame.columns], required)
        return ((i + 1, {k: _cell(v) for k, v in rec.items()}) for i, rec in enumerate(frame.to_dict("records")))
    # -sig: a spreadsheet's byte-order mark is no column name
    handle = open_text_table(path, what="manifest", encoding="utf-8-sig", errors="strict", newline="",
                             error=ProtocolError)  # fmt: skip
    try:
        reader = csv.DictReader(handle)
        header = [h.strip() for h in (reader.fieldnames or [])]
    except (csv.Error, UnicodeDecodeError) as exc:
        handle.close()
        raise ProtocolError(f"cannot read manifest {path}: {exc}") from None
    reader.fieldnames = header
    try:
        _require_columns(path, header, required)
    except ProtocolError:
        handle.close()
        raise

    def rows():
        with handle:
            try:
                for row in reader:
                    yield reader.line_num, {k: (v or "").strip() for k, v in row.items() if k is not None}
            except (csv.Error, UnicodeDecodeError) as exc:
                raise ProtocolError(f"{path}:{reader.line_num + 1}: not readable as CSV text ({exc})") from None

    return rows()


def _require_columns(path: Path, header: list[str], required: tuple[str, ...]) -> None:
    missing = [c for c in required if c not in header]
    if missing:
        raise ProtocolError(f"{path}: missing column(s) {', '.join(missing)} (columns: {quoted(', '.join(header))})")


def _cell(value: object) -> str:
    """A Parquet cell as text; missing values (None, NaN) as an empty string."""
    if value is None or (isinstance(value, float) and value != value):
        return ""
    return str(value)


def read_manifest(
    manifest: str | Path, *, audio_root: str | Path | None = None, skip_bad: bool = False,
    report: ParseReport | None = None,
) -> list[Utterance]:
    """A CSV or Parquet table with columns ``path`` and ``label`` (DeepFense's manifest), and
    optionally ``id``, ``attack``, ``speaker``. Relative paths are taken from ``audio_root``
    (default: the manifest's folder); without an ``id`` a file is named by its path as
    written, without the suffix (``spk1/001``)."""
    manifest = Path(manifest)
    root = Path(audio_root) if audio_root is not None else manifest.parent
    rows = _table_rows(manifest, ("path", "label"))

    def parse(row: dict[str, str], where: str) -> Utterance:
        if not row.get("path"):
            raise ValueError("empty path")
        label = parse_label(row.get("label", ""))
        given = Path(row["path"])
        path = given if given.is_absolute() else root / given
        utt = row.get("id") or given.with_suffix("").as_posix()  # unique where file names repeat
        attack = "-" if label == BONAFIDE else (row.get("attack") or "spoof")
        return Utterance(utt, path, label, attack, row.get("speaker") or "-", where)

    return _collect(manifest, rows, parse, skip_bad, report)


def read_in_the_wild(
    meta: str | Path, *, audio_dir: str | Path | None = None, skip_bad: bool = False,
    report: ParseReport | None = None,
) -> list[Utterance]:
    """In-the-Wild's ``meta.csv`` (``file,speaker,label``; label ``bona-fide`` or ``spoof``);
    audio files beside it unless ``audio_dir`` says otherwise."""
    meta = Path(meta)
    root = Path(audio_dir) if audio_dir is not None else meta.parent
    rows = _table_rows(meta, ("file", "label"))

    def parse(row: dict[str, str], where: str) -> Utterance:
        if not row.get("file"):
            raise ValueError("empty file name")
        label = parse_label(row.get("label", ""))
        attack = "-" if label == BONAFIDE else "spoof"
        path = root / _name(row["file"], "file")
        return Utterance(Path(row["file"]).stem, path, label, attack, row.get("speaker") or "-", where)

    return _collect(meta, rows, parse, skip_bad, report)
