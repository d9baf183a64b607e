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
