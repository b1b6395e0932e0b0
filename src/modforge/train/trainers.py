"""Trainer subclasses a config can choose: ``train.trainer: NAME``.

delira's networks change training through ``closure`` and ``prepare_batch``; modforge's
equivalent is a :class:`~modforge.train.trainer.Trainer` subclass that overrides the *step*
hooks (never the loop), registered in a plug-in and named in the config::

    # my_trainer.py (a plug-in: plugins: [my_trainer.py] in the config, or --plugins)
    import torch
    from modforge.train.trainer import Trainer
    from modforge.train.trainers import register_trainer

    @register_trainer("mixup")
    class Mixup(Trainer):
        def training_step(self, batch):          # delira's closure: forward and loss
            ...
            return loss

    # config: train: {trainer: mixup}     (or trainer: my_trainer.py:Mixup)

The hooks are listed in :class:`~modforge.train.trainer.Trainer`'s docstring. The chosen
class trains (``modforge train``, ``--resume``, ``kfold``) and evaluates (the end-of-training
test and ``modforge test``, so a ``prepare_batch`` that transforms inputs applies there too).
It is built with the Trainer's own constructor arguments.
"""

from __future__ import annotations

from collections.abc import Iterable

from ..core.errors import ConfigValueError, UnknownComponentError
from ..core.plugins import is_import_path
from ..core.registries import TRAINERS, register_trainer
from .trainer import Trainer

__all__ = ["TRAINERS", "register_trainer", "resolve_trainer"]

if "default" not in TRAINERS:
    TRAINERS.add(Trainer, "default")  # the Trainer itself (train.trainer left out)


def resolve_trainer(
    name: str | None,
    *,
    allowed_modules: Iterable[str] = (),
    base_dir: str | None = None,
    path: str = "train.trainer",
    source: str | None = None,
) -> type[Trainer]:
    """The Trainer class ``train.trainer`` names (``None``: :class:`Trainer`).

    Raises:
        UnknownComponentError: no such name, or an import path outside the loaded plug-ins.
        ConfigValueError: the name is registered but is not a Trainer subclass.
    """
    if name is None:
        return Trainer
    try:
        obj, _sig = TRAINERS.resolve(name, allowed_modules=allowed_modules, base_dir=base_dir, path=path, source=source)
    except UnknownComponentError:
        if is_import_path(name):
            raise
        close = TRAINERS.suggestions(name)
        hint = f"; did you mean '{close[0]}'?" if close else ""
        raise UnknownComponentError(f"no trainer named {name!r}{hint} (registered: {', '.join(TRAINERS.list())}; "
                                    "a plug-in registers more with register_trainer)", path=path,
                                    source=source) from None  # fmt: skip
    if not (isinstance(obj, type) and issubclass(obj, Trainer)):
        raise ConfigValueError(
            f"expected a subclass of modforge.train.trainer.Trainer, got {getattr(obj, '__qualname__', obj)!r}",
            path=path,
            source=source,
        )
    return obj
