"""Sweep folders and sweep files from others (issue 25): planted links are never followed or
written through, a trial folder that is a link (or holds someone's files) is never emptied or
trained into, trial ids from a given trials.csv stay inside trials/, a sweep file vouches only
for what lies beside it and cannot set what only the command line may, the planned trial count
is bounded before anything is expanded, trials and Ray workers never import from the cwd, a
sweep file never chooses a Ray cluster, and strings from a sweep's files reach the terminal,
results.md and the CSV files harmless. Each hole has a victim file that must stay byte-identical
or a marker file that must not appear; every refusal is exit 2 and one line."""

from __future__ import annotations

import argparse
import csv
import dataclasses
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from distributed_helpers import children
from modforge.core.child_process import SAFE_BOOTSTRAP
from modforge.core.safe_files import UnsafePathError
from modforge.sweep import SEARCHES, build_job, load_sweep, write_report
from modforge.sweep.command import modforge_command
from modforge.sweep.local import start_trial
from modforge.sweep.spec import SweepSpecError
from modforge.sweep.table import TrialsTable
from sweep_helpers import digits_beside

pytestmark = pytest.mark.hostile

VICTIM_TEXT = b"my thesis, chapter 1\n"
COLUMNS = ["trial", "seed", "status", "test.accuracy", "seconds", "overrides", "error"]


# ----------------------------------------------------------------------------- helpers
def _one_line_refusal(code: int, err: str) -> str:
    """The refusal's line (exit 2, exactly one line on stderr, no 'unexpected')."""
    lines = [line for line in err.splitlines() if line.strip()]
    assert code == 2, err
    assert len(lines) == 1 and "unexpected" not in lines[0] and "Traceback" not in err, err
    return lines[0]


def _modforge(cwd: Path, *args: str, timeout: float = 120) -> subprocess.CompletedProcess:
    """``modforge ARGS`` in a fresh process started without the cwd on sys.path (the console
    script, as a user runs it): what a planted cwd module does to *children* is what is tested."""
    script = Path(sys.executable).with_name("modforge")
    command = [str(script)] if script.is_file() else [sys.executable, "-P", "-m", "modforge"]
    return subprocess.run([*command, *args], cwd=cwd, capture_output=True, text=True, timeout=timeout)


def _victim(folder: Path) -> Path:
    folder.mkdir(parents=True, exist_ok=True)
    victim = folder / "victim.txt"
    victim.write_bytes(VICTIM_TEXT)
    return victim


def _sweep_folder(root: Path, *, title: str = "Sweep", rows: list[dict] | None = None, **extra) -> Path:
    """A finished sweep folder as 'modforge sweep' leaves it: sweep.yaml, trials.csv, trials/<id>/summary.json."""
    sweep_dir = root / "given"
    (sweep_dir / "trials").mkdir(parents=True)
    spec = {"name": "given", "config": str(root / "gone.yaml"), "seeds": [0, 1], "collect": ["test.accuracy"],
            "report": {"title": title}, **extra}  # fmt: skip
    (sweep_dir / "sweep.yaml").write_text(yaml.safe_dump(spec))
    rows = rows if rows is not None else [
        {"trial": f"seed{s}", "seed": s, "status": "done", "test.accuracy": 0.9, "seconds": 1.5, "overrides": "",
         "error": ""} for s in (0, 1)
    ]  # fmt: skip
    with (sweep_dir / "trials.csv").open("w", newline="") as fh:
        writer = csv.DictWriter(fh, fieldnames=list(rows[0]) if rows else COLUMNS)
        writer.writeheader()
        writer.writerows(rows)
    for row in rows:
        trial_id = str(row["trial"])
        if ".." not in trial_id and not os.path.isabs(trial_id):
            (sweep_dir / "trials" / trial_id).mkdir(parents=True, exist_ok=True)
            (sweep_dir / "trials" / trial_id / "summary.json").write_text(json.dumps({"test": {"accuracy": 0.9}}))
    return sweep_dir


