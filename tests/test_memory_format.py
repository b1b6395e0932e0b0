"""The ``memory_format`` engine option: channels-last training follows contiguous training within
float rounding, keeps the parameters the optimizer holds, resumes bitwise, and a wrong value is
one clear error."""

from __future__ import annotations

import pytest
import torch

import modforge as mf
from modforge.core.errors import ModforgeError
from modforge.data import LoaderSettings, make_loader
from modforge.engines import build_engine
from modforge.train.trainer import Trainer


def conv_net() -> torch.nn.Module:
    torch.manual_seed(0)
    return mf.build_model(
        {"backbone": {"type": "resnet18", "args": {"stem": "cifar", "width": 0.125}}, "head": "linear",
         "losses": ["cross_entropy"]},
        in_dim=1, num_classes=10, layout="image",
    )  # fmt: skip


def train(memory_format: str, folder=None, resume=None, epochs: int = 2, lr: float = 0.05):
    splits = mf.DATASETS.build({"type": "digits", "args": {"as_image": True}}, seed=0)
    model = conv_net()
    params = list(model.parameters())
    generator = torch.Generator().manual_seed(1)
    loader = make_loader(splits.train, LoaderSettings(batch_size=64), train=True, generator=generator)
    callbacks = [mf.CALLBACKS.build({"type": "checkpoint", "args": {"every_n_steps": 5}})] if folder else []
    trainer = Trainer(model, torch.optim.SGD(model.parameters(), lr=lr, momentum=0.9), max_epochs=epochs,
                      engine=build_engine({"type": "eager", "args": {"memory_format": memory_format}}),
                      run_dir=folder, callbacks=callbacks)  # fmt: skip
    trainer.fit(loader, resume=resume)
    assert all(a is b for a, b in zip(params, model.parameters(), strict=True))  # the optimizer's own tensors
    return [row["train_loss"] for row in trainer.history], model


def test_channels_last_computes_what_contiguous_does_and_lays_the_weights_out_nhwc():
    splits = mf.DATASETS.build({"type": "digits", "args": {"as_image": True}}, seed=0)
    loader = make_loader(splits.train, LoaderSettings(batch_size=64), train=True, generator=torch.Generator().manual_seed(1))
    batch = next(iter(loader))
    ref, model = conv_net().train(), conv_net().train()
    build_engine({"type": "eager", "args": {"memory_format": "channels_last"}}).prepare(model, train=True)
    convs = [p for p in model.parameters() if p.dim() == 4]
    assert convs and all(p.is_contiguous(memory_format=torch.channels_last) for p in convs)
    assert any(not p.is_contiguous() for p in convs)  # 1×1 kernels and one input channel look the same either way
    assert all(p.is_contiguous() for p in ref.parameters())
    want, got = ref(batch), model(batch)
    want["loss"].backward()
    got["loss"].backward()
    # one step's loss and gradients agree to float rounding (a whole run amplifies rounding, as any reordering does)
    assert float(got["loss"]) == pytest.approx(float(want["loss"]), rel=1e-5)
    for a, b in zip(ref.parameters(), model.parameters(), strict=True):
        assert torch.allclose(a.grad, b.grad, rtol=1e-3, atol=1e-5)
    _, trained = train("channels_last", epochs=1, lr=0.005)  # the trainer arranges the model it trains
    assert all(p.is_contiguous(memory_format=torch.channels_last) for p in trained.parameters() if p.dim() == 4)


def test_a_channels_last_run_resumed_mid_epoch_ends_bitwise_like_an_uninterrupted_one(tmp_path):
    from modforge.train.checkpoint import list_checkpoints, load_checkpoint

    ref, ref_model = train("channels_last", tmp_path / "full")
    middle = [p for p in list_checkpoints(tmp_path / "full" / "checkpoints")
              if load_checkpoint(p)["batch_in_epoch"] > 0][-1]  # fmt: skip
    got, model = train("channels_last", tmp_path / "resumed", resume=load_checkpoint(middle))
    assert got == ref
    assert all(torch.equal(a, b) for a, b in zip(model.state_dict().values(), ref_model.state_dict().values(), strict=True))


def test_an_unknown_memory_format_is_one_clear_error():
    with pytest.raises(ModforgeError, match="memory_format"):
        build_engine({"type": "eager", "args": {"memory_format": "nhwc"}})
