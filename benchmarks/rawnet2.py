"""RawNet2 speed: modforge's ``rawnet2`` + ``linear`` head against the reference layout.

The reference is the ASVspoof 2021 LA/DF baseline (asvspoof-challenge/2021
``LA/Baseline-RawNet2``, ``model_config_RawNet.yaml``: 20 fixed mel sinc filters of 1025
taps, residual blocks of widths 20, 20, 128 × 4 with filter-wise feature map scaling, a
3-layer 1024-unit GRU, ``fc1_gru`` 1024 and ``fc2_gru`` 2, log-softmax output), rebuilt
here from that published architecture with the reference's module names (so its state
dict has the released checkpoints' keys) — not copied from its code. Two things of the
released code are left out, both in the reference's favour: it designs its sinc filters
again (a NumPy loop) at every call, here once; and it computes every block's dead
``bn1``/LeakyReLU, here not at all. modforge's model gets the reference's weights through
``rawnet2.reference_state_dict``; the table reports the largest difference between the
two models' log-probabilities on the timed inputs (eval mode).

Setup: 64,600 samples (the reference's training length), one thread, eval-mode inference
at batch 1 and 8 (no_grad), and a training step at batch 8 (zero_grad, forward, the
reference's weighted cross-entropy — weights 0.1/0.9 — backward, Adam step with its
lr 1e-4 and weight decay 1e-4). Method: one process builds both models and times them in
turn — rounds of reference, modforge, modforge, reference — after untimed warm-up calls, so
drift hits both alike; times are medians, and a ratio is the median over rounds of the
round's modforge / reference time (target ≤ 1.00×; this shared 2-core VM's load varies
from second to second, which per-round ratios cancel better than a ratio of medians).
Peak resident memory (VmHWM) is measured in separate fresh processes, one per model, each
building its model alone and running three training steps at batch 8.

    python benchmarks/rawnet2.py [--runs 5] [--write]
"""

from __future__ import annotations

import json
import statistics
import subprocess
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).parent))

SAMPLES, BATCH, SEED = 64_600, 8, 0
TARGET = 1.00
CONFIG = {"first_conv": 1024, "filts": [20, [20, 20], [20, 128], [128, 128]], "gru_node": 1024,
          "nb_gru_layer": 3, "nb_fc_node": 1024, "nb_classes": 2}


