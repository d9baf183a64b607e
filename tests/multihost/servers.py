"""`moeserve serve` on simulated hosts: one server on one host, or one server spanning several hosts
under torchrun (one launch per host, as docs/multihost.md tells an operator to run it), and
vllm-router on a host of its own. Every process runs inside its host; the test reaches a server from
the thread of a host (`Host.call`)."""
from __future__ import annotations

import re
import subprocess
import sys
import threading
import time
from typing import Any, Callable

import httpx
from harness import Host, inner_pid

_LISTENING = re.compile(r"serving (\S+) on (http://[\d.]+:\d+)")
SECRET = "the simulated pool's secret, long and random enough"  # --kv-secret of every P/D server
MASTER_PORT = 29500
HTTP_PORT = 8000


class Server:
    """A server on `hosts` (hosts[0] runs rank 0 and the HTTP front end on `port`), `nproc` ranks per
    host. `args`: the serve flags shared by every host; `per_host(host)`: flags of one host (e.g. its
    --kv-side-channel-host). With one host and nproc 1 it is a plain `moeserve serve` (a server spawns its
    own ranks on one host: pass --ep/--tp in args); with more hosts each runs torchrun."""

    def __init__(self, hosts: list[Host], args: list[str], nproc: int = 1, per_host: Callable[[Host], list[str]] | None = None,
                 env: dict[str, str] | None = None, port: int = HTTP_PORT, public: bool = False, startup_s: float = 400):
        self.hosts, self.port = hosts, port
        self.lines: list[str] = []
        self.url: str | None = None
        self.model: str | None = None
        self._ready = threading.Event()
        front = ["--port", str(port), "--host", hosts[0].address if public else "127.0.0.1"]
        self.procs: list[subprocess.Popen] = []
        for i, host in enumerate(hosts):
            serve = ["-m", "moeserve.cli", "serve", *args, *front, *(per_host(host) if per_host else [])]
            if len(hosts) > 1:
                serve = ["-m", "torch.distributed.run", "--nnodes", str(len(hosts)), "--node-rank", str(i),
                         "--nproc-per-node", str(nproc), "--master-addr", hosts[0].address, "--master-port",
                         str(MASTER_PORT), *serve, "--nodes", str(len(hosts))]
            proc = host.popen([sys.executable, *serve], env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                              text=True)
            self.procs.append(proc)
            threading.Thread(target=self._read, args=(proc, host.name), daemon=True).start()
        try:
            self._wait_ready(startup_s)
        except BaseException:
            self.kill()
            raise

    def _read(self, proc: subprocess.Popen, name: str) -> None:
        for line in proc.stdout:
            if "hostname of the client socket cannot be retrieved" in line:
                continue  # torchrun's store asks reverse DNS of every client; the simulated hosts have none
            self.lines.append(f"[{name}] {line}")
            m = _LISTENING.search(line)
            if m and not self._ready.is_set():
                self.model, self.url = m.group(1), m.group(2)
                self._ready.set()

    def _wait_ready(self, timeout_s: float) -> None:
        deadline = time.monotonic() + timeout_s
        while not self._ready.wait(0.5):
            if time.monotonic() > deadline or any(p.poll() is not None for p in self.procs):
                raise RuntimeError("the server did not start:\n" + self.log_tail())
        while time.monotonic() < deadline:
            try:
                if self.get("/health", timeout=5).status_code == 200:
                    return
            except httpx.HTTPError:
                pass
            time.sleep(0.3)
        raise RuntimeError("the server never became healthy:\n" + self.log_tail())

    def log_tail(self, n: int = 60) -> str:
        return "".join(self.lines[-n:])

    # ---- HTTP, from the front end's host -----------------------------------------------------------------
    def post(self, path: str, body: dict[str, Any], timeout: float = 120, **kwargs: Any) -> httpx.Response:
        return self.hosts[0].call(httpx.post, self.url + path, json=body, timeout=timeout, **kwargs)

    def get(self, path: str, timeout: float = 30) -> httpx.Response:
        return self.hosts[0].call(httpx.get, self.url + path, timeout=timeout)

    def completion(self, prompt: str | list[int], max_tokens: int = 12, **extra: Any) -> dict[str, Any]:
        body = {"model": self.model, "prompt": prompt, "max_tokens": max_tokens, "temperature": 0, "ignore_eos": True,
                "return_token_ids": True, **extra}
        r = self.post("/v1/completions", body)
        assert r.status_code == 200, r.text
        return r.json()

    def metric(self, name: str) -> float:
        """A value of /metrics at the next heartbeat (engine numbers arrive with it, every 0.2 s)."""
        time.sleep(0.5)
        for line in self.get("/metrics").text.splitlines():
            if line.startswith(name + " "):
                return float(line.split()[1])
        raise AssertionError(f"{name} not in /metrics")

    # ---- ending ------------------------------------------------------------------------------------------
    def terminate(self) -> None:
        """SIGTERM to every host's launch (torchrun passes it to its ranks)."""
        for proc in self.procs:
            if proc.poll() is None:
                try:
                    inner = inner_pid(proc, 1)
                except RuntimeError:
                    continue
                subprocess.run(["kill", "-TERM", str(inner)], check=False)

    def wait(self, timeout_s: float) -> list[int | None]:
        deadline = time.monotonic() + timeout_s
        for proc in self.procs:
            try:
                proc.wait(max(0.1, deadline - time.monotonic()))
            except subprocess.TimeoutExpired:
                pass
        return [p.poll() for p in self.procs]

    def kill(self) -> None:
        for proc in self.procs:
            if proc.poll() is None:
                try:
                    subprocess.run(["kill", "-KILL", str(inner_pid(proc, 1))], check=False)
                except RuntimeError:
                    pass
                proc.kill()
        for proc in self.procs:
            try:
                proc.wait(10)
            except subprocess.TimeoutExpired:
                pass


