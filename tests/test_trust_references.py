"""References in configs are data too (issue 39, holes 1, 2 and 4; deliverable 1).

Every kind of reference a config can make (:data:`modforge.core.references.REFERENCE_KINDS`) is
walked with a planted plug-in (a ``.py`` file that leaves a marker file when imported) and a planted
``download: true`` (a corpus whose catalog URL is a loopback server counting connections): from a
stored config — a run folder's checkpoint someone gives you, a sweep folder — nothing is imported and
nothing is contacted; from a config file you pass, a file it points at in another folder vouches for
nothing there; typed on the command line, it vouches for what lies beside the file you typed. A kind
added to ``REFERENCE_KINDS`` without a case here fails :func:`test_every_reference_kind_is_walked`.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Iterator
from pathlib import Path

import pytest
import torch
import yaml

from loopback_http import LoopbackServer, direct_and_quick
from modforge.core.references import REFERENCE_KINDS, Trust, follow_reference, references_in
from modforge.train.checkpoint import atomic_save

pytestmark = pytest.mark.hostile

DIGITS = str(Path(__file__).parents[1] / "configs" / "digits.yaml")
MORE = ["train.max_epochs=2", "train.max_steps=4"]  # a finished run resumed further: its teacher is loaded
TINY = ["--epochs", "1", "train.max_steps=2", "train.scheduler=null", "train.num_threads=1", "train.progress=never", "train.callbacks=[]",
        "data.batch_size=64"]  # fmt: skip
PLUGIN = "from pathlib import Path\nPath({marker!r}).write_text('imported')\n"


class Counting(LoopbackServer):
    """Counts every request (and serves nothing): where a planted download would go."""

    hits = 0

    def answer(self, handler) -> None:  # noqa: ANN001 - http.server's handler
        self.hits += 1
        handler.send_error(404)


@pytest.fixture
def loopback() -> Iterator[Counting]:
    with Counting() as server:
        yield server


@pytest.fixture
def catalog_on_loopback(monkeypatch, loopback):
    """The MNIST catalog entry's URLs point at the loopback server (a regression would contact it)."""
    from modforge.data.images import catalog

    direct_and_quick(monkeypatch)  # no proxy from the environment between modforge and the loopback
    corpus = catalog.CORPORA["mnist"]
    variants = {name: dataclasses.replace(variant, files=tuple(dataclasses.replace(f, urls=(f"{loopback.url}/{f.filename}",))
                                                               for f in variant.files))
                for name, variant in corpus.variants.items()}  # fmt: skip
    monkeypatch.setitem(catalog.CORPORA, "mnist", dataclasses.replace(corpus, variants=variants))
    return loopback


def plant(folder: Path, name: str = "evil") -> tuple[Path, Path]:
    """A plug-in file in ``folder`` whose import writes a marker; returns (plug-in, marker)."""
    folder.mkdir(parents=True, exist_ok=True)
    marker = folder.parent / f"{folder.name}-{name}-imported"
    plugin = folder / f"{name}_{folder.name}.py"
    plugin.write_text(PLUGIN.format(marker=str(marker)))
    return plugin, marker


def planted_config(folder: Path, download_root: Path) -> tuple[Path, Path]:
    """A config in ``folder`` listing a plug-in beside it and asking for a download; (config, marker)."""
    plugin, marker = plant(folder)
    config = folder / "planted.yaml"
    config.write_text(f"_base_: {DIGITS}\nplugins: [{plugin.name}]\n"
                      f"data: {{_delete_: true, type: mnist, args: {{root: {download_root}, download: true}}}}\n")  # fmt: skip
    return config, marker


def one_line_error(res) -> str:  # noqa: ANN001 - a CliResult
    """The one error line of a refused command (progress and warnings aside)."""
    lines = [line for line in res.err.splitlines() if line.strip() and not line.startswith(("resuming ", "warning:"))]
    assert res.code == 2 and len(lines) == 1 and "Traceback" not in res.err, res
    return lines[0]


@pytest.fixture
def distilled_run(cli, tmp_path) -> Path:
    """A student distilled from a clean teacher config (a short run): what a planted folder starts from."""
    teacher = tmp_path / "teachers" / "clean.yaml"
    teacher.parent.mkdir()
    teacher.write_text(f"_base_: {DIGITS}\n")
    res = cli("train", DIGITS, *TINY, f"train.distill={{teacher: {teacher}}}", "--run-dir", str(tmp_path / "student"))
    assert res.code == 0, res.err
    return tmp_path / "student"


