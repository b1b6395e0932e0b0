"""The continual run: tasks in order, accuracy matrices in summary.json and cl_matrix.png,
Mammoth-style flags for the algorithm, and exact resume across task boundaries."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch
import yaml

from run_configs import continual_digits
from train_processes import kill_at_steps

CONTINUAL = continual_digits(keep_last=2,
                             continual="{algorithm: {type: derpp, args: {buffer_size: 100}}, epochs_per_task: 2}")


@pytest.fixture
def config(write):
    return write("seq.yaml", CONTINUAL)


@pytest.mark.filterwarnings("ignore:torchscript. stage 'backbone':UserWarning")  # the MLP is traced: expected
def test_a_continual_run_fills_both_accuracy_matrices(cli, config, tmp_path, monkeypatch):
    import modforge.experiment.experiment as experiment_module

    models = []
    build_model = experiment_module.build_model
    monkeypatch.setattr(experiment_module, "build_model", lambda *a, **k: models.append(build_model(*a, **k)) or models[-1])
    res = cli("train", str(config), "--run-dir", "run")
    assert res.code == 0, res.err
    assert len(models) == 1  # once: the task its section names gets the run before anything is built
    run = tmp_path / "run"
    summary = json.loads((run / "summary.json").read_text())
    assert summary["tasks"] == 5 and summary["setting"] == "class-il" and (run / "cl_matrix.png").exists()
    for setting in ("class_il", "task_il"):
        matrix = summary[setting]["matrix"]
        assert [len(row) for row in matrix] == [1, 2, 3, 4, 5]  # after task i: tasks 0..i
        assert all(0.0 <= a <= 1.0 for row in matrix for a in row)
        assert summary[setting]["average_accuracy"] == pytest.approx(sum(matrix[-1]) / 5)
    # task-IL is the easier setting: the task's classes are given
    assert summary["task_il"]["average_accuracy"] > summary["class_il"]["average_accuracy"]
    assert "class-IL" in res.out and "average_accuracy" in res.out
    checkpoint = torch.load(run / "checkpoints" / "last.pt", weights_only=True)
    assert checkpoint["continual"]["tasks_done"] == 5 and len(checkpoint["algorithm"]["buffer"]["data"]["input"]) == 100
    assert not (run / "checkpoints" / "best.pt").exists()  # no epoch of a sequence is "best"
    res = cli("export", "run", "--engine", "torchscript")  # DER++ classifies by its logits: exportable
    assert res.code == 0, res.err


def test_modforge_test_re_evaluates_every_task_with_the_algorithms_classifier(cli, config, tmp_path):
    res = cli("train", str(config), "continual.algorithm={type: icarl, args: {buffer_size: 60}}", "--run-dir", "run")
    assert res.code == 0, res.err
    summary = json.loads((tmp_path / "run" / "summary.json").read_text())
    res = cli("test", "run")
    assert res.code == 0, res.err
    record = json.loads((tmp_path / "run" / "evaluations" / "last-test.json").read_text())
    assert record["tasks"] == 5  # nearest-mean-of-exemplars scores, as during the run
    assert record["class_il_accuracy"] == pytest.approx(summary["class_il"]["average_accuracy"])
    assert record["task_il_accuracy"] == pytest.approx(summary["task_il"]["average_accuracy"])
    assert [record[f"class_il_task{i}"] for i in range(1, 6)] == pytest.approx(summary["class_il"]["matrix"][-1])
    res = cli("export", "run", "--engine", "torchscript")  # an artifact would classify by the logits instead
    assert res.code == 2 and "does not classify by the model's logits" in res.err
    assert not (tmp_path / "run" / "exports").exists()


def test_algorithm_and_its_hyper_parameters_as_flags(cli, config):
    res = cli("config", str(config), "--algorithm", "der", "--alpha", "0.7", "--buffer-size", "50")
    assert res.code == 0, res.err
    resolved = yaml.safe_load(res.out)
    assert resolved["continual"]["algorithm"] == {
        "type": "der", "args": {"alpha": 0.7, "buffer_size": 50}
    }  # fmt: skip
    res = cli("config", str(config), "--algorithm", "dre")
    assert res.code == 2 and "did you mean 'der'" in res.err


def test_sgd_forgets_and_replay_remembers(cli, config, tmp_path):
    averages = {}
    for algorithm in ("sgd", "derpp"):
        res = cli("train", str(config), f"continual.algorithm={algorithm}", "continual.epochs_per_task=4",
                  "--run-dir", algorithm)
        assert res.code == 0, res.err
        averages[algorithm] = json.loads((tmp_path / algorithm / "summary.json").read_text())["class_il"]
    assert averages["sgd"]["average_accuracy"] < 0.3  # only the last task survives: about 1/5
    assert averages["derpp"]["average_accuracy"] > averages["sgd"]["average_accuracy"] + 0.1
    assert averages["sgd"]["forgetting"] > averages["derpp"]["forgetting"]


@pytest.mark.slow
@pytest.mark.parametrize("algorithm", ["derpp", "icarl"])  # a reservoir buffer; herding exemplars and a teacher
def test_killed_during_the_sequence_and_resumed_gives_the_same_matrices(cli, config, tmp_path, algorithm):
    chosen = f"continual.algorithm={{type: {algorithm}, args: {{buffer_size: 100}}}}"
    reference = cli("train", str(config), chosen, "--run-dir", "reference")  # in this process: no 4 s of imports
    assert reference.code == 0, reference.err
    run = tmp_path / "killed"
    # each kill once the running process itself has checkpointed a given step (of 80: 2 epochs of 8 steps a
    # task): mid-task, at a task's end (evaluation and the next task's start), mid-task again, late. The whole
    # run trains in ~0.2 s on a fast machine, so kills timed in tenths of a second after a checkpoint could all
    # land after its end (seen: one kill of the four)
    assert kill_at_steps([str(config), chosen], run, ((12, 0.0), (32, 0.001), (52, 0.0), (68, 0.002)), tmp_path) >= 3
    ours = json.loads((run / "summary.json").read_text())
    theirs = json.loads((tmp_path / "reference" / "summary.json").read_text())
    assert ours["class_il"]["matrix"] == theirs["class_il"]["matrix"]
    assert ours["task_il"]["matrix"] == theirs["task_il"]["matrix"]
    a = torch.load(run / "checkpoints" / "last.pt", weights_only=True)
    b = torch.load(tmp_path / "reference" / "checkpoints" / "last.pt", weights_only=True)
    assert all(torch.equal(a["model"][k], b["model"][k]) for k in a["model"])


def test_bad_continual_settings_fail_at_validation(cli, config):
    res = cli("config", str(config), "continual.epochs=3")
    assert res.code == 2 and "continual.epochs: unknown argument 'epochs' (valid arguments: algorithm, epochs_per_task, online, blurry, eval_every, forward_transfer)" in res.err
    assert "warning" not in res.err
    res = cli("config", str(config), "continual.epochs_per_task=0")
    assert res.code == 2 and "epochs_per_task must be at least 1" in res.err
    res = cli("train", str(config), "data.type=digits", "--run-dir", "run")
    assert res.code == 2 and "needs a task-sequence dataset" in res.err
    res = cli("train", str(config), "data.type=perm_digits", "continual.algorithm=icarl", "--run-dir", "run")
    assert res.code == 2 and "algorithm 'icarl' works on class-il sequences; data.type 'perm_digits' is domain-il" in res.err


@pytest.mark.parametrize("path", sorted((Path(__file__).parents[1] / "configs" / "continual").glob("seq_digits_*.yaml")),
                         ids=lambda p: p.stem)
def test_every_continual_config_validates(cli, path):
    res = cli("config", str(path))
    assert res.code == 0, res.err
    resolved = yaml.safe_load(res.out)
    assert resolved["continual"]["algorithm"]["type"] == path.stem.removeprefix("seq_digits_")


def test_joint_is_the_upper_bound(cli, config, tmp_path):
    res = cli("train", str(config), "continual.algorithm=joint", "continual.epochs_per_task=3", "--run-dir", "joint")
    assert res.code == 0, res.err
    summary = json.loads((tmp_path / "joint" / "summary.json").read_text())
    assert summary["class_il"]["average_accuracy"] > 0.8  # sgd on the same run: about 0.2


def test_lwf_and_ewc_keep_their_state_across_a_resume(cli, config, tmp_path):
    for algorithm in ("lwf", "ewc_online"):
        res = cli("train", str(config), f"continual.algorithm={algorithm}", "--run-dir", algorithm)
        assert res.code == 0, res.err
        state = torch.load(tmp_path / algorithm / "checkpoints" / "last.pt", weights_only=True)["algorithm"]
        assert state["task"] == 4 and state["seen_classes"] == list(range(10))
        assert (state["teacher"] if algorithm == "lwf" else state["fisher"]) is not None


@pytest.mark.parametrize("algorithm", ["derpp", "icarl", "lwf"])
def test_resuming_from_a_task_boundary_checkpoint_is_exact(cli, config, tmp_path, algorithm):
    """The checkpoint written at a task boundary resumes into the next task already begun: its
    classes seen, its loader's order from the start — the same run as one never stopped."""
    chosen = [f"continual.algorithm={{type: {algorithm}, args: {{}}}}", "train.checkpoint.keep_last=50"]
    res = cli("train", str(config), *chosen, "--run-dir", "reference")
    assert res.code == 0, res.err
    boundary = tmp_path / "reference" / "checkpoints" / "epoch0004-step0000032.pt"  # after task 2 of 5
    state = torch.load(boundary, weights_only=True)
    assert state["continual"]["tasks_done"] == 2 and state["algorithm"]["task"] == 2  # task 3 has begun
    res = cli("train", "--resume", str(boundary), "--run-dir", "resumed")
    assert res.code == 0, res.err
    ours, theirs = (json.loads((tmp_path / d / "summary.json").read_text()) for d in ("resumed", "reference"))
    assert ours["class_il"]["matrix"] == theirs["class_il"]["matrix"]
    a, b = (torch.load(tmp_path / d / "checkpoints" / "last.pt", weights_only=True) for d in ("resumed", "reference"))
    assert all(torch.equal(a["model"][k], b["model"][k]) for k in b["model"])
    assert a["algorithm"]["seen_classes"] == list(range(10))


