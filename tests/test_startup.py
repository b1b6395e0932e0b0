"""`modforge list` stays light: heavy optional dependencies are imported only where used."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

HEAVY = (
    "onnxruntime",
    "onnx",
    "matplotlib",
    "tensorboard",
    "soundfile",
    "transformers",
    "sklearn",
    "scipy",
    "pandas",
    "lightning",
    "torchvision",
    "torchaudio",
    "timm",
)

PROBE = """
import json, sys
from modforge.cli.main import main
code = main(sys.argv[1:])
sys.stdout.flush()
print("\\n__MODULES__" + json.dumps(sorted(m for m in sys.modules)))
sys.exit(code)
"""


@pytest.mark.slow
@pytest.mark.parametrize("argv", [["list"], ["describe", "optimizer", "adamw"]])
def test_cli_does_not_import_heavy_optional_dependencies(argv):
    proc = subprocess.run([sys.executable, "-c", PROBE, *argv], capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr
    modules = set(json.loads(proc.stdout.rsplit("__MODULES__", 1)[1]))
    loaded = sorted(h for h in HEAVY if h in modules)
    assert not loaded, f"'modforge {' '.join(argv)}' imported {loaded}"


def test_import_modforge_does_not_load_parts_or_torch_optim_registrations():
    proc = subprocess.run(
        [sys.executable, "-c", "import sys, modforge; print('modforge.train.optimizers' in sys.modules)"],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.strip() == "False"  # built-in parts load on the first registry query
