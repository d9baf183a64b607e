"""What the launch environment must give a layout, checked before any rank starts (by
engine/startup_checks.py, in every process that reads the flags: under torchrun each rank says it
once and exits 2, instead of a traceback from inside `init_process_group`).

- `--nodes N > 1` needs a launcher that starts the ranks on every node (RANK and WORLD_SIZE set).
- Under a launcher, WORLD_SIZE must be the layout's world (`--ep`, or `--tp` when `--ep` is 1).
- `--backend nccl` needs CUDA GPUs and a torch built with NCCL (auto picks gloo without them).
- `--device cuda` needs CUDA; `--kernels cpu` runs on CPU only; `--kernels triton` needs triton, and
  CUDA or TRITON_INTERPRET=1 (the interpreter runs the kernels on CPU, for tests).

Unchecked, the first two fail inside the engine process or every rank with a traceback, the third
with a 59-line one from `init_process_group`.
"""
from __future__ import annotations

import os

from moeserve.config import DeviceConfig, ParallelConfig
from moeserve.errors import ConfigError


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
    if parallel.backend == "nccl":
        import torch
        import torch.distributed as dist

        if not (torch.cuda.is_available() and dist.is_nccl_available()):
            raise ConfigError("--backend nccl needs CUDA GPUs and a torch built with NCCL, and this machine has "
                              "neither; use --backend gloo (or auto, which picks NCCL where it can)")


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
