"""The prefill/decode split on a DeepSeek-style tiny model: its KV cache is MLA's compressed latent
plus rope key per token (one tensor per layer, not K and V), and the blocks must move all the same."""
from __future__ import annotations

import pytest
from server_harness import PD_ENV, ROUTER_PREFILL, ServerProcess, decoded, metric, pd_pair, post

if not any(__import__("importlib.util").util.find_spec(m) for m in ("nixl_cu12", "nixl")):
    pytest.skip("NIXL is not installed (pip install 'moeserve[pd]')", allow_module_level=True)

pytestmark = pytest.mark.slow

ARGS = ("--kv-cache-blocks", "64", "--block-size", "8", "--max-num-seqs", "4")


@pytest.fixture(scope="module")
def model_dir(tmp_path_factory):
    from test_deepseek_model import _make_checkpoint

    path = tmp_path_factory.mktemp("deepseek-v3")
    _make_checkpoint("v3", path)
    return path


@pytest.fixture(scope="module")
def mla_pd(model_dir):
    with pd_pair("--model", str(model_dir), *ARGS) as pair:
        yield pair


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



@pytest.fixture(scope="module")
def tp2_decoder(model_dir, mla_pd):
    with ServerProcess("--model", str(model_dir), *ARGS, "--tp", "2", "--kv-role", "decode", env=PD_ENV) as decode:
        yield decode


@pytest.mark.timeout(900)
@pytest.mark.parametrize("length", [5, 45])
def test_mla_latent_blocks_reach_both_ranks_of_a_tp2_decoder(mla_pd, tp2_decoder, length):
    """MLA has no heads to split: every tp rank caches the whole latent, so each rank of a --tp 2
    decoder reads whole latent blocks from the one prefill rank."""
    prefill, decode = mla_pd[0], tp2_decoder
    prompt = [(i * 29 + length) % 90 + 3 for i in range(length)]
    body = {"model": prefill.model, "prompt": prompt, "max_tokens": 6, "temperature": 0, "ignore_eos": True,
            "return_token_ids": True}
    colocated = post(prefill.url, "/v1/completions", body).json()["choices"][0]["token_ids"]
    first = post(prefill.url, "/v1/completions", dict(body, max_tokens=1, min_tokens=1, kv_transfer_params=ROUTER_PREFILL))
    computed = metric(decode.url, "moeserve_prompt_tokens_computed_total")
    out = decoded(decode.url, "/v1/completions", dict(body, kv_transfer_params=first.json()["kv_transfer_params"]))
    assert out["choices"][0]["token_ids"] == colocated
    assert metric(decode.url, "moeserve_prompt_tokens_computed_total") == computed + 1
    assert metric(prefill.url, "moeserve_kv_blocks_pinned_remote") == 0
    assert metric(decode.url, "moeserve_kv_cache_blocks_used") == 0
