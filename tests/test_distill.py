"""``train.distill``: the logit term is Hinton's T²·KL, feature mimicking learns adapters where widths
differ, the teacher never trains (its file and weights unchanged), a distilled run resumes bitwise and
only with its own teacher, and every misconfiguration is one clear error."""

from __future__ import annotations

import hashlib
from pathlib import Path

import pytest
import torch
import torch.nn.functional as F

from modforge.train.distill import distillation_loss

DIGITS = str(Path(__file__).parents[1] / "configs" / "digits.yaml")
STUDENT = """
_base_: {digits}
model:
  backbone: {{type: cnn, args: {{channels: [8, 16], dropout: 0.1}}}}
train:
  max_epochs: 2
  num_threads: 1
  progress: never
  callbacks: []
  device: cpu   # bitwise resume: a GPU's convolution backward (cuDNN) is not deterministic
  checkpoint: {{every_n_steps: 25, keep_last: 10}}
  distill:
    teacher: {teacher}
    temperature: 4.0
    logit_weight: 1.0
    features: [{{student: backbone.block2, teacher: backbone.block2, weight: 0.5}}, {{student: head, teacher: head}}]
"""


@pytest.fixture(scope="module")
def teacher(tmp_path_factory) -> Path:
    from modforge.cli.main import main

    home = tmp_path_factory.mktemp("teacher")
    code = main(["train", DIGITS, "--epochs", "2", "--run-dir", str(home / "teacher"), "train.num_threads=1",
                 "train.progress=never", "train.callbacks=[]"])  # fmt: skip
    assert code == 0
    return home / "teacher"


