"""What host memory is left for a rank's CPU-resident buffers (the KV cache of a CPU engine)."""
from __future__ import annotations


def host_memory_available(meminfo: str = "/proc/meminfo") -> int | None:
    """Bytes the kernel says can be allocated without swapping (MemAvailable), or None where it does
    not say (not Linux, a kernel before 3.14)."""
    try:
        with open(meminfo) as f:
            for line in f:
                if line.startswith("MemAvailable:"):
                    return int(line.split()[1]) * 1024  # the file counts kB (KiB)
    except OSError:
        return None
    return None


def check_host_kv(kv_cache_memory_mb: int, ranks: int, meminfo: str = "/proc/meminfo") -> None:
    """Before `ranks` CPU ranks of one host are started, each to hold a KV cache of up to
    `kv_cache_memory_mb` MiB: raises MemoryError when together they would take more than the host's
    available memory. Each rank checks its own cache again before allocating it (model_runner), but
    ranks started together each see the memory the others have not yet taken, so only a check of the
    sum, made once before any of them starts, catches a host that can hold one cache and not all."""
    available = host_memory_available(meminfo)
    need = ranks * kv_cache_memory_mb * 2**20
    if available is not None and need > available:
        raise MemoryError(
            f"{ranks} ranks on this host with a KV cache of {kv_cache_memory_mb} MiB each take {need} bytes, more "
            f"than the {available} bytes of host memory available: lower --kv-cache-memory-mb (or set "
            f"--kv-cache-blocks) or start fewer ranks")
