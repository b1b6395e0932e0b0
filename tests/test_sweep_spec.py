"""Sweeps without training: the sweep file, trial ids, random draws, commands, the trials
table, the report and the folder lock (fast; the real runs are in test_sweep_run.py)."""

from __future__ import annotations

import json
import statistics
import sys
import textwrap
from pathlib import Path

import pytest

from modforge.sweep import NOTES_MARKER, SEARCHES, build_job, build_report, load_sweep, write_report
from modforge.sweep.command import modforge_command, override_tokens
from modforge.sweep.driver import param_columns, write_resolved
from modforge.sweep.executor import last_error_line
from modforge.sweep.lock import SweepBusyError, SweepLock
from modforge.sweep.report import keep_notes, markdown
from modforge.sweep.search import draw_random
from modforge.sweep.spec import SweepSpecError
from modforge.sweep.table import TrialsTable, read_rows
from sweep_helpers import SHIPPED_DIGITS

DIGITS = SHIPPED_DIGITS  # each test's copy beside its sweep files, once its fixture `sweep_digits` ran
pytestmark = pytest.mark.usefixtures("sweep_digits")


def _trials(spec):
    search = SEARCHES[spec.search](spec, Path("unused"))
    out = []
    while (trial := search.ask()) is not None:
        out.append(trial)
    return out


@pytest.fixture
def sweep_file(write):
    def make(body: str, name: str = "s.yaml") -> Path:
        return write(name, f"config: {DIGITS}\n" + textwrap.dedent(body).lstrip("\n"))

    return make


def test_grid_times_seeds_in_file_order_with_readable_stable_ids(sweep_file):
    spec = load_sweep(
        sweep_file("""
        overrides: {train.max_epochs: 1}
        grid:
          train.optimizer.args.lr: [0.01, 0.1]
          algorithm:
            sgd: {--algorithm: sgd}
            er: {--algorithm: er, --buffer-size: 200}
        seeds: [0, 1]
        collect: [test.accuracy]
    """)
    )
    trials = _trials(spec)
    assert [t.id for t in trials] == [
        "lr0.01-sgd-seed0", "lr0.01-sgd-seed1", "lr0.01-er-seed0", "lr0.01-er-seed1",
        "lr0.1-sgd-seed0", "lr0.1-sgd-seed1", "lr0.1-er-seed0", "lr0.1-er-seed1",
    ]  # fmt: skip
    er = trials[2]
    assert er.params == {"train.optimizer.args.lr": "0.01", "algorithm": "er"} and er.seed == 0
    assert override_tokens(er.overrides) == [
        "train.max_epochs=1", "train.optimizer.args.lr=0.01", "--algorithm", "er", "--buffer-size", "200"
    ]  # fmt: skip
    assert [t.id for t in _trials(load_sweep(spec.file))] == [t.id for t in trials]  # stable over re-reads
    assert param_columns(spec) == ["train.optimizer.args.lr", "algorithm"]


def test_random_space_is_reproducible_from_its_seed_and_within_bounds(sweep_file):
    body = """
        random:
          trials: {n}
          seed: {seed}
          space:
            train.optimizer.args.lr: {{loguniform: [1.0e-4, 1.0e-1]}}
            model.head.args.dropout: {{uniform: [0.0, 0.5]}}
            data.batch_size: {{int: [8, 64]}}
            --backbone: {{choice: [cnn, mlp]}}
        collect: [test.accuracy]
    """
    first = _trials(load_sweep(sweep_file(body.format(n=5, seed=3), "a.yaml")))
    again = _trials(load_sweep(sweep_file(body.format(n=8, seed=3), "b.yaml")))
    other = _trials(load_sweep(sweep_file(body.format(n=5, seed=4), "c.yaml")))
    assert [t.overrides for t in first] == [t.overrides for t in again[:5]]  # more trials: the first ones unchanged
    assert [t.id for t in first] == [t.id for t in again[:5]]
    assert [t.overrides for t in first] != [t.overrides for t in other]
    for t in again:
        o = t.overrides
        assert 1e-4 <= o["train.optimizer.args.lr"] <= 1e-1 and 0.0 <= o["model.head.args.dropout"] <= 0.5
        assert isinstance(o["data.batch_size"], int) and 8 <= o["data.batch_size"] <= 64
        assert o["--backbone"] in ("cnn", "mlp")
    assert len({t.id for t in again}) == 8
    spec = load_sweep(sweep_file(body.format(n=5, seed=3), "d.yaml"))
    assert draw_random(spec.random, 2) == draw_random(spec.random, 2)


