"""The front end's handle on the engine process: spawn it, talk ipc to it, watch it.

Outputs are routed by request id into the asyncio.Queue each caller registered; a queue receives
`ipc.OutputDelta`s and, if the engine dies, one `EngineDeadError`. The engine counts as alive while
its process runs, its socket is open and a heartbeat arrived within `health_timeout_s`; once it is
not, every pending request fails, /health says 503 and new requests are refused.
"""
from __future__ import annotations

import asyncio
import json
import logging
import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
import uuid
from dataclasses import dataclass
from typing import Any

from moeserve.config import EngineConfig, config_to_dict
from moeserve.errors import EngineDeadError, RequestError
from moeserve.sampling_params import SamplingParams
from moeserve.server import ipc

logger = logging.getLogger("moeserve.server")
STOPPED_ENGINE_S = 5.0  # the engine process SIGSTOPped this long is dead (multiproc_executor.STOPPED_RANK_S)
SHUTTING_DOWN = "the server is shutting down"  # the reason a shutdown gives (the engine's own death gives another)


class EngineRejected(RequestError):
    """The engine refused one request; carries the engine's status and error type."""

    def __init__(self, rejection: dict[str, Any]):
        super().__init__(rejection["message"], rejection.get("param"), rejection.get("code"))
        self.status = int(rejection["status"])
        self.type = rejection["type"]


@dataclass
class _Route:
    queue: asyncio.Queue
    added: asyncio.Future


