"""Rank 0's executor for a world of several ranks.

One node: spawns ranks 1..W-1 itself (`python -m moeserve.engine.rank_worker`, configuration passed
as JSON in the environment). Several nodes: torchrun / deepspeed started every rank and this
process is RANK 0. Each step: broadcast the plan (msgpack) on the plan group, run group 0's batch
here, gather the group leaders' sampled tokens on the result group. Any failure (a rank raising,
dying, or a collective timing out) becomes EngineDeadError; a watchdog turns a dead child into an
stop of the whole world, so a dead rank never leaves the server hanging.

An idle server runs no step, and ranks on other nodes are no children of this process to watch, so
`check_health` (called between steps by the engine loop) runs an empty probe step through every
layer's collectives once the world has been idle for PROBE_IDLE_S: a rank that died while nothing
was running is found within seconds (its peers' sockets close) or within the step timeout (stuck),
not only when the next request arrives.
"""
from __future__ import annotations

import contextlib
import json
import logging
import os
import subprocess
import sys
import threading
import time

from moeserve import envs
from moeserve.config import EngineConfig, config_to_dict
from moeserve.core.step_plan import GroupBatch, PullTally, StepPlan, StepResult
from moeserve.engine.host_map import gather_hosts, unreachable
from moeserve.engine.host_memory import check_host_kv
from moeserve.engine.plan_codec import DRAIN, decode_result, encode_plan, encode_sampled
from moeserve.engine.process_groups import (
    RankEnv, broadcast_bytes, gather_bytes, init_rank, loopback_only_env, store_listener,
)
from moeserve.engine.rank_worker import PROBE_IDLE_S  # idle this long: check_health probes the world
from moeserve.errors import EngineDeadError
from moeserve.kernels.registry import kernel_set_class, resolve

log = logging.getLogger("moeserve.executor")

# a spawned rank stopped by SIGSTOP this long is a dead world: its peers would otherwise wait out the
# step timeout (60 s by default) inside a collective, with no heartbeat, before anyone named it
STOPPED_RANK_S = 5.0


class RanksDidNotStart(RuntimeError):
    """A spawned rank exited, or was stopped, before the world had formed (the engine's start fails)."""


class StepFuture:
    """A submitted step; `result()` reads it back (rank 0's share and the others', merged)."""

    def __init__(self, executor: MultiprocExecutor, step: int, own) -> None:
        self.executor, self.step, self.own = executor, step, own
        self.reported = False  # the ranks send (or sent) its result without a drain

    def result(self) -> StepResult:
        return self.executor._collect(self)


