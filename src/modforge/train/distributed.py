"""Multi-process training on ``torch.distributed`` — the process group, who this process
is, and the few collectives the trainer needs.

modforge has no launcher of its own: ``torchrun`` (or ``modforge train --nproc N``, which
starts torchrun) sets ``WORLD_SIZE``, ``RANK``, ``LOCAL_RANK`` and the rendezvous address
in every process's environment; :func:`setup` reads them and joins the group (``gloo`` on
the CPU, ``nccl`` on CUDA, or the configured backend). With one process nothing here does
any work, so single-process code paths stay exactly as they are.

One machine (``--nproc N``): nothing listens beyond the loopback interface. torchrun's
c10d stores would listen on every address and the workers' gloo sockets on the address the
host name resolves to (on most servers the network address) — unauthenticated sockets other
machines could reach. :func:`torchrun_on_loopback` (what ``--nproc`` runs as torchrun) binds
every store it hosts to 127.0.0.1 and names 127.0.0.1 as the rendezvous address
(``--local-addr``, so ``MASTER_ADDR``), and :func:`one_machine_env` puts gloo's and NCCL's
sockets on the loopback interface (``GLOO_SOCKET_IFNAME``, ``NCCL_SOCKET_IFNAME``).

Collectives carry a timeout (``train.distributed.timeout``): when one process dies, the
others fail in their next collective — at once when the dead peer's sockets close, at the
latest after the timeout — and the run ends with :class:`PeerFailure`'s message; the
last complete checkpoint is where ``--resume`` continues.
"""

from __future__ import annotations

import dataclasses
import datetime
import gc
import ipaddress
import logging
import os
import socket
from typing import Any

import torch
import torch.distributed as dist

from ..core.errors import ModforgeError
from .one_machine import LOOPBACK, env_world_size, one_machine_args, one_machine_env

__all__ = [
    "DistributedSettings",
    "PeerFailure",
    "all_gather_objects",
    "all_reduce_sum",
    "average_gradients",
    "barrier",
    "broadcast_buffers",
    "broadcast_module",
    "broadcast_object",
    "broadcast_tensors",
    "env_world_size",
    "is_distributed",
    "is_main_process",
    "join_if_launched",
    "local_rank",
    "one_machine_args",
    "one_machine_env",
    "peer_failure",
    "rank",
    "setup",
    "shutdown",
    "stop_on_sigterm",
    "torchrun_on_loopback",
    "world_size",
]

log = logging.getLogger("modforge.train")

BACKENDS = ("auto", "gloo", "nccl")


class PeerFailure(ModforgeError):
    """Another process of a distributed run failed (or stopped answering)."""


@dataclasses.dataclass
class DistributedSettings:
    """The ``train.distributed:`` section (used only when several processes run).

    Args:
        backend: 'auto' (nccl when training on CUDA, else gloo), 'gloo' or 'nccl'.
        timeout: seconds a collective waits for the other processes before the run fails.
        find_unused_parameters: let DDP handle parameters that get no gradient in a step
            (slower; needed only by models that skip parts of themselves).
    """

    backend: str = "auto"
    timeout: float = 300.0
    find_unused_parameters: bool = False

    def __post_init__(self) -> None:
        if self.backend not in BACKENDS:
            raise ValueError(f"backend must be one of {', '.join(BACKENDS)}, got {self.backend!r}")
        if self.timeout <= 0:
            raise ValueError(f"timeout must be positive (seconds), got {self.timeout}")


def is_distributed() -> bool:
    """True inside an initialised process group of more than one process."""
    return dist.is_available() and dist.is_initialized() and dist.get_world_size() > 1


def world_size() -> int:
    return dist.get_world_size() if is_distributed() else 1


def rank() -> int:
    return dist.get_rank() if is_distributed() else 0


def local_rank() -> int:
    return int(os.environ.get("LOCAL_RANK", "0") or 0) if is_distributed() else 0


def is_main_process() -> bool:
    """Rank 0 (or the only process): the one that writes files and logs."""
    return rank() == 0


