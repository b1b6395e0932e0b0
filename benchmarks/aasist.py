"""AASIST speed and memory: modforge's ``aasist`` + ``linear`` head against the authors'
model (clovaai/aasist, commit a04c986, ``models/AASIST.py``), on 4 s of 16 kHz audio
(64,600 samples, the reference's ``nb_samp``), one thread.

The authors' model is rebuilt in this file (:class:`ReferenceAASIST`) from the facts of
their code, operation for operation: the sinc filter bank cloned at every call, ``bn1`` and
SELU computed and discarded in residual blocks 2–6, in-place SELUs and residual additions,
``torch.max`` for the node readouts, the HS-GAL attention assembled block by block on a
zero board, the unexpanded master nodes, in-place dropouts. Its tensor names are the
authors', so their ``AASIST.pth`` loads into it unchanged: when ``../shared/weights`` is
beside the project, the rebuild's logits are first checked against the authors' own
(``aasist_reference_outputs.json``). modforge's model gets the rebuild's weights through
``official_aasist_state_dict``, and the two are checked to agree in eval mode (logits) and
in train mode (loss and every gradient, with the same dropout draws) before anything is
timed.

Method: one process builds both models and times them side by side, alternating which
goes first each round (A B B A …), after one untimed warm-up call each: inference (eval,
``no_grad``) at batch 1 and 8, and a training step at batch 8 (forward, cross-entropy,
backward, Adam step, as the authors train). Times are medians of the timed calls; the
ratio is the median over the rounds of modforge's time / the reference's in the same
round (≤ 1: modforge at least as fast), which cancels most of what a shared machine's
load does to both.
Peak memory: a fresh process per model (so the peaks cannot mix; both import the same
modules) builds it and runs one batch-8 training step (which also creates Adam's state);
the figure is its peak resident set size (``VmHWM``; ``ru_maxrss`` would report the
parent's size at fork time when that is larger), and the growth from just before the step. About 5 minutes on 2 cores with the default 3 runs (a training step at batch 8
takes ~20 s).

    python benchmarks/aasist.py [--runs 3] [--threads 1] [--write]
"""

from __future__ import annotations

import argparse
import json
import math
import random
import statistics
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).parent))

import numpy as np  # noqa: E402
import torch  # noqa: E402
import torch.nn as nn  # noqa: E402
import torch.nn.functional as F  # noqa: E402
from _report import slowest  # noqa: E402
from _timing import child_result, interleaved_times  # noqa: E402

SAMPLES = 64_600
WEIGHTS = Path(__file__).resolve().parents[2] / "shared" / "weights"  # ../shared/weights beside the project
CONFIG = {  # config/AASIST.conf, model_config
    "first_conv": 128,
    "filts": [70, [1, 32], [32, 32], [32, 64], [64, 64]],
    "gat_dims": [64, 32],
    "pool_ratios": [0.5, 0.7, 0.5, 0.5],
    "temperatures": [2.0, 2.0, 100.0, 100.0],
}
TARGET = 1.00  # modforge / reference time, every row


# --- the authors' model, rebuilt ----------------------------------------------------------


def _glorot(*size: int) -> nn.Parameter:
    weight = nn.Parameter(torch.empty(*size))
    nn.init.xavier_normal_(weight)
    return weight


def _pairwise(x: torch.Tensor) -> torch.Tensor:  # [B, N, D] → [B, N, N, D], x_i ⊙ x_j via expand
    x = x.unsqueeze(2).expand(-1, -1, x.size(1), -1)
    return x * x.transpose(1, 2)


def _node_bn(bn: nn.BatchNorm1d, x: torch.Tensor) -> torch.Tensor:
    shape = x.size()
    return bn(x.view(-1, shape[-1])).view(shape)


