"""The prefill engine's side channel (JSON over HTTP on loopback), without NIXL."""
from __future__ import annotations

import json
import urllib.request

import pytest

from moeserve.kv_transfer.side_channel import PeerError, SideChannel, get_json, post_release


@pytest.fixture
def channel():
    ch = SideChannel("127.0.0.1", 0, "engine-1", {"tp_size": 1, "block_size": 16, "ranks": [{"agent_name": "a"}]})
    yield ch
    ch.close()


def test_layout_names_the_engine(channel):
    status, body = get_json(channel.host, channel.port, "/layout", 5)
    assert status == 200 and body["engine_id"] == "engine-1" and body["ranks"] == [{"agent_name": "a"}]


def test_pins_are_served_until_unpublished(channel):
    channel.publish("cmpl-1-0", [4, 5], "digest")
    status, body = get_json(channel.host, channel.port, "/pins/cmpl-1-0", 5)
    assert status == 200 and body == {"engine_id": "engine-1", "block_ids": [4, 5], "prompt_digest": "digest",
                                      "group": 0}
    channel.unpublish("cmpl-1-0")
    assert get_json(channel.host, channel.port, "/pins/cmpl-1-0", 5)[0] == 404


def test_a_release_is_queued_for_the_engine_loop_once(channel):
    channel.publish("r", [1], "d")
    assert post_release(channel.host, channel.port, "r", "engine-1", 5)
    assert not post_release(channel.host, channel.port, "r", "another-engine", 5)  # a restarted engine's id
    assert not post_release(channel.host, channel.port, "unknown", "engine-1", 5)
    assert channel.drain_releases() == [("r", None)]
    assert channel.drain_releases() == []


def test_a_release_carries_the_bytes_the_decoder_read(channel):
    channel.publish("r", [1, 2], "d", group=1)
    assert get_json(channel.host, channel.port, "/pins/r", 5)[1]["group"] == 1
    assert post_release(channel.host, channel.port, "r", "engine-1", 5, num_bytes=4096)
    assert channel.drain_releases() == [("r", 4096)]


@pytest.mark.parametrize("body", [b"not json", b"[]", b'{"engine_id": "engine-1"}',
                                  b'{"request_id": "r", "num_bytes": -1}', b'{"request_id": "r", "num_bytes": "9"}'])
def test_a_bad_release_body_is_a_400(channel, body):
    req = urllib.request.Request(f"http://127.0.0.1:{channel.port}/release", data=body, method="POST")
    with pytest.raises(urllib.error.HTTPError) as e:
        urllib.request.urlopen(req, timeout=5)
    assert e.value.code == 400 and "error" in json.loads(e.value.read())


def test_a_dead_side_channel_is_a_peer_error(channel):
    port = channel.port
    channel.close()
    with pytest.raises(PeerError, match="did not answer"):
        get_json("127.0.0.1", port, "/layout", 2)
    assert not post_release("127.0.0.1", port, "r", "engine-1", 2)


def test_a_released_pin_is_no_longer_named_before_the_loop_frees_it(channel):
    """So a second decoder's check fails at once, not only once the engine loop has drained the release."""
    channel.publish("r", [1], "d")
    assert post_release(channel.host, channel.port, "r", "engine-1", 5)
    assert get_json(channel.host, channel.port, "/pins/r", 5)[0] == 404
    assert channel.drain_releases() == [("r", None)]
