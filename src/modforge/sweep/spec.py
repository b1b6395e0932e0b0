"""The sweep file: parsing and validating ``SWEEP.yaml`` into a :class:`SweepSpec`.

A sweep file is read like a config (safe YAML only, ``_base_`` inheritance, every key's
file and line remembered), then checked key by key: a bad one is one
:class:`SweepSpecError` naming the key, the file and line, and what was expected.
The format is documented in :mod:`modforge.sweep` and in ``configs/sweeps/reference.yaml``.

A sweep file is held to the rules of a config file, since each trial runs what it says:

* it vouches only for what lies beside it: every ``config:`` it names (relative to the file
  that says it, a ``_base_`` sweep's included) must lie in the folder of the sweep file the
  user gave, or below, or in a folder the user named (``--config-root``) — a config's
  plug-ins are imported by the trial;
* it cannot set what only the user's command line may: ``--plugins``, ``plugins``,
  ``--resume``, ``--run-dir``, ``--nproc``, nor a flag value that would read as another flag;
* it never chooses what to connect to: ``ray.address`` is refused (``--ray-address``);
* the trials it plans are counted before any is made: more than ``max_trials``
  (:data:`DEFAULT_MAX_TRIALS`, ``--max-trials``) is one error, not an expansion that never ends.

Where things live: :mod:`.spec_types` (the parsed form and the vocabulary), :mod:`.spec_parser`
(the checks, :class:`~.spec_parser.SweepParser`); this module reads the file and re-exports :mod:`.spec_types`.
"""

from __future__ import annotations

import contextlib
import os
from collections.abc import Iterable, Iterator
from pathlib import Path

from ..core.config import Config, load_config
from ..core.errors import ConfigError
from .spec_parser import SweepParser
from .spec_types import *  # noqa: F403 - the parsed form and the vocabulary, as spec_types lists them
from .spec_types import DEFAULT_MAX_TRIALS, SweepSpec, SweepSpecError
from .spec_types import __all__ as _type_names

__all__ = [*_type_names, "load_sweep", "parse_sweep"]


@contextlib.contextmanager
def _as_sweep_error() -> Iterator[None]:
    """A config error met while reading or checking a sweep file (a YAML error, ``check_keys``' unknown key)
    raised as the one error kind of sweep files, :class:`SweepSpecError`, with its key and location."""
    try:
        yield
    except SweepSpecError:
        raise
    except ConfigError as exc:
        raise SweepSpecError(exc.message, path=exc.path, source=exc.source) from None


def load_sweep(path: str | Path, *, stored: bool = False, config_roots: Iterable[str | os.PathLike] = (),
               max_trials: int = DEFAULT_MAX_TRIALS) -> SweepSpec:  # fmt: skip
    """Read and check a sweep file.

    Args:
        path: the sweep file.
        stored: a sweep folder's resolved ``sweep.yaml``, read for its report — the configs it
            names need not exist any more (an archived or copied folder), and it is never run.
        config_roots: folders (besides the sweep file's own) where the configs it names may lie.
        max_trials: the most trials the sweep may plan.

    Raises:
        SweepSpecError: the file is missing, not YAML, or a key is malformed (key, file and line named).
    """
    with _as_sweep_error():
        cfg = load_config(Path(path))
    return parse_sweep(cfg, stored=stored, config_roots=config_roots, max_trials=max_trials)


def parse_sweep(cfg: Config, *, stored: bool = False, config_roots: Iterable[str | os.PathLike] = (),
                max_trials: int = DEFAULT_MAX_TRIALS) -> SweepSpec:  # fmt: skip
    """A :class:`SweepSpec` from a loaded sweep file (see :func:`load_sweep`)."""
    with _as_sweep_error():
        return SweepParser(cfg, stored=stored, config_roots=config_roots, max_trials=max_trials).parse()
