"""Multi-process training on torch.distributed (gloo on the CPU, launched by torchrun): the
sharded resumable sampler, DDP gradient equivalence (with and without accumulation),
metrics combined from sums and counts, sharded evaluation with BatchNorm. The command-line
runs are in test_distributed_runs.py."""

from __future__ import annotations

import collections

import pytest
import torch

from distributed_helpers import WORKER, torchrun
from modforge.data.loader import ResumableRandomSampler, ShardedSequentialSampler


# ------------------------------------------------------------------ samplers
def _shards(n: int, world: int, seed: int = 3, skip: int = 0) -> list[list[int]]:
    shards = []
    for rank in range(world):
        sampler = ResumableRandomSampler(n, torch.Generator().manual_seed(seed), world, rank)
        sampler.skip_next(skip)
        assert len(sampler) == len(order := list(sampler))
        shards.append(order)
    return shards


def test_shards_are_disjoint_and_cover_the_epoch_with_head_padding():
    full = _shards(11, 1)[0]
    assert sorted(full) == list(range(11))
    shards = _shards(11, 3)  # 11 → padded to 12: one sample of the permutation's head read twice
    assert [len(s) for s in shards] == [4, 4, 4]
    assert sorted(sum(shards, [])) == sorted(full + full[:1])
    assert shards[1] == (full + full[:1])[1::3]


def test_skipping_whole_epoch_samples_continues_each_shard_exactly():
    batch, world, done = 2, 2, 3  # three batches of two per process consumed: 12 samples of the epoch
    for rank, (whole, rest) in enumerate(zip(_shards(29, world), _shards(29, world, skip=done * batch * world),
                                             strict=True)):
        assert rest == whole[done * batch :], rank
    # the same checkpoint resumed by three or four processes: every remaining sample of the epoch,
    # plus padding to a multiple of the new count (the permutation's head, as DistributedSampler
    # pads), in shards of one length — DDP needs every process to take the same number of steps
    full = _shards(29, 1)[0]
    for world, padding in ((3, 1), (4, 3)):
        shards = _shards(29, world, skip=12)
        assert len({len(s) for s in shards}) == 1, [len(s) for s in shards]
        assert sorted(sum(shards, [])) == sorted(full[12:] + full[:padding])