class MultiprocExecutor:
    def __init__(self, config: EngineConfig):
        from moeserve.engine.rank_worker import set_rank_threads
        from moeserve.engine.worker import Worker

        parallel = config.parallel
        self.num_groups = parallel.num_attention_groups
        self.remote_sampling_groups = frozenset(range(1, self.num_groups))  # group 0 samples here, on rank 0
        self._pulls = PullTally(parallel.world_size // self.num_groups)  # KV reads, as the ranks report them
        self.dead: str | None = None
        self._held: list[StepFuture] = []  # submitted ahead, results not yet reported by the ranks
        self._stopping = False
        self._last_step = time.monotonic()
        self.probe_idle_s = PROBE_IDLE_S
        self.num_probes = 0
        self._procs: list[subprocess.Popen] = []
        self._stopped_at_start: dict[int, float] = {}  # rank -> since when it is stopped (_startup_check)
        env = RankEnv.from_environ()
        store_socket = None
        if env is None:  # one node, ours to spawn (--nodes > 1 needs a launcher: engine/launch_check.py)
            if resolve(config.device.device, config.device.kernels)[0] == "cpu" and config.cache.num_blocks is None:
                check_host_kv(config.cache.kv_cache_memory_mb, parallel.world_size)  # every rank's cache together
            store_socket = store_listener()  # every socket of the world on loopback (docs/limits.md)
            os.environ.update(loopback_only_env())
            env = RankEnv(0, parallel.world_size, 0, "127.0.0.1", store_socket.getsockname()[1])
            kernel_set_class(resolve(config.device.device, config.device.kernels)[1]).build()  # once, not per rank
            if parallel.ep > 1 and parallel.dispatch in ("shm", "auto"):
                from moeserve.dispatch import native

                native.load()  # shm's C++ kernels (dispatch/native.py), likewise built once before the ranks
            self._procs = [self._spawn(config, env, rank) for rank in range(1, env.world_size)]
        elif env.rank != 0:
            raise RuntimeError("MultiprocExecutor runs on rank 0 only")
        set_rank_threads(parallel.ranks_per_node, parallel.reserved_cores or 0)
        try:
            self.groups = init_rank(env, parallel, resolve(config.device.device, config.device.kernels)[0], store_socket,
                                    self._startup_check)
            self.worker = Worker(config, self.groups.ctx, group=0)
            import torch.distributed as dist

            dist.barrier(group=self.groups.plan_group)
            self._hosts = gather_hosts(env.master_addr, self.groups.result_group)  # rank_worker sends its own
            self._kv_layouts = self._gather_kv_layouts()
        except Exception as e:
            exited = self._exited_rank()  # gloo's error (a timeout, a closed socket) does not say who
            if store_socket is not None and store_socket.fileno() >= 0:
                store_socket.close()
            self._kill_children()
            self._leave_group()  # a later engine in this process must be able to start its own
            if exited is not None and not isinstance(e, RanksDidNotStart):
                raise RanksDidNotStart(f"{exited} while the ranks were starting ({type(e).__name__}: {e})") from e
            raise
        runner = self.worker.runner
        self.num_blocks = runner.num_blocks
        self.max_model_len = runner.max_model_len
        self.vocab_size = runner.hf_config.vocab_size
        if self._procs:
            threading.Thread(target=self._watch_children, daemon=True, name="rank-watchdog").start()

    def _gather_kv_layouts(self) -> list[dict]:
        """Every rank's NIXL CacheLayout (JSON, rank order), gathered once after the barrier (every rank
        has built its agent by then); rank_worker.run_rank sends its own at the same point."""
        if self.worker.kv_agent is None:
            return []
        payloads = gather_bytes(json.dumps(self.worker.kv_agent.layout()).encode(), self.groups.result_group)
        return [json.loads(p) for p in payloads]

    def kv_layouts(self) -> list[dict]:
        assert self._kv_layouts, "kv_layouts without --kv-transfer"
        return self._kv_layouts

    @staticmethod
    def _spawn(config: EngineConfig, env: RankEnv, rank: int) -> subprocess.Popen:
        child_env = dict(
            os.environ,
            RANK=str(rank),
            WORLD_SIZE=str(env.world_size),
            LOCAL_RANK=str(rank),
            MASTER_ADDR=env.master_addr,
            MASTER_PORT=str(env.master_port),
        )
        child_env[envs.PARENT_PID.name] = str(os.getpid())
        child_env[envs.ENGINE_CONFIG.name] = json.dumps(config_to_dict(config))
        return subprocess.Popen([sys.executable, "-m", "moeserve.engine.rank_worker"], env=child_env)

    def _startup_check(self) -> None:
        """Raises once a spawned rank has exited, or has been stopped for STOPPED_RANK_S: the world
        cannot form."""
        failure = self._exited_rank() or self._stopped_too_long(self._stopped_at_start)
        if failure is not None:
            raise RanksDidNotStart(f"{failure} while the ranks were starting")

    def _exited_rank(self) -> str | None:
        """'rank N exited with code C' for the first spawned rank that has exited, else None; a
        stopped rank is named first, since its peers exit only because it stalled them."""
        for rank, proc in enumerate(self._procs, start=1):
            code = proc.poll()
            if code is not None:
                return self._stopped_first(f"rank {rank} exited with code {code}")
        return None

    def _stopped_first(self, failure: str) -> str:
        """`failure`, after the spawned ranks the kernel has stopped (SIGSTOP, a debugger), if any: a
        stopped rank stalls every collective until its peers time out, and they, not it, exit (the
        errors would otherwise name a peer)."""
        stopped = self._stopped_ranks(("T", "t"))
        if not stopped:
            return failure
        return f"rank {', '.join(map(str, stopped))} is stopped (SIGSTOP or a debugger) and stalled the world; {failure}"

    def _stopped_ranks(self, states: tuple[str, ...]) -> list[int]:
        """Spawned ranks whose process is in one of `states` (/proc: "T" stopped by a signal, "t"
        stopped by a debugger)."""
        stopped = []
        for rank, proc in enumerate(self._procs, start=1):
            try:
                with open(f"/proc/{proc.pid}/stat") as f:
                    state = f.read().rsplit(")", 1)[1].split()[0]
            except (OSError, IndexError):
                continue
            if state in states:
                stopped.append(rank)
        return stopped

    def _note_exited_ranks(self, wait_s: float) -> None:
        """Sets `dead` to the first spawned rank found exited within wait_s (none spawned: no wait)."""
        deadline = time.monotonic() + wait_s
        while self._procs and self.dead is None:
            exited = self._exited_rank()
            if exited is not None:
                self.dead = f"{exited} (its error, if it raised one, is in the log)"
                return
            if time.monotonic() >= deadline:
                return
            time.sleep(0.05)

    def _watch_children(self) -> None:
        """A dead rank kills the rest of the world, so whatever rank 0 is blocked on fails at once
        instead of waiting for the step timeout; the next (or current) step raises EngineDeadError."""
        stopped_since: dict[int, float] = {}
        while self.dead is None and not self._stopping:
            failure = self._exited_rank() or self._stopped_too_long(stopped_since)
            if failure is not None and not self._stopping:
                self.dead = failure
                log.error("%s; stopping every rank", self.dead)
                self._kill_children()
                return
            time.sleep(0.2)

    def _stopped_too_long(self, since: dict[int, float]) -> str | None:
        """A rank SIGSTOPped for STOPPED_RANK_S stalls every collective: named, it ends the world now.
        A rank a debugger holds ("t") is left alone: someone is looking at it."""
        now = time.monotonic()
        stopped = self._stopped_ranks(("T",))
        for rank in list(since):
            if rank not in stopped:
                del since[rank]
        for rank in stopped:
            if now - since.setdefault(rank, now) >= STOPPED_RANK_S:
                return f"rank {rank} is stopped (SIGSTOP) for {STOPPED_RANK_S:g} s and stalls every collective"
        return None

    def check_health(self) -> None:
        """Raises EngineDeadError once any rank is known dead; when idle, probes the world first."""
        if self.dead:
            raise EngineDeadError(self.dead)
        if time.monotonic() - self._last_step >= self.probe_idle_s:
            self.num_probes += 1
            self.execute(StepPlan(step=-1, groups=[GroupBatch(g) for g in range(self.num_groups)]))

    def execute(self, plan: StepPlan) -> StepResult:
        """One step on every rank, its result read back at once."""
        return self.submit(plan, ahead=False).result()

    def submit(self, plan: StepPlan, ahead: bool = True) -> StepFuture:
        """Send the plan to every rank and queue this rank's share on the device, without reading
        anything back. ahead: the ranks hold this step's result until the next plan (or a drain), so the
        host may schedule that plan while this one runs; False: they report it at once. Results must be
        taken in submission order. Any failure on rank 0 (its own error, or a collective that failed or
        timed out because a rank died, stopped or raised and exited) ends the world at once: no further
        collective is tried, since each would wait out the step timeout again. A BaseException
        (Ctrl-C in LLM.generate) also ends it: the ranks are mid-step and out of step with rank 0."""
        if self.dead:
            raise EngineDeadError(self.dead)
        self._last_step = time.monotonic()
        with self._failing(plan.step):
            broadcast_bytes(encode_plan(plan, report_now=not ahead), self.groups.plan_group)
            own = self.worker.launch(plan)
        future = StepFuture(self, plan.step, own)
        for earlier in self._held:  # the ranks report them now that this step is queued
            earlier.reported = True
        self._held = [future] if ahead else []
        future.reported = not ahead
        return future

    def _collect(self, future: StepFuture) -> StepResult:
        """The step's merged result: rank 0's own, then every rank's share from the result group."""
        assert not self._held or self._held[0] is future or future.reported, "results are taken in submission order"
        with self._failing(future.step):
            if not future.reported:  # the newest step, no plan after it: ask the ranks for it
                broadcast_bytes(DRAIN, self.groups.plan_group)
                self._held = []
            own = future.own.result()
            payloads = gather_bytes(encode_sampled(own.sampled, own.prompt_logprobs, own.kv_pulls, own.drafts,
                                                   own.grammars), self.groups.result_group)
        merged = StepResult(step=future.step)
        pulls = []
        for payload in payloads:
            part = decode_result(payload)
            merged.sampled.extend(part.sampled)
            merged.prompt_logprobs.extend(part.prompt_logprobs)
            merged.drafts.update(part.drafts)
            merged.grammars.extend(part.grammars)
            pulls.append(part.kv_pulls)
        merged.kv_pulls = self._pulls.add(pulls)
        return merged

    @contextlib.contextmanager
    def _failing(self, step: int):
        """Turns any failure inside into the world's death (see `submit`)."""
        try:
            yield
        except BaseException as exc:
            if isinstance(exc, Exception):
                log.exception("step %d failed on rank 0", step)
            # dead first (a second interrupt during the wait below must still find the world dead);
            # then a rank that raised and exited (rank_worker) names the failure better than the
            # "connection closed" our collective saw
            fallback = self._stopped_first(f"step {step} failed: {type(exc).__name__}: {exc}")
            try:
                self._note_exited_ranks(wait_s=0.5)
                if self.dead is None and isinstance(exc, Exception):
                    gone = unreachable(self._hosts)  # a host or link across hosts gone: name it first
                    fallback = fallback if gone is None else f"{gone}; {fallback}"
            finally:
                self.dead = self.dead or fallback
            if isinstance(exc, Exception):
                raise EngineDeadError(self.dead) from exc
            raise

    def shutdown(self) -> None:
        """Tell the ranks to stop and give them 10 s; a dead world (a rank exited, a step failed or
        timed out) is killed at once. The kill runs however this ends: a SIGTERM arriving during the
        wait (SystemExit) must not leave a stuck rank (e.g. a SIGSTOPped one, which no watcher thread
        of its own can end) behind."""
        self._stopping = True
        try:
            if self.dead is None:
                try:
                    broadcast_bytes(encode_plan(None), self.groups.plan_group)
                except Exception:
                    log.warning("could not tell the ranks to stop; killing them")
                deadline = time.monotonic() + 10
                for proc in self._procs:
                    try:
                        proc.wait(timeout=max(0.1, deadline - time.monotonic()))
                    except subprocess.TimeoutExpired:
                        pass
        finally:
            self._kill_children()
        self._leave_group()

    @staticmethod
    def _leave_group() -> None:
        import torch.distributed as dist

        if dist.is_initialized():
            try:
                dist.destroy_process_group()
            except Exception:  # noqa: BLE001 - a group whose peers died may not tear down cleanly
                log.warning("could not destroy the process group cleanly")
        else:  # an init_process_group that failed has counted its group: the next world's ranks
            # (new processes, counting from 0) would wait for keys under another group's prefix
            from torch.distributed.distributed_c10d import _world

            _world.group_count = 0

    def _kill_children(self) -> None:
        for proc in self._procs:
            if proc.poll() is None:
                proc.kill()
        for proc in self._procs:
            try:
                proc.wait(timeout=5)
            except subprocess.TimeoutExpired:
                pass
