"""Registries, vouched plug-ins and plug-in modules put back as they were: what every test
gets from conftest's autouse fixture, and what a module-scoped fixture needs around its own
work."""

from __future__ import annotations

import contextlib
import sys
from collections.abc import Iterator

import modforge as mf
from modforge.core import plugins as plugin_state
from modforge.core.plugins import PLUGIN_MODULE_PREFIX


@contextlib.contextmanager
def registries_restored() -> Iterator[None]:
    for registry in mf.REGISTRIES.values():
        registry._ensure_loaded()
    saved = {kind: dict(r._entries) for kind, r in mf.REGISTRIES.items()}
    modules = set(sys.modules)
    vouched, folders = dict(plugin_state._LOADED), list(plugin_state._TRUSTED_FOLDERS)
    try:
        yield
    finally:
        plugin_state._LOADED.clear()
        plugin_state._LOADED.update(vouched)
        plugin_state._TRUSTED_FOLDERS[:] = folders
        for kind, registry in mf.REGISTRIES.items():
            registry._entries.clear()
            registry._entries.update(saved[kind])
        for name in set(sys.modules) - modules:
            if name.startswith(PLUGIN_MODULE_PREFIX) or name.startswith("mf_test_"):
                del sys.modules[name]
