"""Engine speed: CPU inference latency (batch 1) and throughput (a larger batch) of every
engine against eager, for the MLP on digit vectors, ResNet-18 (CIFAR stem, 3×32×32) and
AASIST on 4 s of 16 kHz audio (64,000 samples; throughput at batch 8, fewer rounds — one
call takes about a second; compiled with static shapes: with dynamic ones torch.compile's
symbolic-shape simplification of AASIST's graph pooling ran over 20 minutes on this CPU, and
with static ones inductor's CPU code generation fails on its graph attention — the compile
engine then warns and runs eager, which is what the AASIST compile row measures).

Method: one process; each model is built once (eval mode) and prepared by every engine
(torch.compile compiles, ONNX exports) before anything is timed; then, per batch size,
every engine is called in turn, round after round (eager, torchscript, compile, onnx,
eager, ...), after 5 untimed warm-up calls each, so drift over time hits all engines alike.
Each figure is the median of the timed calls; ratios are eager's median / the engine's
(> 1: faster than eager). Everything runs on the same number of threads.

    python benchmarks/engines.py [--runs 25] [--threads 1] [--write]
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
import warnings
from pathlib import Path

sys.path.insert(0, str(Path(__file__).parent))

ENGINES = ("eager", "torchscript", "compile", "onnx")
ENGINE_ARGS = {"aasist": {"compile": {"dynamic": False}}}  # per model and engine, beside onnx's threads
MODELS = {  # name: (model config, build arguments, one sample's shape, throughput batch, rounds divisor)
    "mlp": ({"backbone": {"type": "mlp", "args": {"hidden_dims": [256, 256]}}, "head": "linear"},
            {"in_dim": 64, "num_classes": 10}, (64,), 64, 1),
    "resnet18": ({"backbone": {"type": "resnet18", "args": {"stem": "cifar"}}, "head": "linear"},
                 {"in_dim": 3, "num_classes": 10}, (3, 32, 32), 64, 1),
    "aasist": ({"frontend": "raw", "backbone": "aasist", "head": "linear"},
               {"in_dim": 1, "num_classes": 2, "layout": "waveform", "input_shape": (64000,)}, (64000,), 8, 2),
}
TARGET = 1.5  # the best engine vs eager, batch 1, ResNet-18


def prepare_all(model_name: str, threads: int) -> dict:
    import torch

    import modforge as mf
    from modforge.engines import build_engine

    cfg, build, shape, _, _ = MODELS[model_name]
    torch.manual_seed(0)
    model = mf.build_model(cfg, **build).eval()
    example = {"input": torch.randn(2, *shape)}
    runnables = {}
    for name in ENGINES:
        args = dict(ENGINE_ARGS.get(model_name, {}).get(name, {}))
        if name == "onnx":
            args["threads"] = threads
        spec = {"type": name, "args": args}
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            runnables[name] = build_engine(spec).prepare(model, example)
    return runnables


def time_engines(runnables: dict, x, runs: int, warmup: int = 5) -> dict[str, float]:
    import torch

    times: dict[str, list[float]] = {name: [] for name in runnables}
    batch = {"input": x}
    with torch.no_grad():
        for fn in runnables.values():
            for _ in range(warmup):
                fn(batch)
        for _ in range(runs):
            for name, fn in runnables.items():
                start = time.perf_counter()
                fn(batch)
                times[name].append(time.perf_counter() - start)
    return {name: statistics.median(values) for name, values in times.items()}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--runs", type=int, default=25, help="timed calls per engine and batch size (≥ 20)")
    parser.add_argument("--threads", type=int, default=1, help="intra-op threads for every engine")
    parser.add_argument("--write", action="store_true", help="record the figures in benchmarks/README.md")
    ns = parser.parse_args()
    import torch

    torch.set_num_threads(ns.threads)
    lines = [
        "| model | engine | batch 1 latency (ms) | vs eager | throughput (samples/s) at batch | vs eager |",
        "|---|---|---|---|---|---|",
    ]
    best_resnet = 0.0
    for model_name, (_, _, shape, big, divisor) in MODELS.items():
        runnables = prepare_all(model_name, ns.threads)
        generator = torch.Generator().manual_seed(1)
        runs, warmup = max(10, ns.runs // divisor), max(2, 5 // divisor)
        one = time_engines(runnables, torch.randn(1, *shape, generator=generator), runs, warmup)
        many = time_engines(runnables, torch.randn(big, *shape, generator=generator), runs, warmup)
        for name in ENGINES:
            speedup1, speedup_big = one["eager"] / one[name], many["eager"] / many[name]
            lines.append(
                f"| {model_name} | {name} | {one[name] * 1e3:.3f} | {speedup1:.2f}× | {big / many[name]:,.1f} at "
                f"{big} | {speedup_big:.2f}× |"
            )
            if model_name == "resnet18" and name != "eager":
                best_resnet = max(best_resnet, speedup1)
    verdict = "meets" if best_resnet >= TARGET else "misses"
    table = (
        "\n".join(lines)
        + f"\n\n**Best engine vs eager, ResNet-18, batch 1: {best_resnet:.2f}×** ({verdict} the ≥ {TARGET}× target; "
        + f"{ns.threads} thread(s), medians of {ns.runs} timed calls)\n"
    )
    from _report import publish

    return publish("engines", table, ns.write)


if __name__ == "__main__":
    sys.exit(main())