def _planned_ids(sweep_dir: Path) -> list[str]:
    """The trial ids the folder's sweep.yaml plans (what its trials.csv rows must be named)."""
    spec = load_sweep(sweep_dir / "sweep.yaml", stored=True)
    return [trial.id for trial in SEARCHES[spec.search](spec, sweep_dir).trials]


@pytest.fixture
def sweep_file(tmp_path):
    """``sweep_file(body, name)``: a sweep file in tmp_path naming the copy of digits.yaml beside it."""
    digits_beside(tmp_path)

    def make(body: str, name: str = "s.yaml", folder: Path | None = None) -> Path:
        path = (folder or tmp_path) / name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(body)
        return path

    return make


# ----------------------------------------------------------------------------- hole 1: links in a sweep folder
@pytest.mark.parametrize("planted", [".results.md.tmp", "results.md", "results.csv", "results.png", ".lock",
                                     "optuna.db", "sweep.yaml.link"])  # fmt: skip
def test_sweep_report_refuses_a_folder_with_a_link_out(tmp_path, cli, planted):
    victim = _victim(tmp_path / "home")
    sweep_dir = _sweep_folder(tmp_path)
    (sweep_dir / planted).symlink_to(victim)
    before = sorted(os.listdir(sweep_dir))
    res = cli("sweep-report", str(sweep_dir))
    line = _one_line_refusal(res.code, res.err)
    assert planted in line and "outside" in line
    assert victim.read_bytes() == VICTIM_TEXT and sorted(os.listdir(sweep_dir)) == before  # nothing written


def test_report_files_replace_links_planted_after_the_check_and_the_title_stays_one_line(tmp_path):
    """Links planted where the report writes (after the folder check) are replaced, not written
    through; a title holding a newline and a line of Python stays one escaped heading line."""
    victim = _victim(tmp_path / "site-packages")
    payload = "import os; open('PWNED', 'w')"
    sweep_dir = _sweep_folder(tmp_path, title=f"Results\n{payload}\n<script>x</script>")
    for name in ("results.md", "results.csv", "results.png", ".results.md.tmp", ".results.csv.tmp",
                 ".results.tmp.png"):  # fmt: skip
        (sweep_dir / name).symlink_to(victim)
    write_report(sweep_dir)
    assert victim.read_bytes() == VICTIM_TEXT
    text = (sweep_dir / "results.md").read_text()
    assert not (sweep_dir / "results.md").is_symlink() and not (sweep_dir / "results.png").is_symlink()
    heading = text.splitlines()[0]
    assert heading.startswith("# Results") and payload in heading and "&lt;script&gt;" in heading
    assert not any(line.startswith("import os") for line in text.splitlines())  # no line a .pth would run


def test_sweep_refuses_a_given_sweep_dir_with_a_link_out(tmp_path, sweep_file):
    victim = _victim(tmp_path / "home")
    sweep = sweep_file("config: digits.yaml\nseeds: [0]\ncollect: [test.accuracy]\n")
    given = tmp_path / "given"
    (given / "trials").mkdir(parents=True)
    (given / ".lock").symlink_to(victim)
    for args in ([], ["--dry-run"]):
        res = _modforge(tmp_path, "sweep", str(sweep), "--sweep-dir", str(given), *args)
        line = _one_line_refusal(res.returncode, res.stderr)
        assert ".lock" in line and "--sweep-dir" in line
    assert victim.read_bytes() == VICTIM_TEXT and not (given / "sweep.yaml").exists()


