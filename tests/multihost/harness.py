"""Simulated hosts on one machine, for tests of what runs across hosts.

A `Cluster` of N hosts: each host is a set of Linux namespaces (network, UTS, IPC, mount and pid)
whose first process is host_init.py. Each has its own host name, its own /etc/hosts naming every host,
a private /dev/shm, its own network devices (sysfs remounted) and one link, `eth0` (a veth pair), to a
bridge in a switch namespace: the hosts reach each other at 10.77.0.1, 10.77.0.2, ... and nothing else
(not the machine's own network, not another cluster's hosts). Commands run inside a host through
nsenter (`Host.popen`, `Host.run`); the test process talks to a host's network from a thread that has
entered its network namespace (`Host.call`).

Faults: `Host.set_link(False)` takes the host's link down (its peers see nothing more from it: no
reset, no close), `Host.kill()` powers it off (link down first, so no close or reset of its dying
processes reaches anyone; then the kernel kills every process in its pid namespace, and its
namespaces, /dev/shm and link go with them).

Teardown (`Cluster.close`, the fixture calls it however a test ends) kills every host, so no process,
namespace, link or /dev/shm segment outlives the test; if the test process itself is killed, each
host's first process sees its standard input close and the kernel does the same. `leftovers()` lists
what is still running or mapped on each host, for tests that check a clean exit before teardown.

Needs root (CAP_SYS_ADMIN, CAP_NET_ADMIN), unshare/nsenter (util-linux) and ip (iproute2):
`unavailable()` says why not, and the fixture skips with that reason.
"""
from __future__ import annotations

import ctypes
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import Any, Callable

HERE = Path(__file__).resolve().parent
REPO = HERE.parents[1]
SUBNET = "10.77.0"  # host i is SUBNET.(i + 1); every cluster has a network of its own, so they never meet
CLONE_NEWNET = 0x40000000
_UNSHARE = ["unshare", "--fork", "--pid", "--mount-proc", "--net", "--uts", "--ipc", "--mount",
            "--propagation", "private", "--kill-child", "--"]


def unavailable() -> str | None:
    """Why simulated hosts cannot be made here (None: they can)."""
    if sys.platform != "linux":
        return "simulated hosts need Linux namespaces"
    if os.geteuid() != 0:
        return "simulated hosts need root (network, mount and pid namespaces, veth links)"
    missing = [tool for tool in ("unshare", "nsenter", "ip") if shutil.which(tool) is None]
    if missing:
        return f"simulated hosts need {', '.join(missing)} (util-linux, iproute2)"
    probe = subprocess.run(["unshare", "--net", "--uts", "--mount", "--pid", "--fork", "--", "true"],
                           capture_output=True, text=True)
    if probe.returncode != 0:
        return f"cannot make namespaces here: {probe.stderr.strip() or probe.returncode}"
    return None


def _children(pid: int) -> list[int]:
    try:
        with open(f"/proc/{pid}/task/{pid}/children") as f:
            return [int(p) for p in f.read().split()]
    except OSError:
        return []


def _ns(pid: int, kind: str) -> str | None:
    try:
        return os.readlink(f"/proc/{pid}/ns/{kind}")
    except OSError:
        return None


