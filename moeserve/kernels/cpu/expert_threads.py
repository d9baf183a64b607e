"""The packed expert loop (fp32 on CPU), compiled with TorchScript and split over threads.

Why: at decode every local expert gets a few rows, so each of its two GEMMs is small, and the loop
is many small ops. Two things cost time there (tiny-mixtral shapes, AVX2 host, docs/performance.md):
- calling the packed GEMM from Python costs ~15-25 us more than calling it from TorchScript (torch.ops
  parses its schema per call): ~70 such calls a decode step;
- one GEMM with 1-16 rows does not use a second core: oneDNN splits over rows, and with 2 OpenMP
  threads the expert time was unchanged (12.7 vs 12.8 ms a step at 8 sequences). Different experts,
  though, run on different cores independently.
So the loop runs as a TorchScript function, and with `threads` > 1 the slots are cut into that many
contiguous chunks of similar cost, all but the first forked onto torch's inter-op pool
(`torch.jit.fork`, native threads: no GIL hand-offs; Python threads collapsed 20x under a loaded CPU,
the inter-op pool did not). Expert time at 8 sequences: ~1.8x faster on 2 idle cores; with two
CPU burners on the same cores 1.25-1.45x faster at 8-64 sequences but 12% slower at 4, so each layer
times both ways and keeps the faster (`SplitChooser`). A forked chunk that no thread has started by
the time this thread is done with its own is taken back and run here (`split_chooser.take`): a
helper thread whose core is busy (the engine's lent helper runs at idle priority,
kernels/cpu/cpu_binding.py) costs the layer a fork, not a wait.

Contract: `run_packed(...)` returns the same rows, bit for bit, for any `threads` (1 = the serial
loop): each slot runs the same ops on the same rows; only which thread runs it changes, and the
chunks are concatenated in slot order. Rows are slot-major (the dispatcher's ExpertBatch).

Shape legend: R rows, H hidden, Il intermediate on this rank, S local slots.
"""

from typing import List, Optional, Tuple, Union

import torch
import torch.nn.functional as F

from moeserve.kernels.cpu import panel_gemm
from moeserve.kernels.cpu.split_chooser import Scripted, take

# a slot's cost in rows: fixed part (streaming its weights) ~ FIXED_ROW_COST rows of GEMM work
# (measured at tiny-mixtral's shapes: ~200 us fixed, ~10 us a row, both GEMMs together)
FIXED_ROW_COST = 16

ACTIVATION_NAMES = ("silu", "gelu", "gelu_pytorch_tanh", "relu", "swigluoai")