def test_the_lock_the_log_and_the_study_are_never_opened_through_a_link_or_a_hard_link(tmp_path, sweep_file):
    from modforge.sweep.lock import SweepLock

    victim = _victim(tmp_path / "home")
    sweep_dir = tmp_path / "sw"
    (sweep_dir / "trials").mkdir(parents=True)
    (sweep_dir / ".lock").symlink_to(victim)
    with pytest.raises(UnsafePathError, match="symbolic link"):
        SweepLock(sweep_dir).__enter__()
    spec = load_sweep(sweep_file("config: digits.yaml\nseeds: [0]\ncollect: [test.accuracy]\n"))
    job = build_job(spec, SEARCHES[spec.search](spec, sweep_dir).ask(), sweep_dir, threads=1)
    os.link(victim, job.log)  # trials/<id>.log: another name of the victim
    job = dataclasses.replace(job, fresh=(sys.executable, "-c", "pass"))
    with pytest.raises(UnsafePathError, match="hard links"):
        start_trial(job)
    assert victim.read_bytes() == VICTIM_TEXT

    optuna_spec = load_sweep(sweep_file(
        "config: digits.yaml\nseeds: [0]\ncollect: [test.accuracy]\nsearch: optuna\n"
        "optuna: {trials: 2, metric: test.accuracy, space: {train.optimizer.args.lr: {loguniform: [0.001, 0.1]}}}\n",
        "o.yaml"))  # fmt: skip
    (sweep_dir / "optuna.db").symlink_to(victim)
    pytest.importorskip("optuna")
    with pytest.raises(UnsafePathError, match="optuna.db is a symbolic link"):
        SEARCHES["optuna"](optuna_spec, sweep_dir).ask()
    assert victim.read_bytes() == VICTIM_TEXT


# ----------------------------------------------------------------------------- hole 1: trials/<id> -> ~/thesis
def test_a_trial_folder_linked_to_the_users_thesis_is_never_emptied_or_trained_into(tmp_path, sweep_file):
    thesis = tmp_path / "home" / "thesis"
    victim = _victim(thesis)
    sweep = sweep_file("config: digits.yaml\nseeds: [0]\ncollect: [test.accuracy]\n")
    given = tmp_path / "given"
    (given / "trials").mkdir(parents=True)
    (given / "trials" / "seed0").symlink_to(thesis)  # no summary.json there: an unfinished trial
    res = _modforge(tmp_path, "sweep", str(sweep), "--sweep-dir", str(given))
    line = _one_line_refusal(res.returncode, res.stderr)
    assert "seed0" in line
    assert victim.read_bytes() == VICTIM_TEXT and sorted(os.listdir(thesis)) == ["victim.txt"]


def test_a_trial_folder_linked_inside_or_holding_foreign_files_is_refused_not_removed(tmp_path, sweep_file):
    spec = load_sweep(sweep_file("config: digits.yaml\nseeds: [0, 1]\ncollect: [test.accuracy]\n"))
    search = SEARCHES[spec.search](spec, tmp_path / "sw")
    first, second = search.ask(), search.ask()
    job = build_job(spec, first, tmp_path / "sw", threads=1)
    other = job.run_dir.parent / "elsewhere"
    victim = _victim(other)
    job.run_dir.parent.mkdir(parents=True, exist_ok=True)
    job.run_dir.symlink_to(other)  # a link that stays inside the sweep folder passes the folder check
    with pytest.raises(UnsafePathError, match="symbolic link"):
        job.argv()
    job2 = build_job(spec, second, tmp_path / "sw", threads=1)
    job2.run_dir.mkdir()
    (job2.run_dir / "metrics.csv").write_text("partial")  # what an interrupted run leaves...
    (job2.run_dir / "thesis.tex").write_bytes(VICTIM_TEXT)  # ...and what no run writes
    with pytest.raises(UnsafePathError, match="thesis.tex, a file modforge did not write"):
        job2.argv()
    assert victim.read_bytes() == VICTIM_TEXT and (job2.run_dir / "thesis.tex").read_bytes() == VICTIM_TEXT
    (job2.run_dir / "thesis.tex").unlink()  # only what a run writes: emptied, started afresh
    assert job2.argv() == list(job2.fresh) and not job2.run_dir.exists()


# ----------------------------------------------------------------------------- hole 9: trial ids from trials.csv
@pytest.mark.parametrize("trial_id", ["../../outside", "/abs/outside", "seed0/../../../outside"])
def test_sweep_report_does_not_follow_trial_ids_out_of_the_trials_folder(tmp_path, cli, trial_id):
    outside = tmp_path / "outside"
    outside.mkdir()
    (outside / "summary.json").write_text(json.dumps({"test": {"accuracy": 0.4242}}))
    before = (outside / "summary.json").read_bytes()
    rows = [{"trial": trial_id, "seed": 0, "status": "done", "test.accuracy": "", "seconds": 1, "overrides": "",
             "error": ""}]  # fmt: skip
    sweep_dir = _sweep_folder(tmp_path, rows=rows, seeds=[0])
    res = cli("sweep-report", str(sweep_dir))
    line = _one_line_refusal(res.code, res.err)
    assert "trial id" in line and "42.42" not in res.out + res.err
    assert not (sweep_dir / "results.md").exists() and (outside / "summary.json").read_bytes() == before


