"""A new task is one registered class in a user's plug-in file: a toy segmentation task —
its dataset, its per-pixel head, its metric and its task — trains, validates, monitors its
own metric and tests through ``modforge train`` with no edit to modforge."""

from __future__ import annotations

import json

import pytest

from run_configs import ADAM, mlp, run_config

SEGMENTATION_PLUGIN = '''
"""Toy segmentation: find the bright square, pixel by pixel."""
import torch
import torch.nn as nn

import modforge as mf
from modforge.components import Layout
from modforge.data import ArrayDataset, DataSplits
from modforge.tasks.base import Task
from modforge.train.distributed import all_reduce_sum
from modforge.train.metrics import Metric


@mf.register_dataset("bright_squares")
def bright_squares(seed: int = 0, count: int = 96, size: int = 16) -> DataSplits:
    """Noise images with one brighter square; the label is the square's mask."""
    g = torch.Generator().manual_seed(seed)
    images = torch.rand(count, 1, size, size, generator=g) * 0.5
    masks = torch.zeros(count, size, size, dtype=torch.long)
    for i in range(count):
        x, y = torch.randint(0, size - 6, (2,), generator=g).tolist()
        images[i, :, y : y + 6, x : x + 6] += 0.5
        masks[i, y : y + 6, x : x + 6] = 1
    split = lambda a, b: ArrayDataset(images[a:b], masks[a:b])  # noqa: E731
    n = count // 4
    return DataSplits(split(0, 2 * n), split(2 * n, 3 * n), split(3 * n, count), num_classes=2, in_dim=1,
                      layout=Layout.IMAGE, input_shape=(1, size, size), task="toy_segmentation")


@mf.register_backbone("tiny_fcn")
class TinyFCN(nn.Module):
    accepts = (Layout.IMAGE,)
    produces = Layout.IMAGE

    def __init__(self, in_dim: int, width: int = 8):
        super().__init__()
        self.net = nn.Sequential(nn.Conv2d(in_dim, width, 3, padding=1), nn.ReLU(), nn.Conv2d(width, width, 3, padding=1), nn.ReLU())
        self.out_dim = width

    def forward(self, x):
        return self.net(x)


@mf.register_head("pixel_classifier")
class PixelClassifier(nn.Module):
    accepts = (Layout.IMAGE,)
    produces = Layout.IMAGE

    def __init__(self, in_dim: int, num_classes: int):
        super().__init__()
        self.conv = nn.Conv2d(in_dim, num_classes, 1)
        self.out_dim = num_classes

    def forward(self, x):
        return self.conv(x)


@mf.register_metric("foreground_iou")
class ForegroundIoU(Metric):
    """Intersection over union of the predicted and true foreground pixels."""

    def __init__(self):
        self.reset()

    def reset(self):
        self.counts = torch.zeros(2)

    def update(self, out):
        predicted, truth = out["logits"].argmax(dim=1) == 1, out["label"] == 1
        self.counts += torch.stack([(predicted & truth).sum(), (predicted | truth).sum()]).float()

    def sync(self, what="a metric"):
        self.counts = all_reduce_sum(self.counts, what)

    def compute(self):
        return float(self.counts[0] / self.counts[1]) if self.counts[1] else float("nan")


@mf.register_task("toy_segmentation")
class ToySegmentation(Task):
    """Per-pixel classes; validated by foreground IoU."""

    name = "toy_segmentation"
    default_metrics = ("foreground_iou", "loss")
    monitor_preference = ("foreground_iou", "loss")
'''

CONFIG = """
plugins: [segmentation.py]
seed: 0
data: {type: bright_squares, batch_size: 16}
model:
  backbone: {type: tiny_fcn, args: {width: 8}}
  head: pixel_classifier
  losses: [cross_entropy]
train:
  max_epochs: 6
  optimizer: {type: adam, args: {lr: 0.02}}
  num_threads: 1
  progress: never
"""


@pytest.mark.slow
def test_a_task_written_in_a_plug_in_trains_with_its_own_metric_and_monitor(cli, tmp_path):
    (tmp_path / "segmentation.py").write_text(SEGMENTATION_PLUGIN)
    (tmp_path / "seg.yaml").write_text(CONFIG)
    listed = cli("list", "task", "--plugins", "segmentation.py")
    assert listed.code == 0 and "toy_segmentation" in listed.out
    res = cli("train", "seg.yaml", "--run-dir", "run")
    assert res.code == 0, res.err
    summary = json.loads((tmp_path / "run" / "summary.json").read_text())
    assert summary["monitor"] == "val_foreground_iou"  # the task's monitor, by default
    assert set(summary["test"]) >= {"foreground_iou", "loss"}
    assert summary["test"]["foreground_iou"] > 0.5  # it learned to find the squares
    again = cli("test", "run")
    assert again.code == 0, again.err