@pytest.mark.parametrize(
    ("body", "expected"),
    [
        ("grdi: {a: [1]}\ncollect: [x]\n", "grdi: unknown sweep key 'grdi'; did you mean 'grid'?"),
        ("grid: {train.max_epochs: 3}\ncollect: [x]\n", "grid.train.max_epochs: expected a list of values"),
        (
            "random: {trials: 2, space: {train.x: {normal: [0, 1]}}}\ncollect: [x]\n",
            "random.space.train.x: expected one of",
        ),
        ("random: {trials: 2, space: {train.x: {loguniform: [0, 1]}}}\ncollect: [x]\n", "low > 0"),
        (
            "random: {trials: 0, space: {train.x: {uniform: [0, 1]}}}\ncollect: [x]\n",
            "random.trials: expected a number",
        ),
        ("grid: {a.b: [1]}\n", "collect: required"),
        ("grid: {a.b: [1]}\nseeds: [0, 0]\ncollect: [x]\n", "seeds: a seed is listed twice"),
        ("grid: {v: {x: {bad key: 1}}}\ncollect: [x]\n", "grid.v.x.bad key: expected KEY.PATH"),
        ("grid: {v: {x: {--seed: 1}}}\ncollect: [x]\n", "seeds are given by the sweep's 'seeds:' list"),
        ("grid: {a.b: [1]}\ncollect: [{name: x, goal: up}]\n", "collect.0.goal: expected one of max, min, none"),
        ("grid: {v: {x: {config: nope.yaml}}}\ncollect: [x]\n", "config file 'nope.yaml' not found"),
        ("grid: {a.b: [1]}\ncollect: [x]\ncommand: fit\n", "command: expected one of train, test"),
    ],
)
def test_a_bad_sweep_file_is_one_error_naming_the_key_and_the_file(sweep_file, body, expected):
    path = sweep_file(body)
    with pytest.raises(SweepSpecError) as info:
        load_sweep(path)
    message = str(info.value)
    assert expected in message and "s.yaml" in message and "\n" not in message


def test_a_sweep_without_a_config_and_a_broken_yaml_are_refused(write):
    with pytest.raises(SweepSpecError, match=r"config: required.*x\.yaml\)$"):
        load_sweep(write("x.yaml", "grid: {a.b: [1]}\ncollect: [x]\n"))
    with pytest.raises(SweepSpecError, match="y.yaml"):
        load_sweep(write("y.yaml", "grid: {a: [1\n"))


def test_cli_bad_sweep_file_exits_2_with_one_line(cli, write):
    path = write("bad.yaml", f"config: {DIGITS}\ngrid: {{a.b: [1]}}\ncollect: [{{name: x, scale: big}}]\n")
    res = cli("sweep", str(path))
    assert res.code == 2
    assert res.err.count("\n") == 1 and "collect.0.scale: expected a number" in res.err and "bad.yaml:3" in res.err


def test_trial_command_fresh_resume_and_threads(sweep_file, tmp_path):
    spec = load_sweep(sweep_file("grid: {--epochs: [2]}\nseeds: [5]\ncollect: [test.accuracy]\n"))
    (trial,) = _trials(spec)
    job = build_job(spec, trial, tmp_path / "sw", threads=3)
    assert job.run_dir == (tmp_path / "sw" / "trials" / "epochs2-seed5").resolve()
    assert job.log.name == "epochs2-seed5.log" and job.log.parent == job.run_dir.parent
    fresh = job.argv()
    prefix = len(modforge_command())  # python -P -m modforge (a bootstrap on Python 3.10)
    assert fresh[:prefix] == modforge_command() and fresh[prefix : prefix + 2] == ["train", str(DIGITS)]
    assert fresh[prefix + 2 :] == ["--epochs", "2", "--seed", "5", "train.num_threads=3", "train.progress=never",
                         "--run-dir", str(job.run_dir)]  # fmt: skip
    job.run_dir.mkdir(parents=True)
    (job.run_dir / "metrics.csv").write_text("partial")  # an attempt without a checkpoint: started afresh
    assert job.argv() == fresh and not job.run_dir.exists()
    (job.run_dir / "checkpoints").mkdir(parents=True)
    (job.run_dir / "checkpoints" / "last.pt").write_bytes(b"x")
    assert job.argv()[prefix:] == ["train", "--resume", str(job.run_dir)]
    own = load_sweep(sweep_file("overrides: {train.num_threads: 1}\nseeds: [0]\ncollect: [x]\n", "own.yaml"))
    (trial,) = _trials(own)
    assert "train.num_threads=3" not in build_job(own, trial, tmp_path / "o", threads=3).fresh


