"""Nothing a one-machine run opens is reachable from other machines (issue 39, deliverable 5).

``--nproc N``: torchrun's c10d stores and the workers' gloo sockets are unauthenticated. Every
listening TCP socket of the run's processes (read from ``/proc/<pid>/net/tcp{,6}`` against the
socket inodes in ``/proc/<pid>/fd``) must be on the loopback address — also where the host name
resolves to a network address, as on most servers: the run is started in a user, network,
mount and UTS namespace of its own holding a private address (10.231.0.2 on an interface that
exists only inside it, the host name ``mfnode`` mapped to it by a hosts file mounted there).

W&B offline: the SDK posts its telemetry to the W&B server when the process exits unless the
environment says offline; ``WANDB_BASE_URL`` points at a listener on 127.0.0.1 that counts
connections, and an audit hook in the training process reports every network connection.
"""

from __future__ import annotations

import dataclasses
import ipaddress
import os
import shutil
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Iterable
from pathlib import Path
from unittest import mock

import pytest

from tiny_run import TINY
from train_processes import run_warm

pytestmark = pytest.mark.hostile

PRIVATE_ADDRESS = "10.231.0.2"
HOST_NAME = "mfnode"
TINY_NPROC = TINY + "  distributed: {timeout: 60}\n"
PROC = pytest.mark.skipif(not Path("/proc/self/net/tcp").exists(), reason="reads listening sockets from /proc (Linux)")
NAMESPACE = ["unshare", "--user", "--map-root-user", "--net", "--mount", "--uts"]
# inside the namespace: loopback up, the private address on an interface of its own (a dummy one,
# else one end of a veth pair: traffic never leaves the namespace), the host name mapped to it
NETWORK_SETUP = f"""set -e
ip link set lo up
ip link add mf0 type dummy 2>/dev/null || ip link add mf0 type veth peer name mf1
ip addr add {PRIVATE_ADDRESS}/24 dev mf0
ip link set mf0 up
ip link set mf1 up 2>/dev/null || true
hostname {HOST_NAME}
mount --bind "$MF_HOSTS" /etc/hosts
test "$(getent hosts {HOST_NAME} | cut -d' ' -f1)" = {PRIVATE_ADDRESS}
exec "$@"
"""


# ----------------------------------------------------------------------------- listening sockets
@dataclasses.dataclass(frozen=True)
class Listening:
    """A listening TCP socket of process ``pid``."""

    pid: int
    address: ipaddress.IPv4Address | ipaddress.IPv6Address
    port: int

    @property
    def loopback(self) -> bool:
        mapped = getattr(self.address, "ipv4_mapped", None)
        return self.address.is_loopback or bool(mapped and mapped.is_loopback)

    def __str__(self) -> str:
        return f"{self.address}:{self.port} (pid {self.pid})"


def _address(text: str) -> ipaddress.IPv4Address | ipaddress.IPv6Address:
    """An address as ``/proc/net/tcp{,6}`` writes it: hex, in 32-bit words of host byte order."""
    raw = bytes.fromhex(text)
    return ipaddress.ip_address(b"".join(raw[i : i + 4][::-1] for i in range(0, len(raw), 4)))


def _socket_inodes(pid: int) -> set[str]:
    inodes = set()
    for fd in Path(f"/proc/{pid}/fd").iterdir():
        try:
            target = os.readlink(fd)
        except OSError:
            continue
        if target.startswith("socket:["):
            inodes.add(target[8:-1])
    return inodes


def listening_sockets(pids: Iterable[int]) -> set[Listening]:
    """Every listening TCP socket the processes ``pids`` hold, each read in its own network namespace
    (its socket tables read once per namespace: the processes of a run share one)."""
    found, namespaces = set(), {}
    for pid in pids:
        try:
            inodes = _socket_inodes(pid)
            namespace = os.readlink(f"/proc/{pid}/ns/net")
            if namespace not in namespaces:
                namespaces[namespace] = [Path(f"/proc/{pid}/net/{name}").read_text() for name in ("tcp", "tcp6")]
            tables = namespaces[namespace]
        except OSError:  # gone meanwhile
            continue
        for table in tables:
            for line in table.splitlines()[1:]:
                fields = line.split()
                if fields[3] == "0A" and fields[9] in inodes:  # 0A: LISTEN
                    address, port = fields[1].split(":")
                    found.add(Listening(pid, _address(address), int(port, 16)))
    return found


