"""A dead rank becomes an error, never a hang; an idle attention group keeps entering collectives."""
from __future__ import annotations

import os
import signal
import sys
import threading
import time
from pathlib import Path

import pytest

from moeserve import LLM, SamplingParams
from moeserve.errors import EngineDeadError
from tiny_models import make_checkpoint

sys.path.insert(0, str(Path(__file__).parents[1] / "server"))
from server_harness import alive, child_pids  # noqa: E402

pytestmark = pytest.mark.slow  # spawns ranks, servers or builds: left out of the quick run


@pytest.fixture(scope="module")
def tiny(tmp_path_factory):
    return make_checkpoint("mixtral", tmp_path_factory.mktemp("mixtral"), max_position_embeddings=2048)[1]


@pytest.mark.slow
@pytest.mark.timeout(240)
def test_1000_decode_steps_with_one_idle_group(tiny):
    llm = LLM(model=str(tiny), ep=2, tp=1)  # two attention groups, one request: group 1 idles
    try:
        out = llm.generate([[5, 6, 7]], SamplingParams(temperature=0.0, max_tokens=1000, ignore_eos=True))[0]
        assert len(out.token_ids) == 1000 and out.finish_reason == "length"
        assert llm.engine.num_steps >= 1000
    finally:
        llm.shutdown()
    assert all(p.poll() is not None for p in llm.engine.executor._procs)


@pytest.mark.timeout(240)
def test_killed_rank_turns_into_an_error_and_no_process_is_left(tiny):
    llm = LLM(model=str(tiny), ep=2, tp=1)
    procs = llm.engine.executor._procs
    killer = threading.Timer(1.0, procs[0].kill)
    killer.start()
    started = time.monotonic()
    with pytest.raises(EngineDeadError):
        llm.generate([[5, 6, 7]] * 4, SamplingParams(temperature=0.0, max_tokens=1000, ignore_eos=True))
    assert time.monotonic() - started < 60
    llm.shutdown()
    assert all(p.poll() is not None for p in procs)


@pytest.mark.timeout(240)
def test_a_rank_that_raises_ends_the_step_at_once(tiny, monkeypatch):
    """Rank 1 raises before its step's collectives while rank 0 waits in them: the step fails within
    seconds (not after the 60 s step timeout), names the rank, and no process is left."""
    _inject_failure(monkeypatch, "1:20")
    llm = LLM(model=str(tiny), ep=2, tp=1)
    procs = llm.engine.executor._procs
    started = time.monotonic()
    with pytest.raises(EngineDeadError, match="rank 1"):
        llm.generate([[5, 6, 7]] * 4, SamplingParams(temperature=0.0, max_tokens=100, ignore_eos=True))
    assert time.monotonic() - started < 30
    with pytest.raises(EngineDeadError):  # the engine stays dead: no call blocks on a broken world
        llm.generate([[1, 2]], SamplingParams(max_tokens=2))
    llm.shutdown()
    assert all(p.poll() is not None for p in procs)


@pytest.mark.timeout(120)
def test_a_rank_that_dies_while_the_world_forms_fails_the_start_at_once(tiny, monkeypatch):
    """Rank 2 of 4 exits before it joins the rendezvous: the engine's start fails within seconds naming
    it (not after the 15-minute startup timeout), and no rank is left."""
    _inject_failure(monkeypatch, "2:start")
    before = set(_children())
    started = time.monotonic()
    with pytest.raises(RuntimeError, match="rank 2 exited with code 3 while the ranks were starting"):
        LLM(model=str(tiny), ep=4, tp=2)
    assert time.monotonic() - started < 60
    _assert_no_new_child(before)


@pytest.mark.timeout(240)
def test_a_rank_that_dies_while_the_groups_form_fails_the_start(tiny, monkeypatch):
    """Rank 1 exits a second after it joined the rendezvous, while rank 0 is inside gloo's connect for
    the default group: the start fails after the connect timeout (not the group's 15 minutes), naming
    the rank, no rank is left, and the process can start another world."""
    _inject_failure(monkeypatch, "1:joined")
    monkeypatch.setenv("MOESERVE_CONNECT_TIMEOUT_S", "10")  # the default 60 s makes the same test a minute longer
    before = set(_children())
    started = time.monotonic()
    with pytest.raises(RuntimeError, match="rank 1 exited with code 3 while the ranks were starting"):
        LLM(model=str(tiny), ep=2, tp=1)
    assert time.monotonic() - started < 10 + 60
    _assert_no_new_child(before)
    monkeypatch.delenv("MOESERVE_TEST_RAISE_AT")
    llm = LLM(model=str(tiny), ep=2, tp=1)  # this process can start another world
    try:
        assert len(llm.generate([[5, 6, 7]], SamplingParams(max_tokens=4, ignore_eos=True))[0].token_ids) == 4
    finally:
        llm.shutdown()


