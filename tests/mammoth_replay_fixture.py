"""The fixture of the replay-family parity check against Mammoth (ER, DER, DER++, ER-ACE, X-DER):
one small class-incremental stream, one set of initial weights, the hyper-parameters and the
names that map modforge's parameters onto Mammoth's MNISTMLP.

Shared by ``fixtures/record_mammoth_replay.py`` (which runs Mammoth's own models on it, in a
scratch environment without modforge) and ``test_continual_mammoth_parity.py`` (which runs
modforge's algorithms on it): it needs only torch and scikit-learn, never modforge or Mammoth.
How the check works: ``docs/worlds/continual-parity.md``.
"""

from __future__ import annotations

import hashlib
import math
from typing import Any

import torch

MAMMOTH_COMMIT = "e75a491c69fd729edeb01431afb753d9157d9a81"

SEED = 0
CLASSES_PER_TASK = 2
TASK_STEPS = (17, 17, 16)  # steps of each task: 50 in all, three tasks so X-DER's middle task has past and future heads
TASKS = len(TASK_STEPS)
NUM_CLASSES = CLASSES_PER_TASK * TASKS
BATCH = 10
STEPS = sum(TASK_STEPS)
FEATURES = 64  # scikit-learn's digits, 8×8, scaled to [0, 1]
HIDDEN = 100  # Mammoth's MNISTMLP: Linear-ReLU-Linear-ReLU (100 each) + classifier
LR = 0.1  # SGD, no momentum or weight decay (Mammoth's defaults), the same every task
BUFFER = 50
MINIBATCH = 10

# Each run: modforge's algorithm and arguments, its head, and Mammoth's model with the arguments it is
# given (besides --buffer_size / --minibatch_size / --lr / --batch_size). alpha / beta are modforge's
# defaults (Mammoth requires them on the command line); the rest are both codes' defaults, stated.
RUNS: dict[str, dict[str, Any]] = {
    "er": {"algorithm": "er", "args": {}, "head": "linear", "mammoth": "er", "mammoth_args": {}},
    "der": {"algorithm": "der", "args": {"alpha": 0.3}, "head": "linear", "mammoth": "der",
            "mammoth_args": {"alpha": 0.3}},
    "derpp": {"algorithm": "derpp", "args": {"alpha": 0.1, "beta": 0.5}, "head": "linear", "mammoth": "derpp",
              "mammoth_args": {"alpha": 0.1, "beta": 0.5}},
    # ER-ACE on the linear classifier (Mammoth's --use_custom_classifier 0), then with Mammoth's default cosine
    # classifier (CustomLinear: scale 10, no bias) against modforge's cosine head
    "er_ace": {"algorithm": "er_ace", "args": {"task_free": False}, "head": "linear", "mammoth": "er_ace",
               "mammoth_args": {"task_free": 0, "use_custom_classifier": 0}},
    "er_ace_task_free": {"algorithm": "er_ace", "args": {"task_free": True}, "head": "linear", "mammoth": "er_ace",
                         "mammoth_args": {"task_free": 1, "use_custom_classifier": 0}},
    "er_ace_cosine": {"algorithm": "er_ace", "args": {"task_free": False}, "head": "cosine", "mammoth": "er_ace",
                      "mammoth_args": {"task_free": 0, "use_custom_classifier": 1}},
    # models/xder.py with its SimCLR term off (lambd 0, dp_weight 0): the rest at its defaults
    "xder": {"algorithm": "xder",
             "args": {"alpha": 0.3, "beta": 0.8, "gamma": 0.85, "constr_eta": 0.1, "constr_margin": 0.3,
                      "past_constraint": False, "future_constraint": True, "align_bn": True},
             "head": "linear", "mammoth": "xder",
             "mammoth_args": {"alpha": 0.3, "beta": 0.8, "gamma": 0.85, "constr_eta": 0.1, "constr_margin": 0.3,
                              "past_constraint": 0, "future_constraint": 1, "align_bn": 1, "lambd": 0.0,
                              "dp_weight": 0.0}},
    "xder_past_constraint": {"algorithm": "xder",
                             "args": {"alpha": 0.3, "beta": 0.8, "past_constraint": True},
                             "head": "linear", "mammoth": "xder",
                             "mammoth_args": {"alpha": 0.3, "beta": 0.8, "past_constraint": 1, "lambd": 0.0}},
    # models/xder_ce.py: the same update without the SimCLR code; its constr_eta default is 0.01, given 0.1 here
    "xder_ce": {"algorithm": "xder", "args": {"alpha": 0.3, "beta": 0.8}, "head": "linear", "mammoth": "xder_ce",
                "mammoth_args": {"alpha": 0.3, "beta": 0.8, "constr_eta": 0.1}},
}  # fmt: skip