# ----------------------------------------------------------------------------- hole 5: a sweep file's reach
@pytest.mark.parametrize("key", ["--plugins", "--resume", "--run-dir", "--nproc", "plugins"])
def test_a_sweep_file_cannot_set_what_only_the_command_line_may(tmp_path, sweep_file, key):
    evil = tmp_path / "elsewhere" / "evil.py"
    evil.parent.mkdir()
    marker = tmp_path / "MARKER"
    evil.write_text(f"open({str(marker)!r}, 'w').write('ran')\n")
    value = "2" if key == "--nproc" else str(evil)
    sweep = sweep_file(f"config: digits.yaml\noverrides: {{{key}: {value!r}}}\nseeds: [0]\ncollect: [test.accuracy]\n")
    with pytest.raises(SweepSpecError) as caught:
        load_sweep(sweep)
    assert f"'{key}' cannot be set by a sweep file" in str(caught.value) and "s.yaml" in str(caught.value)
    if key == "--plugins":  # and from the command line, with and without --dry-run
        for args in ([], ["--dry-run"]):
            res = _modforge(tmp_path, "sweep", str(sweep), "--sweep-dir", "sw", *args)
            assert "--plugins" in _one_line_refusal(res.returncode, res.stderr)
    assert not marker.exists()


def test_multi_process_trials_come_from_the_users_command_line(tmp_path, cli, sweep_file):
    """``--nproc`` is refused in a sweep file but ``modforge sweep --nproc N`` gives every training trial N processes."""
    sweep = sweep_file("config: digits.yaml\nseeds: [0, 1]\ncollect: [test.accuracy]\n")
    res = cli("sweep", str(sweep), "--sweep-dir", str(tmp_path / "sw"), "--nproc", "2", "--dry-run")
    assert res.code == 0, res.err
    shown = " ".join(res.out.split())  # the table may wrap a long command
    assert shown.count("--nproc 2") == 2 and shown.count("train.num_threads") == 2, res.out
    assert cli("sweep", str(sweep), "--nproc", "0", "--dry-run").code == 2


def test_a_flag_value_that_reads_as_another_flag_is_refused(sweep_file):
    for body in ("overrides: {--algorithm: --plugins=/x/evil.py}", "grid: {--algorithm: [sgd, --plugins=x.py]}",
                 "random: {trials: 2, space: {--algorithm: {choice: [sgd, --resume=/x]}}}"):  # fmt: skip
        with pytest.raises(SweepSpecError, match="would read as another flag"):
            load_sweep(sweep_file(f"config: digits.yaml\n{body}\nseeds: [0]\ncollect: [x]\n"))
    spec = load_sweep(sweep_file("config: digits.yaml\ngrid: {--lr: [-0.5]}\ncollect: [x]\n"))  # a number is a value
    assert spec.grid[0].values[0].overrides == {"--lr": -0.5}


