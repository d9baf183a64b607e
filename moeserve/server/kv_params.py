"""The front end's checks of `kv_transfer_params` (kv_transfer/params.py), before the engine sees
the request: malformed fields, and stale ones, are a 400 here; an unreachable prefill server is a
503. A decoder acts on parameters signed by its pool only (kv_transfer/trust.py): the signature is
checked before any connection, and the signed prompt digest against this request's prompt, so a
client can neither steer a connection nor pair another prompt's KV with its own. Then the decoder
claims the pin on the prefill server's side channel with a token only it can make (POST /claim): the
pin must still exist, on the engine named, with the blocks named, unclaimed by another decoder; so a
decoder never reads blocks that now hold another request's KV, and only it can release them.
"""
from __future__ import annotations

import asyncio
import dataclasses
import functools
import logging
from collections import OrderedDict
from dataclasses import dataclass
from typing import Any

import httpx

from moeserve.config import KvTransferConfig
from moeserve.errors import RequestError
from moeserve.kv_transfer import params as kv
from moeserve.kv_transfer import peer_calls, trust
from moeserve.server.api_errors import ApiError, bad_request, from_request_error, unavailable

log = logging.getLogger("moeserve.server")

CLAIM_TIMEOUT_S = 30.0  # a busy prefill engine process answers late; waiting costs only this request
logging.getLogger("httpx").setLevel(logging.WARNING)  # one INFO line per decode request otherwise


def _stale(message: str) -> ApiError:
    return bad_request(f"{kv.PARAM}: {message}", param=kv.PARAM, code="stale_kv_transfer_params")


@dataclass(frozen=True, repr=False)
class _DecoderKeys:
    pool: trust.PoolKey
    server: bytes  # this front end's own: its release tokens


@functools.cache
def _keys(secret: str | None) -> _DecoderKeys:
    return _DecoderKeys(trust.key_for(secret), trust.new_server_key())


async def check(raw: Any, prompts: list[list[int]], n: int, stream: bool, cfg: KvTransferConfig) -> dict[str, Any] | None:
    """The request's kv_transfer_params as the engine takes them (params.to_plain), or None. `cfg`:
    this server's --kv-role, --kv-transfer and the pool's secret."""
    try:
        parsed = kv.parse(raw)
    except RequestError as e:
        raise from_request_error(e) from None
    if parsed is None:
        return None
    if not cfg.enabled:
        raise bad_request(f"{kv.PARAM} asks for a KV transfer and this server runs without one: start it with "
                          "--kv-role prefill, --kv-role decode or --kv-transfer nixl", param=kv.PARAM)
    wrong = "decode" if parsed.remote_decode else "prefill"
    if cfg.role == wrong:
        asked = "do_remote_decode asks for a prefill" if parsed.remote_decode else "do_remote_prefill asks for a decode"
        raise bad_request(f"{kv.PARAM}: {asked}, and this server runs --kv-role {wrong}", param=kv.PARAM)
    if n != 1 or len(prompts) != 1:
        raise bad_request(f"{kv.PARAM} serves one prompt and n 1", param=kv.PARAM)
    if parsed.remote_decode and stream:
        raise bad_request(f"{kv.PARAM}: a prefill for a remote decoder answers once: send it with stream false",
                          param=kv.PARAM)
    if parsed.remote_prefill is not None:
        keys = _keys(cfg.secret)
        remote = _trusted(parsed.remote_prefill, raw, prompts[0], keys.pool)
        token = trust.release_token(keys.server, remote.engine_id, remote.request_id)
        await _claim(remote, token, keys.pool)
        parsed = dataclasses.replace(parsed, remote_prefill=dataclasses.replace(remote, release_token=token))
    return kv.to_plain(parsed)


def _trusted(remote: kv.RemotePrefill, raw: dict[str, Any], prompt: list[int], key: trust.PoolKey) -> kv.RemotePrefill:
    """`remote` if its pool signed it for this prompt; the 400 otherwise. No connection is made before."""
    if not trust.verify_params(key, raw):
        raise bad_request(f"{kv.PARAM} are not signed by a prefill server of this KV pool: pass on the parameters a "
                          "prefill server answered, unchanged, and start every prefill and decode server of the pool "
                          "with the same --kv-secret (or MOESERVE_KV_SECRET)", param=kv.PARAM, code="invalid_kv_transfer_params")
    if remote.prompt_digest != kv.prompt_digest(prompt):
        raise _stale("the prompt is not the one the prefill server computed for this request")
    return remote