def descendants(pid: int) -> list[int]:
    """Every process below ``pid``, from one pass over ``/proc`` (the parent of each process, then
    down the tree from ``pid``): :func:`distributed_helpers.children` reads all of ``/proc`` again
    for each process it finds, six passes a poll for a run's launcher, torchrun and two workers."""
    below: dict[int, list[int]] = {}
    for entry in os.scandir("/proc"):
        if entry.name.isdigit():
            try:
                with open(f"/proc/{entry.name}/stat", "rb") as stat:
                    parent = int(stat.read().rsplit(b")", 1)[1].split()[1])
            except (OSError, ValueError, IndexError):
                continue
            below.setdefault(parent, []).append(int(entry.name))
    found, todo = [], [pid]
    while todo:
        found += (kids := below.get(todo.pop(), []))
        todo += kids
    return found


def watch(command: list[str], cwd: Path, env: dict[str, str]) -> tuple[int, str, set[Listening]]:
    """Run ``command``; its exit status, its output, and every listening socket its processes held
    while it ran."""
    log = cwd / "output.log"
    with log.open("w") as out:
        proc = subprocess.Popen(command, cwd=cwd, env=env, stdout=out, stderr=subprocess.STDOUT)
        seen: set[Listening] = set()
        try:
            while proc.poll() is None:
                seen |= listening_sockets([proc.pid, *descendants(proc.pid)])
                time.sleep(0.1)
        finally:
            if proc.poll() is None:
                proc.kill()
            proc.wait()
    return proc.returncode, log.read_text(), seen


def _assert_loopback_only(code: int, output: str, seen: set[Listening]) -> None:
    assert code == 0, output[-3000:]
    pids = {s.pid for s in seen}
    assert len(pids) >= 3, f"listening sockets of torchrun and both workers expected, saw {sorted(map(str, seen))}"
    exposed = sorted(str(s) for s in seen if not s.loopback)
    assert not exposed, f"--nproc listens beyond loopback: {exposed}"


def _env() -> dict[str, str]:
    env = {**os.environ, "OMP_NUM_THREADS": "1"}
    for name in ("GLOO_SOCKET_IFNAME", "NCCL_SOCKET_IFNAME", "MASTER_ADDR", "MASTER_PORT"):
        env.pop(name, None)
    return env


# ----------------------------------------------------------------------------- --nproc
def _namespace(tmp_path: Path) -> tuple[list[str], str | None]:
    """The command prefix running a command in a namespace where the host name maps to a private
    address, and None; where user and network namespaces are not available, no prefix and why."""
    if shutil.which("unshare") is None or shutil.which("ip") is None:
        return [], "needs unshare and ip (util-linux, iproute2) to build a namespace with a private address"
    hosts = tmp_path / "hosts"
    hosts.write_text(f"127.0.0.1 localhost\n{PRIVATE_ADDRESS} {HOST_NAME}\n")
    setup = tmp_path / "network.sh"
    setup.write_text(NETWORK_SETUP)
    prefix = [*NAMESPACE, "sh", str(setup)]
    probe = subprocess.run([*prefix, sys.executable, "-c", "import socket; print(socket.gethostbyname(socket.gethostname()))"],
                           env={**os.environ, "MF_HOSTS": str(hosts)}, capture_output=True, text=True, timeout=60)  # fmt: skip
    if probe.returncode != 0 or probe.stdout.strip() != PRIVATE_ADDRESS:
        return [], f"no user/network namespace with a private address here: {(probe.stderr or probe.stdout).strip()[-300:]}"
    return prefix, None


MARKER_MODULE = "import pathlib\npathlib.Path(__file__).with_name('IMPORTED-{name}').write_text('ran')\n"