def setup(settings: DistributedSettings | None = None, device: str = "auto") -> bool:
    """Join the process group torchrun described in the environment; True when this is a
    multi-process run. With CUDA, each process takes the GPU ``LOCAL_RANK``."""
    settings = settings or DistributedSettings()
    if env_world_size() < 2 or is_distributed():
        return is_distributed()
    if not dist.is_available():
        raise ModforgeError("WORLD_SIZE > 1 but this PyTorch build has no torch.distributed")
    cuda = torch.cuda.is_available() and not str(device).startswith("cpu")
    backend = settings.backend if settings.backend != "auto" else ("nccl" if cuda else "gloo")
    if backend == "nccl":
        if not cuda:
            raise ModforgeError("train.distributed.backend 'nccl' needs CUDA devices; use 'gloo' on the CPU")
        torch.cuda.set_device(int(os.environ.get("LOCAL_RANK", "0") or 0))
    try:
        dist.init_process_group(backend, timeout=datetime.timedelta(seconds=settings.timeout))
    except (RuntimeError, ValueError) as exc:
        raise ModforgeError(
            f"could not join the process group ({backend}): {exc}. Launch with torchrun "
            "(or `modforge train ... --nproc N`), which sets MASTER_ADDR, MASTER_PORT, RANK and WORLD_SIZE"
        ) from None
    log.debug("process %d of %d joined the %s group", dist.get_rank(), dist.get_world_size(), backend)
    return True


def stop_on_sigterm() -> None:
    """Turn the launcher's SIGTERM (torchrun stops the other processes when one fails) into
    a :class:`PeerFailure` with a clear message instead of a silent death."""
    import signal

    def _stop(signum: int, frame: Any) -> None:
        raise PeerFailure(
            f"process {rank()} of {world_size()} was stopped by the launcher (SIGTERM), most likely because "
            "another process of this run failed; the last complete checkpoint is where --resume continues"
        )

    signal.signal(signal.SIGTERM, _stop)


def join_if_launched(settings: DistributedSettings | None = None, device: str = "auto") -> bool:
    """:func:`setup` when torchrun launched this process (``WORLD_SIZE > 1`` and a rendezvous
    address in the environment) and nobody joined yet; True in a multi-process group."""
    if is_distributed():
        return True
    if env_world_size() > 1 and os.environ.get("MASTER_ADDR"):
        return setup(settings, device)
    return False


def shutdown(finished: bool = True) -> None:
    """Leave the process group (a no-op outside one). ``finished``: this process ended its
    work normally, so it first waits for the others (a process that leaves while a peer
    still talks to it makes the peer abort); after an error it leaves at once."""
    if not (dist.is_available() and dist.is_initialized()):
        return
    if finished and is_distributed():
        try:
            barrier("finishing")
        except PeerFailure:
            pass  # the others are gone already: nothing to wait for
    # DDP wrappers left in reference cycles keep the group (and gloo's pending work) alive past
    # destroy_process_group; freed during interpreter shutdown they abort the process (SIGABRT,
    # "terminate called without an active exception"). Free them while Python is whole.
    gc.collect()
    dist.destroy_process_group()


# what a failed collective's message says (inside a collective, any of these means a peer problem)
_PEER_SIGNS = ("connection closed by peer", "connection reset", "broken pipe", "timed out", "timeout", "nccl",
               "gloo", "socket")
# what only the distributed stack itself says (used where the error may come from user code too)
_BACKEND_SIGNS = ("gloo/transport", "processgroupgloo", "processgroupnccl", "nccl error", "c10d")


def peer_failure(exc: BaseException, what: str, *, in_collective: bool = False) -> PeerFailure | None:
    """The :class:`PeerFailure` an error means (a dead or silent peer), or None for any
    other error. ``in_collective``: the error came from a collective call, so a timeout or
    a socket error is the peer's; elsewhere only the distributed stack's own errors count."""
    if not isinstance(exc, RuntimeError) or world_size() < 2:
        return None
    text = str(exc).lower()
    signs = _PEER_SIGNS if in_collective else _BACKEND_SIGNS
    if not (isinstance(exc, dist.DistError) or any(sign in text for sign in signs)):
        return None
    text = str(exc)
    first = next((line.strip() for line in text.splitlines() if line.strip()), type(exc).__name__)
    return PeerFailure(
        f"process {rank()} of {world_size()}: a collective failed during {what} — another process of this run "
        f"stopped answering or failed ({first[:200]}). The run is ending; the last complete checkpoint is where "
        "--resume continues"
    )


def _guarded(what: str, call: Any, *args: Any, **kwargs: Any) -> Any:
    try:
        return call(*args, **kwargs)
    except RuntimeError as exc:
        failure = peer_failure(exc, what, in_collective=True)
        if failure is None:
            raise
        raise failure from exc


