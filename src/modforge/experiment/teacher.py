"""The teacher of ``train.distill``: built from its own config on the student's data, frozen.

A teacher is a run folder or a checkpoint (built from its stored config, the weights a test would
use — the weight average when the run kept one), or a config file (built with its ``model.init``
weights, e.g. published AASIST weights). The teacher sees the student's batches, so it is built on
the student's splits: its own ``data:`` section is never loaded (no second copy of a corpus, and
nothing it names is read or fetched).

The path is a reference (:mod:`modforge.core.references`): typed on the command line it is relative
to the current folder and vouches for plug-ins beside the teacher; written in the student's config
file it is relative to that file, and the teacher's config may import only plug-ins beside the
student's config; written in a stored config (``--resume``, a sweep's interrupted trial) it imports
no plug-in and downloads nothing — and a resumed run's teacher is compared with the SHA-256 its
checkpoint recorded *before* anything of it is built.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import torch

from ..core.config import Config, display_path, load_config
from ..core.errors import ConfigError
from ..core.integrity import file_sha256
from ..core.references import Reference, follow_reference
from ..train import distributed
from ..train.rng import capture_rng, restore_rng
from .experiment import Experiment
from .trained import trained_checkpoint, trained_config, trained_experiment

__all__ = ["load_teacher", "teacher_reference"]


def teacher_reference(cfg: Config) -> Reference:
    """Where ``train.distill.teacher`` points and how it may be read (one clear error when nothing
    is there)."""
    key = "train.distill.teacher"
    origin = cfg.where(key)
    ref = follow_reference(key, cfg.get(key), origin=origin, said_in=cfg.base_dir if cfg.file else None,
                           stored=cfg.stored, vouch_root=cfg.base_dir if cfg.file else None)  # fmt: skip
    if not ref.path.exists():
        raise ConfigError(f"the teacher {display_path(ref.path)} does not exist (a run folder, a checkpoint or a "
                          "config file)", path=key, source=origin)  # fmt: skip
    return ref


def _check_fingerprint(expected: str | None, found: str, path: Path) -> None:
    """A resumed run's teacher must be the one its checkpoint recorded: compared before it is built."""
    if expected and expected != found:
        raise ConfigError(f"the teacher {display_path(path)} changed since this run's checkpoint was written (its "
                          "SHA-256 differs): a distilled run resumes only with the teacher it was trained against; "
                          "nothing of the new teacher was built", path="train.distill.teacher")  # fmt: skip


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


def load_teacher(cfg: Config, splits: Any, *, expected: str | None = None) -> tuple[torch.nn.Module, str, Path]:
    """The teacher model (eval mode, frozen) built on the student's ``splits``, a fingerprint of what
    it was built from (the checkpoint's SHA-256, or the config file's) and its absolute path.

    ``expected``: the fingerprint a resumed checkpoint recorded; another teacher is refused before
    its config is read, its plug-ins imported or its model built."""
    from .schema import validate_config

    ref = teacher_reference(cfg)
    path = ref.path
    with _student_state_kept(int(cfg.data.get("seed") or 0) + distributed.rank()), ref.followed():
        if path.is_dir() or path.suffix == ".pt":
            checkpoint, payload = trained_checkpoint(path)
            fingerprint = file_sha256(checkpoint)
            _check_fingerprint(expected, fingerprint, path)
            teacher_cfg = trained_config(checkpoint, payload, own_copies=not ref.stored)
            exp = trained_experiment(teacher_cfg, checkpoint, payload, splits)
        else:
            fingerprint = file_sha256(path)
            _check_fingerprint(expected, fingerprint, path)
            teacher_cfg = validate_config(load_config(path, reference=ref))
            exp = Experiment.build(teacher_cfg, splits)
    model = exp.model.eval()
    for p in model.parameters():
        p.requires_grad_(False)
    return model, fingerprint, path.resolve()
