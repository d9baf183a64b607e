"""The start-up summary: one block, from rank 0 only, naming the model, dtype, layout, dispatch backend
and kernel set (and why, for auto), KV cache, placement and the address to send requests to; each
value checked against what a `--ep 4 --tp 2` server with a placement plan runs."""
from __future__ import annotations

import logging
import platform
import re
import subprocess
import sys

import pytest
from server_harness import REPO, ServerProcess

from moeserve.engine.startup_summary import format_block
from moeserve.kernels.registry import resolve, why_auto
from moeserve.server.cli import serving_lines


def _row(block: list[str], label: str) -> str:
    found = [line.split(label, 1)[1].strip() for line in block if line.startswith(f"  {label} ")]
    assert len(found) == 1, (label, block)
    return found[0]


@pytest.mark.slow  # four ranks behind a server
@pytest.mark.timeout(600)
def test_an_ep4_tp2_server_says_what_it_runs_and_where(tmp_path):
    plan = tmp_path / "plan.json"
    placed = subprocess.run([sys.executable, "-m", "moeserve.cli", "place", "--trace", "traces/builtin_model.npz",
                             "--ep", "4", "--redundant", "4", "-o", str(plan)], cwd=REPO, capture_output=True, text=True)
    assert placed.returncode == 0, placed.stderr
    srv = ServerProcess("--ep", "4", "--tp", "2", "--kv-cache-blocks", "64", "--max-model-len", "256",
                        "--max-num-seqs", "8", "--placement", str(plan), startup_timeout_s=500)
    try:
        lines = [line.rstrip("\n") for line in srv.lines]
        starts = [i for i, line in enumerate(lines) if line.endswith("moeserve is ready")]
        assert len(starts) == 1, srv.log_tail()  # one block, from rank 0 alone
        block = lines[starts[0]:]
        assert _row(block, "model") == "moeserve-tiny-moe: MixtralForCausalLM, float16 safetensors, built-in"
        device, kernels = resolve()
        dtype = _row(block, "dtype")
        assert dtype.startswith("float32 on cpu; " if device == "cpu" else "bfloat16 on cuda")
        assert re.search(r"; \d+\.\d MiB of weights on rank 0$", dtype), dtype
        assert _row(block, "layout") == "tp 2, ep 4: 4 ranks, 2 attention groups of 2, experts over all 4; 1 node"
        dispatch = _row(block, "dispatch")
        if device == "cpu" and platform.machine() in ("x86_64", "AMD64"):
            assert dispatch.startswith("shm: one-sided") and dispatch.endswith("(auto: every rank on this host)")
        assert _row(block, "kernels").startswith(f"{kernels} ({why_auto('auto', 'auto')}): ")
        # 64 blocks hold 4 sequences of 256 tokens (16 blocks each) per group, 2 groups; 8 seats per group
        assert _row(block, "KV cache") == ("64 blocks of 16 tokens in each of 2 attention groups (1,024 tokens); "
                                           "8 sequences of 256 tokens (max_model_len) at once; prefix caching on")
        assert _row(block, "placement") == f"{plan} applied, 4 redundant slots per layer"
        port = srv.url.rsplit(":", 1)[1]
        assert f"moeserve is serving moeserve-tiny-moe on http://127.0.0.1:{port} (OpenAI API under /v1)" in block
        # per-rank detail is debug-level
        assert not any("warm-up stopped" in line or "weights of rank" in line for line in lines)
    finally:
        srv.kill()


def test_the_block_aligns_its_labels_and_ends_with_where_to_send_requests():
    footer = serving_lines([("127.0.0.1", 8000), ("::1", 8000)], ("tiny", "/ckpt/tiny", "org/tiny"))
    text = format_block([("model", "tiny"), ("KV cache", "8 blocks")], footer=footer)
    assert text.splitlines() == [
        "moeserve is ready", "  model     tiny", "  KV cache  8 blocks",
        "moeserve is serving tiny on http://127.0.0.1:8000 (OpenAI API under /v1)",
        "moeserve is serving tiny on http://[::1]:8000 (OpenAI API under /v1)",
        "requests may also name the model /ckpt/tiny, org/tiny"]
    assert re.search(r"serving (\S+) on (http://[\d.]+:\d+)", text).groups() == ("tiny", "http://127.0.0.1:8000")


def test_gemm_warm_up_chatter_is_debug_level(caplog):
    from torch import nn

    from moeserve.kernels.cpu import gemm

    with caplog.at_level(logging.DEBUG, logger=gemm.logger.name):
        gemm.warm_up(nn.Sequential(nn.Linear(8, 8)), max_rows=4, budget_s=-1.0)  # out of budget at once
    said = [r for r in caplog.records if "warm-up stopped" in r.getMessage()]
    assert len(said) == 1 and said[0].levelno == logging.DEBUG
