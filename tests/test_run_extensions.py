"""The run-extension contract (:mod:`modforge.train.extension`): the hooks run where and in the order
documented, a run's loss gains the terms an extension adds (logged as columns), checkpoints carry an
extension's state under its own name, and refusals are generated from what each extension declares
— for the built-in ones (ema, qat, distill) and for a user's own."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch
from torch import nn

from modforge.core.errors import ConfigError
from modforge.core.registries import EXTENSIONS
from modforge.train.callbacks.base import Callback
from modforge.train.extension import RunExtension, refusal
from modforge.train.trainer import Trainer

DIGITS = str(Path(__file__).parents[1] / "configs" / "digits.yaml")


class _Net(nn.Module):
    def __init__(self):
        super().__init__()
        self.fc = nn.Linear(4, 3)

    def forward(self, batch):
        logits = self.fc(batch["input"])
        out = {"logits": logits}
        if "label" in batch:
            out["loss"] = nn.functional.cross_entropy(logits, batch["label"])
        return out


def _batches(n=3):
    g = torch.Generator().manual_seed(0)
    return [{"input": torch.randn(5, 4, generator=g), "label": torch.randint(0, 3, (5,), generator=g)} for _ in range(n)]


class _Recorder(RunExtension):
    """Notes every hook it hears, with what the trainer looked like then."""

    def __init__(self, log: list, tag: str, order: int = 50):
        self.log, self.tag, self.order = log, tag, order
        self.name = tag

    def setup(self, trainer, context):
        self.log.append((self.tag, "setup"))

    def before_optimizer_step(self, trainer):
        self.log.append((self.tag, "before", trainer.global_step))

    def after_optimizer_step(self, trainer):
        self.log.append((self.tag, "after", trainer.global_step))

    def on_train_epoch_end(self, trainer):
        self.log.append((self.tag, "trained", len(trainer.history)))

    def on_epoch_end(self, trainer, row):
        self.log.append((self.tag, "epoch_end", len(trainer.history)))

    def loss(self, trainer, batch, out, loss):
        term = out["logits"].pow(2).mean()
        return loss + 0.5 * term, {f"{self.tag}_loss": term}

    def state_dict(self):
        return {"heard": len(self.log)}


class _Watcher(Callback):
    order = 10

    def __init__(self, log):
        self.log = log

    def on_epoch_end(self, trainer, row):
        self.log.append(("watcher", "epoch_end", len(trainer.history)))


def test_the_hooks_run_in_order_among_the_callbacks_and_the_loss_gains_the_terms():
    log: list = []
    torch.manual_seed(0)
    net = _Net()
    late, early = _Recorder(log, "late", order=20), _Recorder(log, "early", order=5)
    trainer = Trainer(net, torch.optim.SGD(net.parameters(), lr=0.1), extensions=[late, early],
                      callbacks=[_Watcher(log)], max_epochs=1, async_checkpoints=False)  # fmt: skip
    assert log == [("early", "setup"), ("late", "setup")]  # set up by the trainer, in their order
    batch = _batches(1)[0]
    loss = trainer.training_step(batch)
    out = net(batch)
    term = out["logits"].pow(2).mean()
    torch.testing.assert_close(loss, out["loss"] + 0.5 * term + 0.5 * term)  # both extensions' terms
    log.clear()
    trainer.fit(_batches(2))
    assert log[:4] == [("early", "before", 0), ("late", "before", 0), ("early", "after", 1), ("late", "after", 1)]
    trained = [entry for entry in log if entry[1] == "trained"]
    assert trained == [("early", "trained", 0), ("late", "trained", 0)]  # before validation: no row yet
    ends = [who for who, hook, *_ in log if hook == "epoch_end"]
    assert ends == ["early", "watcher", "late"]  # orders 5, 10, 20 at a callback hook
    assert {"train_early_loss", "train_late_loss"} <= set(trainer.history[0])  # the named terms, as columns


def test_an_extensions_state_is_in_every_checkpoint_under_its_own_name_only():
    log: list = []
    net = _Net()
    trainer = Trainer(net, torch.optim.SGD(net.parameters(), lr=0.1), extensions=[_Recorder(log, "mine")],
                      async_checkpoints=False)  # fmt: skip
    payload = trainer.checkpoint_payload()
    assert payload["mine"] == {"heard": 1} and "_Recorder.0" not in payload["callbacks"]
    assert payload["evaluated_weights"] is None

    class Greedy(_Recorder):
        def checkpoint_entries(self):
            return {"model": {}}  # would overwrite the trained weights

    trainer = Trainer(net, torch.optim.SGD(net.parameters(), lr=0.1), extensions=[Greedy(log, "greedy")])
    with pytest.raises(Exception, match="its entries must be named 'greedy' or 'greedy_…'"):
        trainer.checkpoint_payload()


def test_refusals_are_generated_from_the_declarations():
    class Solo(RunExtension):
        conflicts = {"ema": "both would swap weights in for evaluation"}
        engines = ("eager",)
        engine_reason = "it reads hooks"

    ema = EXTENSIONS.get("ema")
    assert refusal([Solo, ema], names=["solo", "ema"]) == (
        "train.solo cannot be combined with train.ema: both would swap weights in for evaluation", "train.solo")
    message, key = refusal([Solo], names=["solo"], engine="torchscript")
    assert key == "train.solo" and "trains with the eager engine, not 'torchscript': it reads hooks" in message

    class OwnStep(Trainer):
        def training_step(self, batch):
            return super().training_step(batch)

    message, key = refusal([EXTENSIONS.get("distill")], names=["distill"], trainer_class=OwnStep)
    assert key == "train.distill" and "needs the standard training step" in message and "OwnStep" in message
    assert refusal([ema], names=["ema"], engine="torchscript", trainer_class=OwnStep) is None

    net = _Net()
    with pytest.raises(ConfigError, match="train.loud trains with the eager engine"):
        class Loud(_Recorder):
            engines = ("eager",)

        Trainer(net, torch.optim.SGD(net.parameters(), lr=0.1), extensions=[Loud([], "loud")],
                engine=_Named("torchscript"))  # fmt: skip


class _Named:
    """An engine stand-in that only has a name (the refusal is decided before anything runs)."""

    def __init__(self, name):
        from modforge.engines.eager import Eager

        self._eager, self.name = Eager(), name

    def __getattr__(self, attr):
        return getattr(self._eager, attr)


def test_the_builtins_are_listed_and_a_users_extension_is_configured_under_train(cli, write):
    listed = cli("list", "extension")
    assert listed.code == 0 and all(name in listed.out for name in ("ema", "qat", "distill"))
    plugin = write("counting.py", '''
        from modforge.core.registries import register_extension
        from modforge.train.extension import RunExtension


        @register_extension("counting")
        class Counting(RunExtension):
            """Counts optimizer steps (and refuses a weight average beside it).

            Args:
                every: count every N steps.
            """

            conflicts = {"ema": "it counts the trained weights' steps only"}

            def __init__(self, every: int = 1):
                if every < 1:
                    raise ValueError(f"every must be at least 1, got {every}")
                self.every, self.count = every, 0

            def after_optimizer_step(self, trainer):
                self.count += trainer.global_step % self.every == 0

            def state_dict(self):
                return {"count": self.count}

            def load_state_dict(self, state):
                self.count = state["count"]
    ''')
    base = ["train", DIGITS, "--plugins", str(plugin), "train.max_epochs=1", "train.progress=never"]
    bad = cli(*base, "train.counting={every: 0}", "--run-dir", "bad")
    assert bad.code == 2 and "train.counting" in bad.err and "every must be at least 1" in bad.err, bad.err
    typo = cli(*base, "train.counting={evry: 2}", "--run-dir", "typo")
    assert typo.code == 2 and "train.counting" in typo.err and "evry" in typo.err, typo.err
    near = cli(*base, "train.countng={every: 2}", "--run-dir", "near")
    assert near.code == 2 and "did you mean 'counting'" in near.err, near.err  # extensions are train keys too
    both = cli(*base, "train.counting={every: 2}", "train.ema={decay: 0.9}", "--run-dir", "both")
    assert both.code == 2 and "train.counting cannot be combined with train.ema" in both.err, both.err
    assert not Path("both").exists()  # refused before anything was written
    ok = cli(*base, "train.counting={every: 2}", "--run-dir", "ok")
    assert ok.code == 0, ok.err
    last = torch.load(Path("ok") / "checkpoints" / "last.pt", weights_only=True)
    assert last["counting"] == {"count": last["global_step"] // 2}
    assert last["config"]["train"]["counting"] == {"every": 2}
