"""torch.distributed set-up for one rank: the mesh of docs/architecture.md
("Parallel layout") and the control groups.

Rank r belongs to attention group r // tp with TP rank r % tp (ranks are node-major, so a TP group
never straddles a node). With ep > 1 the MoE layers span the whole world; over several nodes of
several ranks each, every rank also joins its node's group and its rail (the ranks with its index on
every node), which hierarchical dispatch moves rows over (dispatch/hierarchical.py). Besides the data group
(NCCL on GPUs, gloo on CPU) every rank joins two gloo control groups: `plan_group` (waiting for the
next step may take as long as the server is idle) and `result_group` (bounded by the step timeout,
so a dead or stuck rank turns into an error on rank 0).
"""
from __future__ import annotations

import os
import socket
import time
from collections.abc import Callable
from dataclasses import dataclass
from datetime import timedelta

import torch
import torch.distributed as dist
from torch.distributed.distributed_c10d import _set_pg_timeout  # private, but the only way to change a gloo group's timeout

from moeserve import envs
from moeserve.config import ParallelConfig
from moeserve.engine.launch_check import use_dist_interface
from moeserve.parallel_state import ParallelContext

_IDLE_TIMEOUT = timedelta(days=7)
_STARTUP_TIMEOUT = timedelta(minutes=15)
# how often rank 0 of a spawned world looks at its ranks while it waits for them to join
_JOIN_POLL = 0.05  # seconds
# How long a group's creation may wait for its peers. Groups are made once every rank has joined,
# so this takes milliseconds; a rank that dies inside it would otherwise leave the others in gloo's
# connect for the group's own timeout (15 minutes, or 7 days for plan_group), in C++ where no signal
# handler runs. Each group gets its own timeout once it is made.
def _connect_timeout() -> timedelta:
    """MOESERVE_CONNECT_TIMEOUT_S (default 60 s), read in the rank."""
    return timedelta(seconds=max(1, envs.CONNECT_TIMEOUT_S.get()))


@dataclass(frozen=True)
class RankEnv:
    """What a launcher (ours, torchrun or deepspeed) tells a rank about itself."""

    rank: int
    world_size: int
    local_rank: int
    master_addr: str
    master_port: int

    @classmethod
    def from_environ(cls) -> "RankEnv | None":
        if "RANK" not in os.environ or "WORLD_SIZE" not in os.environ:
            return None
        return cls(
            rank=int(os.environ["RANK"]),
            world_size=int(os.environ["WORLD_SIZE"]),
            local_rank=int(os.environ.get("LOCAL_RANK", os.environ["RANK"])),
            master_addr=os.environ.get("MASTER_ADDR", "127.0.0.1"),
            master_port=int(os.environ.get("MASTER_PORT", "29500")),
        )


@dataclass
class RankGroups:
    ctx: ParallelContext
    group: int  # this rank's attention group
    plan_group: object
    result_group: object


def data_backend(parallel: ParallelConfig, device: str = "cpu") -> str:
    """--backend, or for auto: NCCL for ranks on GPUs (--device cuda), gloo for ranks on CPUs."""
    if parallel.backend != "auto":
        return parallel.backend
    return "nccl" if device == "cuda" else "gloo"


def store_listener() -> socket.socket:
    """A listening socket on loopback for the rendezvous store of a world spawned on one node.
    torch's TCPStore binds every interface, IPv4 and IPv6, whatever host it is given (rank 0's store
    would be open to the network, unauthenticated); handed this socket
    (`master_listen_fd`), it listens on 127.0.0.1 only. Holding it from before the ranks are spawned
    also ends the race of a free port found, closed, and taken by someone else."""
    listener = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    listener.bind(("127.0.0.1", 0))
    listener.listen(128)
    return listener


def loopback_only_env() -> dict[str, str]:
    """Environment that keeps one node's gloo and NCCL bootstrap sockets on loopback (they otherwise
    bind the address the host name resolves to, or the first interface they like). What the user
    set is kept."""
    return {name: os.environ.get(name, "lo") for name in ("GLOO_SOCKET_IFNAME", "NCCL_SOCKET_IFNAME")}


