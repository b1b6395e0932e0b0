"""``modforge predict`` in a child process in which any import of torch fails: what an exported ONNX
model promises (prediction with onnxruntime and numpy alone)."""

from __future__ import annotations

import subprocess
import sys

__all__ = ["predict_without_torch"]

TIMEOUT_S = 180  # against a hang only


def predict_without_torch(*args: str) -> subprocess.CompletedProcess:
    """``modforge predict ARGS`` in a fresh interpreter whose ``import torch`` raises; output captured as text."""
    code = (
        "import sys; sys.modules['torch'] = None  # any import of torch now fails\n"
        "from modforge.cli.main import main\n"
        f"sys.exit(main(['predict', *{list(args)!r}]))\n"
    )
    return subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=TIMEOUT_S)