async def _claim(remote: kv.RemotePrefill, token: str, key: trust.PoolKey) -> None:
    """POST /claim on the event loop (httpx: no redirects followed, no proxies from the environment),
    within CLAIM_TIMEOUT_S in all and its answer within peer_calls.pin_answer_bytes: a peer's answer
    larger, slower or not JSON fails this request alone, with a 503."""
    where = peer_calls.netloc(remote.host, remote.port)
    data, headers = peer_calls.signed(key, "POST", "/claim", peer_calls.claim_body(remote.request_id, remote.engine_id,
                                                                                   token))
    cap = peer_calls.pin_answer_bytes(remote.block_ids)
    try:
        status, raw = await asyncio.wait_for(_post(f"http://{where}/claim", data, headers, cap), CLAIM_TIMEOUT_S)
        body = peer_calls.answer_of(raw, cap)
    except peer_calls.AnswerTooLarge as e:
        log.warning("claiming %s: the side channel at %s %s", remote.request_id, where, e)
        raise unavailable(f"the prefill server's KV side channel at {where} {e} to the claim") from None
    except (httpx.HTTPError, ValueError, asyncio.TimeoutError) as e:
        log.warning("claiming %s at %s: %s", remote.request_id, where, type(e).__name__)
        raise unavailable(f"the prefill server's KV side channel at {where} did not answer") from None
    if status == 404:
        raise _stale(f"request {remote.request_id!r} holds no KV blocks on the prefill server (already read, "
                     f"expired after its --kv-expiry-s, released early for newer prefills past its "
                     f"--kv-max-pinned-blocks, or never there)")
    if status == 409:
        raise _stale(f"request {remote.request_id!r}'s KV blocks were taken by another decode server")
    if status != 200:
        log.warning("claiming %s: the side channel at %s answered %d", remote.request_id, where, status)
        raise unavailable(f"the prefill server's KV side channel at {where} did not answer")
    if body.get("engine_id") != remote.engine_id or body.get("group", 0) != remote.group \
            or body.get("block_ids") != remote.block_ids or body.get("prompt_digest") != remote.prompt_digest:
        raise _stale("the prefill server holds other blocks for this request than the parameters name")


async def _post(url: str, data: bytes, headers: dict[str, str], max_bytes: int) -> tuple[int, bytes]:
    """(status, body) of one POST; the body read no further than max_bytes + 1 bytes, undecoded."""
    async with httpx.AsyncClient(timeout=CLAIM_TIMEOUT_S, trust_env=False, follow_redirects=False) as client:
        async with client.stream("POST", url, content=data, headers=headers) as resp:
            raw = bytearray()
            async for chunk in resp.aiter_raw():
                raw += chunk
                if len(raw) > max_bytes:
                    break
            return resp.status_code, bytes(raw)


class TakenPins:
    """The remote prefills (engine id, request id) this decode server has admitted a request for, newest
    last. A second request naming one is stale here at once, whether the first is still reading the
    blocks or long done: the prefill server stops naming a pin only once the decoder's release reaches
    it, so its own check may pass for a moment after a read, and two requests naming one pin would
    both reach the engine (a read that ends after the other's release fails its check against the pin:
    a 503). Only the newest LIMIT are kept; older ones are left to the prefill server's check (and its
    --kv-expiry-s).
    Single-threaded: the front end's event loop calls it, with no await between a test and a store."""

    LIMIT = 1 << 16

    def __init__(self) -> None:
        self._taken: OrderedDict[tuple[str, str], None] = OrderedDict()

    @staticmethod
    def _key(plain: dict[str, Any] | None) -> tuple[str, str] | None:
        if not plain or not plain.get("do_remote_prefill"):
            return None
        return plain["remote_engine_id"], plain["remote_request_id"]

    def take(self, plain: dict[str, Any] | None) -> None:
        """Marks the pin `plain` (check's result) names as taken; raises the stale 400 if it was."""
        key = self._key(plain)
        if key is None:
            return
        if key in self._taken:
            raise _stale(f"request {key[1]!r}'s KV blocks were already taken by an earlier request to this server "
                         "(kv_transfer_params are good for one decode)")
        self._taken[key] = None
        if len(self._taken) > self.LIMIT:
            self._taken.popitem(last=False)

    def give_back(self, plain: dict[str, Any] | None) -> None:
        """The engine refused the request that took it (it read nothing): a retry may take it again."""
        key = self._key(plain)
        if key is not None:
            self._taken.pop(key, None)
