"""What ``modforge train --nproc N`` needs before it becomes torchrun, without importing torch:
the world size the environment gives, torchrun's arguments for one machine and the
environment that keeps every socket on the loopback interface.

The launching process only builds a command line and ``execve``\\ s into torchrun (which
imports torch itself), so none of this touches torch: the launch skips the seconds and the
memory ``import torch`` costs. :mod:`modforge.train.distributed` re-exports all of it.
"""

from __future__ import annotations

import os
import sys
from collections.abc import Mapping

__all__ = ["LOOPBACK", "env_world_size", "one_machine_args", "one_machine_env"]

LOOPBACK = "127.0.0.1"
"""The address every socket of a one-machine run (``--nproc N``) listens on."""


def env_world_size() -> int:
    """``WORLD_SIZE`` from the environment (1 when not launched by torchrun)."""
    try:
        return max(1, int(os.environ.get("WORLD_SIZE", "1") or 1))
    except ValueError:
        return 1


def _loopback_interface() -> str | None:
    """The loopback interface's name (None where it has none gloo could be given: Windows)."""
    return {"linux": "lo", "darwin": "lo0"}.get(sys.platform)


def one_machine_args(nproc: int) -> list[str]:
    """torchrun's arguments for ``nproc`` processes on this machine: a standalone rendezvous whose
    address (the workers' ``MASTER_ADDR``) is 127.0.0.1, not the host name's address."""
    return ["--standalone", f"--nproc-per-node={nproc}", f"--local-addr={LOOPBACK}"]


def one_machine_env(base: Mapping[str, str] | None = None) -> dict[str, str]:
    """``base`` (this process's environment) for a one-machine run: gloo's and NCCL's sockets on
    the loopback interface, whatever the environment said (a cluster's ``GLOO_SOCKET_IFNAME=eth0``
    would expose them), and the store torchrun hosts on 127.0.0.1 shared with the workers
    (``TORCH_DISABLE_SHARE_RDZV_TCP_STORE`` would make rank 0 host one on every address)."""
    env = dict(os.environ if base is None else base)
    env.pop("TORCH_DISABLE_SHARE_RDZV_TCP_STORE", None)
    interface = _loopback_interface()
    if interface is not None:
        env.update(GLOO_SOCKET_IFNAME=interface, NCCL_SOCKET_IFNAME=interface)
    return env
