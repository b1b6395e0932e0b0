"""A part class's ``accepts``/``produces``, turned into :class:`~.layouts.Layout` members when it
is registered.

Part authors write layouts by name as often as by member (``accepts = ("multiscale",)``,
United Perception style). The builder reads either, but code that takes a layout's
``.value`` (the ONNX engine naming a part's input) needs the member; so registration
converts names once, on the class, and refuses a name that is no layout with one line
saying which attribute of which part and what the layouts are — instead of an
``AttributeError`` from deep inside an export.
"""

from __future__ import annotations

import inspect
from typing import Any

from .errors import RegistrationError
from .layouts import Layout

__all__ = ["normalize_layouts"]


def _layout(value: Any, where: str) -> Layout:
    if isinstance(value, Layout):
        return value
    try:
        return Layout(value.strip().lower() if isinstance(value, str) else value)
    except (ValueError, TypeError):
        names = ", ".join(repr(m.value) for m in Layout)
        raise RegistrationError(f"{where}: {value!r} is not a layout; expected one of {names} (or Layout.X)") from None


def normalize_layouts(obj: Any, label: str) -> None:
    """Convert a class's own ``accepts`` (one layout or a sequence) and ``produces`` to Layout members.

    Args:
        obj: the class being registered (functions and other objects are left alone).
        label: how messages name it (``backbone 'custom_head'``).

    Raises:
        RegistrationError: a value that names no layout.
    """
    if not inspect.isclass(obj):
        return
    own = vars(obj)
    if "accepts" in own and own["accepts"] is not None and not isinstance(own["accepts"], property):
        accepts = own["accepts"]
        items = [accepts] if isinstance(accepts, (str, Layout)) else accepts
        try:
            items = list(items)
        except TypeError:
            raise RegistrationError(
                f"{label}.accepts: expected a layout or a tuple of layouts, got {accepts!r}"
            ) from None
        obj.accepts = tuple(_layout(item, f"{label}.accepts") for item in items)
    if "produces" in own and own["produces"] is not None and not isinstance(own["produces"], property):
        obj.produces = _layout(own["produces"], f"{label}.produces")