def replant(run: Path, change) -> Path:  # noqa: ANN001 - a function of the payload
    """The run's checkpoints and ``config.yaml`` rewritten as an attacker would (valid files, the
    stored config changed in all); returns ``last.pt``."""
    for path in sorted((run / "checkpoints").glob("*.pt")):
        payload = torch.load(path, weights_only=True)
        change(payload)
        atomic_save(payload, path)
    (run / "config.yaml").write_text(yaml.safe_dump(payload["config"], sort_keys=False))
    return run / "checkpoints" / "last.pt"


# ------------------------------------------------------------------ the teacher
def test_a_stored_teacher_config_with_the_right_fingerprint_imports_nothing_and_downloads_nothing(
    cli, tmp_path, distilled_run, catalog_on_loopback
):
    """Hole 1: a given run folder whose stored config names a teacher config listing plug-ins — even
    with the fingerprint the attacker made match — imports none of them on --resume."""
    import hashlib

    config, marker = planted_config(tmp_path / "elsewhere", tmp_path / "download-root")

    def to_planted(payload: dict) -> None:
        payload["config"]["train"]["distill"]["teacher"] = str(config)
        payload["distill_teacher"] = hashlib.sha256(config.read_bytes()).hexdigest()

    replant(distilled_run, to_planted)
    line = one_line_error(cli("train", "--resume", str(distilled_run), *MORE))
    assert "plug-ins" in line and "--plugins" in line, line
    assert not marker.exists() and catalog_on_loopback.hits == 0
    assert not (tmp_path / "download-root").exists()


def test_a_changed_teacher_is_refused_before_anything_of_it_is_read(cli, tmp_path, distilled_run):
    """The fingerprint is compared first: a teacher that is not the recorded one never gets its
    config parsed or its plug-ins looked at."""
    config, marker = planted_config(tmp_path / "elsewhere", tmp_path / "download-root")
    replant(distilled_run, lambda p: p["config"]["train"]["distill"].update(teacher=str(config)))
    line = one_line_error(cli("train", "--resume", str(distilled_run), *MORE))
    assert "changed since" in line and "SHA-256" in line, line
    assert not marker.exists()


def test_a_teacher_config_elsewhere_vouches_for_nothing_there(cli, tmp_path, catalog_on_loopback):
    """Hole 2: the student's config (the file you passed) names a teacher config in another folder; that
    folder's plug-ins are not imported, and the teacher's data section is never loaded."""
    config, marker = planted_config(tmp_path / "elsewhere", tmp_path / "download-root")
    student = tmp_path / "mine" / "student.yaml"
    student.parent.mkdir()
    student.write_text(f"_base_: {DIGITS}\ntrain: {{distill: {{teacher: ../elsewhere/planted.yaml}}}}\n")
    line = one_line_error(cli("train", str(student), *TINY, "--run-dir", str(tmp_path / "run")))
    assert "planted.yaml" in line and "evil_elsewhere.py" in line and "--plugins" in line, line
    assert not marker.exists() and catalog_on_loopback.hits == 0 and not (tmp_path / "run").exists()


def test_a_teacher_typed_on_the_command_line_vouches_for_the_plugins_beside_it(cli, tmp_path, catalog_on_loopback):
    """The same teacher typed by the user is the user's choice: its plug-ins load (the rule is not
    "refuse everything") — and its download still does not happen: the teacher is built on the
    student's data."""
    config, marker = planted_config(tmp_path / "elsewhere", tmp_path / "download-root")
    res = cli("train", DIGITS, *TINY, f"train.distill.teacher={config}", "--run-dir", str(tmp_path / "run"))
    assert res.code == 0, res.err
    assert marker.exists() and catalog_on_loopback.hits == 0 and not (tmp_path / "download-root").exists()


# ------------------------------------------------------------------ _base_, model.init, a sweep's config
def test_a_stored_config_with_a_base_reads_nothing_it_names(cli, tmp_path, distilled_run, catalog_on_loopback):
    config, marker = planted_config(tmp_path / "elsewhere", tmp_path / "download-root")
    replant(distilled_run, lambda p: p["config"].update(_base_=str(config)))
    line = one_line_error(cli("train", "--resume", str(distilled_run), *MORE))
    assert "_base_" in line, line
    assert not marker.exists() and catalog_on_loopback.hits == 0


def test_a_stored_model_init_is_read_as_weights_only(cli, tmp_path, distilled_run, catalog_on_loopback):
    """A stored ``model.init`` pointing at a folder holding a planted config and plug-in: testing the
    run reads the run's own weights; nothing in that folder is imported or followed."""
    config, marker = planted_config(tmp_path / "elsewhere", tmp_path / "download-root")

    def init_elsewhere(payload: dict) -> None:
        payload["config"]["model"]["init"] = {"path": str(config.parent)}
        payload["config"]["train"].pop("distill")
        payload.pop("distill_teacher", None)

    replant(distilled_run, init_elsewhere)
    (distilled_run / "checkpoints" / "best.pt").unlink()
    res = cli("test", str(distilled_run))
    assert res.code == 0, res.err
    assert not marker.exists() and catalog_on_loopback.hits == 0 and not (tmp_path / "download-root").exists()


