"""Run by ``torchrun`` from tests/test_continual_processes.py: continual runs over several processes.

    torchrun --nproc-per-node 2 tests/continual_worker.py FOLDER CONFIG...

Each ``FOLDER/CONFIG.yaml`` is trained into ``FOLDER/CONFIG`` by :func:`train_run` in one
process group (one launch for every config, so the test pays torchrun's start once). A config
the run refuses leaves its one-line message in ``FOLDER/CONFIG.refused`` (rank 0).
"""

from __future__ import annotations

import sys
from pathlib import Path

import modforge  # noqa: F401  (wires the registries' providers)
from modforge.core.config import load_config
from modforge.core.errors import ModforgeError
from modforge.experiment.runner import train_run
from modforge.train import distributed


def main(folder: Path, names: list[str]) -> None:
    for name in names:
        try:
            train_run(load_config(folder / f"{name}.yaml"), folder / name)
        except ModforgeError as exc:
            if distributed.is_main_process():
                (folder / f"{name}.refused").write_text(str(exc))
    distributed.shutdown()


if __name__ == "__main__":
    main(Path(sys.argv[1]), sys.argv[2:])
