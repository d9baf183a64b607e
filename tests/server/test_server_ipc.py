"""The engine-process side: msgpack messages and the loop, driven over a real socket with a fake engine."""
from __future__ import annotations

import gc
import os
import socket
import tempfile
import threading
import time

import msgpack
import pytest
from server_fakes import FakeEngine

from moeserve.config import EngineConfig
from moeserve.outputs import RequestOutput
from moeserve.errors import RequestError
from moeserve.sampling_params import SamplingParams, StructuredOutputsParams
from moeserve.server import ipc
from moeserve.server.engine_process import Channel, EngineLoop, run_engine_process


@pytest.fixture(autouse=True)
def _unfreeze_after():
    """run_engine_process freezes the heap it finds (engine/gc_heap.py), here the test process's: thaw it after
    each test, so later tests see the collector as they would in a process of their own."""
    yield
    gc.unfreeze()


def test_every_message_round_trips_and_splits_anywhere():
    msgs = [
        ipc.AddRequest("r1", [1, 2, 3], ipc.params_to_wire(SamplingParams(max_tokens=5, stop=["x"], seed=7))),
        ipc.AbortRequests(["r1", "r2"]),
        ipc.Shutdown(),
        ipc.Ready("m", 128, 1000, "/tmp/m"),
        ipc.Fatal("bad"),
        ipc.AddResults(["a"], [ipc.Rejection("b", 429, "rate_limit_error", "full", None, "queue_full").__dict__]),
        ipc.Outputs([ipc.output_to_wire(RequestOutput("r", [1], [5], new_token_ids=[5], delta_text="é",
                                                      new_logprobs=[(-0.1, [(5, -0.1), (6, -2.0)], 1)], finish_reason="stop",
                                                      stop_reason=5))]),
        ipc.Heartbeat({"num_running": 3, "kv_usage": 0.5}),
    ]
    data = b"".join(ipc.encode(m) for m in msgs)
    dec = ipc.Decoder()
    got = []
    for i in range(0, len(data), 7):  # feed in odd-sized pieces, as a socket may deliver them
        got.extend(dec.feed(data[i : i + 7]))
    assert got == msgs
    assert ipc.params_from_wire(got[0].params) == SamplingParams(max_tokens=5, stop=["x"], seed=7)
    out = ipc.output_from_wire(got[6].outputs[0])
    assert out.new_logprobs == [[-0.1, [[5, -0.1], [6, -2.0]], 1]] and out.delta_text == "é"


@pytest.mark.parametrize("obj", [{"t": "pickle", "x": 1}, {"t": "abort", "request_ids": [], "extra": 1}, [1, 2], {"t": "ready"}])
def test_decoder_refuses_anything_but_our_messages(obj):
    with pytest.raises(ipc.ProtocolError):
        ipc.Decoder().feed(msgpack.packb(obj))


class LoopHarness:
    def __init__(self, engine: FakeEngine):
        a, b = socket.socketpair()
        self.engine = engine
        self.loop = EngineLoop(engine, Channel(a), heartbeat_s=0.05)
        self.peer = Channel(b)
        self.thread = threading.Thread(target=self.loop.run, daemon=True)
        self.thread.start()

    def collect(self, until, timeout: float = 10.0, got: list | None = None) -> list:
        got = [] if got is None else got
        deadline = time.monotonic() + timeout
        while not until(got):
            assert time.monotonic() < deadline, f"timed out; got {got}"
            got.extend(self.peer.receive(0.05))
        return got


def add(rid: str, prompt: list[int], max_tokens: int) -> ipc.AddRequest:
    return ipc.AddRequest(rid, prompt, ipc.params_to_wire(SamplingParams(max_tokens=max_tokens, temperature=0)))


def test_loop_admits_rejects_streams_aborts_and_stops():
    h = LoopHarness(FakeEngine(max_waiting=2))
    h.peer.send(add("a", [1, 2], 3))
    h.peer.send(add("long", [1] * 990, 20))  # 990 + 20 > 1000: refused, nothing else disturbed
    h.peer.send(add("b", [5], 900))
    h.peer.send(add("c", [5], 5))  # third live request: queue full

    def answered(g) -> int:  # requests the loop has accepted or refused so far
        return sum(len(m.accepted) + len(m.rejected) for m in g if isinstance(m, ipc.AddResults))

    # the four may reach the loop in more than one read, with a step (and outputs) between them
    got = h.collect(lambda g: answered(g) == 4 and any(isinstance(m, ipc.Outputs) for m in g))
    results = [m for m in got if isinstance(m, ipc.AddResults)]
    accepted = [r for m in results for r in m.accepted]
    rejected = {r["request_id"]: r for m in results for r in m.rejected}
    assert accepted == ["a", "b"]
    assert rejected["long"]["status"] == 400 and rejected["long"]["param"] == "max_tokens"
    assert rejected["c"]["status"] == 429 and rejected["c"]["type"] == "rate_limit_error"

    def finished(rid):
        return lambda g: any(o["request_id"] == rid and o["finish_reason"] for m in g if isinstance(m, ipc.Outputs) for o in m.outputs)

    got = h.collect(finished("a"), got=got)
    a_tokens = [t for m in got if isinstance(m, ipc.Outputs) for o in m.outputs if o["request_id"] == "a" for t in o["new_token_ids"]]
    assert a_tokens == [3, 4, 5]
    h.peer.send(ipc.AbortRequests(["b", "never-existed"]))
    got = h.collect(finished("b"))
    last_b = [o for m in got if isinstance(m, ipc.Outputs) for o in m.outputs if o["request_id"] == "b"][-1]
    assert last_b["finish_reason"] == "abort"
    beats = h.collect(lambda g: any(isinstance(m, ipc.Heartbeat) for m in g))
    stats = [m for m in beats if isinstance(m, ipc.Heartbeat)][-1].stats
    assert stats["num_running"] == 0 and "nested" not in stats  # only plain numbers cross
    h.peer.send(ipc.Shutdown())
    h.thread.join(5)
    assert not h.thread.is_alive()