class RefGAT(nn.Module):
    def __init__(self, in_dim: int, out_dim: int, temperature: float):
        super().__init__()
        self.att_proj = nn.Linear(in_dim, out_dim)
        self.att_weight = _glorot(out_dim, 1)
        self.proj_with_att = nn.Linear(in_dim, out_dim)
        self.proj_without_att = nn.Linear(in_dim, out_dim)
        self.bn = nn.BatchNorm1d(out_dim)
        self.input_drop = nn.Dropout(0.2)
        self.temp = temperature

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = self.input_drop(x)
        att = torch.matmul(torch.tanh(self.att_proj(_pairwise(x))), self.att_weight)
        att = F.softmax(att / self.temp, dim=-2)
        x = self.proj_with_att(torch.matmul(att.squeeze(-1), x)) + self.proj_without_att(x)
        return F.selu(_node_bn(self.bn, x), inplace=True)


class RefHtrgGAT(nn.Module):
    def __init__(self, in_dim: int, out_dim: int, temperature: float):
        super().__init__()
        self.proj_type1 = nn.Linear(in_dim, in_dim)
        self.proj_type2 = nn.Linear(in_dim, in_dim)
        self.att_proj = nn.Linear(in_dim, out_dim)
        self.att_projM = nn.Linear(in_dim, out_dim)
        self.att_weight11 = _glorot(out_dim, 1)
        self.att_weight22 = _glorot(out_dim, 1)
        self.att_weight12 = _glorot(out_dim, 1)
        self.att_weightM = _glorot(out_dim, 1)
        self.proj_with_att = nn.Linear(in_dim, out_dim)
        self.proj_without_att = nn.Linear(in_dim, out_dim)
        self.proj_with_attM = nn.Linear(in_dim, out_dim)
        self.proj_without_attM = nn.Linear(in_dim, out_dim)
        self.bn = nn.BatchNorm1d(out_dim)
        self.input_drop = nn.Dropout(0.2)
        self.temp = temperature

    def forward(self, x1, x2, master):
        n1, n2 = x1.size(1), x2.size(1)
        x = self.input_drop(torch.cat([self.proj_type1(x1), self.proj_type2(x2)], dim=1))
        hidden = torch.tanh(self.att_proj(_pairwise(x)))
        board = torch.zeros_like(hidden[:, :, :, 0]).unsqueeze(-1)  # one block per edge type
        board[:, :n1, :n1, :] = torch.matmul(hidden[:, :n1, :n1, :], self.att_weight11)
        board[:, n1:, n1:, :] = torch.matmul(hidden[:, n1:, n1:, :], self.att_weight22)
        board[:, :n1, n1:, :] = torch.matmul(hidden[:, :n1, n1:, :], self.att_weight12)
        board[:, n1:, :n1, :] = torch.matmul(hidden[:, n1:, :n1, :], self.att_weight12)
        att = F.softmax(board / self.temp, dim=-2)
        att_m = torch.matmul(torch.tanh(self.att_projM(x * master)), self.att_weightM)
        att_m = F.softmax(att_m / self.temp, dim=-2)
        master = (self.proj_with_attM(torch.matmul(att_m.squeeze(-1).unsqueeze(1), x))
                  + self.proj_without_attM(master))
        x = self.proj_with_att(torch.matmul(att.squeeze(-1), x)) + self.proj_without_att(x)
        x = F.selu(_node_bn(self.bn, x), inplace=True)
        return x.narrow(1, 0, n1), x.narrow(1, n1, n2), master


class RefPool(nn.Module):
    def __init__(self, k: float, in_dim: int, p: float):
        super().__init__()
        self.k = k
        self.proj = nn.Linear(in_dim, 1)
        self.drop = nn.Dropout(p) if p > 0 else nn.Identity()

    def forward(self, h: torch.Tensor) -> torch.Tensor:
        scores = torch.sigmoid(self.proj(self.drop(h)))
        _, idx = torch.topk(scores, max(int(h.size(1) * self.k), 1), dim=1)
        return torch.gather(h * scores, 1, idx.expand(-1, -1, h.size(2)))