def test_a_stored_sweeps_config_is_never_loaded(cli, tmp_path, catalog_on_loopback):
    """``sweep-report`` of a given sweep folder whose ``sweep.yaml`` names a planted config: it is
    reported from the folder's tables, never loaded, its plug-ins never imported."""
    config, marker = planted_config(tmp_path / "elsewhere", tmp_path / "download-root")
    sweep = tmp_path / "given-sweep"
    sweep.mkdir()
    (sweep / "sweep.yaml").write_text(f"name: given\nconfig: {config}\ngrid: {{train.max_epochs: [1]}}\n")
    res = cli("sweep-report", str(sweep))
    assert res.code in (0, 2), res
    assert not marker.exists() and catalog_on_loopback.hits == 0


def test_a_sweep_file_may_not_point_a_teacher_at_a_config_elsewhere(cli, tmp_path):
    """A teacher override in a sweep file reads as typed on the trial's command line: the sweep file
    checks it, as it checks ``config:`` (beside it, or under --config-root)."""
    config, marker = planted_config(tmp_path / "elsewhere", tmp_path / "download-root")
    sweeps = tmp_path / "sweeps"
    sweeps.mkdir()
    (sweeps / "s.yaml").write_text(f"config: {DIGITS}\ngrid:\n  train.distill.teacher: [{config}]\n")
    line = one_line_error(cli("sweep", str(sweeps / "s.yaml"), "--config-root", str(Path(DIGITS).parent),
                              "--sweep-dir", str(tmp_path / "out")))  # fmt: skip
    assert "--config-root" in line and "planted.yaml" in line, line
    assert not marker.exists() and not (tmp_path / "out").exists()


# ------------------------------------------------------------------ the rule itself
def test_every_reference_kind_is_walked():
    """Each kind has a case above; a new kind must get one (and follow the rule)."""
    walked = {"_base_", "model.init.path", "train.distill.teacher", "sweep.config"}
    assert set(REFERENCE_KINDS) == walked


@pytest.mark.parametrize("kind", sorted(REFERENCE_KINDS))
def test_the_rule_for_each_kind_and_origin(kind, tmp_path):
    from modforge.core.origins import CommandLineOrigin

    stored = follow_reference(kind, "x.yaml", origin="run/config.yaml:3", said_in=tmp_path, stored=True,
                              vouch_root=tmp_path)  # fmt: skip
    assert stored.trust is Trust.STORED and stored.vouch_root is None and stored.vouched({"a.py": tmp_path}) == {}
    in_file = follow_reference(kind, "x.yaml", origin="cfg.yaml:3", said_in=tmp_path / "sub", stored=False,
                               vouch_root=tmp_path)  # fmt: skip
    assert in_file.trust is Trust.FILE and in_file.path == tmp_path / "sub" / "x.yaml"
    assert in_file.vouched({"a.py": tmp_path / "sub", "b.py": tmp_path.parent}) == {"a.py": tmp_path / "sub"}
    typed = follow_reference(kind, "x.yaml", origin=CommandLineOrigin("override 'k=x.yaml'"), said_in=tmp_path,
                             stored=False, vouch_root=None)  # fmt: skip
    assert typed.trust is Trust.TYPED and typed.path == Path.cwd() / "x.yaml" and typed.vouch_root == Path.cwd()
    looks_typed = follow_reference(kind, "x.yaml", origin="override 'k=x.yaml'", said_in=tmp_path, stored=False,
                                   vouch_root=None)  # a file named "override ..." is still a file  # fmt: skip
    assert looks_typed.trust is Trust.FILE


def test_references_are_found_inside_the_values_that_set_them():
    assert references_in("train.distill", {"teacher": "t.yaml", "temperature": 2}) == [("train.distill.teacher",
                                                                                        "t.yaml")]  # fmt: skip
    assert references_in("model.init", "w.pt") == [("model.init.path", "w.pt")]
    assert references_in("model", {"init": [{"path": "a.pt"}, {"path": "b.pt"}]}) == [
        ("model.init.path", "a.pt"), ("model.init.path", "b.pt")]  # fmt: skip
    assert references_in("train.max_epochs", 3) == []