class GrammarEngine(FakeEngine):
    """Compiles a constrained request's grammar as EngineCore.compile_grammar does: slowly (until
    `release` is set) for the regex "slow", refused for "bad". A request added with grammar_pending is
    held, never stepped, until grammar_compiled (as EngineCore's scheduler holds it)."""

    def __init__(self):
        super().__init__(max_waiting=8)
        self.release = threading.Event()
        self.compiled: list[str] = []
        self.held: set[str] = set()
        self.added_while_compiling: list[str] = []

    def compile_grammar(self, params) -> None:
        spec = params.structured_outputs
        if spec.regex == "bad":
            raise RequestError("the regex could not be compiled: bad", param="structured_outputs")
        if spec.regex == "slow":
            assert self.release.wait(10)
        self.compiled.append(spec.regex)

    def add_request(self, request_id, prompt_token_ids, params, owner=None, grammar_pending=False) -> None:
        assert grammar_pending == (params.structured_outputs is not None)
        super().add_request(request_id, prompt_token_ids, params, owner)
        if grammar_pending:
            self.held.add(request_id)
            if params.structured_outputs.regex not in self.compiled:
                self.added_while_compiling.append(request_id)

    def grammar_compiled(self, request_id) -> None:
        assert self.requests[request_id][1].structured_outputs.regex in self.compiled
        self.held.discard(request_id)

    def abort_request(self, request_id, output: bool = True) -> None:
        self.held.discard(request_id)
        super().abort_request(request_id, output)

    def has_unfinished_requests(self) -> bool:
        return len(self.requests) > len(self.held) or bool(self.pending)

    def step(self):
        held = {rid: self.requests.pop(rid) for rid in self.held}
        try:
            return super().step()
        finally:
            self.requests.update(held)


def constrained(rid: str, regex: str, max_tokens: int = 3) -> ipc.AddRequest:
    params = SamplingParams(max_tokens=max_tokens, temperature=0, structured_outputs=StructuredOutputsParams(regex=regex))
    return ipc.AddRequest(rid, [1, 2], ipc.params_to_wire(params))


def test_grammars_compile_off_the_loop():
    """A grammar that takes long to compile (a schema of thousands of properties: seconds) holds back
    its own request only: the loop keeps stepping the others and admits it once compiled."""
    h = LoopHarness(engine := GrammarEngine())
    h.peer.send(constrained("slow", "slow"))
    h.peer.send(constrained("bad", "bad"))
    h.peer.send(constrained("gone", "slow"))
    h.peer.send(ipc.AbortRequests(["gone"]))  # aborted while its grammar compiles: never admitted
    h.peer.send(add("a", [1, 2], 3))

    def results(g) -> tuple[list, dict]:
        adds = [m for m in g if isinstance(m, ipc.AddResults)]
        return [r for m in adds for r in m.accepted], {r["request_id"]: r for m in adds for r in m.rejected}

    def done(rid):
        return lambda g: any(o["request_id"] == rid and o["finish_reason"] for m in g if isinstance(m, ipc.Outputs) for o in m.outputs)

    got = h.collect(lambda g: done("a")(g) and "bad" in results(g)[1])
    accepted, rejected = results(got)
    assert accepted == ["a"] and rejected["bad"]["status"] == 400 and "bad" in rejected["bad"]["message"]
    # added (routed: a sampling rank in another process starts its own compile) while the loop's runs,
    # and held: not stepped, not yet announced taken
    assert engine.added_while_compiling == ["slow", "bad", "gone"] and engine.held == {"slow"}
    assert "bad" not in engine.requests and "gone" not in engine.requests
    engine.release.set()
    got = h.collect(done("slow"), got=got)
    assert results(got)[0] == ["a", "slow"] and "gone" not in engine.requests
    # refused or aborted while compiling: never announced, so no output either
    outputs = {o["request_id"] for m in got if isinstance(m, ipc.Outputs) for o in m.outputs}
    assert outputs == {"a", "slow"} and "gone" not in results(got)[1]
    h.peer.send(ipc.Shutdown())
    h.thread.join(5)
    assert not h.thread.is_alive()


