"""The small run configs many tests train, written by one function instead of a YAML block per file.

Each test file still says what its run is (data, model, train keys); :func:`run_config` writes the
lines every such config shares — ``seed``, ``data``, a ``model`` with a cross-entropy loss, the
``train`` section key by key — in the same order and spelling the files' own blocks had, so a test
that edits the text (``TINY.replace("num_threads: 1", ...)``) or appends a train key still can.
"""

from __future__ import annotations

from collections.abc import Mapping

__all__ = ["ADAM", "SGD", "cnn", "continual_digits", "flat_digits", "flat_seq_digits", "mlp", "run_config", "synthetic"]

ADAM = "{type: adam, args: {lr: 0.01}}"
SGD = "{type: sgd, args: {lr: 0.05}}"


def mlp(*hidden: int) -> str:
    """The ``mlp`` backbone with ``hidden`` units per layer."""
    return f"{{type: mlp, args: {{hidden_dims: [{', '.join(map(str, hidden))}]}}}}"


def cnn(*channels: int) -> str:
    """The ``cnn`` backbone with ``channels`` per block."""
    return f"{{type: cnn, args: {{channels: [{', '.join(map(str, channels))}]}}}}"


def synthetic(num_samples: int, batch_size: int) -> str:
    """``synthetic_classification`` data: ``num_samples`` of 8 features in 3 classes."""
    return (f"{{type: synthetic_classification, args: {{num_samples: {num_samples}, num_features: 8, num_classes: 3}}, "
            f"batch_size: {batch_size}}}")  # fmt: skip


def flat_digits(batch_size: int) -> str:
    """``digits`` as 64-feature vectors (1,257 training samples; no scikit-learn import at the run's start)."""
    return f"{{type: digits, args: {{as_image: false}}, batch_size: {batch_size}}}"


def flat_seq_digits(batch_size: int) -> str:
    """The ``seq_digits`` continual benchmark on flat inputs."""
    return f"{{type: seq_digits, args: {{as_image: false}}, batch_size: {batch_size}}}"


def continual_digits(keep_last: int, continual: str) -> str:
    """The continual runs' config: ``seq_digits`` (flat) through an MLP of 64 units, SGD, a checkpoint
    every 4 steps (the last ``keep_last`` kept), then the ``continual`` section's flow mapping."""
    return run_config(flat_seq_digits(batch_size=32), mlp(64), after=f"continual: {continual}\n", train=dict(
        optimizer=SGD, checkpoint=f"{{every_n_steps: 4, keep_last: {keep_last}}}", num_threads=1, progress="never"))


def _yaml(value: object) -> str:
    return str(value).lower() if isinstance(value, bool) else str(value)


def run_config(data: str, backbone: str, train: Mapping[str, object], *, seed: int | None = 0, neck: str | None = None,
               head: str = "linear", before: str = "", after: str = "") -> str:
    """A config's text: ``before`` (top-level lines such as ``plugins:``), ``seed`` (none when
    ``None``), ``data`` (flow style, or block lines starting with a newline), a model of
    ``backbone`` → ``neck`` → ``head`` with ``losses: [cross_entropy]``, then ``train``'s keys in
    their order (booleans spelled as YAML's), then ``after`` (sections that follow, e.g. ``continual:``)."""
    lines = [f"seed: {seed}"] if seed is not None else []
    lines += [f"data: {data}" if not data.startswith("\n") else f"data:{data.rstrip()}", "model:",
              f"  backbone: {backbone}", *([f"  neck: {neck}"] if neck else []), f"  head: {head}",
              "  losses: [cross_entropy]", "train:", *(f"  {key}: {_yaml(value)}" for key, value in train.items())]  # fmt: skip
    return before + "\n".join(lines) + "\n" + after