def init_rank(
    env: RankEnv,
    parallel: ParallelConfig,
    device: str = "cpu",
    store_socket: socket.socket | None = None,
    startup_check: Callable[[], None] | None = None,
) -> RankGroups:
    """Joins the world and builds every group. All ranks create all groups in the same order.
    `store_socket`: rank 0 of a world spawned on one node hosts the rendezvous store on it
    (`store_listener`); otherwise the store is the launcher's (env://) or rank 0's (tcp://).
    `startup_check` (rank 0 of a spawned world): raises if a spawned rank has died; called while
    rank 0 waits for the ranks to join (`await_ranks`).
    device: the resolved --device; on cuda the rank takes cuda:LOCAL_RANK before NCCL starts, the data
    groups (tp, ep) use NCCL and the control groups (plan, result) stay on gloo."""
    if env.world_size != parallel.world_size:
        raise RuntimeError(
            f"the launcher started {env.world_size} ranks but --ep {parallel.ep} --tp {parallel.tp} needs {parallel.world_size}"
        )
    step_timeout = timedelta(seconds=parallel.step_timeout_s)
    backend = data_backend(parallel, device)
    if device == "cuda":
        torch.cuda.set_device(env.local_rank)
    # The default group only sets things up (ranks may take minutes to import and load weights);
    # every collective of a step runs on a group bounded by the step timeout.
    # Under torchrun the rendezvous store already listens on MASTER_PORT: join it through env://.
    # Ranks rank 0 spawned (they know its pid) join its store as it is, no prefix added on either side.
    spawned = store_socket is not None or envs.PARENT_PID.get() is not None
    if spawned:
        master = store_socket is not None  # the store then owns the socket's descriptor
        store = dist.TCPStore(env.master_addr, env.master_port, env.world_size, master, timeout=_STARTUP_TIMEOUT,
                              master_listen_fd=store_socket.detach() if master else None, wait_for_workers=False)
        if master:
            await_ranks(store, env.world_size, startup_check)
        else:
            store.set(_joined_key(env.rank), "1")
        # every rank has joined the store (await_ranks): the default group forms at once
        dist.init_process_group(backend=backend, store=store, rank=env.rank, world_size=env.world_size,
                                timeout=_connect_timeout())
    else:
        launched = os.environ.get("RANK") is not None
        if launched:  # torchrun / deepspeed: gloo and NCCL's bootstrap on the interface facing the other hosts
            use_dist_interface(parallel, env.rank)
        dist.init_process_group(
            backend=backend,
            init_method="env://" if launched else f"tcp://{env.master_addr}:{env.master_port}",
            rank=env.rank,
            world_size=env.world_size,
            timeout=_STARTUP_TIMEOUT,
        )
    data_group = _new_group(backend, step_timeout)
    plan_group = _new_group("gloo", _IDLE_TIMEOUT)
    result_group = _new_group("gloo", step_timeout)
    tp = parallel.tp
    tp_group = None
    for g in range(parallel.num_attention_groups):
        ranks = list(range(g * tp, (g + 1) * tp))
        created = _new_group(backend, step_timeout, ranks) if tp > 1 else None
        if env.rank in ranks:
            tp_group = created
    node_group = rail_group = None
    per_node = parallel.ranks_per_node
    if parallel.ep > 1 and parallel.nodes > 1 and per_node > 1:  # hierarchical dispatch's groups
        for node in range(parallel.nodes):
            ranks = list(range(node * per_node, (node + 1) * per_node))
            created = _new_group(backend, step_timeout, ranks)
            node_group = created if env.rank in ranks else node_group
        for index in range(per_node):
            ranks = list(range(index, env.world_size, per_node))
            created = _new_group(backend, step_timeout, ranks)
            rail_group = created if env.rank in ranks else rail_group
    ctx = ParallelContext(
        tp_size=tp,
        tp_rank=env.rank % tp,
        tp_group=tp_group,
        ep_size=parallel.ep,
        ep_rank=env.rank if parallel.ep > 1 else 0,
        ep_group=data_group if parallel.ep > 1 else None,
        node_size=per_node if node_group is not None else 1,
        node_group=node_group,
        rail_group=rail_group,
    )
    return RankGroups(ctx=ctx, group=env.rank // tp, plan_group=plan_group, result_group=result_group)


def _new_group(backend: str, timeout: timedelta, ranks: list[int] | None = None) -> dist.ProcessGroup | None:
    """dist.new_group, connecting within _connect_timeout(), then bounding its collectives by `timeout`
    (a non-member object on ranks outside `ranks`). gloo connects as the group is made; NCCL connects
    in the group's first collective, which its own timeout bounds, so it is made with that at once."""
    if backend != "gloo":
        return dist.new_group(ranks=ranks, backend=backend, timeout=timeout)
    connect = _connect_timeout()
    group = dist.new_group(ranks=ranks, backend=backend, timeout=min(timeout, connect))
    if timeout > connect and (ranks is None or dist.get_rank() in ranks):
        _set_pg_timeout(timeout, group)
    return group


def _joined_key(rank: int) -> str:
    return f"moeserve/joined/{rank}"


def await_ranks(store: dist.Store, world_size: int, startup_check: Callable[[], None] | None) -> None:
    """Rank 0 of a spawned world: returns once every other rank has joined the store. Ranks take
    seconds to import torch and connect, and one may die meanwhile (a crash, a kill, the OOM killer):
    rank 0 looks at the store and calls `startup_check` every `_JOIN_POLL` instead of blocking in
    C++ for the 15-minute startup timeout (where no signal handler runs either), so such a death is
    an error within a second and a SIGTERM to the process is handled at once."""
    waiting = list(range(1, world_size))
    deadline = time.monotonic() + _STARTUP_TIMEOUT.total_seconds()
    while True:
        if startup_check is not None:
            startup_check()
        waiting = [r for r in waiting if not store.check([_joined_key(r)])]
        if not waiting:
            return
        if time.monotonic() > deadline:
            raise RuntimeError(f"ranks {waiting} did not join within {_STARTUP_TIMEOUT}")
        time.sleep(_JOIN_POLL)


# A control message travels in one fixed-size frame (its length, then up to HEAD_BYTES of it: a decode
# step's plan or results are a few KB), and only a longer one sends its rest in a second message. One
# gloo collective per direction instead of a length exchange first: broadcast + gather was 5 collectives
# per step, 2.6 ms for 2 ranks on a 2-core VM (cross-core wake-ups), and is 2 (docs/distributed.md).
HEAD_BYTES = 16 << 10


def _frame(payload: bytes | None) -> torch.Tensor:
    """[8-byte length][the first HEAD_BYTES bytes]; None: an empty frame to receive into."""
    if payload is None:
        return torch.empty(8 + HEAD_BYTES, dtype=torch.uint8)
    frame = torch.zeros(8 + HEAD_BYTES, dtype=torch.uint8)
    frame[:8] = torch.tensor([len(payload)], dtype=torch.int64).view(torch.uint8)
    head = payload[:HEAD_BYTES]
    if head:
        frame[8 : 8 + len(head)] = torch.frombuffer(bytearray(head), dtype=torch.uint8)
    return frame


def _unframe(frame: torch.Tensor) -> tuple[int, bytes]:
    """(the message's length, the part of it the frame holds)."""
    n = int(frame[:8].view(torch.int64)[0])
    return n, frame[8 : 8 + min(n, HEAD_BYTES)].numpy().tobytes()


def _rest(payload: bytes) -> torch.Tensor:
    return torch.frombuffer(bytearray(payload[HEAD_BYTES:]), dtype=torch.uint8)


def broadcast_bytes(payload: bytes | None, group) -> bytes:
    """Rank 0 passes the payload; every other rank passes None and receives it."""
    frame = _frame(payload)
    dist.broadcast(frame, src=0, group=group)
    if payload is not None:
        if len(payload) > HEAD_BYTES:
            dist.broadcast(_rest(payload), src=0, group=group)
        return payload
    n, head = _unframe(frame)
    if n <= HEAD_BYTES:
        return head
    rest = torch.empty(n - HEAD_BYTES, dtype=torch.uint8)
    dist.broadcast(rest, src=0, group=group)
    return head + rest.numpy().tobytes()


def gather_bytes(payload: bytes, group) -> list[bytes] | None:
    """Every rank sends its payload; rank 0 gets them all (in rank order), the others get None.
    A rank whose payload outgrows the frame sends the rest to rank 0 alone, which knows from the
    frames whom to receive it from: no rank waits for another's length."""
    world = dist.get_world_size(group)
    is_root = dist.get_rank(group) == 0
    frames = [_frame(None) for _ in range(world)] if is_root else None
    dist.gather(_frame(payload), frames, dst=dist.get_global_rank(group, 0), group=group)
    if not is_root:
        if len(payload) > HEAD_BYTES:
            dist.send(_rest(payload), dst=dist.get_global_rank(group, 0), group=group)
        return None
    out = [payload]
    for r in range(1, world):
        n, data = _unframe(frames[r])
        if n > HEAD_BYTES:
            rest = torch.empty(n - HEAD_BYTES, dtype=torch.uint8)
            dist.recv(rest, src=dist.get_global_rank(group, r), group=group)
            data += rest.numpy().tobytes()
        out.append(data)
    return out
