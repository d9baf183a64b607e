"""The prefill/decode split on a DeepSeek-style tiny model: its KV cache is MLA's compressed latent
plus rope key per token (one tensor per layer, not K and V), and the blocks must move all the same."""
from __future__ import annotations

import pytest
from server_harness import ServerProcess
from test_server_pd import ENV, ROUTER_PREFILL, decoded, metric, post

if not any(__import__("importlib.util").util.find_spec(m) for m in ("nixl_cu12", "nixl")):
    pytest.skip("NIXL is not installed (pip install 'moeserve[pd]')", allow_module_level=True)

pytestmark = pytest.mark.slow

ARGS = ("--kv-cache-blocks", "64", "--block-size", "8", "--max-num-seqs", "4")


@pytest.fixture(scope="module")
def mla_pd(tmp_path_factory):
    from test_deepseek_model import _make_checkpoint

    model_dir = tmp_path_factory.mktemp("deepseek-v3")
    _make_checkpoint("v3", model_dir)
    prefill = ServerProcess("--model", str(model_dir), *ARGS, "--kv-role", "prefill", env=ENV)
    try:
        decode = ServerProcess("--model", str(model_dir), *ARGS, "--kv-role", "decode", env=ENV)
    except BaseException:
        prefill.kill()
        raise
    try:
        yield prefill, decode
    finally:
        decode.kill()
        prefill.kill()


@pytest.mark.parametrize("length", [3, 8, 45])
@pytest.mark.parametrize("stream", [False, True])
def test_mla_latent_blocks_move_and_tokens_equal_colocated(mla_pd, length, stream):
    prefill, decode = mla_pd
    prompt = [(i * 37 + length) % 90 + 3 for i in range(length)]  # token ids: the tiny checkpoint has no tokenizer
    body = {"model": prefill.model, "prompt": prompt, "max_tokens": 6, "temperature": 0, "ignore_eos": True,
            "return_token_ids": True}
    colocated = post(prefill.url, "/v1/completions", body).json()["choices"][0]["token_ids"]
    first = post(prefill.url, "/v1/completions", dict(body, max_tokens=1, min_tokens=1, kv_transfer_params=ROUTER_PREFILL))
    params = first.json()["kv_transfer_params"]
    assert len(params["remote_block_ids"]) == -(-length // 8)
    out = decoded(decode.url, "/v1/completions", dict(body, stream=stream, kv_transfer_params=params))
    if stream:
        tokens = [t for chunk in out for c in chunk["choices"] for t in c.get("token_ids") or []]
    else:
        tokens = out["choices"][0]["token_ids"]
    assert tokens == colocated
    assert metric(decode.url, "moeserve_kv_blocks_pinned_remote") == 0
