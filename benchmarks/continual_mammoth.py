"""Mammoth's own SGD, ER, DER++ and X-DER, end to end on modforge's Seq-Digits stream (class-IL and task-IL).

Not part of modforge, not run by CI or the tests. It answers: what does Mammoth's own code (aimagelab/mammoth,
its ``models/sgd.py``, ``er.py``, ``derpp.py``, ``xder.py``, its ``utils/buffer.py`` with its own NumPy/torch
random draws, its ``meta_begin_task`` / ``meta_observe`` / ``meta_end_task`` called as its
``utils/training.py`` calls them, its seeded data loader, its ``utils/evaluate.py``) reach on the stream that
``configs/continual/base.yaml`` trains modforge on? The figures go beside modforge's in the continual table.

The stream is modforge's own: ``build_splits`` of ``configs/continual/base.yaml`` (``seq_digits``,
``as_image: false``) with the config's seed set to each seed — the same train and test sets per task and the
same class order as ``modforge train configs/continual/base.yaml --seed S``. modforge already numbers the
classes in task order (task t holds classes 2t and 2t+1, checked here), which is what Mammoth's heads and
offsets need, so the labels are handed over unchanged. The validation split modforge holds out is not used
(modforge only monitors on it). Mammoth is driven as ``utils/main.py`` and ``utils/training.py`` drive it:

* ``set_random_seed(seed)`` (Python, NumPy, torch), then the backbone — ``BaseMNISTMLP(64, 10, 100)`` with
  Mammoth's Xavier initialisation — then the model (its buffer of 200, ``minibatch_size`` 10);
* per task: a training loader made by Mammoth's ``create_seeded_dataloader`` (batch 10, shuffled by a
  ``torch.Generator`` seeded with the seed, ``drop_last`` off; ``num_workers`` 0: the order comes from that
  generator alone, so it is the order Mammoth's default worker count gives), ``meta_begin_task`` (a fresh SGD
  optimizer, lr 0.05, no momentum or weight decay), 5 epochs of ``meta_begin_epoch`` / ``meta_observe(inputs,
  labels, not_aug_inputs, epoch=e)`` / ``meta_end_epoch``, ``meta_end_task``, then Mammoth's ``evaluate``
  on the test sets of the tasks seen so far and ``meta_end_eval``;
* Mammoth's ``evaluate`` (commit e75a491): class-IL is the argmax over ``outputs[:, :n_classes]`` with
  ``n_classes`` the end offset of the current task — the classes seen so far; after the last task that is all
  10, so the final figures mask nothing — and task-IL masks every class outside the evaluated task's own
  (``mask_classes``). The figure reported is the mean over the 5 tasks of the accuracy after the last task
  (Mammoth's logged mean accuracy; modforge's ``average_accuracy``).

X-DER runs with ``--lambd 0`` (its SimCLR consistency term off, as modforge's ``xder`` has none; see
``docs/worlds/continual-parity.md``) and the other options at modforge's defaults, which are Mammoth's:
``gamma`` 0.85, ``constr_eta`` 0.1, ``constr_margin`` 0.3, future constraint on, past constraint off,
``align_bn`` on, ``dp_weight`` 0. Its strong image augmentation feeds only that term and cannot act on
64-value vectors, so it is the identity (as in ``tests/fixtures/record_mammoth_replay.py``); Mammoth still
draws its SimCLR batch from the buffer and computes the term (times 0), so its NumPy draws are its own.

Run it in a scratch environment with Mammoth's requirements (torch, NumPy, kornia, tqdm; scikit-learn for
the digits). modforge is imported from this checkout's ``src`` to build the stream, before Mammoth's
top-level packages are put on the path::

    mkdir /tmp/mammoth && git -C <a clone of aimagelab/mammoth> archive e75a491c69fd729edeb01431afb753d9157d9a81 | tar -x -C /tmp/mammoth
    OMP_NUM_THREADS=1 /tmp/mammoth-venv/bin/python benchmarks/continual_mammoth.py /tmp/mammoth

It writes ``benchmarks/continual_mammoth.json`` (``--out`` elsewhere); ``--seeds`` and ``--runs`` pick a
subset. One torch thread; each run takes a few seconds (X-DER's, computing its zero-weighted SimCLR term,
about five). ``--init pytorch`` (a diagnostic, written elsewhere with ``--out``) re-initialises the MLP with
PyTorch's ``nn.Linear`` default, modforge's ``mlp``/``linear`` default, instead of Mammoth's Xavier weights and
zero biases — the one difference of set-up between ``base.yaml`` and Mammoth's MNIST MLP.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import math
import os
import platform
import re
import statistics
import subprocess
import sys
import time
import types
from argparse import Namespace
from pathlib import Path

os.environ.setdefault("OMP_NUM_THREADS", "1")
os.environ.setdefault("MKL_NUM_THREADS", "1")

HERE = Path(__file__).resolve().parent
REPO = HERE.parent
CONFIG = REPO / "configs" / "continual" / "base.yaml"
MAMMOTH_COMMIT = "e75a491c69fd729edeb01431afb753d9157d9a81"

TASKS, CLASSES_PER_TASK, NUM_CLASSES, FEATURES, HIDDEN = 5, 2, 10, 64, 100
LR, BATCH, MINIBATCH, EPOCHS, BUFFER = 0.05, 10, 10, 5, 200

# name: Mammoth's model and the arguments given on its command line (Mammoth requires alpha and beta)
RUNS = {
    "sgd": ("sgd", {}),
    "er": ("er", {}),
    "derpp a1 b1": ("derpp", {"alpha": 1.0, "beta": 1.0}),
    "derpp a0.1 b0.5": ("derpp", {"alpha": 0.1, "beta": 0.5}),
    "xder a1 b1.5": ("xder", {"alpha": 1.0, "beta": 1.5, "gamma": 0.85, "lambd": 0.0}),
    "xder a0.3 b0.8": ("xder", {"alpha": 0.3, "beta": 0.8, "gamma": 0.85, "lambd": 0.0}),
}
# modforge's xder defaults, which are Mammoth's own (given explicitly so a changed default in either shows)
XDER_OPTIONS = {"constr_eta": 0.1, "constr_margin": 0.3, "past_constraint": 0, "future_constraint": 1,
                "align_bn": 1, "dp_weight": 0.0}  # fmt: skip
RECORDED_ARGS = ("alpha", "beta", "gamma", "lambd", "constr_eta", "constr_margin", "past_constraint",
                 "future_constraint", "align_bn", "dp_weight", "simclr_batch_size", "simclr_num_aug", "simclr_temp",
                 "buffer_size", "minibatch_size", "lr", "batch_size", "n_epochs", "optim_mom", "optim_wd")  # fmt: skip


def modforge_streams(seeds: list[int]) -> dict[int, dict]:
    """Each seed's task sequence as modforge builds it for ``configs/continual/base.yaml``, as plain tensors."""
    sys.path.insert(0, str(REPO / "src"))
    import torch

    from modforge.core.config import load_config
    from modforge.experiment.runner import build_splits

    streams = {}
    for seed in seeds:
        cfg = load_config(CONFIG, [f"seed={seed}"])
        data = cfg.data["data"]
        if data["type"] != "seq_digits" or data.get("args") != {"as_image": False}:
            raise SystemExit(f"{CONFIG}: data is {data}, not seq_digits with as_image false")
        if int(data["batch_size"]) != BATCH or float(cfg.data["train"]["optimizer"]["args"]["lr"]) != LR:
            raise SystemExit(f"{CONFIG}: batch size or learning rate is not {BATCH} / {LR}")
        splits = build_splits(cfg, seed)
        if splits.setting != "class-il" or len(splits.tasks) != TASKS or splits.num_classes != NUM_CLASSES:
            raise SystemExit(f"seed {seed}: not {TASKS} class-IL tasks over {NUM_CLASSES} classes")
        tasks, digest = [], hashlib.sha256()
        for t, task in enumerate(splits.tasks):
            own = [CLASSES_PER_TASK * t + c for c in range(CLASSES_PER_TASK)]
            if list(task.classes) != own:
                raise SystemExit(f"seed {seed}: task {t} holds classes {task.classes}, not {own}")
            parts = {}
            for split in ("train", "test"):
                inputs = getattr(task, split).inputs.detach().to(torch.float32).reshape(-1, FEATURES).clone()
                labels = getattr(task, split).labels.detach().to(torch.long).clone()
                if not set(labels.unique().tolist()) <= set(own):
                    raise SystemExit(f"seed {seed}: task {t}'s {split} labels are outside {own}")
                parts[split] = (inputs, labels)
                digest.update(inputs.numpy().tobytes())
                digest.update(labels.numpy().tobytes())
            tasks.append(parts)
        streams[seed] = {
            "tasks": tasks,
            "class_order": [int(c) for c in splits.class_order],
            "train_sizes": [len(p["train"][1]) for p in tasks],
            "test_sizes": [len(p["test"][1]) for p in tasks],
            "sha256": digest.hexdigest(),
        }
    return streams