def reference_model():
    """The ASVspoof 2021 baseline RawNet, from its published architecture."""
    import numpy as np
    import torch
    import torch.nn as nn
    import torch.nn.functional as F

    class SincConv(nn.Module):  # fixed mel-spaced band-passes: edges on the mel scale from 0 Hz to Nyquist
        def __init__(self, out_channels: int, kernel_size: int, sample_rate: int = 16000):
            super().__init__()
            kernel = kernel_size + 1 if kernel_size % 2 == 0 else kernel_size
            top = 2595 * np.log10(1 + (sample_rate // 2) / 700)
            edges = 700 * (10 ** (np.linspace(0, top, out_channels + 1) / 2595) - 1)
            n = np.arange(kernel) - (kernel - 1) / 2
            bank = [(2 * hi / sample_rate) * np.sinc(2 * hi * n / sample_rate)
                    - (2 * lo / sample_rate) * np.sinc(2 * lo * n / sample_rate) for lo, hi in zip(edges[:-1], edges[1:], strict=True)]
            self.filters = torch.tensor(np.array(bank) * np.hamming(kernel), dtype=torch.float32).unsqueeze(1)

        def forward(self, x):
            return F.conv1d(x, self.filters)

    class ResidualBlock(nn.Module):
        def __init__(self, filts: list[int], first: bool = False):
            super().__init__()
            if not first:
                self.bn1 = nn.BatchNorm1d(filts[0])  # in the state dict; its output never reaches the block's
            self.lrelu = nn.LeakyReLU(negative_slope=0.3)
            self.conv1 = nn.Conv1d(filts[0], filts[1], 3, padding=1)
            self.bn2 = nn.BatchNorm1d(filts[1])
            self.conv2 = nn.Conv1d(filts[1], filts[1], 3, padding=1)
            self.downsample = filts[0] != filts[1]
            if self.downsample:
                self.conv_downsample = nn.Conv1d(filts[0], filts[1], 1)
            self.mp = nn.MaxPool1d(3)

        def forward(self, x):
            out = self.conv2(self.lrelu(self.bn2(self.conv1(x))))
            out += self.conv_downsample(x) if self.downsample else x
            return self.mp(out)

    class RawNet(nn.Module):
        def __init__(self, d: dict):
            super().__init__()
            f = d["filts"]
            self.Sinc_conv = SincConv(f[0], d["first_conv"])
            self.first_bn = nn.BatchNorm1d(f[0])
            self.selu = nn.SELU(inplace=True)
            widths = [f[1], f[1], f[2], [f[2][1], f[2][1]], [f[2][1], f[2][1]], [f[2][1], f[2][1]]]
            for i, w in enumerate(widths):
                setattr(self, f"block{i}", nn.Sequential(ResidualBlock(list(w), first=i == 0)))
                setattr(self, f"fc_attention{i}", nn.Sequential(nn.Linear(w[1], w[1])))
            self.avgpool = nn.AdaptiveAvgPool1d(1)
            self.bn_before_gru = nn.BatchNorm1d(f[2][-1])
            self.gru = nn.GRU(f[2][-1], d["gru_node"], num_layers=d["nb_gru_layer"], batch_first=True)
            self.fc1_gru = nn.Linear(d["gru_node"], d["nb_fc_node"])
            self.fc2_gru = nn.Linear(d["nb_fc_node"], d["nb_classes"])
            self.sig = nn.Sigmoid()
            self.logsoftmax = nn.LogSoftmax(dim=1)

        def forward(self, x):
            x = self.Sinc_conv(x.view(x.shape[0], 1, x.shape[1]))
            x = self.selu(self.first_bn(F.max_pool1d(torch.abs(x), 3)))
            for i in range(6):
                x = getattr(self, f"block{i}")(x)
                y = self.avgpool(x).view(x.size(0), -1)
                y = self.sig(getattr(self, f"fc_attention{i}")(y)).view(y.size(0), y.size(1), -1)
                x = x * y + y
            x = self.selu(self.bn_before_gru(x)).permute(0, 2, 1)
            x, _ = self.gru(x)
            return self.logsoftmax(self.fc2_gru(self.fc1_gru(x[:, -1, :])))

    return RawNet(json.loads(json.dumps(CONFIG)))


def randomise_batchnorm(model) -> None:
    import torch

    generator = torch.Generator().manual_seed(SEED + 1)
    for module in model.modules():
        if isinstance(module, torch.nn.BatchNorm1d):
            module.running_mean.copy_(0.1 * torch.randn(module.num_features, generator=generator))
            module.running_var.copy_(0.5 + torch.rand(module.num_features, generator=generator))


def build_pair():
    """(reference, modforge, log-probabilities function of modforge), the same weights."""
    import torch

    import modforge as mf
    from modforge.components.backbones.rawnet2 import reference_state_dict

    torch.manual_seed(SEED)
    reference = reference_model()
    with torch.no_grad():
        randomise_batchnorm(reference)
    ours = mf.build_model({"backbone": "rawnet2", "head": "linear"}, in_dim=1, num_classes=2, layout="waveform")
    ours.load_state_dict(reference_state_dict(reference.state_dict()))
    return reference, ours


def make_step(model, log_probs: bool):
    import torch
    import torch.nn.functional as F

    weight = torch.tensor([0.1, 0.9])
    optimizer = torch.optim.Adam(model.parameters(), lr=1e-4, weight_decay=1e-4)

    def step(x, y):
        optimizer.zero_grad()
        out = model(x)
        loss = F.nll_loss(out, y, weight=weight) if log_probs else F.cross_entropy(out, y, weight=weight)
        loss.backward()
        optimizer.step()

    return step


def paired_ratio(times: dict[str, list[float]]) -> float:
    """The median over rounds of modforge's time / the reference's within the round (each round
    times reference, modforge, modforge, reference), so that drift between rounds cancels."""
    ref, ours = times["reference"], times["modforge"]
    return statistics.median((ours[i] + ours[i + 1]) / (ref[i] + ref[i + 1]) for i in range(0, len(ref), 2))


def timed(fn, *args) -> float:
    start = time.perf_counter()
    fn(*args)
    return time.perf_counter() - start


def measure(runs: int) -> dict:
    import torch

    reference, ours = build_pair()
    generator = torch.Generator().manual_seed(SEED + 2)
    inputs = {b: 0.1 * torch.randn(b, SAMPLES, generator=generator) for b in (1, BATCH)}
    labels = torch.randint(0, 2, (BATCH,), generator=generator)
    results: dict = {}
    reference.eval()
    ours.eval()
    with torch.no_grad():
        results["max_diff"] = max(
            float((torch.log_softmax(ours(x), dim=1) - reference(x)).abs().max()) for x in inputs.values()
        )
        for b, x in inputs.items():
            times = {"reference": [], "modforge": []}
            for _ in range(2):  # warm-up
                reference(x), ours(x)
            for _ in range(runs * (12 if b == 1 else 2)):  # a batch-1 call is short: more rounds
                for name, model in (("reference", reference), ("modforge", ours), ("modforge", ours),
                                    ("reference", reference)):
                    times[name].append(timed(model, x))
            results[f"infer{b}"] = times
    reference.train()
    ours.train()
    steps = {"reference": make_step(reference, True), "modforge": make_step(ours, False)}
    x = inputs[BATCH]
    for step in steps.values():
        step(x, labels)  # warm-up (allocates Adam's state)
    times = {"reference": [], "modforge": []}
    for _ in range(2 * runs):
        for name in ("reference", "modforge", "modforge", "reference"):
            times[name].append(timed(steps[name], x, labels))
    results["train"] = times
    return results


def _child(contender: str) -> None:
    """Three training steps at batch 8 in a fresh process with one model; print the peak RSS in MiB."""
    import resource

    import torch

    import modforge as mf

    torch.set_num_threads(1)
    torch.manual_seed(SEED)
    if contender == "reference":
        model, log_probs = reference_model(), True
    else:
        model = mf.build_model({"backbone": "rawnet2", "head": "linear"}, in_dim=1, num_classes=2, layout="waveform")
        log_probs = False
    model.train()
    step = make_step(model, log_probs)
    generator = torch.Generator().manual_seed(SEED + 2)
    x = 0.1 * torch.randn(BATCH, SAMPLES, generator=generator)
    y = torch.randint(0, 2, (BATCH,), generator=generator)
    for _ in range(3):
        step(x, y)
    print(json.dumps({"rss_mib": _peak_rss_mib(resource)}))


def _peak_rss_mib(resource) -> float:
    """This process's peak resident memory: VmHWM where Linux has it (ru_maxrss also counts the
    parent's peak, inherited across fork and exec), else ru_maxrss."""
    try:
        with open("/proc/self/status") as status:
            for line in status:
                if line.startswith("VmHWM:"):
                    return int(line.split()[1]) / 1024
    except OSError:
        pass
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024


def peak_rss(contender: str) -> float:
    out = subprocess.run([sys.executable, __file__, "--child", contender], capture_output=True, text=True, check=True)
    return json.loads(out.stdout.strip().splitlines()[-1])["rss_mib"]


def main() -> int:
    from _report import paired_run_arguments, publish, slowest

    ns = paired_run_arguments(__doc__, "rounds (reference, modforge, modforge, reference): ×2 at batch 8 and for "
                              "training, ×12 at batch 1")
    if ns.child:
        _child(ns.child)
        return 0
    rss = {name: peak_rss(name) for name in ("reference", "modforge")}  # first, while this process is small
    import torch

    torch.set_num_threads(1)
    results = measure(max(2, ns.runs))
    rows = [("inference, batch 1", "infer1", 1e3, "ms"), (f"inference, batch {BATCH}", f"infer{BATCH}", 1e3, "ms"),
            (f"training step, batch {BATCH}", "train", 1e3, "ms")]
    lines = [
        "| measurement | reference | modforge | modforge / reference | fastest calls: reference, modforge |",
        "|---|---|---|---|---|",
    ]
    worst = 0.0
    for label, key, scale, unit in rows:
        ref, ours = (statistics.median(results[key][n]) for n in ("reference", "modforge"))
        fast_ref, fast_ours = (min(results[key][n]) for n in ("reference", "modforge"))
        ratio = paired_ratio(results[key])
        worst = max(worst, ratio)
        lines.append(f"| {label} ({unit}) | {ref * scale:.1f} | {ours * scale:.1f} | {ratio:.3f}× "
                     f"| {fast_ref * scale:.1f}, {fast_ours * scale:.1f} ({fast_ours / fast_ref:.3f}×) |")
    mem_ratio = rss["modforge"] / rss["reference"]
    lines.append(f"| peak RSS, training step batch {BATCH} (MiB) | {rss['reference']:.0f} | {rss['modforge']:.0f} "
                 f"| {mem_ratio:.3f}× | |")
    table = (
        "\n".join(lines)
        + "\n\n" + slowest("ratio modforge / reference", worst, TARGET)
        + f"{SAMPLES:,} samples, 1 thread; times are medians of {4 * max(2, ns.runs)} calls per model "
        + f"({24 * max(2, ns.runs)} at batch 1), ratios the median over rounds of each round's modforge / reference "
        + "time). "
        + f"Largest |difference| of the log-probabilities with the same weights: {results['max_diff']:.1e}.\n"
    )
    return publish("rawnet2", table, ns.write)


if __name__ == "__main__":
    sys.exit(main())
