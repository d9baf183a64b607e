"""Entry point of every rank but 0: join the mesh, load this rank's weights, run plans until told to stop.

Started by `MultiprocExecutor` on one node (`python -m moeserve.engine.rank_worker`, config in the
MOESERVE_ENGINE_CONFIG environment variable as JSON), or by `moeserve serve` itself when torchrun or
the deepspeed launcher set RANK != 0.
"""
from __future__ import annotations

import json
import logging
import os
import signal
import sys
import threading
import time

from moeserve import envs
from moeserve.config import EngineConfig, config_from_dict
from moeserve.engine.gc_heap import freeze_startup_objects

log = logging.getLogger("moeserve.rank")

# A server's rank 0 that has been idle this long runs an empty probe step through every collective
# (multiproc_executor.MultiprocExecutor.check_health), so its ranks hear from it at least this often.
PROBE_IDLE_S = 5.0
# Past the step timeout and the probe interval, this much more silence from rank 0 means it (or the
# network to it) is gone: a launcher's rank then exits instead of waiting in the plan broadcast forever.
RANK0_GRACE_S = 10.0


class Rank0Watch:
    """A launcher's rank of a server's world (its rank 0 probes when idle): exits the process when no
    plan has come from rank 0 for `limit_s` while it waited for one. Its peers on other hosts cannot
    tell it that the world ended when the network between them is gone (no close, no reset reaches
    it), and the plan broadcast waits without a bound, since a server may idle for days."""

    def __init__(self, limit_s: float, rank: int):
        self.limit_s, self.rank = limit_s, rank
        self._waiting_since: float | None = None
        threading.Thread(target=self._watch, daemon=True, name="rank0-watch").start()

    def waiting(self) -> None:
        self._waiting_since = time.monotonic()

    def got_plan(self) -> None:
        self._waiting_since = None

    def _watch(self) -> None:
        while True:
            time.sleep(min(1.0, self.limit_s / 4))
            since = self._waiting_since
            if since is not None and time.monotonic() - since > self.limit_s:
                log.error("rank %d: no step from rank 0 for %.0f s (it probes every %.0f s when idle): rank 0, its "
                          "host or the network to it is gone; exiting", self.rank, self.limit_s, PROBE_IDLE_S)
                logging.shutdown()
                os._exit(1)


def _exit_when_parent_dies(parent_pid: int) -> None:
    """A spawned rank must not outlive the engine that spawned it."""

    def watch() -> None:
        while True:
            if os.getppid() != parent_pid:
                os._exit(1)
            time.sleep(0.5)

    threading.Thread(target=watch, daemon=True, name="parent-watch").start()


def set_rank_threads(world_on_node: int, reserved: int = 0) -> None:
    import torch

    cores = max(1, (os.cpu_count() or 1) - reserved)
    torch.set_num_threads(max(1, cores // max(1, world_on_node)))


def run_rank(config: EngineConfig, watch_rank0: bool = False) -> int:
    """watch_rank0: rank 0 is a server's (it probes its world when idle): exit once it has been silent
    past the step timeout and the probe interval (Rank0Watch)."""
    from moeserve.engine.host_map import gather_hosts
    from moeserve.engine.plan_codec import decode_message, encode_sampled
    from moeserve.engine.process_groups import RankEnv, broadcast_bytes, gather_bytes, init_rank
    from moeserve.engine.worker import Worker
    from moeserve.kernels.registry import resolve

    env = RankEnv.from_environ()
    assert env is not None and env.rank != 0, "rank_worker runs ranks other than 0"
    set_rank_threads(config.parallel.ranks_per_node, config.parallel.reserved_cores or 0)
    groups = init_rank(env, config.parallel, resolve(config.device.device, config.device.kernels)[0])
    import torch.distributed as dist

    worker = Worker(config, groups.ctx, group=groups.group)
    dist.barrier(group=groups.plan_group)  # every rank has loaded its weights
    gather_hosts(env.master_addr, groups.result_group)  # rank 0 names a host that stops answering
    if worker.kv_agent is not None:  # rank 0 serves every rank's layout on its KV side channel
        gather_bytes(json.dumps(worker.kv_agent.layout()).encode(), groups.result_group)
    freeze_startup_objects()  # a full collection must not walk the model's objects mid-step (a stall every rank waits on)
    held = []  # launched steps whose results rank 0 has not asked for yet (the host one step ahead)

    def report(pending) -> None:
        result = pending.result()
        gather_bytes(encode_sampled(result.sampled, result.prompt_logprobs, result.kv_pulls, result.drafts,
                                    result.grammars), groups.result_group)

    watch = None
    if watch_rank0:
        watch = Rank0Watch(config.parallel.step_timeout_s + PROBE_IDLE_S + RANK0_GRACE_S, env.rank)
    while True:
        if watch is not None:
            watch.waiting()
        plan, kind = decode_message(broadcast_bytes(None, groups.plan_group))
        if watch is not None:
            watch.got_plan()
        if kind == "shutdown":
            break
        try:
            if kind == "drain":  # rank 0 reads the results it has not asked for yet
                for pending in held:
                    report(pending)
                held = []
                continue
            launched = worker.launch(plan)
            for pending in held:  # results of earlier steps go back once the next one is queued
                report(pending)
            held = [launched]
            if kind == "plan":
                report(launched)
                held = []
        except Exception:
            # exit at once: the peers may be waiting for this rank inside a collective of the step,
            # which only our closed sockets (and, on rank 0's node, our exit) end before the step
            # timeout; rank 0 then fails the step and stops the world
            log.exception("rank %d failed in step %d; exiting", env.rank, plan.step if plan is not None else -1)
            logging.shutdown()
            os._exit(1)  # no interpreter teardown: a gloo group torn down mid-step may block
    dist.destroy_process_group()
    return 0


def main() -> int:
    logging.basicConfig(level=logging.INFO, format="%(asctime)s rank%(process)d %(levelname)s %(message)s")
    parent = envs.PARENT_PID.get()
    if parent:
        _exit_when_parent_dies(parent)
        # a terminal's Ctrl-C reaches the whole foreground group: the engine that spawned us decides
        # (it ends the world and kills us), so the failure reads as the interrupt, not "rank N exited"
        signal.signal(signal.SIGINT, signal.SIG_IGN)
    config = config_from_dict(json.loads(envs.ENGINE_CONFIG.get()))
    return run_rank(config)


if __name__ == "__main__":
    sys.exit(main())
