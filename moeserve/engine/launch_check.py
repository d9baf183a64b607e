"""What the launch environment must give a layout, checked before any rank starts (by
engine/startup_checks.py, in every process that reads the flags: under torchrun each rank says it
once and exits 2, instead of a traceback from inside `init_process_group`).

- `--nodes N > 1` needs a launcher that starts the ranks on every node (RANK and WORLD_SIZE set).
- Under a launcher, the ranks of different hosts talk over one interface (`dist_interface`): --dist-ifname,
  else the one that routes to MASTER_ADDR; with `--nodes > 1` never loopback, and it must exist here.
- Under a launcher, WORLD_SIZE must be the layout's world (`--ep`, or `--tp` when `--ep` is 1).
- `--kv-side-channel-host` (the prefill/decode split) must be an address of this host, not loopback
  with `--nodes > 1`, and one facing other hosts needs the pool's secret given (`check_kv_hosts`).
- `--backend nccl` needs CUDA GPUs and a torch built with NCCL (auto picks gloo without them).
- `--device cuda` needs CUDA; `--kernels cpu` runs on CPU only; `--kernels triton` needs triton, and
  CUDA or TRITON_INTERPRET=1 (the interpreter runs the kernels on CPU, for tests).

Unchecked, the first two fail inside the engine process or every rank with a traceback, the third
with a 59-line one from `init_process_group`.
"""
from __future__ import annotations

import logging
import os

from moeserve import envs, netif
from moeserve.config import DeviceConfig, KvTransferConfig, ParallelConfig
from moeserve.errors import ConfigError

log = logging.getLogger("moeserve.launch")
DIST_IFNAME_VARS = ("GLOO_SOCKET_IFNAME", "NCCL_SOCKET_IFNAME")


def check_launch(parallel: ParallelConfig) -> None:
    rank, world = os.environ.get("RANK"), os.environ.get("WORLD_SIZE")
    if rank is None or world is None:
        if parallel.nodes > 1:
            raise ConfigError(
                f"--nodes {parallel.nodes} needs a launcher that starts the ranks on every node (torchrun or "
                "deepspeed: RANK, WORLD_SIZE, MASTER_ADDR and MASTER_PORT are unset here); without one, drop --nodes")
    else:
        try:
            size = int(world)
        except ValueError:
            raise ConfigError(f"the launcher's WORLD_SIZE {world!r} is not a number") from None
        if size != parallel.world_size:
            raise ConfigError(
                f"the launcher started {size} ranks but --ep {parallel.ep} --tp {parallel.tp} needs "
                f"{parallel.world_size}: start {parallel.world_size} ranks in all (--nnodes x --nproc-per-node)")
        dist_interface(parallel)
    if parallel.backend == "nccl":
        import torch
        import torch.distributed as dist

        if not (torch.cuda.is_available() and dist.is_nccl_available()):
            raise ConfigError("--backend nccl needs CUDA GPUs and a torch built with NCCL, and this machine has "
                              "neither; use --backend gloo (or auto, which picks NCCL where it can)")


def dist_interface(parallel: ParallelConfig) -> str:
    """The interface the ranks of a launcher's world talk to other hosts over: --dist-ifname, else the
    one this host's routing table picks for MASTER_ADDR (the first host's address, which every host
    reaches). With --nodes > 1 it is never loopback: a world whose MASTER_ADDR routes over loopback
    cannot span hosts. ConfigError saying what to change otherwise."""
    master = os.environ.get("MASTER_ADDR", "127.0.0.1")
    if parallel.dist_ifname:
        name, why = parallel.dist_ifname, "--dist-ifname"
        if not netif.interface_addresses(name):
            raise ConfigError(f"--dist-ifname {name} holds no IP address on this host")
    else:
        name, _ = netif.route_interface(master)
        why = f"the route to MASTER_ADDR {master}"
    if parallel.nodes > 1 and netif.is_loopback(name):
        raise ConfigError(
            f"--nodes {parallel.nodes}: the hosts cannot talk over the loopback interface {name} ({why}); give "
            "torchrun --master-addr an address of the first host that every host reaches, or --dist-ifname")
    return name


def use_dist_interface(parallel: ParallelConfig, rank: int) -> str:
    """Points gloo and NCCL's bootstrap at `dist_interface` (GLOO_SOCKET_IFNAME, NCCL_SOCKET_IFNAME)
    unless the operator set them, and logs what this rank uses. Called by a launcher's rank before it
    joins the world."""
    name = dist_interface(parallel)
    for var in DIST_IFNAME_VARS:
        os.environ.setdefault(var, name)
    log.info("rank %d: other hosts over %s (%s), master %s:%s; GLOO_SOCKET_IFNAME=%s NCCL_SOCKET_IFNAME=%s", rank,
             name, ", ".join(netif.interface_addresses(name)), os.environ.get("MASTER_ADDR", "127.0.0.1"),
             os.environ.get("MASTER_PORT", "29500"), os.environ["GLOO_SOCKET_IFNAME"], os.environ["NCCL_SOCKET_IFNAME"])
    return name


def check_kv_hosts(kv: KvTransferConfig, parallel: ParallelConfig) -> None:
    """--kv-side-channel-host is the address this host's peers in the KV pool reach it at: its side
    channel (rank 0) listens there, and every rank of this host binds its UCX transports to the
    interface holding it. So it must be an address of this host (each host of a --nodes > 1 server
    gives its own, never loopback), and once it faces other hosts, the pool's servers need one secret
    given to all of them: the default secret file is this host's alone, so another host's signatures
    would fail as forgeries (docs/disaggregation.md, trust model)."""
    if not kv.enabled:
        return
    interface = netif.interface_of(kv.side_channel_host)  # ConfigError unless this host holds it
    loopback = netif.is_loopback(interface)
    if parallel.nodes > 1 and loopback:
        raise ConfigError(
            f"--kv-side-channel-host {kv.side_channel_host} is loopback but the ranks span --nodes {parallel.nodes}: "
            "the pool's peers read every rank's KV blocks, so give each host's own address facing them (its "
            "--kv-side-channel-host)")
    if not loopback and kv.secret is None and not envs.KV_SECRET.get():
        raise ConfigError(
            f"--kv-side-channel-host {kv.side_channel_host} faces other hosts: give every prefill and decode "
            f"server of the pool the same --kv-secret (or {envs.KV_SECRET.name}; never the --api-key); the default "
            "secret file is this host's own")


def check_device(device: DeviceConfig) -> None:
    """The --device / --kernels pair against this machine (after `auto` is resolved)."""
    if device.device == "cpu" and device.kernels == "auto":
        return  # the default on a CPU machine: nothing to import
    from moeserve.kernels.registry import kernels_available, resolve

    if device.device == "cuda":
        import torch

        if not torch.cuda.is_available():
            raise ConfigError("--device cuda needs a CUDA GPU and a CUDA build of torch, and this machine has "
                              f"neither (torch {torch.__version__}); use --device cpu (or auto)")
    dev, kernels = resolve(device.device, device.kernels)
    if kernels == "cpu" and dev != "cpu":
        raise ConfigError(f"--kernels cpu runs on --device cpu, not {dev}; use --kernels triton or torch there")
    if kernels == "triton" and not kernels_available("triton"):
        raise ConfigError("--kernels triton needs the triton package and a CUDA GPU (or TRITON_INTERPRET=1 to run "
                          "its kernels on CPU, slowly, as the tests do); use --kernels cpu or torch")
