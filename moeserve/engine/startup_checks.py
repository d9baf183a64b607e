"""The checks a configuration passes before any rank starts, beyond its own field checks.

`EngineConfig.validate()` checks each field alone (no I/O, no environment). What needs the model's
config.json, a --placement file or the launcher's environment is checked here, once per process
that reads the flags: by `moeserve serve` (server/config_file.py) and by the engine
(`EngineCore`, which the Python `LLM` and the server's engine process build).
"""
from __future__ import annotations

import os
from pathlib import Path

from moeserve.config import EngineConfig
from moeserve.errors import ConfigError
from moeserve.engine.launch_check import check_device, check_kv_hosts, check_launch
from moeserve.engine.layout_check import check_model_layout
from moeserve.engine.model_source import resolve_model_source


def check_startup(config: EngineConfig) -> EngineConfig:
    """`config` after its field checks, with --model resolved to a directory (a Hugging Face name
    through the cache: engine/model_source.py), the model's sizes against its tensors and --tp / --ep
    (config.json and safetensors headers, before any weight is read), the --placement plan, what the
    launcher gives the layout and what the machine gives --device / --kernels; ConfigError saying
    what to change otherwise."""
    config.validate()
    config = resolve_model_source(config)  # --model org/name -> its directory in the Hugging Face cache
    check_model_layout(config)
    check_launch(config.parallel)  # what torchrun / deepspeed / the machine give the layout
    # the P/D pool's address of this host (UCX listens on its interface only, kv_transfer/nixl_agent.py:
    # "0" or "::0", every interface, named here, not in the engine), and its secret across hosts
    check_kv_hosts(config.kv_transfer, config.parallel)
    check_device(config.device)  # --device cuda without CUDA, kernels this machine cannot run
    check_formats(config)
    check_record_dir(config.placement_runtime.record_trace_dir)
    return config


def check_record_dir(path: str | None) -> None:
    """--record-trace-dir: a directory, or one that can be made (the recorder makes it). A file there, or a
    parent that cannot be written, only logged a warning per window while serving, and recorded nothing."""
    if path is None:
        return
    if not path:
        raise ConfigError("--record-trace-dir '': name a directory for the routing traces")
    where = Path(path).resolve()
    if where.exists() and not where.is_dir():
        raise ConfigError(f"--record-trace-dir {path} is a file, not a directory")
    existing = next(p for p in (where, *where.parents) if p.exists())
    if not existing.is_dir() or not os.access(existing, os.W_OK | os.X_OK):
        raise ConfigError(f"--record-trace-dir {path}: {existing} is not a writable directory")


def check_formats(config: EngineConfig) -> None:
    """--quantization fp8 needs a kernel set that runs FP8 block-scaled weights (KernelSet.fp8_block_weights)."""
    if config.model.quantization != "fp8":
        return
    from moeserve.kernels.registry import kernel_set_class, resolve

    _, kernels = resolve(config.device.device, config.device.kernels)
    if not kernel_set_class(kernels).fp8_block_weights:
        raise ConfigError(f"--quantization fp8 runs FP8 weights on FP8 kernels, which --kernels {kernels} lacks; use "
                          "--kernels triton (a GPU, or TRITON_INTERPRET=1 on a CPU)")