def test_a_config_outside_the_sweep_files_folder_is_refused_unless_the_user_names_its_folder(tmp_path, sweep_file):
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    marker = tmp_path / "MARKER"
    (elsewhere / "evil.py").write_text(f"open({str(marker)!r}, 'w').write('ran')\n")
    (elsewhere / "cfg.yaml").write_text((tmp_path / "digits.yaml").read_text() + "plugins: [evil.py]\n")
    home = tmp_path / "project"
    sweep = sweep_file(f"config: {elsewhere / 'cfg.yaml'}\nseeds: [0]\ncollect: [test.accuracy]\n", folder=home)
    for args in (["--dry-run"], []):
        res = _modforge(home, "sweep", str(sweep), *args)
        line = _one_line_refusal(res.returncode, res.stderr)
        assert "does not lie beside the sweep file" in line and "--config-root" in line
    # through a _base_ sweep elsewhere, whose relative config: is relative to that base file
    (elsewhere / "base.yaml").write_text("config: cfg.yaml\nseeds: [0]\ncollect: [test.accuracy]\n")
    child = sweep_file(f"_base_: {elsewhere / 'base.yaml'}\n", "child.yaml", folder=home)
    with pytest.raises(SweepSpecError, match=r"'cfg.yaml' does not lie beside the sweep file"):
        load_sweep(child)
    assert Path(load_sweep(child, config_roots=[elsewhere]).config) == (elsewhere / "cfg.yaml").resolve()
    res = _modforge(home, "sweep", str(child), "--config-root", str(elsewhere), "--dry-run")
    assert res.returncode == 0, res.stderr
    assert not marker.exists()


def test_a_base_sweeps_relative_config_resolves_against_the_base_file(tmp_path, sweep_file):
    sub = tmp_path / "bases"
    sub.mkdir()
    digits_beside(sub)  # bases/digits.yaml, beside the base sweep
    (tmp_path / "digits.yaml").write_text("this: is the child's neighbour, not the base's\n")
    sweep_file("config: digits.yaml\nseeds: [0]\ncollect: [test.accuracy]\n", "base.yaml", folder=sub)
    child = sweep_file("_base_: bases/base.yaml\n", "child.yaml")
    assert Path(load_sweep(child).config) == (sub / "digits.yaml").resolve()


# ----------------------------------------------------------------------------- weakness: unbounded expansion
def test_a_ten_billion_point_grid_is_refused_before_anything_is_expanded(tmp_path, sweep_file):
    axes = "\n".join(f"  a{i}.x: [0, 1, 2, 3, 4, 5, 6, 7, 8, 9]" for i in range(10))
    sweep = sweep_file(f"config: digits.yaml\ngrid:\n{axes}\ncollect: [x]\n")
    res = _modforge(tmp_path, "sweep", str(sweep), "--dry-run", timeout=60)
    line = _one_line_refusal(res.returncode, res.stderr)
    assert "10,000,000,000 trials" in line and "--max-trials" in line
    small = sweep_file("config: digits.yaml\ngrid: {a.x: [1, 2, 3]}\nseeds: [0, 1, 2, 3]\ncollect: [x]\n", "t.yaml")
    with pytest.raises(SweepSpecError, match="12 trials"):
        load_sweep(small, max_trials=10)
    assert len(load_sweep(small).grid[0].values) == 3


def test_sweep_report_refuses_a_stored_billion_draw_random_search_at_once(tmp_path):
    sweep_dir = _sweep_folder(tmp_path, random={"trials": 10**9, "seed": 0,
                                                "space": {"a.x": {"uniform": [0.0, 1.0]}}})  # fmt: skip
    res = _modforge(tmp_path, "sweep-report", str(sweep_dir), timeout=60)
    line = _one_line_refusal(res.returncode, res.stderr)
    assert "1,000,000,000" in line and "random.trials" in line


# ----------------------------------------------------------------------------- hole 6: children and the cwd
def _plant(folder: Path, marker: Path) -> None:
    """``yaml.py`` and ``modforge.py`` in ``folder`` that leave ``marker`` when imported."""
    payload = f"open({str(marker)!r}, 'a').write(__name__ + '\\n')\n"
    (folder / "yaml.py").write_text(payload + "raise ImportError('planted')\n")
    (folder / "modforge.py").write_text(payload)


def test_the_trial_command_never_imports_from_the_cwd(tmp_path):
    cwd, marker = tmp_path / "cwd", tmp_path / "MARKER"
    cwd.mkdir()
    _plant(cwd, marker)
    subprocess.run([sys.executable, "-c", "import yaml"], cwd=cwd, capture_output=True)  # the plant works...
    assert marker.exists()
    marker.unlink()
    for command in (modforge_command(), [sys.executable, "-c", SAFE_BOOTSTRAP.format(module="modforge")]):  # ...and neither form imports it
        res = subprocess.run([*command, "sweep", "--help"], cwd=cwd, capture_output=True, text=True, timeout=120)
        assert res.returncode == 0 and "SWEEP.yaml" in res.stdout, res.stderr
    assert not marker.exists()