def mammoth_commit(mammoth: Path, given: str | None) -> str:
    """The checkout's commit; an exported tree has no ``.git``: then ``given`` (default: the one checked)."""
    if (mammoth / ".git").exists():
        done = subprocess.run(["git", "-C", str(mammoth), "rev-parse", "HEAD"], capture_output=True, text=True)
        if done.returncode == 0:
            return done.stdout.strip()
    return given or MAMMOTH_COMMIT


def mammoth_kit(mammoth: Path) -> types.SimpleNamespace:
    """Mammoth's pieces this script drives, imported from the tree ``mammoth`` (after modforge's stream
    is built: Mammoth's top-level packages — utils, models, ... — are then put on the path), with the
    dataset classes that hand it modforge's stream: ``kit.build(name, args, seed, tasks, init, device)``
    builds one run as ``utils/main.py`` does; ``kit.evaluate`` is Mammoth's own."""
    import importlib

    import torch
    import torch.nn.functional as F
    from _mammoth import enter_mammoth

    enter_mammoth(mammoth, "this script gives Mammoth's models their dataset")

    from backbone.MNISTMLP import BaseMNISTMLP
    from datasets.utils.continual_dataset import ContinualDataset
    from torch.utils.data import Dataset
    from utils.conf import create_seeded_dataloader, set_random_seed
    from utils.evaluate import evaluate
    from utils.schedulers import get_scheduler

    class TaskSet(Dataset):
        """One task's split as Mammoth's wrapped datasets serve it: (input, label, not-augmented input) for
        training (no augmentation: Seq-MNIST has none), (input, label) for testing."""

        def __init__(self, inputs, labels, train: bool):
            self.inputs, self.labels, self.train = inputs, labels, train

        def __len__(self):
            return len(self.labels)

        def __getitem__(self, i):
            x, y = self.inputs[i], self.labels[i]
            return (x, y, x) if self.train else (x, y)

    class SeqDigits:
        """What Mammoth's training loop, models and ``evaluate`` read of a ``ContinualDataset``: modforge's task
        sequence of one seed, served per task as ``store_masked_loaders`` serves Seq-MNIST's."""

        NAME, SETTING, SIZE = "seq-digits (modforge)", "class-il", (FEATURES,)
        N_CLASSES, N_TASKS, N_CLASSES_PER_TASK = NUM_CLASSES, TASKS, CLASSES_PER_TASK
        get_offsets = ContinualDataset.get_offsets  # Mammoth's own

        def __init__(self, tasks, args):
            self.tasks, self.args = tasks, args
            self.c_task, self.train_loader, self.test_loaders = -1, None, []

        def get_data_loaders(self):
            self.c_task += 1
            task = self.tasks[self.c_task]
            train = create_seeded_dataloader(self.args, TaskSet(*task["train"], train=True), non_verbose=True,
                                             batch_size=self.args.batch_size, shuffle=True,
                                             drop_last=self.args.drop_last)  # fmt: skip
            test = create_seeded_dataloader(self.args, TaskSet(*task["test"], train=False), non_verbose=True,
                                            batch_size=self.args.batch_size, shuffle=False)  # fmt: skip
            self.test_loaders.append(test)
            self.train_loader = train
            return train, test

        @staticmethod
        def get_loss():
            return F.cross_entropy

        @staticmethod
        def get_transform():
            return None  # Seq-MNIST's TRANSFORM

        def get_denormalization_transform(self):
            return Namespace(mean=(0.0,), std=(1.0,))  # read by X-DER for its (unused) strong augmentation

    def build(model_name: str, model_args: dict, seed: int, tasks: list, init: str = "xavier", device: str = "cpu"):
        """``(model, dataset, args)`` of one run, built as ``utils/main.py`` builds them, on ``device``."""
        module = importlib.import_module(f"models.{model_name}")
        model_class = next(c for c in vars(module).values()
                           if isinstance(c, type) and getattr(c, "NAME", None) == model_name)  # fmt: skip
        parser = argparse.ArgumentParser()
        model_class.get_parser(parser)
        argv = []
        if model_name != "sgd":
            argv += ["--buffer_size", str(BUFFER), "--minibatch_size", str(MINIBATCH)]
        extra = {**model_args, **(XDER_OPTIONS if model_name == "xder" else {})}
        for key, value in extra.items():
            argv += [f"--{key}", str(value)]
        args = parser.parse_args(argv)
        args.__dict__.update(  # Mammoth's defaults for the rest of what its loop and models read
            lr=LR, optimizer="sgd", optim_wd=0.0, optim_mom=0.0, optim_nesterov=False, lr_scheduler=None,
            batch_size=BATCH, n_epochs=EPOCHS, fitting_mode="epochs", drop_last=False, num_workers=0, seed=seed,
            label_perc=1, nowand=1, non_verbose=True, debug_mode=0, eval_future=False, enable_other_metrics=0,
            device=device, code_optimization=0,
        )  # fmt: skip
        set_random_seed(seed)  # utils/main.py: before the dataset, the backbone and the model are built
        dataset = SeqDigits(tasks, args)
        backbone = BaseMNISTMLP(FEATURES, NUM_CLASSES, HIDDEN)  # nn.Linear's init, then Mammoth's Xavier
        if init == "pytorch":  # diagnostic only: nn.Linear's own init again, as modforge's mlp/linear default
            for layer in (backbone.fc1, backbone.fc2, backbone.classifier):
                layer.reset_parameters()
        model = model_class(backbone, F.cross_entropy, args, dataset.get_transform(), dataset=dataset)
        model.to(torch.device(device))
        if model_name == "xder":  # its SimCLR input: image augmentations, on vectors; the term weighs lambd = 0
            assert args.lambd == 0.0
            model.gpu_augmentation = lambda x: x
        return model, dataset, args

    return types.SimpleNamespace(build=build, evaluate=evaluate, get_scheduler=get_scheduler)