@pytest.mark.timeout(120)
def test_a_rank_stopped_while_the_world_forms_fails_the_start(tiny):
    """A spawned rank SIGSTOPped as it starts (so it never joins): the start fails after the stopped-rank
    grace, naming it, and no rank is left."""
    before = set(_children())

    def stop_the_first_rank() -> None:
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline:
            new = set(_children()) - before
            if new:
                os.kill(min(new), signal.SIGSTOP)
                return
            time.sleep(0.02)

    threading.Thread(target=stop_the_first_rank, daemon=True).start()
    started = time.monotonic()
    with pytest.raises(RuntimeError, match="rank 1 is stopped .* while the ranks were starting"):
        LLM(model=str(tiny), ep=2, tp=1)
    assert time.monotonic() - started < 60
    _assert_no_new_child(before)


def _inject_failure(monkeypatch, spec: str) -> None:
    """The ranks spawned next load inject/sitecustomize.py, which fails them as `spec` says."""
    inject = Path(__file__).parent / "inject"
    monkeypatch.setenv("PYTHONPATH", os.pathsep.join([str(inject), os.environ.get("PYTHONPATH", "")]))
    monkeypatch.setenv("MOESERVE_TEST_RAISE_AT", spec)


def _assert_no_new_child(before: set[int]) -> None:
    """Within 10 s, no live child of this process but those in `before`."""
    deadline = time.monotonic() + 10
    while set(_children()) - before and time.monotonic() < deadline:
        time.sleep(0.2)
    assert not set(_children()) - before, "a rank outlived the failed start"


def _children() -> list[int]:
    """pids of this process's live children (zombies are reaped by their Popen objects' wait)."""
    return [pid for pid in child_pids(os.getpid()) if alive(pid)]


@pytest.mark.slow
def test_generate_after_a_refused_prompt_serves_only_its_own_requests(tiny):
    """A refused prompt aborts the prompts of the same call that were already added: the next call
    neither waits for them nor mistakes their outputs for its own."""
    from moeserve.errors import RequestError

    llm = LLM(model=str(tiny))
    try:
        with pytest.raises(RequestError):
            llm.generate([[5, 6, 7], [10**6]], SamplingParams(max_tokens=30))
        out = llm.generate([[8, 9]], SamplingParams(temperature=0.0, max_tokens=30, ignore_eos=True))
        assert len(out) == 1 and len(out[0].token_ids) == 30
        assert not llm.engine.has_unfinished_requests()
    finally:
        llm.shutdown()


@pytest.mark.slow
@pytest.mark.timeout(240)
def test_dropping_an_llm_stops_its_ranks_and_another_can_start(tiny):
    import gc

    llm = LLM(model=str(tiny), ep=2, tp=1)
    procs = llm.engine.executor._procs
    del llm
    gc.collect()
    for p in procs:
        p.wait(timeout=30)
    again = LLM(model=str(tiny), ep=2, tp=1)  # the process group of the first is gone
    try:
        out = again.generate([[5, 6, 7]], SamplingParams(temperature=0.0, max_tokens=4, ignore_eos=True))
        assert len(out[0].token_ids) == 4
    finally:
        again.shutdown()


class _Interrupt(BaseException):
    """What Ctrl-C does to generate (a BaseException), without pytest's own KeyboardInterrupt handling."""


@pytest.mark.timeout(240)
def test_interrupted_generate_leaves_a_dead_engine_not_a_hang(tiny):
    """Interrupted mid-step, the ranks are out of step with rank 0: the engine must say it is dead at
    once instead of blocking the next call until a collective times out (121 s before)."""
    import signal

    def interrupt(*_):
        raise _Interrupt

    llm = LLM(model=str(tiny), ep=2, tp=1)
    previous = signal.signal(signal.SIGALRM, interrupt)
    try:
        signal.setitimer(signal.ITIMER_REAL, 2.0)
        with pytest.raises(_Interrupt):
            llm.generate([[5, 6, 7]] * 4, SamplingParams(temperature=0.0, max_tokens=2000, ignore_eos=True))
        started = time.monotonic()
        try:  # interrupted inside a step (nearly always): dead; between steps: still serving
            assert len(llm.generate([[1, 2]], SamplingParams(max_tokens=2, ignore_eos=True))[0].token_ids) == 2
        except EngineDeadError:
            pass
        assert time.monotonic() - started < 10
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, previous)
        llm.shutdown()
    assert all(p.poll() is not None for p in llm.engine.executor._procs)