def test_a_sweep_trial_does_not_import_a_yaml_py_lying_in_the_cwd(tmp_path, sweep_file):
    marker = tmp_path / "MARKER"
    _plant(tmp_path, marker)
    sweep = sweep_file("config: digits.yaml\noverrides: {model.backbone.args.channels: nope}\nseeds: [0]\n"
                       "collect: [test.accuracy]\n")  # fmt: skip
    res = _modforge(tmp_path, "sweep", str(sweep), "--sweep-dir", "sw")
    assert res.returncode == 1, res.stdout + res.stderr  # the trial ran, and failed on its config
    assert "model.backbone.args.channels" in (tmp_path / "sw" / "trials" / "seed0.log").read_text()
    assert not marker.exists()


# ----------------------------------------------------------------------------- hole 7: Ray
def test_a_sweep_files_ray_section_neither_switches_ray_on_nor_names_the_cluster(tmp_path, cli, sweep_file):
    from modforge.cli.commands.sweep_run import _backend_settings

    spec = load_sweep(sweep_file("config: digits.yaml\nseeds: [0]\ncollect: [x]\nray: {cpus_per_trial: 2}\n"))
    flags = {"backend": None, "ray_address": None, "cpus_per_trial": None, "gpus_per_trial": None, "cold_trials": False}
    assert _backend_settings(argparse.Namespace(**flags), spec) == ("local", {"warm": True})
    backend, settings = _backend_settings(argparse.Namespace(**{**flags, "backend": "ray"}), spec)
    assert (backend, settings["address"], settings["cpus_per_trial"]) == ("ray", None, 2.0)
    hostile = sweep_file(
        "config: digits.yaml\nseeds: [0]\ncollect: [x]\nray: {address: 'ray://evil:10001'}\n", "h.yaml"
    )
    res = cli("sweep", str(hostile), "--backend", "ray", "--dry-run")
    assert "ray.address" in _one_line_refusal(res.code, res.err) and "--ray-address" in res.err
    stored = _sweep_folder(tmp_path / "st", ray={"address": "ray://evil:10001"})
    assert cli("sweep-report", str(stored)).code == 0  # a stored address is never used: the report is written


def _listening_beyond_loopback() -> list[str]:
    """Every listening TCP socket of this process's descendants (the local Ray instance: GCS,
    raylet, object manager, dashboard, agents) bound to an address other than loopback."""
    inodes: dict[str, int] = {}
    for pid in children(os.getpid()):
        try:
            for fd in Path(f"/proc/{pid}/fd").iterdir():
                target = os.readlink(fd)
                if target.startswith("socket:["):
                    inodes[target[8:-1]] = pid
        except OSError:
            continue
    exposed: list[str] = []
    listening: list[str] = []
    for table, size in (("/proc/net/tcp", 8), ("/proc/net/tcp6", 32)):
        for line in Path(table).read_text().splitlines()[1:]:
            fields = line.split()
            address, port = fields[1].split(":")
            if fields[3] != "0A" or fields[9] not in inodes:  # 0A: LISTEN
                continue
            raw = bytes.fromhex(address)
            ip = ".".join(str(b) for b in raw[::-1]) if size == 8 else raw.hex()
            # IPv6 as /proc writes it (four host-order words): ::1 and ::ffff:127.x.y.z
            loopback = ip.startswith("127.") if size == 8 else raw == bytes(12) + b"\x01\x00\x00\x00" or (
                raw[:12] == bytes(8) + b"\xff\xff\x00\x00" and raw[15] == 127)
            (listening if loopback else exposed).append(f"{ip}:{int(port, 16)} (pid {inodes[fields[9]]})")
    assert listening, "no listening socket of the Ray instance was found: the check would see nothing"
    return exposed