def main(
    mammoth_dir: str, out: str, seeds: list[int], names: list[str], commit: str | None, init: str = "xavier"
) -> None:
    mammoth = Path(mammoth_dir).resolve()
    out_path = Path(out).resolve()  # Mammoth's models/__init__.py changes the working directory
    found = mammoth_commit(mammoth, commit)
    if found != MAMMOTH_COMMIT and not commit:
        raise SystemExit(f"{mammoth} is at {found}, not {MAMMOTH_COMMIT} (pass --commit to run anyway)")

    streams = modforge_streams(seeds)  # before Mammoth's top-level packages (utils, models, ...) are importable

    import numpy as np
    import torch

    torch.set_num_threads(1)
    kit = mammoth_kit(mammoth)

    def run(model_name: str, model_args: dict, seed: int) -> dict:
        started = time.perf_counter()
        model, dataset, args = kit.build(model_name, model_args, seed, streams[seed]["tasks"], init)
        class_rows, task_rows, steps = [], [], 0
        for _ in range(dataset.N_TASKS):  # utils/training.py's train()
            model.net.train()
            train_loader, _ = dataset.get_data_loaders()
            model.meta_begin_task(dataset)
            scheduler = kit.get_scheduler(model, args, reload_optim=True)  # None: no lr_scheduler
            for epoch in range(args.n_epochs):
                model.meta_begin_epoch(epoch, dataset)
                for data in train_loader:  # train_single_epoch
                    inputs, labels, not_aug_inputs = data[0], data[1].to(dtype=torch.long), data[2]
                    loss = model.meta_observe(inputs, labels, not_aug_inputs, epoch=epoch)
                    if math.isnan(loss):
                        raise SystemExit(f"{model_name} seed {seed}: the loss is NaN at step {steps}")
                    steps += 1
                if scheduler is not None:
                    scheduler.step()
                model.meta_end_epoch(epoch, dataset)
            model.meta_end_task(dataset)
            accs = kit.evaluate(model, dataset)  # the tasks seen so far
            model.meta_end_eval(dataset, accs)
            class_rows.append([round(a, 4) for a in accs[0]])
            task_rows.append([round(a, 4) for a in accs[1]])
        seconds = time.perf_counter() - started
        final_class, final_task = class_rows[-1], task_rows[-1]
        return {
            "class_il": round(statistics.fmean(final_class), 4),
            "task_il": round(statistics.fmean(final_task), 4),
            "class_il_per_task": final_class,
            "task_il_per_task": final_task,
            "class_il_matrix": class_rows,
            "task_il_matrix": task_rows,
            "steps": steps,
            "seconds": round(seconds, 2),
            "mammoth_args": {k: getattr(args, k) for k in RECORDED_ARGS if hasattr(args, k)},
        }

    runs: dict[str, dict] = {}
    for name in names:
        model_name, model_args = RUNS[name]
        per_seed = {}
        for seed in seeds:
            result = run(model_name, model_args, seed)
            per_seed[str(seed)] = result
            print(f"{name:16s} seed {seed}: class-IL {result['class_il']:6.2f}  task-IL {result['task_il']:6.2f}"
                  f"  ({result['seconds']:.1f} s)", flush=True)  # fmt: skip
        first = next(iter(per_seed.values()))
        summary = {"mammoth_model": model_name, "mammoth_args": first["mammoth_args"], "seeds": per_seed}
        for key in ("class_il", "task_il"):
            values = [r[key] for r in per_seed.values()]
            summary[f"{key}_mean"] = round(statistics.fmean(values), 2)
            summary[f"{key}_std"] = round(statistics.stdev(values), 2) if len(values) > 1 else None
        for r in per_seed.values():
            del r["mammoth_args"]
        runs[name] = summary

    def margin(a: str, b: str, key: str = "class_il") -> dict | None:
        if a not in runs or b not in runs:
            return None
        diffs = [runs[a]["seeds"][s][key] - runs[b]["seeds"][s][key] for s in runs[a]["seeds"]]
        return {"per_seed": [round(d, 2) for d in diffs], "mean": round(statistics.fmean(diffs), 2),
                "of_means": round(runs[a][f"{key}_mean"] - runs[b][f"{key}_mean"], 2)}  # fmt: skip

    record = {
        "what": "Mammoth's own sgd / er / derpp / xder (lambd 0) on modforge's Seq-Digits stream "
        "(configs/continual/base.yaml); accuracy (%) on every task's test set after the last task, "
        "mean over the 5 tasks; std is the sample std over seeds",
        "mammoth_commit": found,
        "script": "benchmarks/continual_mammoth.py",
        "command": "OMP_NUM_THREADS=1 /tmp/mammoth-venv/bin/python benchmarks/continual_mammoth.py /tmp/mammoth"
        + ("" if init == "xavier" else " --init pytorch --out ..."),
        "environment": {
            "python": platform.python_version(),
            "torch": torch.__version__,
            "numpy": np.__version__,
            "machine": platform.machine(),
            "torch_threads": torch.get_num_threads(),
        },  # fmt: skip
        "settings": {
            "stream": "modforge build_splits(configs/continual/base.yaml, seed): seq_digits, as_image false; "
            "labels already in task order (task t: classes 2t, 2t+1), handed over unchanged; "
            "train split trained on, test split evaluated, val split unused",
            "backbone": f"Mammoth BaseMNISTMLP({FEATURES} -> {HIDDEN} -> {HIDDEN} -> {NUM_CLASSES}), "
            + (
                "its Xavier init (uniform weights, zero biases)"
                if init == "xavier"
                else "PyTorch's nn.Linear init instead of Mammoth's (--init pytorch: a diagnostic)"
            ),
            "optimizer": f"SGD lr {LR}, no momentum, no weight decay, rebuilt at each task (meta_begin_task)",
            "batch_size": BATCH,
            "minibatch_size": MINIBATCH,
            "epochs_per_task": EPOCHS,
            "buffer_size": BUFFER,
            "seeding": "Mammoth's set_random_seed(seed) before the backbone and model; each task's training "
            "loader from create_seeded_dataloader (torch.Generator seeded with the seed, num_workers 0)",
            "evaluation": "Mammoth's utils/evaluate.py evaluate after each task: class-IL argmax over the classes "
            "seen so far (outputs[:, :end offset of the current task]; after the last task all 10, "
            "nothing masked); task-IL masks all classes but the evaluated task's (mask_classes)",
            "xder": "lambd 0 (SimCLR term off, as modforge's xder); strong augmentation replaced by the identity "
            "(feeds only that term); other options: " + json.dumps(XDER_OPTIONS),
        },  # fmt: skip
        "seeds": seeds,
        "streams": {str(s): {k: v for k, v in streams[s].items() if k != "tasks"} for s in seeds},
        "runs": runs,
        "margins_class_il": {
            "derpp a1 b1 - er": margin("derpp a1 b1", "er"),
            "derpp a0.1 b0.5 - er": margin("derpp a0.1 b0.5", "er"),
            "xder a1 b1.5 - derpp a1 b1": margin("xder a1 b1.5", "derpp a1 b1"),
            "xder a0.3 b0.8 - derpp a1 b1": margin("xder a0.3 b0.8", "derpp a1 b1"),
            "xder a0.3 b0.8 - derpp a0.1 b0.5": margin("xder a0.3 b0.8", "derpp a0.1 b0.5"),
        },
    }
    text = json.dumps(record, indent=1)
    text = re.sub(
        r"\[\s+([-0-9.eE,\s]+?)\s+\]", lambda m: "[" + " ".join(m.group(1).split()) + "]", text
    )  # numbers inline
    out_path.write_text(text + "\n")
    print(f"wrote {out_path}")
    for name, r in runs.items():
        std_c = f" ± {r['class_il_std']:.2f}" if r["class_il_std"] is not None else ""
        std_t = f" ± {r['task_il_std']:.2f}" if r["task_il_std"] is not None else ""
        print(f"  {name:16s} class-IL {r['class_il_mean']:6.2f}{std_c}   task-IL {r['task_il_mean']:6.2f}{std_t}")


if __name__ == "__main__":
    cli = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    cli.add_argument("mammoth", help="a checkout (or exported tree) of aimagelab/mammoth")
    cli.add_argument("--out", default=str(HERE / "continual_mammoth.json"))
    cli.add_argument("--seeds", type=int, nargs="+", default=[0, 1, 2])
    cli.add_argument("--runs", nargs="+", default=list(RUNS), choices=list(RUNS), metavar="RUN",
                     help=f"which runs (default all): {', '.join(RUNS)}")  # fmt: skip
    cli.add_argument("--commit", help=f"the commit of an exported tree (default: {MAMMOTH_COMMIT})")
    cli.add_argument("--init", choices=("xavier", "pytorch"), default="xavier",
                     help="the backbone's initialisation: Mammoth's Xavier (default), or PyTorch's nn.Linear one, "
                          "modforge's default (a diagnostic; write it elsewhere with --out)")  # fmt: skip
    options = cli.parse_args()
    main(options.mammoth, options.out, options.seeds, options.runs, options.commit, options.init)
