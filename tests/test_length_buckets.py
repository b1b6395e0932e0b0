"""Whole-utterance scoring: length-bucketed evaluation batches, dynamic training batches, and
the equivalence of padded, masked batches with scoring each file alone."""

from __future__ import annotations

import logging

import numpy as np
import pytest
import soundfile as sf
import torch

from modforge.data.audio.dataset import AudioDataset, AudioSettings
from modforge.data.audio.protocols import Utterance
from modforge.data.loader import (
    DynamicBatchSampler,
    EpochTaggedBatches,
    LengthBucketBatchSampler,
    LoaderSettings,
    ResumableRandomSampler,
    make_loader,
)
from modforge.model.builder import build_model

RATE = 16000
LENGTHS = [2400, 8000, 5123, 16000, 3001, 8000, 12345, 700, 9999]


@pytest.fixture(scope="module")
def files(tmp_path_factory):
    root = tmp_path_factory.mktemp("whole")
    rng = np.random.default_rng(0)
    utts = []
    for i, n in enumerate(LENGTHS):
        path = root / f"u{i}.wav"
        sf.write(path, (0.3 * rng.standard_normal(n)).clip(-1, 1).astype(np.float32), RATE, subtype="FLOAT")
        utts.append(Utterance(f"u{i}", path, i % 2, "-" if i % 2 else "A01", "spk", f"list:{i + 1}"))
    return utts


def eval_split(utts, mode="full"):
    return AudioDataset(utts, AudioSettings(sample_rate=RATE, seconds=0.5, eval_mode=mode), train=False)


# ------------------------------------------------------------------ samplers
def test_length_buckets_cover_every_sample_once_under_the_cap():
    lengths = [5, 17, 3, 17, 9, 40, 1, 8, 8, 12]
    sampler = LengthBucketBatchSampler(lengths, max_samples=34)
    batches = list(sampler)
    assert sorted(i for b in batches for i in b) == list(range(len(lengths)))
    assert len(sampler) == len(batches)
    for batch in batches:
        longest = max(lengths[i] for i in batch)
        assert len(batch) == 1 or len(batch) * longest <= 34
    assert batches[0] == [5]  # longer than the cap: a batch of its own, first (longest first)
    assert batches[1] == [1, 3]  # equal lengths by index
    assert batches == list(LengthBucketBatchSampler(lengths, max_samples=34))  # deterministic
    with pytest.raises(ValueError):
        LengthBucketBatchSampler(lengths, max_samples=0)


def test_dynamic_batches_follow_the_resumable_order_and_resume_exactly():
    n, crop = 23, 100
    dyn = DynamicBatchSampler(ResumableRandomSampler(n, torch.Generator().manual_seed(3)), crop, 450, False)
    ref = EpochTaggedBatches(ResumableRandomSampler(n, torch.Generator().manual_seed(3)), 4, False)
    assert dyn.batch_size == 4 and list(dyn) == list(ref)  # 450 // 100 rows, the same order
    # resume after 2 batches: skip 2 × 4 samples of the same epoch
    g = torch.Generator().manual_seed(3)
    state = g.get_state()
    full = list(DynamicBatchSampler(ResumableRandomSampler(n, g), crop, 450, False))
    g.set_state(state)
    sampler = ResumableRandomSampler(n, g)
    sampler.skip_next(2 * 4)
    assert list(DynamicBatchSampler(sampler, crop, 450, False)) == full[2:]


def test_max_samples_settings(files):
    with pytest.raises(ValueError, match="max_samples"):
        LoaderSettings(max_samples=0)
    with pytest.raises(ValueError, match="eval_max_samples"):
        LoaderSettings(eval_max_samples=0)
    train = AudioDataset(files, AudioSettings(sample_rate=RATE, seconds=0.25), train=True)
    loader = make_loader(train, LoaderSettings(max_samples=4000 * 3 + 5), train=True, generator=torch.Generator())
    assert isinstance(loader.batch_sampler, DynamicBatchSampler) and loader.batch_sampler.batch_size == 3
    assert [b["input"].shape for b in loader][0] == (3, 4000)