# ------------------------------------------------------------------ hole 4: a stored config downloads nothing
@pytest.fixture
def mnist_run(cli, tmp_path) -> tuple[Path, Path]:
    """A short run on MNIST-format files (root, run folder)."""
    from image_fixtures import write_mnist_family

    root = write_mnist_family(tmp_path / "mnist-root", n_train=16, n_test=8) and tmp_path / "mnist-root"
    config = tmp_path / "mnist.yaml"
    config.write_text(f"data: {{type: mnist, args: {{root: {root}, val_fraction: 0.25}}, batch_size: 8}}\n"
                      "model: {backbone: {type: cnn, args: {channels: [4]}}, neck: global_avg_pool, head: linear, "
                      "losses: [cross_entropy]}\n"
                      "train: {max_epochs: 1, max_steps: 2, progress: never, callbacks: [], num_threads: 1}\n")  # fmt: skip
    res = cli("train", str(config), "--run-dir", str(tmp_path / "run"))
    assert res.code == 0, res.err
    return root, tmp_path / "run"


@pytest.mark.parametrize("command", [
    ["test", "{run}"],
    ["export", "{run}", "--engine", "onnx"],
    ["export", "{run}", "--engine", "onnx", "--quantize", "int8", "--calibration-batches", "1"],
    ["profile", "{run}", "--engines", "eager", "--repeats", "1"],
    ["data", "show", "{run}/config.yaml", "--out", "{tmp}/grid.png", "-n", "4"],
    ["train", "--resume", "{run}", "train.max_epochs=2", "train.max_steps=3"],
])  # fmt: skip
def test_a_stored_download_is_not_followed_by_any_command(cli, tmp_path, mnist_run, catalog_on_loopback, command):
    """Hole 4: ``download: true`` in a given run's stored config: every command reads the files as they
    are, with one warning naming how to fetch them; nothing is contacted."""
    _, run = mnist_run
    replant(run, lambda p: p["config"]["data"]["args"].update(download=True))
    res = cli(*[part.format(run=run, tmp=tmp_path) for part in command])
    assert res.code == 0, res.err
    assert "download: true is not followed" in res.err and "modforge data download mnist" in res.err
    assert catalog_on_loopback.hits == 0


def test_a_stored_download_never_makes_its_root(cli, tmp_path, mnist_run, catalog_on_loopback):
    """The stored root lies outside the run folder and does not exist: nothing is made there; the
    missing-data error is the one line, and typing the download on the command line is what asks."""
    _, run = mnist_run
    elsewhere = tmp_path / "not-mine" / "root"
    replant(run, lambda p: p["config"]["data"]["args"].update(download=True, root=str(elsewhere)))
    one_line_error(cli("test", str(run)))
    assert not elsewhere.parent.exists() and catalog_on_loopback.hits == 0
    res = cli("test", str(run), "data.args.download=true")  # typed: the user asked (the loopback has no files)
    assert res.code != 0 and catalog_on_loopback.hits > 0


@pytest.mark.slow
def test_a_sweep_resuming_a_planted_trial_imports_nothing_its_teacher_lists(tmp_path, distilled_run):
    """Hole 1 through a sweep: a given sweep folder holding an interrupted trial whose stored config
    names a teacher config with plug-ins (fingerprint forged to match) — ``modforge sweep --sweep-dir``
    resumes the trial in a child process, which imports nothing and reports the trial failed."""
    import hashlib
    import shutil

    from modforge.sweep import SEARCHES, load_sweep
    from modforge.sweep.command import build_job
    from sweep_helpers import digits_beside, sweep_cli, trial_rows

    config, marker = planted_config(tmp_path / "elsewhere", tmp_path / "download-root")

    def to_planted(payload: dict) -> None:
        payload["config"]["train"]["distill"]["teacher"] = str(config)
        payload["distill_teacher"] = hashlib.sha256(config.read_bytes()).hexdigest()

    replant(distilled_run, to_planted)
    (distilled_run / "summary.json").unlink()  # interrupted: the sweep resumes it
    digits_beside(tmp_path)
    sweep = tmp_path / "s.yaml"
    sweep.write_text("config: digits.yaml\nseeds: [0]\ncollect: [test.accuracy]\n")
    given = tmp_path / "given"
    job = build_job(load_sweep(sweep), SEARCHES["grid"](load_sweep(sweep), given).ask(), given, threads=1)
    job.run_dir.parent.mkdir(parents=True)
    shutil.copytree(distilled_run, job.run_dir)
    assert "--resume" in job.argv()  # the planted trial is one the sweep resumes
    res = sweep_cli(tmp_path, str(sweep), "--sweep-dir", str(given))
    assert not marker.exists(), res.stderr[-2000:]
    assert trial_rows(given)[job.trial_id]["status"] != "done"
    assert "plug-ins" in job.log.read_text() and "--plugins" in job.log.read_text()