def reference_sinc_bank(out_channels: int, kernel_size: int, sample_rate: int = 16000) -> torch.Tensor:
    """The authors' fixed filters: mel-spaced edges on a 512-point FFT grid, float32 taps."""
    kernel_size += 1 - kernel_size % 2
    freqs = int(sample_rate / 2) * np.linspace(0, 1, 257)
    mel = 2595 * np.log10(1 + freqs / 700)
    edges = 700 * (10 ** (np.linspace(mel.min(), mel.max(), out_channels + 1) / 2595) - 1)
    taps = torch.arange(-(kernel_size - 1) / 2, (kernel_size - 1) / 2 + 1)
    bank = torch.zeros(out_channels, kernel_size)
    for i in range(out_channels):
        high = (2 * edges[i + 1] / sample_rate) * np.sinc(2 * edges[i + 1] * taps / sample_rate)
        low = (2 * edges[i] / sample_rate) * np.sinc(2 * edges[i] * taps / sample_rate)
        bank[i, :] = torch.Tensor(np.hamming(kernel_size)) * torch.Tensor(high - low)
    return bank


class RefBlock(nn.Module):
    def __init__(self, filts, first: bool = False):
        super().__init__()
        self.first = first
        if not first:
            self.bn1 = nn.BatchNorm2d(filts[0])
        self.conv1 = nn.Conv2d(filts[0], filts[1], (2, 3), padding=(1, 1))
        self.bn2 = nn.BatchNorm2d(filts[1])
        self.conv2 = nn.Conv2d(filts[1], filts[1], (2, 3), padding=(0, 1))
        self.downsample = filts[0] != filts[1]
        if self.downsample:
            self.conv_downsample = nn.Conv2d(filts[0], filts[1], (1, 3), padding=(0, 1))
        self.mp = nn.MaxPool2d((1, 3))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        identity = x
        if not self.first:
            out = F.selu(self.bn1(x), inplace=True)  # computed, then discarded, as in the reference
        out = self.conv1(x)
        out = self.conv2(F.selu(self.bn2(out), inplace=True))
        if self.downsample:
            identity = self.conv_downsample(identity)
        out += identity
        return self.mp(out)