SEEDS_PLUGIN = '''
"""A task that owns a config section and its own run routine: the same run under several seeds."""
from modforge.core.errors import ConfigError
import modforge as mf
from modforge.tasks.base import Task


@mf.register_task("seeded")
class Seeded(Task):
    name = "seeded"
    section = "seeds"

    def check_config(self, cfg):
        seeds = cfg.data["seeds"]
        if not (isinstance(seeds, list) and seeds and all(isinstance(s, int) for s in seeds)):
            raise ConfigError(f"expected a list of whole numbers, got {seeds!r}", path="seeds", source=cfg.where("seeds"))

    def run(self, routines, cfg, run_dir, *, resume=None, splits=None, restart=False):
        run_dir.mkdir(parents=True, exist_ok=True)
        runs = {}
        for seed in cfg.data["seeds"]:
            one = cfg.copy()
            one.data["seed"] = seed
            summary = routines.fit_and_test(one, run_dir / f"seed{seed}")
            runs[str(seed)] = summary["test"]["accuracy"]
        routines.write_json(run_dir / "summary.json", {"test_accuracy": runs})
        return {"test_accuracy": runs}
'''

SEEDS_CONFIG = run_config("{type: digits, batch_size: 64}", mlp(32), seed=None,
                          before="plugins: [seeds.py]\nseeds: [0, 1]\n",
                          train=dict(max_epochs=1, optimizer=ADAM, num_threads=1, progress="never"))


def test_a_plug_in_task_can_own_a_config_section_and_its_run(cli, tmp_path):
    (tmp_path / "seeds.py").write_text(SEEDS_PLUGIN)
    (tmp_path / "seeds.yaml").write_text(SEEDS_CONFIG)
    bad = cli("config", "seeds.yaml", "seeds=3")
    assert bad.code == 2 and "seeds: expected a list of whole numbers, got 3" in bad.err
    res = cli("train", "seeds.yaml", "--run-dir", "run")
    assert res.code == 0, res.err
    summary = json.loads((tmp_path / "run" / "summary.json").read_text())
    assert set(summary["test_accuracy"]) == {"0", "1"}
    assert all((tmp_path / "run" / f"seed{s}" / "checkpoints" / "best.pt").exists() for s in (0, 1))
    other = json.loads((tmp_path / "run" / "seed1" / "summary.json").read_text())
    assert other["test"]["accuracy"] == summary["test_accuracy"]["1"]


TIMED_PLUGIN = '''
"""A dataset that names its task, whose run wraps the standard routine (must not recurse)."""
import modforge as mf
from modforge.data.digits import digits
from modforge.tasks.base import Task


@mf.register_dataset("digits_timed")
def digits_timed(seed: int = 0):
    splits = digits(seed=seed, as_image=False)
    splits.task = "timed"
    return splits


@mf.register_task("timed")
class Timed(Task):
    name = "timed"

    def run(self, routines, cfg, run_dir, *, resume=None, splits=None, restart=False):
        summary = routines.fit_and_test(cfg, run_dir, resume=resume, splits=splits, restart=restart)
        summary["wrapped"] = True
        summary["handed_built"] = routines.built.cfg is cfg and routines.built.splits is splits
        routines.write_json(run_dir / "summary.json", summary)
        return summary
'''


def test_a_task_chosen_by_its_dataset_runs_its_own_routine_once(cli, tmp_path):
    (tmp_path / "timed.py").write_text(TIMED_PLUGIN)
    (tmp_path / "timed.yaml").write_text(SEEDS_CONFIG.replace("plugins: [seeds.py]\nseeds: [0, 1]\n", "plugins: [timed.py]\n")
                                         .replace("{type: digits,", "{type: digits_timed,"))
    res = cli("train", "timed.yaml", "--run-dir", "run")
    assert res.code == 0, res.err
    summary = json.loads((tmp_path / "run" / "summary.json").read_text())
    assert summary["wrapped"] is True and "accuracy" in summary["test"]
    assert summary["handed_built"] is True  # chosen by its dataset: the runner's experiment, for this very config


def test_a_task_may_not_claim_a_core_section_or_another_tasks_section():
    from modforge.core.errors import UsageError
    from modforge.core.registries import TASKS, register_task
    from modforge.experiment.schema import SECTIONS
    from modforge.tasks.base import Task, sectioned_tasks

    assert sectioned_tasks(reserved=SECTIONS)["continual"].name == "continual"  # the built-in claim is fine

    @register_task("grabs_train")
    class GrabsTrain(Task):
        name = "grabs_train"
        section = "train"

    with pytest.raises(UsageError, match="'grabs_train' claims the config section 'train'"):
        sectioned_tasks(reserved=SECTIONS)
    TASKS._entries.pop("grabs_train")

    @register_task("second_continual")
    class SecondContinual(Task):
        name = "second_continual"
        section = "continual"

    with pytest.raises(UsageError, match="both claim the config section 'continual'"):
        sectioned_tasks(reserved=SECTIONS)