@pytest.mark.slow
@PROC
def test_nproc_listens_on_loopback_only_and_imports_nothing_from_its_cwd(tmp_path, capsys):
    """A two-process run listens on 127.0.0.1 only. Where this machine can make one, the run is
    watched in a namespace where the host name maps to a private address — the harder case, where
    gloo would listen on that address and torchrun's stores on every address — else on this machine
    as it is (one launch either way: the harder case covers the plain one).

    The same run has a ``yaml.py`` and a ``torch.py`` in its cwd (both imported by every modforge
    process): neither the torchrun launcher nor a worker imports them. The same folder does make
    ``python -c`` import them — the marker would appear if a process were started that way (the
    test can fail)."""
    prefix, missing = _namespace(tmp_path)
    if missing:
        with capsys.disabled():
            print(f"\n[test_trust_sockets] the run is watched on this machine as it is: {missing}")
    (tmp_path / "tiny.yaml").write_text(TINY_NPROC)
    for name in ("yaml", "torch"):
        (tmp_path / f"{name}.py").write_text(MARKER_MODULE.format(name=name))
    env = {**_env(), "MF_HOSTS": str(tmp_path / "hosts")}
    env.pop("PYTHONSAFEPATH", None)  # modforge's own launch keeps the cwd off every child's path
    script = Path(sys.executable).with_name("modforge")  # the console script: it never imports from the cwd
    launcher = [str(script)] if script.exists() else [sys.executable, "-P", "-m", "modforge"]
    code, output, seen = watch([*prefix, *launcher, "train", "tiny.yaml", "--run-dir", "run", "--nproc", "2"],
                               tmp_path, env)  # fmt: skip
    _assert_loopback_only(code, output, seen)
    assert (tmp_path / "run" / "summary.json").is_file()
    assert not list(tmp_path.glob("IMPORTED-*"))
    control = subprocess.run([sys.executable, "-c", "import yaml"], cwd=tmp_path, env=env, capture_output=True)
    assert control.returncode == 0 and (tmp_path / "IMPORTED-yaml").exists()  # the planted module does run so


def test_the_nproc_launcher_names_loopback_and_puts_gloo_and_nccl_on_it():
    from modforge.cli.commands.train_run import launch_command
    from modforge.train.distributed import one_machine_env

    command = launch_command(["tiny.yaml"], 2)
    launcher = command[: command.index("--no-python")]
    assert launcher[launcher.index("-m") + 1] == "modforge.train.distributed"  # torchrun_on_loopback
    assert "--standalone" in launcher and "--local-addr=127.0.0.1" in launcher
    cluster = {"GLOO_SOCKET_IFNAME": "eth0", "NCCL_SOCKET_IFNAME": "ib0", "TORCH_DISABLE_SHARE_RDZV_TCP_STORE": "1"}
    env = one_machine_env(cluster)
    assert env["GLOO_SOCKET_IFNAME"] == env["NCCL_SOCKET_IFNAME"] == {"linux": "lo", "darwin": "lo0"}[sys.platform]
    assert "TORCH_DISABLE_SHARE_RDZV_TCP_STORE" not in env


@PROC
def test_a_store_torchrun_hosts_listens_on_127_0_0_1_only():
    import datetime

    import torch.distributed as dist

    from modforge.train.distributed import _loopback_store_class

    timeout = datetime.timedelta(seconds=30)
    store = _loopback_store_class()("localhost", 0, is_master=True, multi_tenant=True, timeout=timeout)
    client = dist.TCPStore("127.0.0.1", store.port, is_master=False, timeout=timeout)
    client.set("k", "v")
    assert store.get("k") == b"v" and isinstance(store, dist.TCPStore)
    mine = {s for s in listening_sockets([os.getpid()]) if s.port == store.port}
    assert [str(s.address) for s in mine] == ["127.0.0.1"]
    plain = dist.TCPStore("localhost", 0, is_master=True, timeout=timeout)  # what torchrun makes on its own
    assert {s.loopback for s in listening_sockets([os.getpid()]) if s.port == plain.port} == {False}
    del client, store, plain