class ReferenceAASIST(nn.Module):
    """The authors' ``Model`` (tensor names included); ``forward`` returns the logits."""

    def __init__(self, args: dict):
        super().__init__()
        filts, gat_dims = args["filts"], args["gat_dims"]
        ratios, temps = args["pool_ratios"], args["temperatures"]
        self.band_pass = reference_sinc_bank(filts[0], args["first_conv"])  # a plain attribute: not state
        self.first_bn = nn.BatchNorm2d(1)
        self.drop = nn.Dropout(0.5, inplace=True)
        self.drop_way = nn.Dropout(0.2, inplace=True)
        self.encoder = nn.Sequential(
            nn.Sequential(RefBlock(filts[1], first=True)), nn.Sequential(RefBlock(filts[2])),
            nn.Sequential(RefBlock(filts[3])), nn.Sequential(RefBlock(filts[4])),
            nn.Sequential(RefBlock(filts[4])), nn.Sequential(RefBlock(filts[4])),
        )
        self.pos_S = nn.Parameter(torch.randn(1, 23, filts[-1][-1]))
        self.master1 = nn.Parameter(torch.randn(1, 1, gat_dims[0]))
        self.master2 = nn.Parameter(torch.randn(1, 1, gat_dims[0]))
        self.GAT_layer_S = RefGAT(filts[-1][-1], gat_dims[0], temps[0])
        self.GAT_layer_T = RefGAT(filts[-1][-1], gat_dims[0], temps[1])
        self.HtrgGAT_layer_ST11 = RefHtrgGAT(gat_dims[0], gat_dims[1], temps[2])
        self.HtrgGAT_layer_ST12 = RefHtrgGAT(gat_dims[1], gat_dims[1], temps[2])
        self.HtrgGAT_layer_ST21 = RefHtrgGAT(gat_dims[0], gat_dims[1], temps[2])
        self.HtrgGAT_layer_ST22 = RefHtrgGAT(gat_dims[1], gat_dims[1], temps[2])
        self.pool_S = RefPool(ratios[0], gat_dims[0], 0.3)
        self.pool_T = RefPool(ratios[1], gat_dims[0], 0.3)
        self.pool_hS1 = RefPool(ratios[2], gat_dims[1], 0.3)
        self.pool_hT1 = RefPool(ratios[2], gat_dims[1], 0.3)
        self.pool_hS2 = RefPool(ratios[2], gat_dims[1], 0.3)
        self.pool_hT2 = RefPool(ratios[2], gat_dims[1], 0.3)
        self.out_layer = nn.Linear(5 * gat_dims[1], 2)

    def _branch(self, gal1, gal2, pool_s, pool_t, out_t, out_s, master):
        t, s, master = gal1(out_t, out_s, master)
        s, t = pool_s(s), pool_t(t)
        t_aug, s_aug, master_aug = gal2(t, s, master)
        return t + t_aug, s + s_aug, master + master_aug

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        bank = self.band_pass.clone().to(x.device).view(self.band_pass.size(0), 1, -1)
        x = F.conv1d(x.unsqueeze(1), bank).unsqueeze(1)
        x = F.max_pool2d(torch.abs(x), (3, 3))
        x = F.selu(self.first_bn(x), inplace=True)
        e = self.encoder(x)
        e_s, _ = torch.max(torch.abs(e), dim=3)
        out_s = self.pool_S(self.GAT_layer_S(e_s.transpose(1, 2) + self.pos_S))
        e_t, _ = torch.max(torch.abs(e), dim=2)
        out_t = self.pool_T(self.GAT_layer_T(e_t.transpose(1, 2)))
        self.master1.expand(x.size(0), -1, -1)  # expanded and unused in the reference
        self.master2.expand(x.size(0), -1, -1)
        t1, s1, m1 = self._branch(self.HtrgGAT_layer_ST11, self.HtrgGAT_layer_ST12, self.pool_hS1, self.pool_hT1,
                                  out_t, out_s, self.master1)
        t2, s2, m2 = self._branch(self.HtrgGAT_layer_ST21, self.HtrgGAT_layer_ST22, self.pool_hS2, self.pool_hT2,
                                  out_t, out_s, self.master2)
        t1, t2, s1, s2 = self.drop_way(t1), self.drop_way(t2), self.drop_way(s1), self.drop_way(s2)
        m1, m2 = self.drop_way(m1), self.drop_way(m2)
        out_t, out_s, master = torch.max(t1, t2), torch.max(s1, s2), torch.max(m1, m2)
        t_max, _ = torch.max(torch.abs(out_t), dim=1)
        s_max, _ = torch.max(torch.abs(out_s), dim=1)
        hidden = torch.cat([t_max, torch.mean(out_t, dim=1), s_max, torch.mean(out_s, dim=1), master.squeeze(1)], 1)
        return self.out_layer(self.drop(hidden))


# --- building and checking --------------------------------------------------------------


def build_pair() -> tuple[nn.Module, nn.Module]:
    """(reference rebuild, modforge aasist + linear) with the same weights."""
    import modforge as mf
    from modforge.components.backbones.aasist import official_aasist_state_dict

    torch.manual_seed(0)
    reference = ReferenceAASIST(CONFIG)
    with torch.no_grad():  # running statistics off their 0/1 start, so eval-mode BN does some work
        for module in reference.modules():
            if isinstance(module, nn.modules.batchnorm._BatchNorm):
                module.running_mean.normal_(0, 0.1)
                module.running_var.uniform_(0.5, 2.0)
    ours = mf.build_model({"backbone": "aasist", "head": "linear"}, in_dim=1, num_classes=2, layout="waveform",
                          input_shape=[SAMPLES])
    ours.load_state_dict(official_aasist_state_dict(reference.state_dict()), strict=True)
    return reference, ours


def authors_inputs() -> dict[str, torch.Tensor]:
    """The two inputs of ``aasist_reference_outputs.json``, rebuilt as it says."""
    t = torch.arange(SAMPLES) / 16000
    noise = torch.randn(SAMPLES, generator=torch.Generator().manual_seed(1))
    tone = 0.3 * torch.sin(2 * math.pi * 150 * t) * (1 + 0.5 * torch.sin(2 * math.pi * 3 * t)) + 0.05 * noise
    return {"randn": torch.randn(2, SAMPLES, generator=torch.Generator().manual_seed(0)), "tone": tone[None]}


