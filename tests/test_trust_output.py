"""Output hygiene (issue 25, deliverable 7): strings from data never drive the terminal.

Class names in an artifact, input file names, table titles and error messages quoting them
may hold terminal escape sequences (C0 ``ESC``, C1 ``CSI``) or rich markup (``[/bold]`` made
rich raise ``MarkupError`` → "unexpected"). Each must reach the terminal as plain text:
no ESC/C1 byte, the markup shown literally, exit status as for any other input.
"""

from __future__ import annotations

import logging
from pathlib import Path

import numpy as np
import pytest

import modforge as mf
from modforge.cli.main import main
from modforge.cli.output import print_table
from modforge.engines.artifact import make_metadata, write_torch_artifact

pytestmark = pytest.mark.hostile

HOSTILE_NAMES = ["\x1b[2J", "\x9b31m", "[/bold]", "[red]x[/red]"]
SECTION = {"backbone": "mlp", "head": "linear"}


def no_control(text: str) -> bool:
    """True when ``text`` holds no ESC, no other C0 control but the line break, and no C1 control."""
    return not any((ord(c) < 32 and c != "\n") or 0x7F <= ord(c) <= 0x9F for c in text)


def hostile_folder(tmp_path: Path) -> Path:
    """A folder whose path, once a file name is added, reads ``...[/bold]...`` (a ``/`` cannot
    be inside one file name, but a folder ending in ``[`` and a file starting with ``bold]`` make it)."""
    folder = tmp_path / "data["
    folder.mkdir()
    return folder


def eager_artifact(path: Path, class_names) -> Path:
    """A tiny untrained eager artifact (vector input of 4, 4 classes) with the given class_names."""
    model = mf.build_model(SECTION, in_dim=4, num_classes=4, layout="vector", input_shape=[4])
    metadata = make_metadata(engine="eager", model=SECTION, build={"in_dim": 4, "num_classes": 4},
                             input_shape=[4], input_layout="vector", class_names=class_names)  # fmt: skip
    return write_torch_artifact(model.state_dict(), path, metadata)


def test_predict_shows_hostile_class_and_file_names_as_plain_text(tmp_path, capsys):
    folder = hostile_folder(tmp_path)
    artifact = eager_artifact(folder / "bold]\x1b[2J.pt", HOSTILE_NAMES)
    sample = folder / "bold]\x9b[red]x.npy"
    np.save(sample, np.random.default_rng(0).random((2, 4), dtype=np.float32))
    assert main(["predict", str(artifact), str(sample), "--top", "4"]) == 0
    captured = capsys.readouterr()
    assert no_control(captured.out) and no_control(captured.err)
    assert "unexpected" not in captured.err
    # the markup is shown literally, the escape sequences with their control character replaced
    for shown in ("[/bold]", "[red]x[/red]", "?[2J", "?31m", "data[/bold]?[2J.pt", "bold]?[red]x.npy[1]"):
        assert shown in "".join(captured.out.split()), captured.out  # a long title may wrap anywhere


def test_a_detectors_json_lines_escape_hostile_class_and_file_names():
    """A detector prints JSON lines: class and file names are JSON-escaped (no raw ESC/C1), markup is inert."""
    import json

    from modforge.cli.commands.predict_files import json_line
    from modforge.tasks.detection.predict import detection_records

    rows = np.array([[0, 1, 2, 3, 4, 0.9, i] for i in range(4)], dtype=np.float32)
    line = json_line(Path("data[/bold]\x1b[2J\x9b.png"), detection_records(rows, 1.0, HOSTILE_NAMES))
    assert no_control(line) and "\n" not in line
    assert [r["class"] for r in json.loads(line)["detections"]] == HOSTILE_NAMES


def test_class_names_that_are_not_a_list_of_names_are_one_clear_error(tmp_path, capsys):
    sample = tmp_path / "x.npy"
    np.save(sample, np.zeros((1, 4), dtype=np.float32))
    for bad in ({"a": 1}, [["\x1b[2J"]], "abcd"):
        artifact = eager_artifact(tmp_path / "bad.pt", bad)
        assert main(["predict", str(artifact), str(sample)]) == 2
        err = capsys.readouterr().err
        assert err.count("\n") == 1 and "class_names is not a list of names" in err and no_control(err)


def test_print_table_shows_hostile_cells_columns_and_title_literally(capsys):
    print_table(["name", "[/bold]\x1b[2J"], [["\x1b[2J\x9b31m", "[/bold]"], ["[red]x[/red]", None]],
                title="run [/bold] \x1b]0;pwned\x07 \u202e")  # fmt: skip
    out = capsys.readouterr().out
    assert no_control(out) and "\u202e" not in out
    assert "run [/bold] ?]0;pwned? ?" in out
    assert "[/bold]?[2J" in out and "?[2J?31m" in out and "[red]x[/red]" in out


def test_an_error_naming_a_hostile_file_is_one_plain_line(tmp_path, capsys):
    folder = hostile_folder(tmp_path)
    artifact = eager_artifact(tmp_path / "m.pt", ["a", "b", "c", "d"])
    text = folder / "bold]\x1b[2J\x9b\nforged.txt"
    text.write_text("hello")
    assert main(["predict", str(artifact), str(text)]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and err.startswith("error: ") and no_control(err)
    assert "data[/bold]" in err and "unsupported input type" in err and "unexpected" not in err
    # an artifact that is not there, named through markup and escape sequences
    assert main(["predict", str(folder / "bold]\x1b[31m.pt"), str(text)]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "artifact not found" in err and "data[/bold]" in err and no_control(err)


def test_an_unexpected_error_quoting_data_is_still_one_plain_line(monkeypatch, capsys):
    """A bug's message may quote data too: the last-resort handler prints it as one plain line."""
    import modforge.cli.commands.list_parts as list_parts

    def broken(argv):
        raise RuntimeError("bad [/bold] value\x1b[2J\nsecond line\x9b")

    monkeypatch.setattr(list_parts, "run", broken)
    assert main(["list"]) == 1
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "bad [/bold] value" in err and no_control(err)


def test_log_warnings_quoting_data_show_control_characters_escaped(capsys):
    from modforge.cli.main import _setup_logging

    _setup_logging(debug=False)
    try:
        logging.getLogger("modforge.test").warning("skipped %s", "img[/bold]\x1b[2J\x9b.png")
        logging.getLogger("modforge.test").info("read %s", "\x1b]0;title\x07")
    finally:
        logging.getLogger("modforge").handlers[:] = []
    err = capsys.readouterr().err
    assert no_control(err)
    assert "warning: skipped img[/bold]\\x1b[2J\\x9b.png" in err and "read \\x1b]0;title\\x07" in err