# modforge's parameter names (a ModularModel of backbone ``mlp`` [100, 100] and head ``linear`` or
# ``cosine``) → Mammoth's (BaseMNISTMLP; ER-ACE's CustomLinear classifier keeps its weight in ``L``)
MAMMOTH_NAMES = {
    "parts.backbone.layer1.0.weight": "fc1.weight",
    "parts.backbone.layer1.0.bias": "fc1.bias",
    "parts.backbone.layer2.0.weight": "fc2.weight",
    "parts.backbone.layer2.0.bias": "fc2.bias",
    "parts.head.fc.weight": "classifier.weight",
    "parts.head.fc.bias": "classifier.bias",
    "parts.head.weight": "classifier.L.weight",
}


def model_config(head: str) -> dict[str, Any]:
    """modforge's model section for ``head`` ('linear' or 'cosine', ER-ACE's)."""
    heads = {"linear": "linear", "cosine": {"type": "cosine", "args": {"scale": 10.0, "learn_scale": False, "eps": 1e-5}}}
    return {"backbone": {"type": "mlp", "args": {"hidden_dims": [HIDDEN, HIDDEN]}}, "head": heads[head],
            "losses": ["cross_entropy"]}  # fmt: skip


def initial_weights(head: str) -> dict[str, torch.Tensor]:
    """The weights both codes start from, by modforge's parameter names: uniform in ±1/√fan_in
    (PyTorch's default range for Linear), biases included, from a generator seeded with SEED."""
    generator = torch.Generator().manual_seed(SEED)

    def uniform(*shape: int) -> torch.Tensor:
        bound = 1.0 / math.sqrt(shape[-1] if len(shape) > 1 else HIDDEN)
        return (torch.rand(*shape, generator=generator) * 2 - 1) * bound

    weights = {
        "parts.backbone.layer1.0.weight": uniform(HIDDEN, FEATURES),
        "parts.backbone.layer1.0.bias": uniform(HIDDEN),
        "parts.backbone.layer2.0.weight": uniform(HIDDEN, HIDDEN),
        "parts.backbone.layer2.0.bias": uniform(HIDDEN),
    }
    if head == "linear":
        weights["parts.head.fc.weight"] = uniform(NUM_CLASSES, HIDDEN)
        weights["parts.head.fc.bias"] = uniform(NUM_CLASSES)
    else:
        weights["parts.head.weight"] = uniform(NUM_CLASSES, HIDDEN)
    return weights


def mammoth_weights(head: str) -> dict[str, torch.Tensor]:
    """:func:`initial_weights` under Mammoth's names."""
    return {MAMMOTH_NAMES[name]: value for name, value in initial_weights(head).items()}


def task_data() -> list[dict[str, Any]]:
    """The stream: task ``t`` holds classes 2t and 2t+1 of scikit-learn's digits (features / 16), its
    samples of those classes in an order drawn by a generator seeded with SEED, the first
    ``TASK_STEPS[t] * BATCH`` of them. Each task: ``classes``, ``input`` [N, 64], ``label`` [N]."""
    from sklearn.datasets import load_digits

    digits = load_digits()
    inputs = torch.tensor(digits.data, dtype=torch.float32) / 16.0
    labels = torch.tensor(digits.target, dtype=torch.long)
    generator = torch.Generator().manual_seed(SEED)
    tasks = []
    for t, steps in enumerate(TASK_STEPS):
        classes = list(range(t * CLASSES_PER_TASK, (t + 1) * CLASSES_PER_TASK))
        rows = torch.isin(labels, torch.tensor(classes)).nonzero().reshape(-1)
        rows = rows[torch.randperm(len(rows), generator=generator)][: steps * BATCH]
        tasks.append({"classes": classes, "input": inputs[rows].clone(), "label": labels[rows].clone()})
    return tasks


def batches(task: dict[str, Any]) -> list[dict[str, torch.Tensor]]:
    """A task's training batches, in order (the same order every time: the end-of-task pass reads them too)."""
    return [{"input": task["input"][i : i + BATCH], "label": task["label"][i : i + BATCH]}
            for i in range(0, len(task["label"]), BATCH)]  # fmt: skip


def fingerprint(tasks: list[dict[str, Any]]) -> dict[str, str]:
    """SHA-256 of the stream and of the initial weights: the recording notes them, so a changed
    fixture is told from a changed algorithm."""

    def digest(tensors: list[torch.Tensor]) -> str:
        h = hashlib.sha256()
        for tensor in tensors:
            h.update(tensor.detach().contiguous().numpy().tobytes())
        return h.hexdigest()

    return {
        "stream": digest([t[key] for t in tasks for key in ("input", "label")]),
        "weights_linear": digest(list(initial_weights("linear").values())),
        "weights_cosine": digest(list(initial_weights("cosine").values())),
    }