def test_item_lengths_read_from_headers(files):
    assert eval_split(files).item_lengths() == LENGTHS
    assert eval_split(files, "fixed").item_lengths() == [8000] * len(LENGTHS)


# --------------------------------------------------------------- equivalence
MODELS = {
    "lfcc_stats_mlp": {  # configs/spoofing/lfcc_mlp.yaml's model
        "stages": [
            {"name": "frontend", "type": "lfcc", "args": {"n_coeffs": 20, "deltas": True}},
            {"name": "pool", "kind": "neck", "type": "stats_pool"},
            {"name": "backbone", "type": "mlp", "args": {"hidden_dims": [64, 64], "norm": "batch"}},
            {"name": "head", "type": "linear"},
        ],
        "losses": ["cross_entropy"],
    },
    "lfcc_attention_pool": {
        "frontend": {"type": "lfcc", "args": {"n_coeffs": 20}},
        "backbone": {"type": "attention_pool_mlp", "args": {"attention_dim": 32, "embed_dim": 32}},
        "head": "linear",
        "losses": ["cross_entropy"],
    },
    "raw_stats_pool": {  # raw (rms level, pre-emphasis) → [B, 1, T] → stats_pool over samples
        "stages": [
            {"name": "frontend", "type": "raw", "args": {"normalize": "rms", "pre_emphasis": 0.97}},
            {"name": "pool", "kind": "neck", "type": "stats_pool"},
            {"name": "head", "type": "linear"},
        ],
        "losses": ["cross_entropy"],
    },
}


def build(section):
    torch.manual_seed(0)
    model = build_model(section, in_dim=1, num_classes=2, sample_rate=RATE, scores=True)
    return model.eval()


def scores(model, loader):
    out = {}
    with torch.no_grad():
        for batch in loader:
            result = model(batch)
            for i, s in zip(batch["index"].tolist(), result["score"].tolist(), strict=True):
                assert i not in out
                out[i] = s
    return torch.tensor([out[i] for i in range(len(out))], dtype=torch.float64)


@pytest.mark.parametrize("name", sorted(MODELS))
def test_length_bucketing_equivalence(files, name):
    """Whole files scored in length-bucketed, padded batches (with masks) equal each file
    scored alone, to 1e-5."""
    model = build(MODELS[name])
    assert model.mask_aware
    data = eval_split(files)
    alone_loader = make_loader(data, LoaderSettings(), train=False)  # 'full': one file at a time
    assert len(alone_loader) == len(files)
    bucketed = make_loader(data, LoaderSettings(eval_max_samples=3 * 9000), train=False, mask_aware=True)
    assert isinstance(bucketed.batch_sampler, LengthBucketBatchSampler)
    assert max(len(b) for b in bucketed.batch_sampler) > 1 and len(bucketed) < len(files)
    alone, batched = scores(model, alone_loader), scores(model, bucketed)
    with torch.no_grad():  # and the file alone as a plain tensor, no mask at all
        plain = torch.tensor([float(model({"input": data[i]["input"][None]})["score"]) for i in range(len(files))],
                             dtype=torch.float64)  # fmt: skip
    assert torch.allclose(batched, alone, atol=1e-5, rtol=0), (batched - alone).abs().max()
    assert torch.allclose(batched, plain, atol=1e-5, rtol=0), (batched - plain).abs().max()