def test_loop_ends_when_the_front_end_disappears():
    h = LoopHarness(FakeEngine())
    h.peer.sock.close()
    h.thread.join(5)
    assert not h.thread.is_alive()


def _serve_over_unix_socket(engine: FakeEngine) -> tuple[Channel, threading.Thread, list]:
    path = os.path.join(tempfile.mkdtemp(), "s.sock")
    listener = socket.socket(socket.AF_UNIX)
    listener.bind(path)
    listener.listen(1)
    rc: list = []
    t = threading.Thread(target=lambda: rc.append(run_engine_process(EngineConfig(), path, 0.05, lambda c: engine)), daemon=True)
    t.start()
    conn, _ = listener.accept()
    return Channel(conn), t, rc


def _first_message(ch: Channel, within: float = 60.0):
    """The first message the engine process sends (its start imports and builds: generous on a busy machine)."""
    deadline = time.monotonic() + within
    while time.monotonic() < deadline:
        if got := ch.receive(0.5):
            return got[0]
    raise AssertionError(f"no message from the engine process within {within} s")


def test_run_engine_process_reports_ready_then_fatal_on_a_step_error():
    engine = FakeEngine(fail_on_step=2)
    ch, t, rc = _serve_over_unix_socket(engine)
    first = _first_message(ch)
    assert first == ipc.Ready("fake", 1000, 100, "/nonexistent/fake")
    ch.send(add("a", [1], 5))
    deadline = time.monotonic() + 60
    got: list = []
    while not any(isinstance(m, ipc.Fatal) for m in got):
        assert time.monotonic() < deadline
        got.extend(ch.receive(0.1))
    fatal = [m for m in got if isinstance(m, ipc.Fatal)][0]
    assert "boom" in fatal.message
    t.join(5)
    assert rc == [1] and engine.shut


def test_run_engine_process_reports_a_load_failure():
    def factory(config):
        raise FileNotFoundError("no config.json in /models/x")

    path = os.path.join(tempfile.mkdtemp(), "s.sock")
    listener = socket.socket(socket.AF_UNIX)
    listener.bind(path)
    listener.listen(1)
    rc: list = []
    t = threading.Thread(target=lambda: rc.append(run_engine_process(EngineConfig(), path, 0.05, factory)), daemon=True)
    t.start()
    ch = Channel(listener.accept()[0])
    msg = _first_message(ch)
    assert isinstance(msg, ipc.Fatal) and "no config.json" in msg.message
    t.join(5)
    assert rc == [1]


def test_output_to_wire_carries_exactly_the_output_delta_fields():
    import dataclasses

    wire = ipc.output_to_wire(RequestOutput("r", [1], [5], new_token_ids=[5], delta_text="x", finish_reason="length", text="x"))
    assert set(wire) == {f.name for f in dataclasses.fields(ipc.OutputDelta)}
    assert ipc.output_from_wire(wire).text == "x"


def test_prompt_logprobs_cross_the_wire_once_with_the_first_token():
    prompt_lps = [None, (-1.5, [(7, -0.5)], 3), (-0.25, [(3, -0.25)], 1)]
    first = RequestOutput("r", [1, 3, 4], [5], new_token_ids=[5], prompt_logprobs=prompt_lps)
    later = RequestOutput("r", [1, 3, 4], [5, 6], new_token_ids=[6], prompt_logprobs=prompt_lps)
    wire = ipc.Decoder().feed(ipc.encode(ipc.Outputs([ipc.output_to_wire(first), ipc.output_to_wire(later)])))[0]
    a, b = (ipc.output_from_wire(d) for d in wire.outputs)
    assert a.prompt_logprobs == [None, [-1.5, [[7, -0.5]], 3], [-0.25, [[3, -0.25]], 1]]
    assert b.prompt_logprobs is None
    assert ipc.output_to_wire(RequestOutput("r", [1], [5], new_token_ids=[5]))["prompt_logprobs"] is None


def test_a_trace_that_cannot_be_written_fails_the_action_not_the_engine():
    class ReadOnlyTraceEngine(FakeEngine):
        recorder_start = recorder_stop = staticmethod(lambda: None)

        def recorder_dump(self):
            raise PermissionError(13, "Permission denied", "/srv/traces/trace.npz")

    h = LoopHarness(ReadOnlyTraceEngine())
    h.peer.send(ipc.TraceControl("c1", "dump"))
    got = h.collect(lambda g: any(isinstance(m, ipc.TraceControlResult) for m in g))
    result = [m for m in got if isinstance(m, ipc.TraceControlResult)][0]
    assert not result.ok and result.message == "could not write the trace: Permission denied"
    h.peer.send(add("a", [1], 2))  # the loop still serves
    h.collect(lambda g: any(isinstance(m, ipc.Outputs) for m in g))
    h.peer.send(ipc.Shutdown())
    h.thread.join(5)
    assert not h.thread.is_alive()