def _communication_device() -> torch.device:
    """Where the backend takes tensors: the current GPU for nccl, else the CPU."""
    if dist.get_backend() == "nccl":
        return torch.device("cuda", torch.cuda.current_device())
    return torch.device("cpu")


def all_reduce_sum(tensor: torch.Tensor, what: str = "a reduction") -> torch.Tensor:
    """The element-wise sum of ``tensor`` over every process (the tensor itself with one),
    on ``tensor``'s device."""
    if not is_distributed():
        return tensor
    moved = tensor.to(_communication_device(), copy=True)
    _guarded(what, dist.all_reduce, moved, op=dist.ReduceOp.SUM)
    return moved.to(tensor.device)


def broadcast_tensors(tensors: list[torch.Tensor], src: int = 0, what: str = "a broadcast") -> None:
    """Give every process rank ``src``'s values of ``tensors`` (in place; the same list, in the
    same order, on every process) — one broadcast per dtype, the tensors flattened into it."""
    if not is_distributed():
        return
    device = _communication_device()
    by_dtype: dict[torch.dtype, list[torch.Tensor]] = {}
    for tensor in tensors:
        by_dtype.setdefault(tensor.dtype, []).append(tensor)
    for group in by_dtype.values():
        flat = torch.cat([t.detach().reshape(-1).to(device) for t in group])
        _guarded(what, dist.broadcast, flat, src=src)
        with torch.no_grad():
            for tensor, part in zip(group, flat.split([t.numel() for t in group]), strict=True):
                tensor.data.copy_(part.view_as(tensor).to(tensor.device))


def broadcast_buffers(module: torch.nn.Module, src: int = 0, what: str = "sharing buffers") -> None:
    """Give every process rank ``src``'s buffers of ``module`` (BatchNorm running
    statistics drift apart when each process normalises its own batches)."""
    broadcast_tensors(list(module.buffers()), src, what)


def broadcast_module(module: torch.nn.Module, src: int = 0, what: str = "sharing the weights") -> None:
    """Give every process rank ``src``'s parameters and buffers of ``module`` (what DDP does
    when it wraps a model, for code that averages gradients itself)."""
    broadcast_tensors([*module.parameters(), *module.buffers()], src, what)


def average_gradients(params: list[torch.Tensor], what: str = "averaging the gradients") -> None:
    """Replace each parameter's ``.grad`` by its mean over the processes, as DDP's reducer
    does (one reduction per dtype). A parameter without a gradient on some process counts
    zeros there; one without a gradient on every process keeps none (an optimizer skips it)."""
    if not is_distributed():
        return
    device = _communication_device()
    present = torch.tensor([float(p.grad is not None) for p in params], dtype=torch.float64, device=device)
    _guarded(what, dist.all_reduce, present, op=dist.ReduceOp.SUM)
    size = world_size()
    by_dtype: dict[torch.dtype, list[torch.Tensor]] = {}
    for param, count in zip(params, present.tolist(), strict=True):
        if count > 0:
            by_dtype.setdefault(param.dtype, []).append(param)
    for group in by_dtype.values():
        flat = torch.cat([
            (p.grad.detach() if p.grad is not None else torch.zeros_like(p)).reshape(-1).to(device) for p in group
        ])  # fmt: skip
        _guarded(what, dist.all_reduce, flat, op=dist.ReduceOp.SUM)
        flat /= size
        for param, part in zip(group, flat.split([p.numel() for p in group]), strict=True):
            value = part.view_as(param).to(param.device)
            if param.grad is None:
                param.grad = value.clone()
            else:
                param.grad.copy_(value)


_NUMPY_DTYPES = {torch.bool, torch.uint8, torch.int8, torch.int16, torch.int32, torch.int64, torch.float16,
                 torch.float32, torch.float64, torch.complex64, torch.complex128}


def _plain(tensor: torch.Tensor) -> bool:
    """A tensor numpy can share as-is: dense, on the CPU, no autograd, no lazy conj/neg bit."""
    return (tensor.device.type == "cpu" and tensor.layout == torch.strided and not tensor.requires_grad
            and tensor.dtype in _NUMPY_DTYPES and not tensor.is_conj() and not tensor.is_neg()
            and type(tensor) is torch.Tensor)  # fmt: skip


