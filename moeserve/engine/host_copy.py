"""Small host values onto the device without the host waiting for it.

`torch.tensor(data, device="cuda")` copies from pageable memory with `non_blocking=False`, which makes
the host wait for everything queued on the stream (a sync: with the host one step ahead, it would wait
for the step before). Here the values go through pinned memory with a non-blocking copy, queued on
the current stream; torch's pinned allocator keeps the host buffer until that copy has run.
"""

from __future__ import annotations

from typing import Any

import torch


def to_device(data: Any, dtype: torch.dtype, device: torch.device) -> torch.Tensor:
    """data (a list, scalar or numpy array) as a tensor of dtype on device, copied asynchronously."""
    t = torch.as_tensor(data, dtype=dtype)
    if device.type == "cpu":
        return t
    return t.pin_memory().to(device, non_blocking=True)