def _digest(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def test_the_logit_term_is_hintons_temperature_scaled_kl():
    torch.manual_seed(0)
    student, teacher = torch.randn(6, 5), torch.randn(6, 5)
    p_teacher = F.softmax(teacher / 3.0, dim=1)
    expected = (p_teacher * (p_teacher.log() - F.log_softmax(student / 3.0, dim=1))).sum(1).mean() * 9.0
    torch.testing.assert_close(distillation_loss(student, teacher, 3.0), expected)
    assert float(distillation_loss(teacher, teacher, 3.0)) == pytest.approx(0.0, abs=1e-6)


@pytest.mark.slow
def test_a_student_learns_from_a_frozen_teacher_and_resumes_bitwise(cli, write, tmp_path, teacher):
    before = _digest(teacher / "checkpoints" / "best.pt")
    import os

    relative = os.path.relpath(teacher, tmp_path)  # relative to the config: the resumed run must still find it
    config = write("student.yaml", STUDENT.format(digits=DIGITS, teacher=relative))
    res = cli("train", str(config), "--run-dir", "student")
    assert res.code == 0, res.err
    assert _digest(teacher / "checkpoints" / "best.pt") == before  # the teacher's file is only read
    last = torch.load(tmp_path / "student" / "checkpoints" / "last.pt", weights_only=True)
    adapters = last["distill_adapters"]
    assert set(adapters) == {"0.weight", "0.bias"} and adapters["0.weight"].shape == (64, 16, 1, 1)  # 16 → 64 channels
    first = torch.load(tmp_path / "student" / "checkpoints" / "epoch0000-step0000025.pt", weights_only=True)
    assert not torch.equal(first["distill_adapters"]["0.weight"], adapters["0.weight"])  # the adapter trains
    assert last["distill_teacher"] == _digest(teacher / "checkpoints" / "best.pt")
    header = (tmp_path / "student" / "metrics.csv").read_text().splitlines()[0]
    assert "train_distill_logit_loss" in header and "train_distill_feature_loss" in header

    res = cli("train", "--resume", str(tmp_path / "student" / "checkpoints" / "epoch0000-step0000025.pt"),
              "--run-dir", "resumed")  # fmt: skip
    assert res.code == 0, res.err
    again = torch.load(tmp_path / "resumed" / "checkpoints" / "last.pt", weights_only=True)
    for name, value in last["model"].items():
        assert torch.equal(again["model"][name], value), name
    assert all(torch.equal(again["distill_adapters"][k], v) for k, v in adapters.items())


@pytest.mark.slow
def test_the_teachers_weights_never_change_during_training(teacher):
    from modforge.core.config import load_config
    from modforge.experiment.runner import Experiment
    from modforge.experiment.schema import validate_config

    cfg = validate_config(load_config(DIGITS, ["train.max_epochs=1", "train.num_threads=1", "train.progress=never",
                                               "train.callbacks=[]", f"train.distill={{teacher: {teacher}}}"]))  # fmt: skip
    exp = Experiment.build(cfg)
    train_loader, val_loader, _ = exp.loaders()
    trainer = exp.trainer(train_loader, None)
    teacher_model = trainer.extension("distill").teacher
    frozen = {k: v.clone() for k, v in teacher_model.state_dict().items()}
    trainer.fit(train_loader, val_loader)
    assert all(torch.equal(teacher_model.state_dict()[k], v) for k, v in frozen.items())
    assert not any(p.requires_grad for p in teacher_model.parameters()) and not teacher_model.training
    in_optimizer = {id(p) for group in trainer.optimizer.param_groups for p in group["params"]}
    assert not in_optimizer & {id(p) for p in teacher_model.parameters()}


@pytest.mark.parametrize(("section", "message"), [
    ("{teacher: nowhere}", "the teacher nowhere does not exist"),
    ("{teacher: TEACHER, temperature: 0}", "temperature must be positive"),
    ("{teacher: TEACHER, logit_weight: 0}", "nothing to distil"),
    ("{teacher: TEACHER, features: [{student: backbone.blok2}]}", "the student has no module 'backbone.blok2'"),
    ("{teacher: TEACHER, features: [{student: backbone.block2}]}\n  engine: torchscript",
     "train.distill.features read the student's modules through hooks"),
])  # fmt: skip
def test_a_bad_distillation_is_one_clear_error(cli, write, teacher, section, message):
    config = write("bad.yaml", f"_base_: {DIGITS}\ntrain:\n  max_epochs: 1\n  distill: {section.replace('TEACHER', str(teacher))}\n")
    res = cli("train", str(config), "--run-dir", "bad")
    assert res.code == 2 and message in res.err and "Traceback" not in res.err, res.err


def test_a_continual_run_refuses_distillation(cli, write, teacher):
    config = write("seq.yaml", f"""
        _base_: {Path(DIGITS).parent / 'continual' / 'base.yaml'}
        train: {{distill: {{teacher: {teacher}}}}}
        continual: {{epochs_per_task: 1}}
    """)
    res = cli("train", str(config), "--run-dir", "seq")
    assert res.code == 2 and "train.distill trains a model against a teacher in the standard run" in res.err, res.err
    assert not (Path(config).parent / "seq").exists()  # refused before the run folder was made


class _Pyramid(torch.nn.Module):
    """A model whose 'neck' returns two levels (an FPN's shape), with a loss and logits."""

    def __init__(self, width: int):
        super().__init__()
        self.stem = torch.nn.Conv2d(1, width, 3, padding=1)
        self.neck = _Levels(width)
        self.head = torch.nn.Linear(width, 3)

    def forward(self, batch):
        levels = self.neck(self.stem(batch["input"]))
        logits = self.head(levels[-1].mean((2, 3)))
        out = {"logits": logits}
        if "label" in batch:
            out["loss"] = F.cross_entropy(logits, batch["label"])
        return out


class _Levels(torch.nn.Module):
    def __init__(self, width: int):
        super().__init__()
        self.down = torch.nn.Conv2d(width, width, 3, stride=2, padding=1)

    def forward(self, x):
        return [x, self.down(x)]


def test_a_feature_pyramid_is_mimicked_level_by_level_with_an_adapter_per_level():
    from modforge.train.distill import TeacherDistillation
    from modforge.train.trainer import Trainer

    torch.manual_seed(0)
    student, teacher = _Pyramid(4), _Pyramid(8)
    batch = {"input": torch.randn(6, 1, 8, 8), "label": torch.tensor([0, 1, 2, 0, 1, 2])}
    distill = TeacherDistillation(teacher="unused", logit_weight=0.0, features=[{"student": "neck", "teacher": "neck"}])
    trainer = Trainer(student, torch.optim.SGD(student.parameters(), lr=0.1), extensions=[distill])
    distill.attach_teacher(trainer, teacher, batch)
    assert set(distill.adapters) == {"0_0", "0_1"}  # 4 → 8 channels on each of the two levels
    loss = trainer.training_step(batch)
    with torch.no_grad():
        s, t = student.neck(student.stem(batch["input"])), teacher.neck(teacher.stem(batch["input"]))
        expected = F.cross_entropy(student(batch)["logits"], batch["label"]) + sum(
            F.mse_loss(distill.adapters[f"0_{j}"](s[j]), t[j]) for j in range(2)) / 2  # fmt: skip
    torch.testing.assert_close(loss.detach(), expected)
    in_optimizer = {id(p) for group in trainer.optimizer.param_groups for p in group["params"]}
    assert all(id(p) in in_optimizer for p in distill.adapters.parameters())


@pytest.mark.slow
def test_a_detector_distils_through_its_fpn_and_a_logit_term_is_refused_with_the_way_out(cli, tmp_path):
    """A detector's 'logits' are per-level maps: the default logit term is one clear error naming
    the setting and the alternative, before training; features of the neck (an FPN) train."""
    from modforge.data.detection.shapes import make_shapes

    make_shapes(tmp_path / "set", images=24, size=64, seed=0, max_object=32)
    configs = Path(DIGITS).parent / "detection"
    small = [f"data.args.root={tmp_path / 'set'}", "data.args.min_size=64", "data.args.max_size=64",
             "data.batch_size=8", "train.max_epochs=1", "model.neck.args.out_channels=32", "train.progress=never",
             "train.num_threads=1", "train.scheduler.args.warmup=2"]  # fmt: skip
    teacher = tmp_path / "teacher"
    assert cli("train", str(configs / "shapes_retinanet.yaml"), *small, "model.backbone.args.width=0.25",
               "--run-dir", str(teacher)).code == 0  # fmt: skip
    student = [str(configs / "shapes_fcos_r18_w025.yaml"), *small, "model.backbone.args.width=0.125"]
    res = cli("train", *student, f"train.distill={{teacher: {teacher}}}", "--run-dir", str(tmp_path / "refused"))
    assert res.code == 2 and "Traceback" not in res.err, res.err
    assert "set train.distill.logit_weight: 0 and distil through train.distill.features" in res.err
    section = f"train.distill={{teacher: {teacher}, logit_weight: 0, features: [{{student: neck, teacher: neck}}]}}"
    assert cli("train", *student, section, "--run-dir", str(tmp_path / "student")).code == 0
    header = (tmp_path / "student" / "metrics.csv").read_text().splitlines()[0]
    assert "train_distill_feature_loss" in header and "val_map" in header


def test_loading_the_teacher_leaves_the_students_threads_and_generators_alone(teacher):
    """The teacher's stored config seeds the generators and sets torch's threads when its experiment
    is built; the student's run must keep its own seed's random stream and its own thread count."""
    from modforge.core.config import load_config
    from modforge.experiment.runner import Experiment
    from modforge.experiment.schema import validate_config
    from modforge.experiment.teacher import load_teacher

    threads = torch.get_num_threads()
    try:
        torch.set_num_threads(3)  # the teacher's config says 1
        torch.manual_seed(1234)
        expected = torch.rand(4)
        torch.manual_seed(1234)
        cfg = validate_config(load_config(DIGITS, [f"train.distill={{teacher: {teacher}}}"]))
        splits = Experiment.build(cfg).splits  # the student's data: the teacher is built on it
        torch.set_num_threads(3)
        torch.manual_seed(1234)
        model, fingerprint, _ = load_teacher(cfg, splits)
        assert torch.get_num_threads() == 3
        assert torch.equal(torch.rand(4), expected)
        assert len(fingerprint) == 64 and not model.training
    finally:
        torch.set_num_threads(threads)