# ----------------------------------------------------------------------------- W&B offline
class CountingListener:
    """A TCP listener on 127.0.0.1 that counts the connections it accepts (and answers 404)."""

    def __init__(self) -> None:
        self.server = socket.create_server(("127.0.0.1", 0))
        self.port = self.server.getsockname()[1]
        self.requests: list[bytes] = []
        threading.Thread(target=self._serve, daemon=True).start()

    def _serve(self) -> None:
        while True:
            try:
                conn, _ = self.server.accept()
            except OSError:
                return
            with conn:
                conn.settimeout(5)
                try:
                    self.requests.append(conn.recv(200))
                    conn.sendall(b"HTTP/1.1 404 Not Found\r\nContent-Length: 0\r\nConnection: close\r\n\r\n")
                except OSError:
                    self.requests.append(b"")

    def close(self) -> None:
        self.server.close()


AUDITED_TRAINING = """
import socket, sys
def audit(event, args):
    if event == "socket.connect" and args[0].family in (socket.AF_INET, socket.AF_INET6):
        print("CONNECT", args[1], file=sys.stderr, flush=True)
sys.addaudithook(audit)
from modforge.cli.main import main
sys.exit(main(["train", "tiny.yaml", "--run-dir", "run"]))
"""


def _wandb_env(home: Path, listener: CountingListener) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("WANDB_")}
    env.update(HOME=str(home), WANDB_CONFIG_DIR=str(home / "config"), WANDB_CACHE_DIR=str(home / "cache"),
               WANDB_DATA_DIR=str(home / "data"), WANDB_BASE_URL=f"http://127.0.0.1:{listener.port}",
               OMP_NUM_THREADS="1")  # fmt: skip
    return env


@pytest.mark.slow
def test_a_wandb_offline_run_connects_nowhere(tmp_path):
    pytest.importorskip("wandb")
    (tmp_path / "tiny.yaml").write_text(TINY + "  callbacks: [{type: wandb, args: {mode: offline}}]\n")
    listener = CountingListener()
    try:
        # the training process: a warm child (train_processes.run_warm: forked from a server that imported torch
        # and modforge, not wandb — imported here, after the audit hook, under this environment)
        res = run_warm(code=AUDITED_TRAINING, cwd=tmp_path, env=_wandb_env(tmp_path, listener), timeout=300)
    finally:
        listener.close()
    assert res.returncode == 0, res.stderr[-3000:]
    assert listener.requests == [], f"W&B connected to WANDB_BASE_URL: {listener.requests}"
    connects = [line for line in res.stderr.splitlines() if line.startswith("CONNECT")]
    assert connects == [], f"the training process connected out: {connects}"
    assert list((tmp_path / "run").glob("wandb/offline-run-*/run-*.wandb"))


def test_the_quiet_environment_holds_while_the_run_is_open_and_is_restored(tmp_path, monkeypatch):
    wandb = pytest.importorskip("wandb")
    from modforge.cli.main import main
    from registry_state import registries_restored

    for key in [k for k in os.environ if k.startswith("WANDB_")]:
        monkeypatch.delenv(key)
    home = tmp_path / "home"
    monkeypatch.setenv("HOME", str(home))
    monkeypatch.setenv("WANDB_CONFIG_DIR", str(home / "config"))
    monkeypatch.setenv("WANDB_CACHE_DIR", str(home / "cache"))
    monkeypatch.setenv("WANDB_DATA_DIR", str(home / "data"))
    monkeypatch.setenv("WANDB_SILENT", "true")
    monkeypatch.setenv("WANDB_ERROR_REPORTING", "true")  # the user's own setting: back after the run
    real_init, during = wandb.init, []

    def init(*args, **kwargs):
        during.append({k: os.environ.get(k) for k in ("WANDB_MODE", "WANDB_ERROR_REPORTING")})
        return real_init(*args, **kwargs)

    (tmp_path / "tiny.yaml").write_text(TINY + "  callbacks: [wandb]\n")  # mode auto: offline
    with registries_restored(), mock.patch.object(wandb, "init", init):
        assert main(["train", str(tmp_path / "tiny.yaml"), "--run-dir", str(tmp_path / "run")]) == 0
    assert during == [{"WANDB_MODE": "offline", "WANDB_ERROR_REPORTING": "false"}]
    assert "WANDB_MODE" not in os.environ and os.environ["WANDB_ERROR_REPORTING"] == "true"
