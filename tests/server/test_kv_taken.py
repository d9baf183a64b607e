"""A decode server takes a prefill's pinned blocks once (server/kv_params.TakenPins): a second request
naming the same pin is the stale 400 at once, whatever the prefill server's side channel still says;
a request the engine refused gives its pin back."""
from __future__ import annotations

import asyncio

import pytest

from moeserve.errors import EngineDeadError
from moeserve.kv_transfer import params as kv
from moeserve.sampling_params import SamplingParams
from moeserve.server.api_errors import ApiError
from moeserve.server.engine_client import EngineRejected
from moeserve.server.generation import Generation
from moeserve.server.kv_params import TakenPins

PIN = kv.prefill_answer("engine-1", "cmpl-1-0", [3, 4], "127.0.0.1", 5600, 1)


def _stale(call) -> ApiError:
    with pytest.raises(ApiError) as info:
        call()
    assert info.value.status == 400 and info.value.code == "stale_kv_transfer_params"
    return info.value


def test_a_pin_is_taken_once_and_other_pins_and_prefill_calls_are_free():
    taken = TakenPins()
    taken.take(PIN)
    assert "already taken" in _stale(lambda: taken.take(dict(PIN))).message
    taken.take(dict(PIN, remote_request_id="cmpl-2-0"))
    taken.take(dict(PIN, remote_engine_id="engine-2"))  # another prefill engine's request of that id
    taken.take({"do_remote_decode": True})  # a prefill call takes nothing
    taken.take({"do_remote_decode": True})
    taken.take(None)
    taken.give_back(PIN)
    taken.take(PIN)


def test_only_the_newest_pins_are_remembered(monkeypatch):
    monkeypatch.setattr(TakenPins, "LIMIT", 3)
    taken = TakenPins()
    for i in range(4):
        taken.take(dict(PIN, remote_request_id=f"r{i}"))
    taken.take(dict(PIN, remote_request_id="r0"))  # forgotten: left to the prefill server's check
    _stale(lambda: taken.take(dict(PIN, remote_request_id="r3")))


class _Client:
    """Refuses (or admits) every request, as the engine client would."""

    def __init__(self, error: BaseException | None):
        self.error, self.aborted = error, []

    async def add(self, *args, **kwargs) -> None:
        if self.error is not None:
            raise self.error

    def abort(self, request_ids) -> None:
        self.aborted += request_ids


class _Metrics:
    def on_admitted(self, tokens: int) -> None:
        pass


@pytest.mark.parametrize("error", [None, EngineRejected({"message": "queue full", "status": 429, "type": "rate_limit_error"}), EngineDeadError("gone")])
def test_generation_takes_the_pin_and_gives_it_back_when_the_engine_refuses(error):
    taken = TakenPins()

    def start():
        gen = Generation(_Client(error), _Metrics(), "cmpl-9", [[1, 2, 3]], SamplingParams(max_tokens=2),
                         kv_transfer=PIN, kv_taken=taken)
        asyncio.run(gen.start())

    if error is None:
        start()
        _stale(start)  # a second request for the same pin, admitted or not yet read
    else:
        with pytest.raises(ApiError):
            start()
        with pytest.raises(ApiError) as again:  # the pin was given back: refused for the engine's reason again
            start()
        assert again.value.code != "stale_kv_transfer_params"