def _slots(
    claims: Optional[torch.Tensor],
    chunk: int,
    x: torch.Tensor,
    counts: List[int],
    starts: List[int],
    p13: List[torch.Tensor],
    p2: List[torch.Tensor],
    q13: List[torch.Tensor],
    q2: List[torch.Tensor],
    small: int,
    lo: int,
    hi: int,
    Il: int,
    act: str,
    b13: List[torch.Tensor],
    b2: List[torch.Tensor],
    alpha: float,
    limit: float,
) -> List[torch.Tensor]:
    """Outputs of the non-empty slots in [lo, hi), in slot order; nothing when `claims` is given and
    another thread has taken chunk `chunk` (a forked call: split_chooser.take). A slot with at most
    `small` rows runs the panel kernel on q13/q2 (kernels/cpu/panel_gemm.py), others oneDNN on p13/p2.
    b13 [S] of [2Il], b2 [S] of [H]: the slots' biases, added after each GEMM (empty lists: none);
    alpha, limit: the clamped SwiGLU's, for act "swigluoai"."""
    outs: List[torch.Tensor] = []
    if claims is not None and not take(claims, chunk):
        return outs
    none: List[Optional[Union[float, int, complex]]] = []
    H = x.shape[1]
    for s in range(lo, hi):
        n = counts[s]
        if n > 0:
            rows = x[starts[s] : starts[s] + n]
            if n <= small:
                gate_up = torch.ops.moeserve.panel_linear(rows, q13[s], 2 * Il)
            else:
                gate_up = torch.ops.mkldnn._linear_pointwise(rows, p13[s], None, "none", none, "")
            if len(b13) > 0:
                gate_up = gate_up + b13[s]
            step = max(1, 16383 // Il)  # rows per block: below kernels/cpu/blocked.py's ELEMENTWISE_GRAIN (TorchScript reads no globals)
            if n <= step:
                hidden = _gated(gate_up, Il, act, alpha, limit)
            else:  # kernels/cpu/blocked.py: same bits at any intra-op thread count
                hidden = torch.cat([_gated(gate_up[r : r + step], Il, act, alpha, limit) for r in range(0, n, step)])
            if n <= small:
                out = torch.ops.moeserve.panel_linear(hidden, q2[s], H)
            else:
                out = torch.ops.mkldnn._linear_pointwise(hidden, p2[s], None, "none", none, "")
            outs.append(out + b2[s] if len(b2) > 0 else out)
    return outs


def _gated(gate_up: torch.Tensor, Il: int, act: str, alpha: float, limit: float) -> torch.Tensor:
    """gate_up [r, 2Il] -> [r, Il]: act(gate) * up, or gpt-oss's clamped SwiGLU (moe/experts.py)."""
    if act == "swigluoai":
        gate = gate_up[:, :Il].clamp(max=limit)
        up = gate_up[:, Il:].clamp(min=-limit, max=limit)
        return (up + 1) * (gate * torch.sigmoid(gate * alpha))
    return _activate(gate_up[:, :Il], act).mul_(gate_up[:, Il:])


def _activate(gate: torch.Tensor, act: str) -> torch.Tensor:
    if act == "silu":
        return F.silu(gate)
    if act == "gelu":
        return F.gelu(gate)
    if act == "gelu_pytorch_tanh":
        return F.gelu(gate, approximate="tanh")
    return F.relu(gate)


def _split(
    x: torch.Tensor,
    counts: List[int],
    starts: List[int],
    p13: List[torch.Tensor],
    p2: List[torch.Tensor],
    q13: List[torch.Tensor],
    q2: List[torch.Tensor],
    small: int,
    cuts: List[int],
    Il: int,
    act: str,
    b13: List[torch.Tensor],
    b2: List[torch.Tensor],
    alpha: float,
    limit: float,
) -> torch.Tensor:
    """Chunk i = slots [cuts[i], cuts[i + 1]); chunks 1.. forked, chunk 0 on this thread, which then
    runs every forked chunk no thread has started (split_chooser.take) and waits for the rest."""
    claims = torch.zeros(len(cuts) - 1, dtype=torch.int8)
    futures = [
        torch.jit.fork(_slots, claims, i, x, counts, starts, p13, p2, q13, q2, small, cuts[i], cuts[i + 1], Il, act,
                       b13, b2, alpha, limit)
        for i in range(1, len(cuts) - 1)
    ]
    outs = _slots(None, 0, x, counts, starts, p13, p2, q13, q2, small, cuts[0], cuts[1], Il, act, b13, b2, alpha,
                  limit)
    mine = [take(claims, i) for i in range(1, len(cuts) - 1)]
    for i in range(1, len(cuts) - 1):
        if mine[i - 1]:
            outs.extend(_slots(None, i, x, counts, starts, p13, p2, q13, q2, small, cuts[i], cuts[i + 1], Il, act,
                               b13, b2, alpha, limit))
        else:
            outs.extend(torch.jit.wait(futures[i - 1]))
    return outs[0] if len(outs) == 1 else torch.cat(outs)



_split_scripted = Scripted(_split, "the expert loop")


def chunk_cuts(counts: List[int], threads: int) -> List[int]:
    """Slot boundaries [0, ..., S] of at most `threads` contiguous chunks of similar cost (a
    non-empty slot costs FIXED_ROW_COST + its rows), each holding at least one non-empty slot; one
    chunk when fewer than 2 slots have rows. Each boundary sits right after a non-empty slot, where
    the cost before it comes closest to its share of the total."""
    S = len(counts)
    costs = [FIXED_ROW_COST + n if n else 0 for n in counts]
    busy_from = [0] * (S + 1)  # busy_from[i]: non-empty slots in [i, S)
    for i in range(S - 1, -1, -1):
        busy_from[i] = busy_from[i + 1] + (1 if counts[i] else 0)
    chunks = min(threads, busy_from[0])
    if chunks <= 1:
        return [0, S]
    prefix = [0]
    for c in costs:
        prefix.append(prefix[-1] + c)
    cuts = [0]
    for j in range(1, chunks):
        target = prefix[S] * j / chunks
        best = -1
        for i in range(cuts[-1] + 1, S):
            if busy_from[i] < chunks - j:
                break  # every later chunk needs a non-empty slot of its own
            if costs[i - 1] and (best < 0 or abs(prefix[i] - target) < abs(prefix[best] - target)):
                best = i
        cuts.append(best)
    cuts.append(S)
    return cuts


def run_packed(
    x: torch.Tensor,
    counts: List[int],
    p13: List[torch.Tensor],
    p2: List[torch.Tensor],
    Il: int,
    act: str,
    threads: int = 1,
    panels: Optional[Tuple[List[torch.Tensor], List[torch.Tensor]]] = None,
    biases: Optional[Tuple[List[torch.Tensor], List[torch.Tensor]]] = None,
    swiglu: Tuple[float, float] = (0.0, 0.0),
) -> torch.Tensor:
    """x [R, H] slot-major fp32 CPU, counts [S] rows per slot (python ints, sum R > 0), p13/p2 the
    slots' packed weights (gemm.pack_weight) -> [R, H]. act: one of ACTIVATION_NAMES.
    panels: the slots' (w13, w2) as panel_gemm.pack panels, used by slots with at most
    panel_gemm.small_rows() rows; None = oneDNN for every slot. biases: the slots' (b13 [2Il], b2 [H])
    (gpt-oss), or None. swiglu: (alpha, limit) of act "swigluoai"."""
    starts, acc = [], 0
    for n in counts:
        starts.append(acc)
        acc += n
    panel_gemm.ensure_op()  # the scripted loop names the op whether or not the kernel is loaded
    q13, q2 = panels if panels is not None else ([], [])
    small = panel_gemm.small_rows() if panels is not None else 0
    b13, b2 = biases if biases is not None else ([], [])
    return _split_scripted(x, counts, starts, p13, p2, q13, q2, small, chunk_cuts(counts, threads), Il, act, b13, b2,
                           float(swiglu[0]), float(swiglu[1]))