def test_shards_stay_equal_for_any_size_skip_and_process_count():
    for n in (1, 2, 7, 30, 31):
        for world in (1, 2, 3, 4):
            for skip in range(0, n + 2):
                lengths = [len(s) for s in _shards(n, world, skip=skip)]
                assert len(set(lengths)) == 1 and lengths[0] == -(-max(0, n - skip) // world), (n, world, skip)


def test_evaluation_shards_read_every_sample_once():
    shards = [list(ShardedSequentialSampler(10, 3, r)) for r in range(3)]
    assert shards == [[0, 3, 6, 9], [1, 4, 7], [2, 5, 8]]
    with pytest.raises(ValueError, match="rank 3 is not one of 3 processes"):
        ShardedSequentialSampler(10, 3, 3)


def test_collected_shards_are_put_back_in_data_order():
    from modforge.train.trainer_evaluation import _interleave

    data = torch.arange(10)
    assert torch.equal(_interleave([data[r::3] for r in range(3)]), data)


# --------------------------------------------------------------- processes
TWO_PROCESS_MODES = ("step", "accumulate", "bf16-true", "metrics", "evaluate", "buckets")
ONE_PROCESS_MODES = ("step", "accumulate", "bf16-true", "metrics")  # what the 2-process results are compared with


def _write_wavs(wavs) -> None:
    """Whole files of different lengths, for the length-bucket check."""
    import numpy as np
    import soundfile as sf

    wavs.mkdir()
    rng = np.random.default_rng(0)
    for i, n in enumerate([2400, 8000, 5123, 16000, 3001, 8000, 12345, 700, 9999, 4000, 6000]):
        sf.write(wavs / f"u{i}.wav", (0.3 * rng.standard_normal(n)).clip(-1, 1).astype(np.float32), 16000,
                 subtype="FLOAT")  # fmt: skip


@pytest.fixture(scope="module")
def runs(tmp_path_factory):
    """The worker's results: every mode in one torchrun launch of 2 processes (``MODE-two.pt``; the
    launch's result, for the tests to check its exit status), and the modes compared with one process
    computed here, in this process, by the worker's own functions, as its run without torchrun computes
    them (a plain process would only add seconds of imports: one process is no multi-process check)."""
    folder = tmp_path_factory.mktemp("distributed")
    _write_wavs(folder / "wavs")  # the buckets mode reads them beside its output
    two = torchrun(2, str(WORKER), *[a for m in TWO_PROCESS_MODES for a in (m, str(folder / f"{m}-two.pt"))],
                   cwd=folder)  # fmt: skip
    worker = _worker()
    alone = {"step": worker.one_step, "accumulate": lambda: worker.one_step(2),
             "bf16-true": lambda: worker.one_step(precision="bf16-true"), "metrics": worker.synced_metrics}
    one = {mode: alone[mode]() for mode in ONE_PROCESS_MODES}
    return folder, two, one


def _results(runs, mode: str, *, single: bool = False):
    folder, two, one = runs
    assert two.returncode == 0, two.stderr
    if not single:
        return torch.load(folder / f"{mode}-two.pt")
    return torch.load(folder / f"{mode}-two.pt"), one[mode]


@pytest.mark.slow
@pytest.mark.parametrize("mode", ["step", "accumulate", "bf16-true"])
def test_one_ddp_step_of_two_processes_equals_one_step_on_the_whole_batch(runs, mode):
    # accumulate: 2 micro-batches, DDP syncs only the last
    # bf16-true: 16-bit weights and float32 norms reduced in their own dtypes, within bf16's rounding (2^-8)
    two, one = _results(runs, mode, single=True)
    start = _worker().fixed_model("layer" if mode == "bf16-true" else "none").state_dict()
    close = {"rtol": 1e-2, "atol": 1e-2} if mode == "bf16-true" else {"rtol": 1e-5, "atol": 1e-6}
    for key in one:
        assert two[key].dtype == one[key].dtype, key
        torch.testing.assert_close(two[key], one[key], **close)
        assert not torch.allclose(one[key].float(), start[key].float()), f"{key} did not move: the step did nothing"
    if mode == "bf16-true":
        assert {v.dtype for k, v in one.items() if v.is_floating_point()} == {torch.bfloat16, torch.float32}


def _worker():
    import importlib.util

    spec = importlib.util.spec_from_file_location("mf_test_distributed_worker", WORKER)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


@pytest.mark.slow
def test_metrics_of_two_processes_equal_one_process_on_all_the_data(runs):
    two, one = _results(runs, "metrics", single=True)
    assert two["confusion_matrix"] == one["confusion_matrix"] and sum(map(sum, one["confusion_matrix"])) == 40
    for name in ("accuracy", "macro_f1", "eer", "min_dcf"):
        assert two[name] == pytest.approx(one[name]), name
    assert two["loss"] == pytest.approx(one["loss"] + 0.5)  # 20 samples at loss l, 20 at l + 1


@pytest.mark.slow
def test_sharded_evaluation_with_batch_norm_equals_one_process_on_rank_0s_model(runs):
    two = _results(runs, "evaluate")
    worker = _worker()
    model = worker.fixed_model(norm="batch")
    model.load_state_dict(two["state"])  # rank 0's weights and BatchNorm statistics
    import modforge as mf
    from modforge.data import LoaderSettings, make_loader
    from modforge.train.trainer import Trainer

    metrics = {name: mf.METRICS.build(name, path=name, num_classes=4) for name in ("accuracy", "loss", "macro_f1")}
    trainer = Trainer(model, torch.optim.SGD(model.parameters(), lr=0.0), metrics=metrics, async_checkpoints=False)
    loader = make_loader(worker.evaluation_data(), LoaderSettings(batch_size=4), train=False)
    assert two["row"] == pytest.approx(trainer.evaluate(loader, "val"))
    one = trainer.collect(loader, ("logits", "label"))
    assert torch.equal(two["collected"]["label"], one["label"])  # all 30 rows, back in order
    torch.testing.assert_close(two["collected"]["logits"], one["logits"])


@pytest.mark.slow
def test_length_buckets_shared_among_processes_score_each_file_as_alone(runs):
    """Whole files of different lengths scored in length buckets by two processes (each taking
    whole batches) give every file once, with the score it gets scored alone, to 1e-5."""
    two = _results(runs, "buckets")
    wavs = runs[0] / "wavs"
    worker = _worker()
    assert sorted(two["index"].tolist()) == list(range(11))  # every file once
    assert two["all_batches"] > 2 and two["batches"] == (two["all_batches"] + 1) // 2  # rank 0: batches 0, 2, 4…
    data = worker.audio_eval_split(wavs)
    model = worker.bucket_model()
    with torch.no_grad():
        alone = torch.tensor([float(model({"input": data[i]["input"][None]})["score"]) for i in range(len(data))])
    got = torch.empty(11)
    got[two["index"]] = two["score"].float()
    assert torch.allclose(got, alone, atol=1e-5, rtol=0), (got - alone).abs().max()


def test_a_step_schedule_refuses_another_number_of_processes():
    import modforge as mf
    from modforge.train.trainer import Trainer

    model = _worker().fixed_model()
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    schedule = torch.optim.lr_scheduler.OneCycleLR(opt, max_lr=0.1, total_steps=100)
    trainer = Trainer(model, opt, scheduler=schedule, scheduler_interval="step", async_checkpoints=False)
    payload = {**trainer.checkpoint_payload(), "world_size": 2}
    with pytest.raises(mf.ModforgeError, match="trained by 2 process.*interval: step.*Resume with 2 process"):
        trainer.load_state(payload)
    epochly = Trainer(model, opt, scheduler=torch.optim.lr_scheduler.StepLR(opt, 1), async_checkpoints=False)
    epochly.load_state({**epochly.checkpoint_payload(), "world_size": 2})  # epoch schedules carry over


def test_outputs_with_several_rows_per_sample_are_joined_in_rank_order():
    from modforge.train.trainer_evaluation import _merge_shards

    one_row_each = [torch.tensor([0, 2, 4]), torch.tensor([1, 3])]
    assert _merge_shards(one_row_each, [3, 2]).tolist() == [0, 1, 2, 3, 4]  # back in data order
    windows = [torch.tensor([0, 0, 2, 2, 2]), torch.tensor([1])]  # audio windows: rows carry their file's index
    assert _merge_shards(windows, [2, 1]).tolist() == [0, 0, 2, 2, 2, 1]


Pair = collections.namedtuple("Pair", "a b")  # module level: what all_gather_object pickles must be importable


def test_gathered_objects_travel_as_arrays_and_come_back_as_tensors():
    import pickle

    from modforge.train.distributed import _as_arrays, _as_tensors

    sent = {"x": torch.arange(6).reshape(2, 3).t(), "flags": torch.tensor([True, False]), "zero": torch.tensor(3.5),
            "grad": torch.ones(2, requires_grad=True), "half": torch.ones(2, dtype=torch.bfloat16),
            "pair": Pair(1, torch.ones(1)), "list": [torch.zeros(1, dtype=torch.uint8), "text", None]}
    back = _as_tensors(pickle.loads(pickle.dumps(_as_arrays(sent))))
    for key in ("x", "flags", "zero", "half"):
        assert torch.equal(back[key], sent[key]) and back[key].dtype == sent[key].dtype, key
    assert back["grad"].requires_grad and isinstance(back["pair"], Pair) and back["list"][1:] == ["text", None]
    assert torch.equal(back["list"][0], sent["list"][0])


def _pretend_rank(trainer, rank: int, world: int) -> None:
    """Make a single-process trainer take the multi-process code paths (collectives are no-ops
    outside a process group)."""
    trainer.rank, trainer.world_size = rank, world


def test_resuming_with_another_process_count_gives_each_process_its_own_randomness():
    from modforge.train.trainer import Trainer

    model = _worker().fixed_model()
    trainer = Trainer(model, torch.optim.SGD(model.parameters(), lr=0.1), async_checkpoints=False)
    payload = trainer.checkpoint_payload()  # one process
    _pretend_rank(trainer, 0, 2)
    trainer.load_state(payload)
    first = torch.rand(3)
    _pretend_rank(trainer, 1, 2)
    trainer.load_state(payload)
    second = torch.rand(3)
    trainer.load_state(payload)
    assert not torch.equal(first, second)  # rank 1 does not repeat rank 0's draws
    trainer.load_state(payload)
    assert torch.equal(torch.rand(3), second)  # and its stream is a function of the checkpoint


def test_a_new_checkpoint_never_reuses_the_last_loss_reduction():
    from modforge.train.trainer import Trainer

    model = _worker().fixed_model()
    trainer = Trainer(model, torch.optim.SGD(model.parameters(), lr=0.1), async_checkpoints=False)
    payload = trainer.checkpoint_payload()
    _pretend_rank(trainer, 0, 2)
    trainer.load_state({**payload, "epoch_losses": torch.tensor([1.0]), "epoch_sizes": [4]})
    assert trainer._mean_loss() == 1.0
    trainer.load_state({**payload, "epoch_losses": torch.tensor([5.0]), "epoch_sizes": [4]})
    assert trainer._mean_loss() == 5.0  # the same (epoch, step, batches) key, other losses