class EngineClient:
    def __init__(self, config: EngineConfig, health_timeout_s: float = 60.0):
        self.config = config
        self.health_timeout_s = health_timeout_s
        self.ready: ipc.Ready | None = None
        self.stats: dict[str, Any] = {}
        self.dead_reason: str | None = None
        self.stopping = False  # shutdown() asked the engine to stop: its exit is then no error
        self.last_heartbeat = 0.0
        self._routes: dict[str, _Route] = {}
        self._proc: subprocess.Popen | None = None
        self._tmpdir: str | None = None
        self._writer: asyncio.StreamWriter | None = None
        self._tasks: list[asyncio.Task] = []
        self._controls: dict[str, asyncio.Future] = {}

    # -- lifecycle --------------------------------------------------------------------------------
    async def start(self, startup_timeout_s: float) -> ipc.Ready:
        """Spawns the engine process and waits until its model is loaded; raises EngineDeadError."""
        self._tmpdir = tempfile.mkdtemp(prefix="moeserve-")  # mode 0700: only this user can connect
        path = os.path.join(self._tmpdir, "engine.sock")
        listener = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        listener.bind(path)
        listener.listen(1)
        listener.setblocking(False)
        self._proc = subprocess.Popen(
            [sys.executable, "-m", "moeserve.server.engine_process", "--socket", path,
             "--config-json", json.dumps(config_to_dict(self.config)), "--parent-pid", str(os.getpid())],
            start_new_session=True,  # terminal signals go to the front end, which drains first
        )
        deadline = time.monotonic() + startup_timeout_s
        try:
            conn, _ = await self._until(asyncio.get_running_loop().sock_accept(listener), deadline)
        finally:
            listener.close()
            # connected (or given up): the path is needed no more, so nothing is left behind even if
            # this process is SIGKILLed later
            shutil.rmtree(self._tmpdir, ignore_errors=True)
            self._tmpdir = None
        return await self.attach(conn, deadline)

    async def attach(self, conn: socket.socket, deadline: float = float("inf")) -> ipc.Ready:
        """Talks to an engine loop on `conn` (a connected unix socket); returns its Ready message."""
        reader, self._writer = await asyncio.open_unix_connection(sock=conn)
        decoder = ipc.Decoder()
        first = await self._until(self._read_one(reader, decoder), deadline)
        if isinstance(first, ipc.Fatal):
            await self.shutdown()
            raise EngineDeadError(first.message)
        if not isinstance(first, ipc.Ready):
            raise EngineDeadError(f"the engine sent {type(first).__name__} before Ready")
        self.ready, self.last_heartbeat = first, time.monotonic()
        self._tasks = [asyncio.create_task(self._read_loop(reader, decoder)), asyncio.create_task(self._watchdog())]
        return first

    def _exited(self) -> bool:
        """True once the engine process has exited. Before reaping it, SIGKILL what is left of its
        process group: the engine's pid names that group only while the pid is held (a reaped pid
        may be reused, and killing by it then could hit an unrelated group)."""
        proc = self._proc
        if proc is None:
            return False
        if proc.returncode is not None:
            return True
        try:
            info = os.waitid(os.P_PID, proc.pid, os.WEXITED | os.WNOHANG | os.WNOWAIT)
        except ChildProcessError:  # reaped elsewhere: its group can no longer be named safely
            proc.poll()
            return True
        if info is None:
            return False
        _kill_group(proc.pid)
        proc.poll()
        return True

    async def _until(self, awaitable: Any, deadline: float) -> Any:
        """Awaits `awaitable` while the engine process lives and the deadline is ahead."""
        task = asyncio.ensure_future(awaitable)
        try:
            while not task.done():
                if self._exited():
                    raise EngineDeadError(f"{self._exit_reason()} while starting")
                if time.monotonic() > deadline:
                    raise EngineDeadError("the engine did not start within --startup-timeout-s")
                await asyncio.wait({task}, timeout=0.2)
            return task.result()
        finally:
            task.cancel()

    @staticmethod
    async def _read_one(reader: asyncio.StreamReader, decoder: ipc.Decoder) -> Any:
        while True:
            data = await reader.read(1 << 16)
            if not data:
                raise EngineDeadError("the engine closed its socket while starting")
            msgs = decoder.feed(data)
            if msgs:
                assert len(msgs) == 1, "the engine sends nothing after Ready until asked"
                return msgs[0]

    async def shutdown(self, timeout_s: float = 10.0) -> None:
        """Asks the engine to stop, waits, then escalates to SIGTERM and SIGKILL. Idempotent."""
        self.stopping = True
        self._send(ipc.Shutdown())
        proc = self._proc
        # a stopped or stuck engine ignores Shutdown (and a stopped one SIGTERM): escalate to SIGKILL
        for wait_s, escalate in ((timeout_s, proc.terminate if proc else None), (5.0, proc.kill if proc else None)):
            if proc is None or await self._wait_exit(wait_s):
                break
            escalate()
        else:
            await self._wait_exit(5.0)
        if proc is not None and proc.returncode is None:  # still unreaped: its pid still names its group
            _kill_group(proc.pid)
        for task in self._tasks:
            task.cancel()
        if self._writer is not None:
            self._writer.close()
        if self._tmpdir:
            shutil.rmtree(self._tmpdir, ignore_errors=True)
        self._mark_dead(SHUTTING_DOWN, log=False)

    async def _wait_exit(self, timeout_s: float) -> bool:
        deadline = time.monotonic() + timeout_s
        while not self._exited() and time.monotonic() < deadline:
            await asyncio.sleep(0.05)
        return self._exited()

    # -- requests ---------------------------------------------------------------------------------
    @property
    def healthy(self) -> bool:
        return self.dead_reason is None and time.monotonic() - self.last_heartbeat < self.health_timeout_s

    async def add(self, request_id: str, prompt_token_ids: list[int], params: SamplingParams, queue: asyncio.Queue,
                  owner: str | None = None, kv_transfer: dict[str, Any] | None = None) -> None:
        """Admits one request whose outputs go to `queue`; raises EngineRejected or EngineDeadError.
        `owner`: the HTTP request it is a choice of (the engine shares fairly between owners)."""
        if self.dead_reason is not None:
            raise EngineDeadError(self.dead_reason)
        route = _Route(queue, asyncio.get_running_loop().create_future())
        message = ipc.encode(ipc.AddRequest(request_id, prompt_token_ids, ipc.params_to_wire(params), owner, kv_transfer))
        self._routes[request_id] = route
        self._write(message)
        try:
            await route.added
        except asyncio.CancelledError:
            self.abort([request_id])  # the engine may have admitted it already
            raise
        except BaseException:
            self._routes.pop(request_id, None)
            raise

    def abort(self, request_ids: list[str], notify: bool = False) -> None:
        """Stops requests; with notify, their queues get a final output with finish_reason "abort"."""
        live = [r for r in request_ids if r in self._routes]
        if not live:
            return
        self._send(ipc.AbortRequests(live))
        for rid in live:
            route = self._routes.pop(rid)
            if not route.added.done():
                route.added.set_exception(EngineDeadError(SHUTTING_DOWN))
            elif notify:
                route.queue.put_nowait(ipc.OutputDelta(rid, [], "", finish_reason="abort"))

    async def trace_control(self, action: str, timeout_s: float = 60.0) -> ipc.TraceControlResult:
        """Start, stop or dump the engine's routing recorder; the engine answers between steps."""
        if self.dead_reason is not None:
            raise EngineDeadError(self.dead_reason)
        control_id = uuid.uuid4().hex
        future = asyncio.get_running_loop().create_future()
        self._controls[control_id] = future
        self._send(ipc.TraceControl(control_id, action))
        try:
            return await asyncio.wait_for(future, timeout_s)
        finally:
            self._controls.pop(control_id, None)

    def abort_all(self) -> None:
        self.abort(list(self._routes), notify=True)

    @property
    def num_pending(self) -> int:
        return len(self._routes)

    def _send(self, msg: Any) -> None:
        self._write(ipc.encode(msg))

    def _write(self, data: bytes) -> None:
        if self._writer is not None and not self._writer.is_closing():
            self._writer.write(data)

    # -- what the engine sends --------------------------------------------------------------------
    async def _read_loop(self, reader: asyncio.StreamReader, decoder: ipc.Decoder) -> None:
        reason = "the engine process exited"
        try:
            while data := await reader.read(1 << 20):
                for msg in decoder.feed(data):
                    self._dispatch(msg)
        except ipc.ProtocolError as e:
            reason = f"the engine sent a malformed message ({e})"
        except ConnectionError:  # the engine died mid-write: its exit is the news, not our traceback
            logger.warning("the engine closed its connection")
        except Exception as e:  # a bug here must fail requests, not hang them
            logger.exception("engine reader failed")
            reason = f"engine connection failed: {type(e).__name__}"
        if self.dead_reason is None and reason == "the engine process exited":  # its status says why
            for _ in range(20):
                if self._exited():
                    reason = self._exit_reason()
                    break
                await asyncio.sleep(0.05)
        self._mark_dead(reason)

    def _exit_reason(self) -> str:
        status = self._proc.returncode
        if status is not None and status < 0:
            try:
                return f"the engine process was killed by {signal.Signals(-status).name} (status {status})"
            except ValueError:
                pass
        return f"the engine process exited with status {status}"

    def _dispatch(self, msg: Any) -> None:
        if isinstance(msg, ipc.Outputs):
            for wire in msg.outputs:
                self._route_output(ipc.output_from_wire(wire))
        elif isinstance(msg, ipc.AddResults):
            for rid in msg.accepted:
                if rid in self._routes and not self._routes[rid].added.done():
                    self._routes[rid].added.set_result(None)
            for rejection in msg.rejected:
                route = self._routes.pop(rejection["request_id"], None)
                if route is not None and not route.added.done():
                    route.added.set_exception(EngineRejected(rejection))
        elif isinstance(msg, ipc.TraceControlResult):
            future = self._controls.pop(msg.control_id, None)
            if future is not None and not future.done():
                future.set_result(msg)
        elif isinstance(msg, ipc.Heartbeat):
            self.stats, self.last_heartbeat = msg.stats, time.monotonic()
        elif isinstance(msg, ipc.Fatal):
            self._mark_dead(msg.message)

    def _route_output(self, out: ipc.OutputDelta) -> None:
        route = self._routes.get(out.request_id)
        if route is None:
            return  # aborted by us: its late outputs have no reader
        route.queue.put_nowait(out)  # may abort the request (a client that stopped reading), routes and all
        if out.finish_reason is not None:
            self._routes.pop(out.request_id, None)

    async def _watchdog(self) -> None:
        stopped_since = None
        while self.dead_reason is None:
            await asyncio.sleep(0.5)
            stopped_since = (stopped_since or time.monotonic()) if self._stopped() else None
            if self._exited():
                self._mark_dead(self._exit_reason())
            elif stopped_since is not None and time.monotonic() - stopped_since >= STOPPED_ENGINE_S:
                # it would answer nothing until --health-timeout-s, and SIGTERM waits on a stopped process
                self._mark_dead(f"the engine process is stopped (SIGSTOP) for {STOPPED_ENGINE_S:g} s")
                self._proc.kill()
            elif time.monotonic() - self.last_heartbeat > self.health_timeout_s:
                self._mark_dead(f"the engine sent no heartbeat for {self.health_timeout_s:g} s")
                if self._proc is not None:
                    self._proc.terminate()
        while self._proc is not None and not self._exited():  # reap it: no zombie while we answer 503
            await asyncio.sleep(0.5)

    def _stopped(self) -> bool:
        """The engine process is stopped by a signal (/proc state "T"; a debugger's "t" is left alone)."""
        if self._proc is None:
            return False
        try:
            with open(f"/proc/{self._proc.pid}/stat") as f:
                return f.read().rsplit(")", 1)[1].split()[0] == "T"
        except (OSError, IndexError):
            return False

    def _mark_dead(self, reason: str, log: bool = True) -> None:
        if self.dead_reason is not None:
            return
        self.dead_reason = reason
        if log and self.stopping:  # the reader or watchdog saw the exit that shutdown() asked for
            logger.info("the engine stopped: %s", reason)
        elif log:  # an OOM kill must leave a trace in the log, not only in 503 bodies
            logger.error("the engine is dead: %s; /health answers 503 and %d pending request(s) get errors",
                         reason, len(self._routes))
        error = EngineDeadError(reason)
        for route in self._routes.values():
            if not route.added.done():
                route.added.set_exception(error)
            route.queue.put_nowait(error)
        self._routes.clear()


def _kill_group(pgid: int) -> None:
    """SIGKILL whatever is left of the engine's process group (the engine leads its own session, and
    the ranks it spawns join its group): a rank that cannot run its own parent watcher (stopped,
    or stuck in the kernel) would otherwise outlive the server. Nothing left: nothing to do."""
    try:
        os.killpg(pgid, signal.SIGKILL)
    except (ProcessLookupError, PermissionError):
        pass