def check_rebuild_against_the_authors() -> str:
    """Max |logit difference| of the rebuild with the authors' AASIST.pth vs their recorded logits."""
    if not (WEIGHTS / "AASIST.pth").is_file():
        return f"not checked ({WEIGHTS} absent)"
    recorded = json.loads((WEIGHTS / "aasist_reference_outputs.json").read_text())["models"]["AASIST"]["logits"]
    reference = ReferenceAASIST(CONFIG)
    reference.load_state_dict(torch.load(WEIGHTS / "AASIST.pth", map_location="cpu", weights_only=True), strict=True)
    reference.eval()
    with torch.no_grad():
        worst = max((reference(x) - torch.tensor(recorded[name])).abs().max().item()
                    for name, x in authors_inputs().items())
    return f"{worst:.1e}"


def agreement(reference: ReferenceAASIST, ours: nn.Module) -> tuple[float, float, float]:
    """(max |Δ logits| in eval mode; |Δ loss| and max |Δ gradient| / max |gradient| in
    train mode with the same dropout draws). The rebuild gets modforge's filter bank for
    this (the two banks, computed in float32 and float64, differ by ~1e-7), so that only
    the models' computations are compared."""
    from modforge.components.backbones.aasist import official_aasist_state_dict

    own_bank = reference.band_pass
    reference.band_pass = ours.parts.backbone.front.band_pass.squeeze(1).clone()
    x = torch.randn(2, SAMPLES, generator=torch.Generator().manual_seed(2))
    y = torch.tensor([0, 1])
    with torch.no_grad():
        logits = (reference.eval()(x) - ours.eval()(x)).abs().max().item()
    losses, grads = [], []
    for model in (reference, ours):
        model.train().zero_grad(set_to_none=True)
        torch.manual_seed(3)
        loss = F.cross_entropy(model(x), y)
        loss.backward()
        losses.append(loss.item())
        grads.append({name: p.grad for name, p in model.named_parameters() if p.grad is not None})
        model.zero_grad(set_to_none=True)
    reference.band_pass = own_bank
    state = reference.state_dict()
    rename = dict(zip(state, official_aasist_state_dict(state), strict=True))  # the map keeps the order
    mapped = {rename[k]: g for k, g in grads[0].items()}
    assert set(mapped) == set(grads[1]), "the two models' trained parameters differ"
    scale = max(g.abs().max().item() for g in grads[1].values())
    worst = max((mapped[k] - grads[1][k]).abs().max().item() for k in mapped)
    return logits, abs(losses[0] - losses[1]), worst / scale


# --- timing -------------------------------------------------------------------------------


def _infer(model: nn.Module, x: torch.Tensor):
    def run():
        with torch.no_grad():
            model(x)
    model.eval()
    return run


def _train(model: nn.Module, x: torch.Tensor, y: torch.Tensor):
    opt = torch.optim.Adam([p for p in model.parameters() if p.requires_grad], lr=1e-4, weight_decay=1e-4)

    def run():
        model.train()
        opt.zero_grad(set_to_none=True)
        F.cross_entropy(model(x), y).backward()
        opt.step()
    return run


def side_by_side(calls: dict[str, object], runs: int) -> tuple[dict[str, float], float]:
    """(median seconds per call of each contender, median over the rounds of modforge's
    time / the reference's in that round); the two alternate which goes first (A B B A …)."""
    times = interleaved_times(calls, runs)
    ratios = [ours / ref for ours, ref in zip(times["modforge"], times["reference"], strict=True)]
    return {name: statistics.median(values) for name, values in times.items()}, statistics.median(ratios)


# --- peak memory, one process per model ---------------------------------------------------


def _status_mb(field: str) -> float:
    """A memory figure of this process from /proc/self/status (Linux), in MB."""
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith(field + ":"):
            return int(line.split()[1]) / 1024
    raise RuntimeError(f"no {field} in /proc/self/status: the peak-memory figures need Linux")


