"""The one safe-write path (core/safe_files.py) and the text hygiene helpers (core/text_safety.py)."""

from __future__ import annotations

import os
import re
import socket
from pathlib import Path

import pytest

from modforge.core import yaml_guard
from modforge.core.errors import ConfigFileError, UsageError
from modforge.core.json_limits import JsonLimitError, read_json
from modforge.core.safe_files import (
    UnsafePathError,
    atomic_open,
    check_folder,
    data_lines,
    ensure_folder,
    inside,
    open_append,
    open_bounded_file,
    open_lock,
    open_regular,
    read_bounded_file,
    relative_name,
    remove_tree,
    write_atomic,
    write_via_temp,
)
from modforge.core.text_safety import csv_cell, markdown_cell, plain_text, terminal_text
from modforge.core.yaml_guard import read_config_text

pytestmark = pytest.mark.hostile


@pytest.fixture
def victim(tmp_path):
    path = tmp_path / "victim.txt"
    path.write_text("precious\n")
    return path


def test_write_atomic_replaces_a_planted_link_instead_of_following_it(tmp_path, victim):
    folder = tmp_path / "run"
    folder.mkdir()
    (folder / "summary.json").symlink_to(victim)
    write_atomic(folder / "summary.json", "{}\n")
    assert victim.read_text() == "precious\n"
    assert not (folder / "summary.json").is_symlink()
    assert (folder / "summary.json").read_text() == "{}\n"
    assert sorted(p.name for p in folder.iterdir()) == ["summary.json"]


def test_atomic_open_leaves_the_old_file_on_error(tmp_path):
    target = tmp_path / "a.csv"
    target.write_text("old")
    with pytest.raises(RuntimeError), atomic_open(target) as fh:
        fh.write("new")
        raise RuntimeError("boom")
    assert target.read_text() == "old"
    assert [p.name for p in tmp_path.iterdir()] == ["a.csv"]


def test_atomic_open_keeps_the_umask_mode(tmp_path):
    write_atomic(tmp_path / "x", b"1")
    assert (tmp_path / "x").stat().st_mode & 0o777 == 0o644 & ~_umask()


def _umask():
    mask = os.umask(0)
    os.umask(mask)
    return mask


def test_write_via_temp_never_writes_through_a_link(tmp_path, victim):
    (tmp_path / "model.onnx").symlink_to(victim)
    write_via_temp(tmp_path / "model.onnx", lambda name: open(name, "wb").write(b"onnx"))
    assert victim.read_text() == "precious\n"
    assert (tmp_path / "model.onnx").read_bytes() == b"onnx"


def test_open_append_and_lock_refuse_links_and_hard_links(tmp_path, victim):
    (tmp_path / "log").symlink_to(victim)
    with pytest.raises(UnsafePathError, match="symbolic link"):
        open_append(tmp_path / "log")
    with pytest.raises(UnsafePathError, match="symbolic link"):
        open_lock(tmp_path / "log")
    os.link(victim, tmp_path / "hard")
    with pytest.raises(UnsafePathError, match="hard links"):
        open_append(tmp_path / "hard")
    assert victim.read_text() == "precious\n"
    with open_append(tmp_path / "fresh") as fh:
        fh.write("a\n")
    os.close(open_lock(tmp_path / ".lock"))


def test_open_regular_refuses_a_fifo_and_a_link(tmp_path, victim):
    os.mkfifo(tmp_path / "fifo")
    with pytest.raises(UnsafePathError, match="not a regular file"):
        open_regular(tmp_path / "fifo")
    (tmp_path / "link").symlink_to(victim)
    with pytest.raises(UnsafePathError, match="symbolic link"):
        open_regular(tmp_path / "link")
    with open_regular(victim, "r") as fh:
        assert fh.read() == "precious\n"


def test_ensure_folder_refuses_a_link(tmp_path):
    (tmp_path / "evaluations").symlink_to(tmp_path)
    with pytest.raises(UnsafePathError):
        ensure_folder(tmp_path / "evaluations")


@pytest.mark.parametrize("name", ["../x", "/etc/passwd", "a/../../x", "", "a\x00b", "C:/x"])
def test_inside_refuses_names_that_leave_the_root(tmp_path, name):
    with pytest.raises(UnsafePathError):
        inside(tmp_path, name, "file_name")


def test_inside_refuses_a_link_out_and_accepts_a_plain_name(tmp_path):
    (tmp_path / "images").mkdir()
    (tmp_path / "out").symlink_to("/")
    with pytest.raises(UnsafePathError, match="outside"):
        inside(tmp_path, "out/etc/passwd", "file_name")
    assert inside(tmp_path, "images/a.png", "file_name") == tmp_path / "images" / "a.png"