def _fake_sweep(sweep_file, tmp_path: Path, values: dict[tuple[str, int], float | None]) -> Path:
    """A sweep folder as a finished sweep leaves it, with ``test.accuracy`` per (algorithm, seed)."""
    spec = load_sweep(
        sweep_file("""
        grid: {algorithm: {sgd: {--algorithm: sgd}, er: {--algorithm: er}}}
        seeds: [0, 1, 2]
        collect:
          - {name: test.accuracy, label: acc, scale: 100, decimals: 1}
          - {name: test.loss, label: loss}
          - {name: seconds, agg: median, decimals: 1}
        report: {title: Fake, description: A fake sweep.}
    """)
    )
    sweep_dir = tmp_path / "sweep"
    sweep_dir.mkdir()
    write_resolved(spec, sweep_dir)
    table = TrialsTable(sweep_dir, param_columns(spec), ["test.accuracy", "test.loss"])
    for trial in _trials(spec):
        value = values[(trial.params["algorithm"], trial.seed)]
        table.set(trial.id, algorithm=trial.params["algorithm"], seed=trial.seed, seconds=10.0 + trial.seed)
        if value is None:
            table.set(trial.id, status="failed", error="boom")
            continue
        run = sweep_dir / "trials" / trial.id
        run.mkdir(parents=True)
        (run / "summary.json").write_text(json.dumps({"test": {"accuracy": value, "loss": 1 - value}}))
        table.set(trial.id, status="done", **{"test.accuracy": value, "test.loss": 1 - value})
    table.write()
    return sweep_dir


def test_report_groups_over_seeds_with_mean_std_n_and_bold_best(sweep_file, tmp_path):
    values = {("sgd", 0): 0.2, ("sgd", 1): 0.3, ("sgd", 2): 0.1, ("er", 0): 0.8, ("er", 1): 0.7, ("er", 2): None}
    sweep_dir = _fake_sweep(sweep_file, tmp_path, values)
    report = build_report(sweep_dir)
    assert [g.params for g in report.groups] == [{"algorithm": "sgd"}, {"algorithm": "er"}]
    sgd, er = report.groups
    assert (sgd.n, sgd.failed, er.n, er.failed) == (3, 0, 2, 1)
    acc = report.spec.collect[0]
    assert sgd.centre(acc) == pytest.approx(0.2) and sgd.spread(acc) == pytest.approx(statistics.stdev([0.2, 0.3, 0.1]))
    assert report.row(er) == ["er", "2 (1 failed)", "**75.0 ± 7.1**", "**0.250 ± 0.071**", "10.5"]
    assert report.row(sgd) == ["sgd", "3", "20.0 ± 10.0", "0.800 ± 0.100", "11.0"]  # seconds: median, no bold
    text = markdown(report, "modforge sweep s.yaml")
    assert "# Fake" in text and "A fake sweep." in text and "| algorithm | n | acc | loss | seconds |" in text
    assert "| `er` | 2 (1 failed) | **75.0 ± 7.1** |" in text and "Settings (algorithm): `sgd` --algorithm sgd" in text
    write_report(sweep_dir)
    for name in ("results.md", "results.csv", "results.png"):
        assert (sweep_dir / name).stat().st_size > 0
    csv_rows = (sweep_dir / "results.csv").read_text().splitlines()
    assert csv_rows[0] == ("algorithm,n,failed,pruned,test.accuracy_mean,test.accuracy_std,test.loss_mean,test.loss_std,"
                           "seconds_median,seconds_std")  # fmt: skip
    assert csv_rows[2].startswith("er,2,1,0,0.75,")


def test_write_to_keeps_the_hand_written_notes_and_refuses_a_page_without_the_marker(sweep_file, tmp_path):
    sweep_dir = _fake_sweep(sweep_file, tmp_path, {(a, s): 0.5 for a in ("sgd", "er") for s in (0, 1, 2)})
    page = tmp_path / "page.md"
    page.write_text(f"# old table\n\n{NOTES_MARKER}\n\n**Why.** Hand-written.\n")
    write_report(sweep_dir, write_to=page)
    text = page.read_text()
    assert (
        text.startswith("# Fake")
        and "old table" not in text
        and text.endswith(f"{NOTES_MARKER}\n\n**Why.** Hand-written.\n")
    )
    plain = tmp_path / "plain.md"
    plain.write_text("notes nobody marked\n")
    with pytest.raises(Exception, match="no '<!-- hand-written notes below"):
        write_report(sweep_dir, write_to=plain)
    assert plain.read_text() == "notes nobody marked\n"
    assert keep_notes("# new\n", tmp_path / "new.md") == f"# new\n\n{NOTES_MARKER}\n"


