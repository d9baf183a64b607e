"""vLLM's kv_transfer_params: what parses, what is a 400, and the prefill answer's shape."""
from __future__ import annotations

import pytest

from moeserve.errors import RequestError
from moeserve.kv_transfer import params as kv

ROUTER_PREFILL = {"do_remote_decode": True, "do_remote_prefill": False, "remote_engine_id": None,
                  "remote_block_ids": None, "remote_host": None, "remote_port": None}
ANSWER = kv.prefill_answer("engine-1", "cmpl-1-0", [3, 4, 5], "127.0.0.1", 5600, 1)


def test_the_routers_prefill_call_asks_for_a_remote_decode():
    assert kv.parse(ROUTER_PREFILL) == kv.KvTransfer(remote_decode=True)


def test_nothing_asked_is_none():
    assert kv.parse(None) is None
    assert kv.parse({}) is None
    assert kv.parse({"do_remote_decode": False, "do_remote_prefill": False}) is None


def test_the_prefill_answer_parses_on_the_decoder_as_vllm_names_it():
    assert set(ANSWER) >= {"do_remote_prefill", "do_remote_decode", "remote_engine_id", "remote_block_ids",
                           "remote_request_id", "remote_host", "remote_port", "tp_size"}
    parsed = kv.parse(ANSWER)
    assert parsed.remote_prefill == kv.RemotePrefill("engine-1", "cmpl-1-0", [3, 4, 5], "127.0.0.1", 5600, 1)
    vllms = {k: v for k, v in ANSWER.items() if k != "prompt_digest"}
    assert kv.parse(vllms) == parsed
    assert kv.to_plain(parsed) == ANSWER
    assert kv.parse(dict(ANSWER, some_connector_field=1)) == parsed  # other connectors' keys pass


def test_the_answer_names_the_attention_group_and_vllms_plain_fields_mean_group_0():
    answer = kv.prefill_answer("engine-1", "cmpl-1-0", [3], "127.0.0.1", 5600, 2, group=1)
    assert answer["remote_group"] == 1 and answer["tp_size"] == 2
    assert kv.parse(answer).remote_prefill.group == 1
    vllms = {k: v for k, v in ANSWER.items() if k != "remote_group"}
    assert kv.parse(vllms).remote_prefill.group == 0


@pytest.mark.parametrize("raw, words", [
    ([1], "must be an object"),
    ({"do_remote_decode": "yes"}, "do_remote_decode must be true or false"),
    ({"do_remote_decode": True, "do_remote_prefill": True}, "cannot both be true"),
    (dict(ANSWER, remote_block_ids=[]), "non-empty list"),
    (dict(ANSWER, remote_block_ids="0,1"), "non-empty list"),
    (dict(ANSWER, remote_block_ids=[1, -2]), "non-negative"),
    (dict(ANSWER, remote_block_ids=[1, True]), "non-negative"),
    (dict(ANSWER, remote_port=0), "remote_port must be in"),
    (dict(ANSWER, remote_port="5600"), "remote_port must be an integer"),
    (dict(ANSWER, remote_host=None), "remote_host is required"),
    (dict(ANSWER, remote_engine_id=7), "remote_engine_id must be a string"),
    (dict(ANSWER, remote_group=-1), r"remote_group must be in \[0, 65535\]"),
    (dict(ANSWER, remote_group="1"), "remote_group must be an integer"),
    (dict(ANSWER, tp_size=0), r"tp_size must be in \[1, 4096\]"),
    (dict(ANSWER, tp_size=2**64), "tp_size must be in"),
    (dict(ANSWER, remote_group=2**64), "remote_group must be in"),
    ({k: v for k, v in ANSWER.items() if k != "remote_request_id"}, "remote_request_id is required"),
    # what a client could steer a connection or a path with
    (dict(ANSWER, remote_host="127.0.0.1\r\nX-Injected: 1"), "remote_host must be an IP address or a host name"),
    (dict(ANSWER, remote_host="[::1"), "remote_host must be"),
    (dict(ANSWER, remote_host="fe80::1%eth0\r\n"), "remote_host must be"),
    (dict(ANSWER, remote_host="a" * 300), "remote_host must be"),
    (dict(ANSWER, remote_host="evil.example/path"), "remote_host must be"),
    (dict(ANSWER, remote_host=""), "remote_host must be"),
    (dict(ANSWER, remote_request_id="../layout"), "remote_request_id must be an identifier"),
    (dict(ANSWER, remote_request_id="a?b=c"), "remote_request_id must be an identifier"),
    (dict(ANSWER, remote_request_id="a\r\nb"), "remote_request_id must be an identifier"),
    (dict(ANSWER, remote_request_id="a\x00b"), "remote_request_id must be an identifier"),
    (dict(ANSWER, remote_request_id="x" * 100_000), "remote_request_id must be an identifier"),
    (dict(ANSWER, remote_engine_id="e/../x"), "remote_engine_id must be an identifier"),
    (dict(ANSWER, remote_block_ids=[2**64]), "below 2\\*\\*31"),
    (dict(ANSWER, remote_block_ids=[2**31]), "below 2\\*\\*31"),
    (dict(ANSWER, remote_block_ids=list(range(kv.MAX_BLOCK_IDS + 1))), "at most"),
    (dict(ANSWER, prompt_digest="not hex"), "prompt_digest must be 32 lowercase hex digits"),
    (dict(ANSWER, moeserve_signature=5), "moeserve_signature must be a string"),
    (dict(ANSWER, moeserve_signature="ab"), "moeserve_signature must be 64 lowercase hex digits"),
])
def test_malformed_parameters_are_a_request_error_naming_the_field(raw, words):
    with pytest.raises(RequestError, match=words) as e:
        kv.parse(raw)
    assert e.value.status == 400 and e.value.param == "kv_transfer_params"


def test_host_names_and_addresses_parse():
    for host in ("127.0.0.1", "::1", "fd00::2", "localhost", "prefill-0.pool.example.com"):
        assert kv.parse(dict(ANSWER, remote_host=host)).remote_prefill.host == host


def test_prompt_digest_tells_prompts_apart():
    assert kv.prompt_digest([1, 2, 3]) == kv.prompt_digest([1, 2, 3])
    assert kv.prompt_digest([1, 2, 3]) != kv.prompt_digest([1, 2, 4])
    assert kv.prompt_digest([1, 2]) != kv.prompt_digest([1, 2, 0])