@pytest.mark.parametrize(
    ("make", "message"),
    [
        (lambda d, v: (d / "x").symlink_to(v), "outside the folder"),
        (lambda d, v: (d / "sub").mkdir() or (d / "sub" / "x").symlink_to(v.parent), "outside the folder"),
        (lambda d, v: (d / "x").symlink_to(d / "nowhere"), "does not exist"),
        (lambda d, v: (d / "x").symlink_to(d / "x"), "loops"),
        (lambda d, v: os.mkfifo(d / "x"), "FIFO"),
    ],
)
def test_check_folder_refuses(tmp_path, victim, make, message):
    folder = tmp_path / "run"
    folder.mkdir()
    make(folder, victim)
    with pytest.raises(UnsafePathError, match=message):
        check_folder(folder, "run folder")


def test_check_folder_accepts_links_that_stay_inside(tmp_path):
    folder = tmp_path / "run"
    (folder / "checkpoints").mkdir(parents=True)
    (folder / "checkpoints" / "a.pt").write_bytes(b"")
    (folder / "best.pt").symlink_to("checkpoints/a.pt")
    (folder / "ck").symlink_to("checkpoints")
    check_folder(folder)
    link = tmp_path / "given"
    link.symlink_to(folder)
    check_folder(link)  # the folder the user named may itself be a link


def test_remove_tree_removes_only_real_folders_holding_what_modforge_wrote(tmp_path, victim):
    owner = tmp_path / "sweep"
    (owner / "trials").mkdir(parents=True)
    thesis = tmp_path / "thesis"
    thesis.mkdir()
    (thesis / "chapter.tex").write_text("work")
    (owner / "trials" / "t1").symlink_to(thesis)
    with pytest.raises(UnsafePathError, match="not a real folder"):
        remove_tree(owner / "trials" / "t1", owner, lambda rel: True, "trial folder")
    assert (thesis / "chapter.tex").read_text() == "work"
    real = owner / "trials" / "t2"
    real.mkdir()
    (real / "config.yaml").write_text("x")
    (real / "notes.tex").write_text("mine")
    wrote = lambda rel: rel.name == "config.yaml"  # noqa: E731
    with pytest.raises(UnsafePathError, match="notes.tex"):
        remove_tree(real, owner, wrote, "trial folder")
    (real / "notes.tex").unlink()
    remove_tree(real, owner, wrote, "trial folder")
    assert not real.exists()
    with pytest.raises(UnsafePathError, match="outside"):
        remove_tree(thesis, owner, lambda rel: True, "trial folder")


def test_plain_and_terminal_text():
    assert plain_text("a\x1b[2Jb\x9b\u202e") == "a?[2Jb??"
    assert terminal_text("[/bold]x") == "\\[/bold]x"


def test_markdown_cell_escapes_tables_html_and_markup():
    assert markdown_cell("a|b<script>*x*\nz") == "a\\|b&lt;script&gt;\\*x\\* z"


@pytest.mark.parametrize(
    ("value", "expected"),
    [("=cmd|' /C calc'!A0", "'=cmd|' /C calc'!A0"), ("@SUM(1)", "'@SUM(1)"), ("\tx", "'\tx"), ("-0.5", "-0.5"),
     ("+1e3", "+1e3"), ("-x", "'-x"), (0.5, 0.5), ("plain", "plain")],
)
def test_csv_cell_neutralises_formulas(value, expected):
    assert csv_cell(value) == expected


def test_display_lines_keeps_line_breaks_only():
    from modforge.core.text_safety import display_lines

    assert display_lines("a: 1\n\tb: \x1b[2J\u0085\u202ex\n") == "a: 1\n\tb: ?[2J??x\n"


def test_a_replaced_file_keeps_its_mode(tmp_path):
    page = tmp_path / "results.md"
    page.write_text("old")
    page.chmod(0o600)
    write_atomic(page, "new")
    write_via_temp(page, lambda name: open(name, "w").write("newer"))
    assert page.read_text() == "newer" and page.stat().st_mode & 0o777 == 0o600


def test_csv_value_takes_back_only_what_csv_cell_added():
    from modforge.core.text_safety import csv_value

    for value in ("-aug", "=x", "@y", "plain", "'quoted", "-0.5"):
        assert csv_value(str(csv_cell(value))) == value


def test_open_append_on_a_fifo_neither_hangs_nor_writes(tmp_path):
    os.mkfifo(tmp_path / "trial.log")
    with pytest.raises(UnsafePathError):
        open_append(tmp_path / "trial.log")


def test_the_checkpoint_copy_fallback_never_writes_through_a_link(tmp_path, victim):
    from modforge.train.checkpoint_commit import _copy_to_new

    (tmp_path / "a.pt").write_bytes(b"weights")
    (tmp_path / ".last.pt.link-1").symlink_to(victim)
    with pytest.raises(FileExistsError):
        _copy_to_new(str(tmp_path / "a.pt"), str(tmp_path / ".last.pt.link-1"))
    assert victim.read_text() == "precious\n"
    _copy_to_new(str(tmp_path / "a.pt"), str(tmp_path / "b.pt"))
    assert (tmp_path / "b.pt").read_bytes() == b"weights"