def test_padding_without_masks_would_change_scores(files):
    """The check is not vacuous: the same padded batches scored without their masks differ."""
    model = build(MODELS["lfcc_stats_mlp"])
    data = eval_split(files)
    bucketed = make_loader(data, LoaderSettings(eval_max_samples=3 * 9000), train=False, mask_aware=True)
    alone = scores(model, make_loader(data, LoaderSettings(), train=False))
    out = {}
    with torch.no_grad():
        for batch in bucketed:
            batch = {k: v for k, v in batch.items() if k not in ("mask", "length")}
            for i, s in zip(batch["index"].tolist(), model(batch)["score"].tolist(), strict=True):
                out[i] = s
    unmasked = torch.tensor([out[i] for i in range(len(out))], dtype=torch.float64)
    assert (unmasked - alone).abs().max() > 1e-3


def test_models_that_do_not_handle_padding_score_files_one_at_a_time(files, caplog):
    model = build({"frontend": "lfcc", "backbone": "lcnn", "head": "linear", "losses": ["cross_entropy"]})
    assert not model.mask_aware
    data = eval_split(files)
    with caplog.at_level(logging.INFO, logger="modforge.data.loader"):
        loader = make_loader(data, LoaderSettings(eval_max_samples=10**6), train=False, mask_aware=model.mask_aware)
    assert len(loader) == len(files) and "does not handle padding masks" in caplog.text
    reflect = build({"frontend": {"type": "lfcc", "args": {"pad_mode": "reflect"}}, "backbone": "attention_pool_mlp",
                     "head": "linear"})  # fmt: skip
    assert not reflect.mask_aware  # reflected frame edges cannot be matched in a padded row


# ------------------------------------------------------------------ end to end
def test_train_with_max_samples_and_test_whole_files_in_buckets(cli, tmp_path, caplog):
    """A real spoofing config: training batches by total samples, validation and test on whole
    files of different lengths in buckets (data.eval_max_samples); `modforge test` one file at a
    time writes the same scores to 1e-5."""
    from pathlib import Path

    from modforge.data.audio.spoof_corpus import make_spoof_corpus
    from modforge.tasks.spoofing.scores import read_score_file

    corpus = tmp_path / "spoof"
    make_spoof_corpus(corpus, utts=40, seed=0, duration=0.5)
    rng = np.random.default_rng(1)
    for line in (corpus / "protocols" / "eval.txt").read_text().splitlines():
        if line.strip():
            path = corpus / "wav" / f"{line.split()[1]}.wav"
            wave, rate = sf.read(path, dtype="float32")
            sf.write(path, wave[: int(rng.integers(len(wave) // 3, len(wave) + 1))], rate, subtype="FLOAT")
    config = str(Path(__file__).resolve().parents[1] / "configs" / "spoofing" / "lfcc_mlp.yaml")
    common = [f"data.args.root={corpus}", "data.args.audio.seconds=0.25", "data.args.audio.eval_mode=full",
              "train.num_threads=1"]  # fmt: skip
    with caplog.at_level(logging.INFO, logger="modforge.data.loader"):
        res = cli("train", config, *common, "train.max_epochs=1", "data.max_samples=40000",
                  "data.eval_max_samples=30000", "--run-dir", "run")  # fmt: skip
    assert res.code == 0, res.err
    assert "length-bucketed batches" in caplog.text + res.err, res.err  # validation and test
    evaluations = tmp_path / "run" / "evaluations"
    bucketed = read_score_file(tmp_path / "run" / "scores.txt")  # the run's own test: bucketed
    caplog.clear()
    with caplog.at_level(logging.INFO, logger="modforge.data.loader"):
        res = cli("test", "run", "data.eval_max_samples=null")
    assert res.code == 0, res.err
    assert "length-bucketed batches" not in caplog.text + res.err
    (path,) = evaluations.glob("best-test-*-scores.txt")
    alone = read_score_file(path)
    assert bucketed.utt_ids == alone.utt_ids
    assert np.abs(np.asarray(bucketed.scores) - np.asarray(alone.scores)).max() <= 1e-5
    bad = cli("train", config, *common, "data.max_samples=0", "--run-dir", "bad")
    assert bad.code == 2 and "max_samples" in bad.err