@pytest.mark.slow
def test_a_ray_sweeps_local_instance_listens_on_loopback_and_its_workers_ignore_the_cwd(tmp_path, sweep_file,
                                                                                        monkeypatch):  # fmt: skip
    ray = pytest.importorskip("ray")
    from modforge.sweep.executor import ExecutorOptions
    from modforge.sweep.ray_executor import RayExecutor

    marker = tmp_path / "MARKER"
    spec = load_sweep(sweep_file("config: digits.yaml\noverrides: {model.backbone.args.channels: nope}\n"
                                 "seeds: [0]\ncollect: [test.accuracy]\n"))  # fmt: skip
    _plant(tmp_path, marker)
    monkeypatch.chdir(tmp_path)
    executor = RayExecutor(ExecutorOptions(workers=1, settings={"cpus_per_trial": 1.0}))
    try:
        assert ray.get_runtime_context().gcs_address.startswith("127.0.0.1:")
        exposed = _listening_beyond_loopback()
        assert not exposed, f"Ray processes listen beyond loopback: {exposed}"
        job = build_job(spec, SEARCHES[spec.search](spec, tmp_path / "sw").ask(), tmp_path / "sw", threads=1)
        executor.submit(job)
        outcomes = []
        for _ in range(240):
            outcomes += executor.wait(1.0)
            if outcomes:
                break
    finally:
        executor.shutdown()
    assert outcomes and outcomes[0].returncode != 0  # the trial ran on a Ray worker and failed on its config
    log = job.log.read_text()
    assert "[ray worker" in log and "model.backbone.args.channels" in log
    assert not marker.exists()


# ----------------------------------------------------------------------------- weaknesses: output hygiene
def test_strings_from_a_given_sweep_folder_reach_terminal_markdown_and_csv_harmless(tmp_path, cli):
    formula = "=cmd|' /C calc'!A0"
    values = ["[/bold]\x1b]0;pwned\x07", formula, "a|b<img src=x onerror=alert(1)>"]
    sweep_dir = _sweep_folder(tmp_path, rows=[], title="[red]T[/red]\x1b[2J", seeds=[0], grid={"algorithm": values},
                              collect=[{"name": "test.accuracy", "label": "acc [/bold]\x1b[31m"}])  # fmt: skip
    rows = [{"trial": trial_id, "algorithm": value, "seed": 0, "status": "done", "test.accuracy": 0.5 + i / 10,
             "seconds": 1, "overrides": "", "error": ""}
            for i, (trial_id, value) in enumerate(zip(_planned_ids(sweep_dir), values, strict=True))]  # fmt: skip
    with (sweep_dir / "trials.csv").open("w", newline="") as fh:
        writer = csv.DictWriter(fh, fieldnames=list(rows[0]))
        writer.writeheader()
        writer.writerows(rows)
    res = cli("sweep-report", str(sweep_dir))
    assert res.code == 0, res.err
    assert "\x1b" not in res.out + res.err and "unexpected" not in res.err and "[/bold]" in res.out
    md = (sweep_dir / "results.md").read_text()
    assert "<img" not in md and "\x1b" not in md and "&lt;img" in md
    table = [line for line in md.splitlines() if line.startswith("| ")]
    assert len(table) == 4 and len({line.count("|") - line.count("\\|") for line in table}) == 1  # no split cell
    with (sweep_dir / "results.csv").open(newline="") as fh:
        cells = [cell for row in csv.reader(fh) for cell in row]
    assert f"'{formula}" in cells and formula not in cells


def test_the_trials_table_neutralises_formulas(tmp_path):
    table = TrialsTable(tmp_path, ["algorithm"], ["test.accuracy"])
    table.set("t0", algorithm='=HYPERLINK("http://evil")', seed=0, status="done", overrides="--lr 0.1", error="@x")
    table.write()
    with (tmp_path / "trials.csv").open(newline="") as fh:
        (row,) = list(csv.DictReader(fh))
    assert row["algorithm"].startswith("'=") and row["error"] == "'@x" and row["overrides"] == "'--lr 0.1"