def _as_arrays(obj: Any) -> Any:
    """``obj`` with its plain CPU tensors as numpy arrays (pickled ~3× faster than
    tensors); containers of the built-in kinds are walked, anything else travels as it is."""
    if isinstance(obj, torch.Tensor):
        return _Array(obj.numpy()) if _plain(obj) else obj
    if type(obj) is dict:
        return {k: _as_arrays(v) for k, v in obj.items()}
    if type(obj) in (list, tuple):
        return type(obj)(_as_arrays(v) for v in obj)
    return obj


def _as_tensors(obj: Any) -> Any:
    if isinstance(obj, _Array):
        return torch.from_numpy(obj.array)
    if type(obj) is dict:
        return {k: _as_tensors(v) for k, v in obj.items()}
    if type(obj) in (list, tuple):
        return type(obj)(_as_tensors(v) for v in obj)
    return obj


class _Array:
    """A tensor travelling as a numpy array (so arrays the caller sent stay arrays)."""

    __slots__ = ("array",)

    def __init__(self, array: Any):
        self.array = array

    def __getstate__(self) -> Any:
        return self.array

    def __setstate__(self, array: Any) -> None:
        self.array = array


def all_gather_objects(obj: Any, what: str = "a gather") -> list[Any]:
    """Every process's ``obj``, in rank order (``[obj]`` with one process). CPU tensors
    inside travel as numpy arrays and come back as tensors."""
    if not is_distributed():
        return [obj]
    gathered: list[Any] = [None] * world_size()
    _guarded(what, dist.all_gather_object, gathered, _as_arrays(obj))
    return [_as_tensors(item) for item in gathered]


def broadcast_object(obj: Any, src: int = 0, what: str = "a broadcast") -> Any:
    """Rank ``src``'s ``obj`` on every process."""
    if not is_distributed():
        return obj
    box = [obj]
    _guarded(what, dist.broadcast_object_list, box, src=src)
    return box[0]


def barrier(what: str = "a barrier") -> None:
    """Wait until every process gets here."""
    if is_distributed():
        _guarded(what, dist.barrier)


# ----------------------------------------------------------------------------- one machine: loopback only
# LOOPBACK, one_machine_args and one_machine_env live in .one_machine (no torch: --nproc reaches torchrun
# without importing it) and are re-exported above.


def _is_loopback(host: str) -> bool:
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


_STORE_ARGS = ("world_size", "is_master", "timeout", "wait_for_workers", "multi_tenant", "master_listen_fd",
               "use_libuv")  # fmt: skip
"""``TCPStore``'s arguments after ``host_name`` and ``port``, in order."""


def _loopback_store_class() -> type:
    """A ``TCPStore`` whose server, for a loopback host, listens on 127.0.0.1 only: ``TCPStore``
    binds its server to every address whatever ``host_name`` says, unless it is handed a socket
    already listening (``master_listen_fd``)."""

    class LoopbackTCPStore(dist.TCPStore):
        def __init__(self, host_name: str, port: int, *args: Any, **kwargs: Any) -> None:
            kwargs.update(zip(_STORE_ARGS, args, strict=False))  # fewer given than it takes
            if kwargs.get("is_master") and kwargs.get("master_listen_fd") is None and _is_loopback(host_name):
                listener = socket.create_server((LOOPBACK, port))
                port = listener.getsockname()[1]
                kwargs["master_listen_fd"] = listener.detach()  # the store owns (and closes) it now
            super().__init__(host_name, port, **kwargs)

    return LoopbackTCPStore


def torchrun_on_loopback(argv: list[str] | None = None) -> None:
    """torchrun (``torch.distributed.run``; ``argv``: its command line, default ``sys.argv[1:]``)
    with every store it hosts on a loopback host listening on 127.0.0.1 only — what ``--nproc N``
    runs, with :func:`one_machine_args` and :func:`one_machine_env`."""
    from torch.distributed import run
    from torch.distributed.elastic.rendezvous import c10d_rendezvous_backend, static_tcp_rendezvous

    original = dist.TCPStore
    loopback = _loopback_store_class()
    for module in (dist, c10d_rendezvous_backend, static_tcp_rendezvous):  # where torchrun makes its stores
        if getattr(module, "TCPStore", None) is original:
            module.TCPStore = loopback
    run.main(argv)


if __name__ == "__main__":  # python -m modforge.train.distributed ARGS: torchrun_on_loopback (for --nproc)
    torchrun_on_loopback()