def _start_init(argv: list[str]) -> tuple[subprocess.Popen, int]:
    """(the unshare process, its child: the namespaces' first process, by its pid on this machine)."""
    proc = subprocess.Popen([*_UNSHARE, sys.executable, str(HERE / "host_init.py"), *argv], stdin=subprocess.PIPE,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    line = proc.stdout.readline()
    if line.strip() != "ready":
        proc.kill()
        raise RuntimeError(f"a simulated host did not start: {line}{proc.stderr.read()}")
    kids = _children(proc.pid)
    assert len(kids) == 1, kids
    return proc, kids[0]


class Host:
    def __init__(self, cluster: "Cluster", index: int, name: str, address: str):
        self.cluster, self.index, self.name, self.address = cluster, index, name, address
        self._unshare, self.pid = _start_init(["host", name, str(cluster.hosts_file)])
        self._pid_ns = _ns(self.pid, "pid")

    # ---- running things ----------------------------------------------------------------------------
    def command(self, argv: list[str], cwd: str | os.PathLike = REPO) -> list[str]:
        """argv, run inside this host (its namespaces, `cwd` as working directory)."""
        return ["nsenter", "--target", str(self.pid), "--net", "--uts", "--ipc", "--mount", "--pid",
                f"--wd={cwd}", "--", *argv]

    def popen(self, argv: list[str], env: dict[str, str] | None = None, **kwargs: Any) -> subprocess.Popen:
        """A process inside this host. Its pid is nsenter's; the command is nsenter's one child
        (`inner_pid`). `env` is added to this process's environment (PYTHONPATH: the repository)."""
        full = dict(os.environ, PYTHONPATH=str(REPO), PYTHONUNBUFFERED="1", OMP_NUM_THREADS="1", **(env or {}))
        return subprocess.Popen(self.command(argv, kwargs.pop("cwd", REPO)), env=full, **kwargs)

    def run(self, argv: list[str], timeout: float = 60, **kwargs: Any) -> subprocess.CompletedProcess:
        return subprocess.run(self.command(argv), capture_output=True, text=True, timeout=timeout, **kwargs)

    def call(self, fn: Callable[..., Any], *args: Any, **kwargs: Any) -> Any:
        """fn(*args, **kwargs) from a thread inside this host's network namespace (sockets it opens
        belong to this host's network: e.g. httpx calls to a server listening on a host address)."""
        box: dict[str, Any] = {}

        def run() -> None:
            try:
                fd = os.open(f"/proc/{self.pid}/ns/net", os.O_RDONLY)
                try:
                    if ctypes.CDLL(None, use_errno=True).setns(fd, CLONE_NEWNET) != 0:
                        raise OSError(ctypes.get_errno(), f"setns into {self.name}'s network failed")
                finally:
                    os.close(fd)
                box["value"] = fn(*args, **kwargs)
            except BaseException as e:  # noqa: BLE001 - re-raised in the caller
                box["error"] = e

        thread = threading.Thread(target=run, name=f"in-{self.name}", daemon=True)
        thread.start()
        thread.join()
        if "error" in box:
            raise box["error"]
        return box["value"]

    # ---- faults ------------------------------------------------------------------------------------
    def set_link(self, up: bool) -> None:
        """This host's link up or down (down: packets to and from it are dropped, nobody is told)."""
        subprocess.run(["nsenter", "--target", str(self.pid), "--net", "ip", "link", "set", "eth0",
                        "up" if up else "down"], check=True)

    def kill(self) -> None:
        """Power the host off: its link goes down first (a real power-off sends its peers no close and no
        reset, where killed processes would), then every process in it dies at once."""
        if self.alive:
            subprocess.run(["nsenter", "--target", str(self.pid), "--net", "ip", "link", "set", "eth0", "down"],
                           stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        try:
            os.kill(self.pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
        self._unshare.wait(30)

    @property
    def alive(self) -> bool:
        return self._unshare.poll() is None

    # ---- what is left ------------------------------------------------------------------------------
    def processes(self) -> list[int]:
        """Pids (as this machine numbers them) of every process in this host but its first."""
        if not self.alive:
            return []
        out = []
        for entry in os.listdir("/proc"):
            if entry.isdigit() and int(entry) != self.pid and _ns(int(entry), "pid") == self._pid_ns:
                try:
                    state = Path(f"/proc/{entry}/stat").read_text().rsplit(")", 1)[1].split()[0]
                except (OSError, IndexError):
                    continue
                if state not in ("Z", "X"):
                    out.append(int(entry))
        return out

    def shm_files(self) -> list[str]:
        """The names in this host's /dev/shm."""
        if not self.alive:
            return []
        return sorted(os.listdir(os.path.join("/proc", str(self.pid), "root", "dev", "shm")))  # its /dev/shm

    def close(self) -> None:
        if self.alive:
            try:
                self._unshare.stdin.close()  # the first process exits; the kernel kills the rest
            except OSError:
                pass
            try:
                self._unshare.wait(10)
            except subprocess.TimeoutExpired:
                self.kill()
        for stream in (self._unshare.stdout, self._unshare.stderr):
            stream.close()

    def __repr__(self) -> str:
        return f"Host({self.name}, {self.address})"


class Cluster:
    """`n` simulated hosts on one bridge. Use as a context manager, or call close()."""

    def __init__(self, n: int):
        reason = unavailable()
        if reason:
            raise RuntimeError(reason)
        self._tmp = tempfile.TemporaryDirectory(prefix="moeserve-hosts-")
        names = [f"host-{chr(ord('a') + i)}" for i in range(n)]
        self.hosts_file = Path(self._tmp.name) / "hosts"
        self.hosts_file.write_text("127.0.0.1 localhost\n::1 localhost\n" +
                                   "".join(f"{SUBNET}.{i + 1} {name}\n" for i, name in enumerate(names)))
        self.hosts: list[Host] = []
        self._switch: subprocess.Popen | None = None
        try:
            self._switch, switch_pid = _start_init(["switch"])
            self._in_switch(switch_pid, "ip link add br0 type bridge", "ip link set br0 up")
            for i, name in enumerate(names):
                host = Host(self, i, name, f"{SUBNET}.{i + 1}")
                self.hosts.append(host)
                subprocess.run(["ip", "link", "add", "eth0", "netns", str(host.pid), "type", "veth", "peer", "name",
                                f"port{i}", "netns", str(switch_pid)], check=True)
                self._in_switch(switch_pid, f"ip link set port{i} master br0", f"ip link set port{i} up")
                for cmd in (f"ip addr add {host.address}/24 dev eth0", "ip link set eth0 up"):
                    subprocess.run(["nsenter", "--target", str(host.pid), "--net", *cmd.split()], check=True)
        except BaseException:
            self.close()
            raise

    @staticmethod
    def _in_switch(pid: int, *commands: str) -> None:
        for cmd in commands:
            subprocess.run(["nsenter", "--target", str(pid), "--net", *cmd.split()], check=True)

    def __getitem__(self, i: int) -> Host:
        return self.hosts[i]

    def __iter__(self):
        return iter(self.hosts)

    def __len__(self) -> int:
        return len(self.hosts)

    def leftovers(self) -> dict[str, dict[str, list]]:
        """Per host still running: its processes (besides its first) and /dev/shm names; hosts with
        neither are left out (so a clean cluster gives {})."""
        out = {}
        for host in self.hosts:
            procs, shm = host.processes(), host.shm_files()
            if procs or shm:
                out[host.name] = {"processes": [_cmdline(p) for p in procs], "shm": shm}
        return out

    def wait_clean(self, timeout_s: float) -> dict[str, dict[str, list]]:
        """leftovers() once it is empty, or as it is after timeout_s."""
        deadline = time.monotonic() + timeout_s
        while (left := self.leftovers()) and time.monotonic() < deadline:
            time.sleep(0.5)
        return left

    def close(self) -> None:
        for host in self.hosts:
            host.close()
        if self._switch is not None and self._switch.poll() is None:
            self._switch.stdin.close()
            try:
                self._switch.wait(10)
            except subprocess.TimeoutExpired:
                self._switch.kill()
            for stream in (self._switch.stdout, self._switch.stderr):
                stream.close()
        self._tmp.cleanup()

    def __enter__(self) -> "Cluster":
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()


def _cmdline(pid: int) -> str:
    try:
        return f"{pid}: " + Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")[:200]
    except OSError:
        return f"{pid}: (gone)"


def inner_pid(proc: subprocess.Popen, timeout_s: float = 10) -> int:
    """The command nsenter started in a host (its one child), by its pid on this machine."""
    deadline = time.monotonic() + timeout_s
    while not (kids := _children(proc.pid)):
        if proc.poll() is not None or time.monotonic() > deadline:
            raise RuntimeError("the command did not start in its host")
        time.sleep(0.01)
    return kids[0]