# ----------------------------------------------------------------------------- reading within bounds: one helper
def _bounded_readers(path: Path):
    """Each reader built on :func:`open_bounded_file`, with the words its refusals use."""
    return [
        (lambda: open_bounded_file(path, what="score file"), UsageError, f"the score file {path} is"),
        (lambda: read_json(path, what="meta.json"), JsonLimitError, f"meta.json {path} is not a regular file but"),
        (lambda: read_config_text(path, path.name), ConfigFileError, "expected a regular YAML file, got"),
    ]


def test_a_device_is_refused_by_every_bounded_reader_without_being_opened(monkeypatch):
    """Score files, JSON and configs share one check: a device is named from ``stat``, never opened (opening
    some devices does something), where the score-file reader used to open it first."""
    device = Path("/dev/null")
    if not device.exists():
        pytest.skip("no /dev/null here")
    opened: list[str] = []
    real_open = os.open
    monkeypatch.setattr(os, "open", lambda name, *a, **k: opened.append(os.fspath(name)) or real_open(name, *a, **k))
    for read, error, words in _bounded_readers(device):
        with pytest.raises(error, match=re.escape(words) + ".*a character device"):
            read()
    assert str(device) not in opened


@pytest.mark.skipif(not hasattr(socket, "AF_UNIX"), reason="no unix sockets here")
def test_a_socket_is_named_as_one_by_every_bounded_reader(tmp_path, monkeypatch):
    """(Opened, a socket only says "No such device or address"; JSON said "not a regular file".)"""
    monkeypatch.chdir(tmp_path)  # keep the bound path short
    with socket.socket(socket.AF_UNIX) as sock:
        sock.bind("s.json")
        for read, error, words in _bounded_readers(Path("s.json")):
            with pytest.raises(error, match=re.escape(words) + ".*a socket"):
                read()


def test_a_file_growing_past_its_cap_while_read_is_refused_by_every_bounded_reader(monkeypatch):
    """``/proc/self/status`` is a regular file whose ``stat`` says 0 bytes: what is read is bounded too."""
    proc = Path("/proc/self/status")
    if not proc.is_file():
        pytest.skip("no /proc here")
    with pytest.raises(UsageError, match=r"^the status file /proc/self/status grew past the 16 bytes a status file"):
        read_bounded_file(proc, what="status file", max_bytes=16)
    with pytest.raises(JsonLimitError, match=r"^JSON file /proc/self/status is more than the 16 bytes"):
        read_json(proc, max_bytes=16)
    monkeypatch.setattr(yaml_guard, "MAX_CONFIG_BYTES", 16)
    with pytest.raises(ConfigFileError, match=r"config file is too large \(0.0 MiB; at most 0 MiB is read\)"):
        read_config_text(proc, "status.yaml")


def test_bounded_reads_name_a_missing_file_and_take_their_callers_error(tmp_path):
    with pytest.raises(ValueError, match=rf"^ASV score file not found: {tmp_path / 'gone.txt'}$"):
        read_bounded_file(tmp_path / "gone.txt", what="ASV score file", max_bytes=10, error=ValueError)
    (tmp_path / "ok.txt").write_text("# comment\n\nu1 0.5\n")
    assert list(data_lines(tmp_path / "ok.txt", what="score file")) == [(3, "u1 0.5\n")]
    assert read_bounded_file(tmp_path / "ok.txt", what="score file", max_bytes=100).endswith(b"u1 0.5\n")


# ----------------------------------------------------------------------------- names from data, quoted
def test_a_5_mb_name_from_data_is_quoted_in_at_most_200_characters(tmp_path):
    """relative_name and inside quote a name read from a file (a COCO ``file_name``) through ``quoted``; a name
    too long for the system is said to be, not called a loop."""
    (tmp_path / "elsewhere").mkdir()
    (tmp_path / "root").mkdir()
    (tmp_path / "root" / "out").symlink_to(tmp_path / "elsewhere")
    root, what = tmp_path / "root", "file_name of image 7"
    climbing, through_link, too_long = "../" + "x" * 5_000_000, "out/" + "/".join(["y" * 100] * 30), "z" * 5_000
    cases = [(lambda: relative_name(climbing, what, root), climbing, "is not a relative path inside"),
             (lambda: inside(root, climbing, what), climbing, "is not a relative path inside"),
             (lambda: inside(root, through_link, what), through_link, "leads outside"),
             (lambda: inside(root, too_long, what), too_long, "cannot be looked up (File name too long)")]  # fmt: skip
    for refuse, name, problem in cases:
        with pytest.raises(UnsafePathError) as info:
            refuse()
        text = str(info.value)
        assert text.startswith(f"{what} '") and problem in text, text[:700]
        assert f"…' ({len(name)} characters)" in text and len(text) < 600, text[:700]