def test_schedules_restart_every_task_and_whole_run_stopping_is_refused(cli, config, tmp_path):
    res = cli("train", str(config), "train.scheduler={type: step_lr, args: {step_size: 1, gamma: 0.5}}",
              "train.checkpoint.keep_last=50", "--run-dir", "run")
    assert res.code == 0, res.err
    checkpoints = tmp_path / "run" / "checkpoints"
    mid = torch.load(checkpoints / "epoch0003-step0000024.pt", weights_only=True)  # task 2, its first epoch done
    boundary = torch.load(checkpoints / "epoch0004-step0000032.pt", weights_only=True)  # task 3 begun
    assert mid["optimizer"]["param_groups"][0]["lr"] == pytest.approx(0.025)  # 0.05 halved once within task 2
    assert boundary["optimizer"]["param_groups"][0]["lr"] == pytest.approx(0.05)  # a fresh schedule for task 3
    res = cli("train", str(config), "train.scheduler={type: reduce_lr_on_plateau, args: {patience: 0, factor: 0.5, "
              "threshold: 10}}", "train.checkpoint.keep_last=50", "--run-dir", "plateau")
    assert res.code == 0, res.err
    boundary = torch.load(tmp_path / "plateau" / "checkpoints" / "epoch0004-step0000032.pt", weights_only=True)
    assert boundary["optimizer"]["param_groups"][0]["lr"] == pytest.approx(0.05)  # plateau schedules restart too
    res = cli("train", str(config), "train.callbacks=[early_stopping]", "--run-dir", "stopping")
    assert res.code == 2 and "early stopping would end the whole task sequence" in res.err
    res = cli("train", str(config), "train.max_steps=10", "--run-dir", "steps")
    assert res.code == 2 and "train.max_steps counts over the whole task sequence" in res.err


