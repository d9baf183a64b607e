"""A process holding a NIXL agent for test_nixl_agent.py (NIXL may crash at interpreter exit, so no
agent ever lives in the pytest process). Prints one JSON line per answer; exits with os._exit.

    owner <engine_id> [tp]: fills a fake KV cache (with tp > 1: one per rank, each holding its share of
        the heads, all in this process), serves its side channel with every block pinned for request "r";
        prints {"port"}; reads "unpin" (withdraws the pin) from stdin until it closes
    reader [tp_rank tp]: reads JSON KvPull lines from stdin, runs them as that rank of a tp group, prints
        {"error", "bytes", "blocks", "heads"} per pull; heads[b][t][h]: head h of the last slot of block b
"""
from __future__ import annotations

import json
import os
import sys

import torch

from moeserve.core.step_plan import KvPull
from moeserve.kv_transfer.head_slices import HeadRange

NUM_BLOCKS, BLOCK_SIZE, HEADS, DIM, LAYERS = 12, 4, 2, 8, 2
SECRET = "the test pool's secret, long enough"


def fake_cache(fill: bool, heads: HeadRange = HeadRange(0, HEADS, HEADS)) -> list[list[torch.Tensor]]:
    """LAYERS x [K, V], each [NUM_BLOCKS, BLOCK_SIZE, heads.count, DIM] float32; filled: head h (global)
    of block b of tensor t holds 100 t + b + h / 10."""
    caches = [[torch.zeros(NUM_BLOCKS, BLOCK_SIZE, heads.count, DIM) for _ in range(2)] for _ in range(LAYERS)]
    if fill:
        for t, tensor in enumerate(x for layer in caches for x in layer):
            for b in range(NUM_BLOCKS):
                for i in range(heads.count):
                    tensor[b, :, i] = 100 * t + b + (heads.start + i) / 10
    return caches


def rank_heads(tp_rank: int, tp: int) -> HeadRange:
    return HeadRange(tp_rank * HEADS // tp, HEADS // tp, HEADS)


def allow_py_spy() -> None:
    """Let any process of this user attach (Yama ptrace_scope 1 allows only ancestors): the test runs
    py-spy on a peer that does not answer."""
    try:
        import ctypes

        ctypes.CDLL(None, use_errno=True).prctl(0x59616D61, ctypes.c_ulong(-1), 0, 0, 0)  # PR_SET_PTRACER, ANY
    except (OSError, AttributeError):
        pass


def main() -> None:
    allow_py_spy()
    from moeserve.kv_transfer.rank_agent import RankKvAgent
    from moeserve.kv_transfer.side_channel import SideChannel
    from moeserve.kv_transfer.trust import PoolKey

    key = PoolKey.from_secret(SECRET, "test")
    role = sys.argv[1]
    if role == "owner":
        tp = int(sys.argv[3]) if len(sys.argv) > 3 else 1
        agents = [RankKvAgent(fake_cache(True, rank_heads(r, tp)), key, BLOCK_SIZE, rank_heads(r, tp), 0, r) for r in range(tp)]
        layout = {"tp_size": tp, "block_size": BLOCK_SIZE, "ranks": [a.layout() for a in agents]}
        channel = SideChannel("127.0.0.1", 0, sys.argv[2], layout, key)
        channel.publish("r", list(range(NUM_BLOCKS)), "digest")
        print(json.dumps({"port": channel.port}), flush=True)
        for line in sys.stdin:
            if line.strip() == "unpin":
                channel.unpublish("r")
                print(json.dumps({"unpinned": True}), flush=True)
        channel.close()
    else:
        tp_rank, tp = (int(sys.argv[2]), int(sys.argv[3])) if len(sys.argv) > 3 else (0, 1)
        heads = rank_heads(tp_rank, tp)
        caches = fake_cache(False, heads)
        agents = [RankKvAgent(caches, key, BLOCK_SIZE, heads, 0, tp_rank)]
        for line in sys.stdin:
            pull = KvPull(**json.loads(line))
            (done,) = agents[0].run([pull])
            flat = [x for layer in caches for x in layer]
            blocks = [[int(t[b].flatten()[0]) for t in flat] for b in pull.local_block_ids]
            per_head = [[[round(float(t[b, -1, h, -1]), 3) for h in range(heads.count)] for t in flat]
                        for b in pull.local_block_ids]
            print(json.dumps({"error": done.error, "bytes": done.num_bytes, "blocks": blocks, "heads": per_head}),
                  flush=True)
    for agent in agents:
        agent.close()
    sys.stdout.flush()
    os._exit(0)


if __name__ == "__main__":
    main()
