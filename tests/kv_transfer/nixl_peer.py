"""A process holding a NIXL agent for test_nixl_agent.py (NIXL may crash at interpreter exit, so no
agent ever lives in the pytest process). Prints one JSON line per answer; exits with os._exit.

    owner <engine_id>: fills a fake KV cache, serves its side channel with every block pinned for request
        "r"; prints {"port"}; reads "unpin" (withdraws the pin) from stdin until it closes
    reader: reads JSON KvPull lines from stdin, runs them, prints {"errors", "blocks"} per pull
"""
from __future__ import annotations

import json
import os
import sys

import torch

from moeserve.core.step_plan import KvPull

NUM_BLOCKS, BLOCK_SIZE, HEADS, DIM, LAYERS = 12, 4, 2, 8, 2


def fake_cache(fill: bool) -> list[list[torch.Tensor]]:
    """LAYERS x [K, V], each [NUM_BLOCKS, BLOCK_SIZE, HEADS, DIM] float32; filled: block b of tensor t holds 100 t + b."""
    caches = [[torch.zeros(NUM_BLOCKS, BLOCK_SIZE, HEADS, DIM) for _ in range(2)] for _ in range(LAYERS)]
    if fill:
        for t, tensor in enumerate(x for layer in caches for x in layer):
            for b in range(NUM_BLOCKS):
                tensor[b] = 100 * t + b
    return caches


def main() -> None:
    from moeserve.kv_transfer.rank_agent import RankKvAgent
    from moeserve.kv_transfer.side_channel import SideChannel

    role = sys.argv[1]
    caches = fake_cache(fill=role == "owner")
    agent = RankKvAgent(caches, BLOCK_SIZE)
    if role == "owner":
        layout = {"tp_size": 1, "block_size": BLOCK_SIZE, "ranks": [agent.layout()]}
        channel = SideChannel("127.0.0.1", 0, sys.argv[2], layout)
        channel.publish("r", list(range(NUM_BLOCKS)), "digest")
        print(json.dumps({"port": channel.port}), flush=True)
        for line in sys.stdin:
            if line.strip() == "unpin":
                channel.unpublish("r")
                print(json.dumps({"unpinned": True}), flush=True)
        channel.close()
    else:
        for line in sys.stdin:
            pull = KvPull(**json.loads(line))
            (done,) = agent.run([pull])
            flat = [x for layer in caches for x in layer]
            blocks = [[int(t[b].flatten()[0]) for t in flat] for b in pull.local_block_ids]
            print(json.dumps({"error": done.error, "bytes": done.num_bytes, "blocks": blocks}), flush=True)
    agent.close()
    sys.stdout.flush()
    os._exit(0)


if __name__ == "__main__":
    main()