def test_trials_table_keeps_rows_of_trials_not_reached_yet(tmp_path):
    first = TrialsTable(tmp_path, ["a"], ["m"])
    first.set("t1", a="1", status="done", m=0.5)
    first.set("t2", a="2", status="failed", error="x")
    first.write()
    second = TrialsTable(tmp_path, ["a"], ["m"])
    second.set("t2", a="2", status="running")
    second.write()
    rows = read_rows(tmp_path)
    assert [(r["trial"], r["status"]) for r in rows] == [("t2", "running"), ("t1", "done")]
    assert rows[1]["m"] == "0.5"


def test_last_error_line_prefers_modforge_s_error_line(tmp_path):
    log = tmp_path / "t.log"
    log.write_text("# cmd\nepoch 1\nerror: data.batch_size: expected int, got 'x' (in override)\n")
    assert last_error_line(log) == "data.batch_size: expected int, got 'x' (in override)"
    log.write_text('Traceback (most recent call last):\n  File "x", line 1\nRuntimeError: boom\n')
    assert last_error_line(log) == "RuntimeError: boom"


def test_a_second_sweep_on_a_held_folder_is_refused(tmp_path):
    with SweepLock(tmp_path, wait_s=0.0):
        with pytest.raises(SweepBusyError, match="is in use by another 'modforge sweep'"):
            with SweepLock(tmp_path, wait_s=0.2):
                pass
    with SweepLock(tmp_path, wait_s=0.0):  # released
        pass


def test_the_sweep_package_does_not_import_torch():
    import subprocess

    code = "import sys, modforge.sweep, modforge.cli.commands.sweep_run; print('torch' in sys.modules)"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True, timeout=120)
    assert out.stdout.strip() == "False"


def test_the_report_survives_an_edited_collect_a_dropped_seed_and_a_moved_config(sweep_file, tmp_path):
    values = {("sgd", 0): 0.2, ("sgd", 1): 0.3, ("sgd", 2): 0.1, ("er", 0): 0.8, ("er", 1): 0.7, ("er", 2): 0.9}
    sweep_dir = _fake_sweep(sweep_file, tmp_path, values)
    stored = sweep_dir / "sweep.yaml"
    text = stored.read_text()
    edited = text.replace("seeds:\n- 0\n- 1\n- 2", "seeds:\n- 0\n- 1")  # seed 2 dropped from the sweep
    edited = edited.replace(str(DIGITS), str(tmp_path / "moved" / "digits.yaml"))  # the config is gone
    assert edited != text
    start = edited.index("- name: test.loss")
    edited = edited[:start] + edited[edited.index("- name: seconds"):]  # test.loss no longer collected
    stored.write_text(edited)
    report = build_report(sweep_dir)
    assert [g.params for g in report.groups] == [{"algorithm": "sgd"}, {"algorithm": "er"}]  # still two groups
    sgd, er = report.groups
    assert (sgd.n, er.n) == (2, 2)  # the dropped seed's trials are not averaged
    assert sgd.centre(report.spec.collect[0]) == pytest.approx(0.25)


def test_goals_come_from_whole_words_of_the_name():
    from modforge.sweep.spec import default_goal

    for name in ("val_loss", "min_dcf", "test_per_attack.A05.eer", "class_il.forgetting", "train_seconds", "wer"):
        assert default_goal(name) == "min", name
    for name in ("sentiment_accuracy", "answer_f1", "test.map_50", "best.val_accuracy"):
        assert default_goal(name) == "max", name


def test_the_error_of_a_trial_is_its_last_attempts(tmp_path):
    log = tmp_path / "t.log"
    log.write_text("# 10:00 cmd\nerror: first attempt failed\n# 10:05 cmd --resume\nepoch 3\nKilled\n")
    assert last_error_line(log) == "Killed"


def test_every_shipped_sweep_file_loads_with_the_documented_config_root():
    """The commands the README and the sweep files show (``--config-root configs``) work, and
    without the flag the configs in the sibling folders are refused (they do not lie beside)."""
    from modforge.sweep.spec import SweepSpecError

    configs = Path(__file__).resolve().parents[1] / "configs"
    for sweep in sorted((configs / "sweeps").glob("*.yaml")):
        spec = load_sweep(sweep, config_roots=[configs])
        assert spec.name
        with pytest.raises(SweepSpecError, match="config-root"):
            load_sweep(sweep)