def test_continual_is_a_registered_task_chosen_by_its_section(cli, config, tmp_path):
    listed = cli("list", "task")
    assert listed.code == 0 and "continual" in listed.out
    described = cli("describe", "task", "continual")
    assert described.code == 0 and "task sequence" in described.out
    res = cli("config", str(config), "task=detection")  # the section says continual, task: says otherwise
    assert res.code == 2 and "the 'continual:' section belongs to the 'continual' task, but task: is 'detection'" in res.err
    assert cli("config", str(config), "task=continual").code == 0


def test_kfold_refuses_a_continual_run_before_making_anything(cli, config, tmp_path):
    res = cli("kfold", str(config), "--folds", "2", "--run-dir", "cv")
    assert res.code == 2
    assert "k-fold cannot split a continual run: it trains its dataset's own task sequence" in res.err
    assert not (tmp_path / "cv").exists()


def test_the_runners_experiment_is_used_only_for_the_config_it_was_built_from(config, tmp_path):
    """``routines.built`` is the runner's experiment of the config it handed over; a task's run called
    with another config (a plug-in running one config per seed through it) builds that config's own."""
    from types import SimpleNamespace

    import modforge as mf
    from modforge.core.errors import ConfigError
    from modforge.tasks.base import RunRoutines
    from modforge.tasks.continual.run import continual_run

    class Built(Exception):
        pass

    def build(cfg, splits=None, *, init_weights=True):
        raise Built

    cfg = mf.load_config(config)
    runners = SimpleNamespace(cfg=cfg, splits=SimpleNamespace())  # no task sequence: refused right after it is taken
    routines = RunRoutines(fit_and_test=None, build=build, open_run_folder=None, require_a_loss=None, write_json=None,
                           built=runners)  # fmt: skip
    with pytest.raises(ConfigError, match="needs a task-sequence dataset"):
        continual_run(routines, cfg, tmp_path / "run")  # its own config: the runner's experiment
    with pytest.raises(Built):
        continual_run(routines, mf.load_config(config), tmp_path / "run")  # another config: built anew
    with pytest.raises(Built):
        continual_run(routines, cfg, tmp_path / "run", splits=SimpleNamespace())  # other data: built anew
