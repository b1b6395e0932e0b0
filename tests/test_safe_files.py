"""The one safe-write path (core/safe_files.py) and the text hygiene helpers (core/text_safety.py)."""

from __future__ import annotations

import os

import pytest

from modforge.core.safe_files import (
    UnsafePathError,
    atomic_open,
    check_folder,
    ensure_folder,
    inside,
    open_append,
    open_lock,
    open_regular,
    remove_tree,
    write_atomic,
    write_via_temp,
)
from modforge.core.text_safety import csv_cell, markdown_cell, plain_text, terminal_text

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
