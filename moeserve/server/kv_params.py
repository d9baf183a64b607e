"""The front end's checks of `kv_transfer_params` (kv_transfer/params.py), before the engine sees
the request: malformed fields, and stale ones, are a 400 here; an unreachable prefill server is a
503. A decoder's parameters are checked against the prefill server's side channel (GET /pins/<id>):
the pin must still exist, on the engine named, with the blocks named, for this very prompt; so a
decoder never reads blocks that now hold another request's KV.
"""
from __future__ import annotations

import logging
from collections import OrderedDict
from typing import Any

import httpx

from moeserve.config import KvTransferConfig
from moeserve.errors import RequestError
from moeserve.kv_transfer import params as kv
from moeserve.server.api_errors import ApiError, bad_request, from_request_error, unavailable

PINS_TIMEOUT_S = 30.0  # a busy prefill engine process answers late; waiting costs only this request
logging.getLogger("httpx").setLevel(logging.WARNING)  # one INFO line per decode request otherwise


def _stale(message: str) -> ApiError:
    return bad_request(f"{kv.PARAM}: {message}", param=kv.PARAM, code="stale_kv_transfer_params")


async def check(raw: Any, prompts: list[list[int]], n: int, stream: bool, cfg: KvTransferConfig) -> dict[str, Any] | None:
    """The request's kv_transfer_params as the engine takes them (params.to_plain), or None. `cfg`:
    this server's --kv-role and --kv-transfer."""
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
        await _check_pin(parsed.remote_prefill, prompts[0])
    return kv.to_plain(parsed)


async def _check_pin(remote: kv.RemotePrefill, prompt: list[int]) -> None:
    host = f"[{remote.host}]" if ":" in remote.host else remote.host
    url = f"http://{host}:{remote.port}/pins/{httpx.URL(remote.request_id).raw_path.decode()}"
    try:
        async with httpx.AsyncClient(timeout=PINS_TIMEOUT_S, trust_env=False) as client:
            resp = await client.get(url)
        body = resp.json()
    except (httpx.HTTPError, ValueError) as e:
        raise unavailable(f"the prefill server's KV side channel at {remote.host}:{remote.port} did not answer "
                          f"({type(e).__name__})") from None
    if resp.status_code == 404:
        raise _stale(f"request {remote.request_id!r} holds no KV blocks on the prefill server (already read, "
                     f"expired after its --kv-expiry-s, or never there)")
    if resp.status_code != 200 or not isinstance(body, dict):
        raise unavailable(f"the prefill server's KV side channel answered {resp.status_code}")
    if body.get("engine_id") != remote.engine_id:
        raise _stale(f"remote_engine_id {remote.engine_id!r} is not the engine at {remote.host}:{remote.port}")
    if body.get("group", 0) != remote.group:
        raise _stale(f"remote_group {remote.group} is not the attention group holding the blocks ({body.get('group')})")
    if body.get("block_ids") != remote.block_ids:
        raise _stale("remote_block_ids are not the blocks the prefill server holds for this request")
    if body.get("prompt_digest") != kv.prompt_digest(prompt):
        raise _stale("the prompt is not the one the prefill server computed for this request")


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
