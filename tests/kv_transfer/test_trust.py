"""The pool's secret, signed kv_transfer_params and signed side-channel calls (kv_transfer/trust.py)."""
from __future__ import annotations

import os
import stat

import pytest

from moeserve.kv_transfer import params as kv
from moeserve.kv_transfer import trust

KEY = trust.PoolKey.from_secret("the pool's secret, long enough", "test")
ANSWER = trust.sign_params(KEY, kv.prefill_answer("engine-1", "cmpl-1-0", [3, 4, 5], "127.0.0.1", 5600, 2, 1,
                                                  kv.prompt_digest([1, 2, 3])))


def test_signed_parameters_verify_and_pass_through_parse_unchanged():
    assert trust.verify_params(KEY, ANSWER)
    assert kv.to_plain(kv.parse(ANSWER)) == ANSWER  # what vllm-router and the front end pass on


@pytest.mark.parametrize("field, value", [("remote_engine_id", "engine-2"), ("remote_request_id", "cmpl-2-0"),
                                          ("remote_block_ids", [3, 4, 6]), ("remote_host", "127.0.0.2"),
                                          ("remote_port", 5601), ("tp_size", 1), ("remote_group", 0),
                                          ("prompt_digest", kv.prompt_digest([1, 2, 4]))])
def test_any_changed_field_breaks_the_signature(field, value):
    assert not trust.verify_params(KEY, dict(ANSWER, **{field: value}))


def test_another_pools_key_or_no_signature_does_not_verify():
    other = trust.PoolKey.from_secret("another pool's secret, long enough", "test")
    assert not trust.verify_params(other, ANSWER)
    assert not trust.verify_params(KEY, {k: v for k, v in ANSWER.items() if k != trust.SIGNATURE_FIELD})
    assert not trust.verify_params(KEY, dict(ANSWER, moeserve_signature=trust.sign_call(KEY, "GET", "/layout")))


def test_keys_are_never_shown():
    assert "secret" not in repr(KEY) and KEY.params.hex() not in repr(KEY)


def test_a_call_signature_binds_method_path_body_and_time():
    header = trust.sign_call(KEY, "POST", "/claim", b"{}", now=1000)
    assert trust.check_call(KEY, header, "POST", "/claim", b"{}", now=1000 + trust.CALL_SKEW_S)
    assert not trust.check_call(KEY, header, "POST", "/claim", b"{}", now=1001 + trust.CALL_SKEW_S)
    assert not trust.check_call(KEY, header, "GET", "/claim", b"{}", now=1000)
    assert not trust.check_call(KEY, header, "POST", "/release", b"{}", now=1000)
    assert not trust.check_call(KEY, header, "POST", "/claim", b"{ }", now=1000)
    for bad in (None, "", "x", "1.2.3", "-1.ab", "9" * 20 + ".ab",
                "\u00b2\u00b3.ab", "1000." + "\u00e9" * 64):  # Latin-1 header text: ValueError, TypeError before
        assert not trust.check_call(KEY, bad, "POST", "/claim", b"{}", now=1000)


def test_release_tokens_are_per_decoder_and_repeatable():
    a, b = trust.new_server_key(), trust.new_server_key()
    assert trust.release_token(a, "e", "r") == trust.release_token(a, "e", "r")
    assert trust.release_token(a, "e", "r") != trust.release_token(b, "e", "r")
    assert trust.release_token(a, "e", "r") != trust.release_token(a, "e", "r2")


def test_without_a_secret_one_users_servers_share_a_file_made_once(tmp_path):
    first = trust.pool_key(None, tmp_path)
    second = trust.pool_key(None, tmp_path)
    assert first.params == second.params
    path = tmp_path / trust.SECRET_FILE
    assert stat.S_IMODE(path.stat().st_mode) == 0o600
    assert not [p for p in tmp_path.iterdir() if p.name != trust.SECRET_FILE]  # no temporary file left
    os.chmod(path, 0o644)
    with pytest.raises(PermissionError, match="readable by other users"):
        trust.pool_key(None, tmp_path)


def test_a_given_secret_wins_over_the_file_and_env(tmp_path, monkeypatch):
    monkeypatch.setenv("MOESERVE_CACHE", str(tmp_path))
    monkeypatch.setenv("MOESERVE_KV_SECRET", "from the environment, long enough")
    assert trust.key_for("given on the command line").params == \
        trust.PoolKey.from_secret("given on the command line", "x").params
    assert trust.key_for(None).params == trust.PoolKey.from_secret("from the environment, long enough", "x").params
    monkeypatch.delenv("MOESERVE_KV_SECRET")
    assert trust.key_for(None).params == trust.pool_key(None, tmp_path).params