@pytest.mark.parametrize("column, value, expected", [
    ("seconds", "abc", "column 'seconds' holds 'abc', not a finite number"),
    ("error", "x" * (128 * 1024 + 1), "not readable as CSV"),
    ("status", "running\x1b[2J", "is not one of"),
])  # fmt: skip
def test_a_malformed_trials_csv_is_one_clear_line(tmp_path, cli, column, value, expected):
    rows = [{"trial": "seed0", "seed": 0, "status": "done", "test.accuracy": 0.9, "seconds": 1, "overrides": "",
             "error": ""}]  # fmt: skip
    rows[0][column] = value
    sweep_dir = _sweep_folder(tmp_path, rows=rows, seeds=[0])
    res = cli("sweep-report", str(sweep_dir))
    line = _one_line_refusal(res.code, res.err)
    assert expected in line and "trials.csv" in line and "\x1b" not in line


def test_the_pruning_marker_replaces_a_planted_link(tmp_path):
    from modforge.train.callbacks.optuna_pruning import _write_json

    victim = _victim(tmp_path / "home")
    (tmp_path / "run").mkdir()
    (tmp_path / "run" / "pruned.json").symlink_to(victim)
    (tmp_path / "run" / ".pruned.json.tmp").symlink_to(victim)
    _write_json(tmp_path / "run" / "pruned.json", {"trial": 0})
    assert victim.read_bytes() == VICTIM_TEXT and json.loads((tmp_path / "run" / "pruned.json").read_text()) == {
        "trial": 0
    }


def test_a_stored_sweep_asking_for_thousands_of_plot_panels_is_one_line(tmp_path, cli):
    grid = {f"a{i}.x": [1] for i in range(200)}  # one trial, 200 swept parameters
    sweep_dir = _sweep_folder(tmp_path, rows=[], seeds=[0], grid=grid)
    (trial_id,) = _planned_ids(sweep_dir)
    row = {"trial": trial_id, **{k: "1" for k in grid}, "seed": 0, "status": "done", "test.accuracy": 0.9,
           "seconds": 1, "overrides": "", "error": ""}  # fmt: skip
    with (sweep_dir / "trials.csv").open("w", newline="") as fh:
        writer = csv.DictWriter(fh, fieldnames=list(row))
        writer.writeheader()
        writer.writerow(row)
    res = cli("sweep-report", str(sweep_dir))
    assert "200 panels in results.png" in _one_line_refusal(res.code, res.err)
    assert not (sweep_dir / "results.png").exists()


def test_a_trials_csv_that_is_not_utf8_is_one_clear_line(tmp_path, cli):
    sweep_dir = _sweep_folder(tmp_path, seeds=[0, 1])
    (sweep_dir / "trials.csv").write_bytes((sweep_dir / "trials.csv").read_bytes() + b"seed9,\xff\xfe,done\n")
    res = cli("sweep-report", str(sweep_dir))
    assert "not UTF-8" in _one_line_refusal(res.code, res.err)


def test_a_sweep_dir_that_is_a_dangling_link_is_one_clear_line(tmp_path, cli, sweep_file):
    sweep = sweep_file("config: digits.yaml\nseeds: [0]\ncollect: [test.accuracy]\n")
    (tmp_path / "sw").symlink_to(tmp_path / "nowhere")
    res = cli("sweep", str(sweep), "--sweep-dir", str(tmp_path / "sw"))
    assert "sw" in _one_line_refusal(res.code, res.err) and not (tmp_path / "nowhere").exists()


def test_an_interrupted_trial_of_any_task_can_be_started_again():
    """What runs of every task leave before summary.json (scores, detections, TensorBoard events
    in a sub-folder the config named) is modforge's to remove; anything else is not."""
    from modforge.sweep.command import run_wrote

    for written in ("scores.txt", "detections.json", "metrics.csv", "config.yaml", "curves.png", ".x.part",
                    "tb/events.out.tfevents.1.host", "logs/metrics.csv", "checkpoints/epoch1.pt"):  # fmt: skip
        assert run_wrote(Path(written)), written
    for foreign in ("thesis.tex", "notes.docx", "tb/thesis.tex", "src/model.py"):
        assert not run_wrote(Path(foreign)), foreign