def child_peak(which: str, threads: int) -> dict[str, float]:
    import modforge.components.backbones.aasist  # noqa: F401 - both processes import the same modules

    torch.set_num_threads(threads)
    torch.manual_seed(0)
    model = build_pair()[1] if which == "modforge" else ReferenceAASIST(CONFIG)
    x = torch.randn(8, SAMPLES, generator=torch.Generator().manual_seed(4))
    y = torch.randint(0, 2, (8,), generator=torch.Generator().manual_seed(5))
    step = _train(model, x, y)
    before = _status_mb("VmRSS")
    step()
    # VmHWM, not getrusage's ru_maxrss: that one keeps the parent's resident size at fork time
    peak = _status_mb("VmHWM")
    return {"peak": peak, "growth": peak - before}


def peak_memory(threads: int) -> dict[str, dict[str, float]]:
    out = {}
    for which in ("reference", "modforge"):
        out[which] = child_result(__file__, "--threads", str(threads), "--child", which)
    return out


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--runs", type=int, default=3, help="timed calls per model and row (batch 1: 3× as many)")
    parser.add_argument("--threads", type=int, default=1, help="intra-op threads")
    parser.add_argument("--write", action="store_true", help="record the figures in benchmarks/README.md")
    parser.add_argument("--child", choices=("reference", "modforge"), help=argparse.SUPPRESS)
    ns = parser.parse_args()
    if ns.child:
        print(json.dumps(child_peak(ns.child, ns.threads)))
        return 0
    torch.set_num_threads(ns.threads)
    random.seed(0)
    rebuild = check_rebuild_against_the_authors()
    reference, ours = build_pair()
    d_logits, d_loss, d_grad = agreement(reference, ours)
    generator = torch.Generator().manual_seed(6)
    x1, x8 = torch.randn(1, SAMPLES, generator=generator), torch.randn(8, SAMPLES, generator=generator)
    y8 = torch.randint(0, 2, (8,), generator=generator)
    rows = []
    for label, make, x, runs in (("inference, batch 1", _infer, (x1,), 3 * ns.runs),
                                 ("inference, batch 8", _infer, (x8,), ns.runs),
                                 ("training step, batch 8", _train, (x8, y8), ns.runs)):
        medians, ratio = side_by_side({"reference": make(reference, *x), "modforge": make(ours, *x)}, runs)
        rows.append((label, medians["reference"], medians["modforge"], ratio, runs))
    memory = peak_memory(ns.threads)
    worst = max(ratio for *_, ratio, _ in rows)
    mem_ok = memory["modforge"]["peak"] <= memory["reference"]["peak"]
    lines = [
        "| AASIST, 64,600 samples | reference (ms) | modforge (ms) | median paired ratio modforge / reference | "
        "timed calls each |",
        "|---|---|---|---|---|",
        *(f"| {label} | {r * 1e3:,.0f} | {o * 1e3:,.0f} | {q:.3f}× | {n} |" for label, r, o, q, n in rows),
        "",
        "| batch-8 training step, own process | reference | modforge |",
        "|---|---|---|",
        f"| peak RSS (MB) | {memory['reference']['peak']:,.0f} | {memory['modforge']['peak']:,.0f} |",
        f"| growth from before the first step (MB) | {memory['reference']['growth']:,.0f} | "
        f"{memory['modforge']['growth']:,.0f} |",
    ]
    table = (
        "\n".join(lines)
        + "\n\n" + slowest("row, modforge / reference", worst, TARGET)
        + f"{ns.threads} thread(s), medians); peak RSS {'≤' if mem_ok else '>'} the reference's. Same weights in "
        + f"both: eval logits differ by ≤ {d_logits:.1e}, the train-mode loss by {d_loss:.1e}, gradients by ≤ "
        + f"{d_grad:.1e} of their scale; the rebuild with the authors' AASIST.pth vs their recorded logits: "
        + f"{rebuild}.\n"
    )
    from _report import publish

    return publish("aasist", table, ns.write)


if __name__ == "__main__":
    sys.exit(main())