class Router:
    """vllm-router in P/D mode on `host`, in front of prefill and decode servers that listen on their
    hosts' addresses."""

    def __init__(self, host: Host, prefill: list[Server], decode: list[Server], port: int = HTTP_PORT):
        self.host = host
        self.url = f"http://{host.address}:{port}"
        argv = ["vllm-router", "--vllm-pd-disaggregation", "--host", host.address, "--port", str(port),
                "--prometheus-port", str(port + 1)]
        for s in prefill:
            argv += ["--prefill", s.url]
        for s in decode:
            argv += ["--decode", s.url]
        self.proc = host.popen(argv, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)

    def post(self, path: str, body: dict[str, Any], timeout: float = 120) -> httpx.Response:
        return self.host.call(httpx.post, self.url + path, json=body, timeout=timeout)

    def first(self, body: dict[str, Any], timeout_s: float = 120) -> httpx.Response:
        """The first 200 answer of the starting router to `body`."""
        deadline = time.monotonic() + timeout_s
        while True:
            try:
                r = self.post("/v1/completions", body)
                if r.status_code == 200:
                    return r
            except httpx.HTTPError:
                pass
            assert time.monotonic() < deadline, "vllm-router never answered"
            time.sleep(0.5)

    def kill(self) -> None:
        if self.proc.poll() is None:
            try:
                subprocess.run(["kill", "-KILL", str(inner_pid(self.proc, 1))], check=False)
            except RuntimeError:
                pass
            self.proc.wait(10)


def run_offline(hosts: list[Host], nproc: int, settings: dict[str, Any], prompts: list, max_tokens: int,
                rounds: int = 1, timeout_s: float = 600, port: int = MASTER_PORT + 1) -> dict[str, Any]:
    """offline_world.py under torchrun on every host (`nproc` ranks each): rank 0's result (tokens,
    seconds per round, dispatcher)."""
    import json
    import tempfile

    with tempfile.TemporaryDirectory(prefix="moeserve-offline-") as tmp:  # /tmp is every host's
        prompts_file, out = f"{tmp}/prompts.json", f"{tmp}/out.json"
        with open(prompts_file, "w") as f:
            json.dump(prompts, f)
        procs = []
        for i, host in enumerate(hosts):
            argv = [sys.executable, "-m", "torch.distributed.run", "--nnodes", str(len(hosts)), "--node-rank", str(i),
                    "--nproc-per-node", str(nproc), "--master-addr", hosts[0].address, "--master-port", str(port),
                    "tests/multihost/offline_world.py", "--settings", json.dumps(dict(settings, nodes=len(hosts))),
                    "--prompts", prompts_file, "--max-tokens", str(max_tokens), "--rounds", str(rounds), "--out", out]
            procs.append(host.popen(argv, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True))
        logs = []
        try:
            for proc in procs:
                logs.append(proc.communicate(timeout=timeout_s)[0])
        finally:
            for proc in procs:
                if proc.poll() is None:
                    proc.kill()
        text = "\n".join(line for log in logs for line in log.splitlines()
                         if "hostname of the client socket" not in line)
        assert all(p.returncode == 0 for p in procs), text[-6000:]
        with open(out) as f:
            return json.load(f)
