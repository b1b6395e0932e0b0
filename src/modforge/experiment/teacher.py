"""The teacher of ``train.distill``: built by its own config, frozen, checked against the student's data.

A teacher is a run folder or a checkpoint (built from its stored config, its run's plug-ins verified as
for ``modforge test``; the weights a test would use — the weight average when the run kept one), or a
config file (built with its ``model.init`` weights, e.g. published AASIST weights). A relative path is
relative to the student's config file (to the current folder for a config given as a mapping).
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import torch

from ..core.config import display_path, load_config
from ..core.errors import ConfigError
from ..core.integrity import file_sha256
from ..core.origins import typed_here
from ..train import distributed
from ..train.rng import capture_rng, restore_rng

__all__ = ["load_teacher", "teacher_path"]


def teacher_path(spec: str, cfg: Any) -> Path:
    """Where ``train.distill.teacher`` points (one clear error when nothing is there): a relative path
    typed on the command line (an override, a sweep's trial) is relative to the current folder, one
    written in a config file to that file's folder — ``model.init``'s rule."""
    path = Path(spec).expanduser()
    if not path.is_absolute() and not typed_here(cfg.where("train.distill.teacher")):
        path = Path(cfg.base_dir) / path  # written in a config file: beside it, as model.init's paths
    if not path.exists():
        raise ConfigError(f"the teacher {display_path(path)} does not exist (a run folder, a checkpoint or a config "
                          "file)", path="train.distill.teacher", source=cfg.where("train.distill.teacher"))  # fmt: skip
    return path


@contextlib.contextmanager
def _student_state_kept(student_seed: int) -> Iterator[None]:
    """Building the teacher's experiment seeds the random generators and sets torch's thread count
    from the *teacher's* config; the student's run keeps its own (restored afterwards): its seed
    decides its randomness, its ``train.num_threads`` its threads (two processes each running
    two threads on two cores slowed the distillation sweep tenfold). CUDA's generators, when CUDA
    has not started yet, hold only the last seed asked for, to be applied when it starts: the
    student's is asked for again."""
    threads, generators = torch.get_num_threads(), capture_rng()
    try:
        yield
    finally:
        torch.set_num_threads(threads)
        restore_rng(generators)
        if "cuda" not in generators and torch.cuda.is_available():
            torch.cuda.manual_seed_all(student_seed)


def load_teacher(spec: str, cfg: Any) -> tuple[torch.nn.Module, str, Path]:
    """The teacher model (eval mode, frozen), a fingerprint of what it was built from (the
    checkpoint's SHA-256, or the config's) and its absolute path."""
    from .runner import Experiment, load_trained
    from .schema import validate_config

    path = teacher_path(spec, cfg)
    with _student_state_kept(int(cfg.data.get("seed") or 0) + distributed.rank()):
        if path.is_dir() or path.suffix == ".pt":
            exp, checkpoint = load_trained(path)
            fingerprint = file_sha256(checkpoint)
        else:
            teacher_cfg = validate_config(load_config(path))
            exp = Experiment.build(teacher_cfg)
            fingerprint = file_sha256(path)
    model = exp.model.eval()
    for p in model.parameters():
        p.requires_grad_(False)
    return model, fingerprint, path.resolve()

