"""A constrained request routed to a group whose sampling rank is another process waits outside the
group's queue until that rank reports its grammar compiled (core/scheduler.py): no step waits for a
compile. Model-free: the test plays the ranks' reports."""
from __future__ import annotations

from moeserve.config import CacheConfig, SchedulerConfig
from moeserve.core.request import Request
from moeserve.core.scheduler import Scheduler
from moeserve.core.step_plan import GrammarCompile, GrammarDone, SampledToken, StepPlan, StepResult
from moeserve.sampling_params import SamplingParams, StructuredOutputsParams

SPEC = StructuredOutputsParams(regex="a+")


def scheduler() -> Scheduler:
    return Scheduler(SchedulerConfig(8, 64, 1000), CacheConfig(block_size=4), num_groups=2, num_blocks=64,
                     max_model_len=4096, grammar_groups=frozenset({1}))


def request(rid: str, n: int, constrained: bool = True) -> Request:
    sampling = SamplingParams(max_tokens=4, structured_outputs=SPEC if constrained else None)
    return Request(request_id=rid, prompt_token_ids=list(range(1, n + 1)), sampling=sampling)


def run(s: Scheduler, grammars: list[GrammarDone] = ()) -> StepPlan:
    plan = s.schedule()
    sampled = [SampledToken(seq.request_id, 7) for g in plan.groups for seq in g.seqs if seq.sample]
    s.update(plan, StepResult(plan.step, sampled, grammars=list(grammars)))
    return plan


def scheduled(plan: StepPlan) -> dict[str, int]:
    return {seq.request_id: g.group for g in plan.groups for seq in g.seqs}


def test_a_remote_groups_request_waits_for_its_ranks_grammar():
    s = scheduler()
    s.add_request(request("plain", 3, constrained=False))  # group 0
    s.add_request(request("far", 5))  # group 1: its sampling rank compiles first
    s.add_request(request("near", 1))  # group 0: the engine core's process samples it, compiled already
    assert {r: s.requests[r].group for r in s.requests} == {"plain": 0, "far": 1, "near": 0}
    first = run(s)
    assert first.grammars == [GrammarCompile("far", 1, SPEC)]  # announced once, to its group
    assert scheduled(first) == {"plain": 0, "near": 0}
    assert [n.request_id for n in first.new_requests] == ["plain", "near"]
    assert s.grammars_in_flight and s.num_waiting == 1
    second = run(s)  # compiling: the others step on
    assert not second.grammars and "far" not in scheduled(second)
    run(s, [GrammarDone("far")])
    assert not s.grammars_in_flight
    third = run(s)
    assert scheduled(third)["far"] == 1 and [n.request_id for n in third.new_requests] == ["far"]


def test_a_rank_that_cannot_compile_fails_that_request_alone():
    s = scheduler()
    s.add_request(request("plain", 3, constrained=False))
    s.add_request(request("bad", 5))
    run(s)
    plan = run(s, [GrammarDone("bad", "out of memory")])
    failed = s.take_failed()
    assert [(r.request_id, r.error_status) for r, _ in failed] == [("bad", 500)]
    assert "out of memory" in failed[0][1]
    assert "plain" in scheduled(plan) and "bad" in run(s).finished_request_ids  # the rank drops it
    assert not s.grammars_in_flight


def test_an_aborted_request_is_never_scheduled_nor_announced_late():
    s = scheduler()
    s.add_request(request("plain", 3, constrained=False))
    s.add_request(request("early", 5))  # aborted before any plan announced it
    s.abort_request("early")
    plan = run(s)
    assert not plan.grammars and plan.finished_request_ids == ["early"]
    s.add_request(request("late", 5))
    assert s.requests["late"].group == 1
    assert [g.request_id for g in run(s).grammars] == ["late"]
    s.abort_request("late")  # while its rank compiles
    assert not s.grammars_in_flight
    plan = run(s, [GrammarDone("late")])  # its report comes after all: ignored
    assert "late" not in scheduled(run(s)) and "late" in plan.finished_request_ids
    s.check_invariants()


def test_the_engines_compile_and_the_ranks_run_at_once_and_both_gate_the_request():
    """The server's engine loop adds a request while it compiles the grammar itself (grammar_pending):
    the remote rank hears of it in the very next plan, and the request is scheduled only once both
    compiles are done, in either order."""
    for rank_first in (True, False):
        s = scheduler()
        s.add_request(request("plain", 3, constrained=False))
        s.add_request(request("far", 5), grammar_pending=True)  # group 1
        s.add_request(request("near", 1), grammar_pending=True)  # group 0: the engine's compile alone
        assert [s.requests[r].group for r in ("far", "near")] == [1, 0]
        first = run(s)
        assert first.grammars == [GrammarCompile("far", 1, SPEC)]  # before the engine's compile is done
        assert scheduled(first) == {"plain": 0}
        if rank_first:
            run(s, [GrammarDone("far")])
            assert not s.grammars_in_flight and "far" not in scheduled(run(s))  # the engine's still runs
            s.grammar_compiled("far")
        else:
            s.grammar_compiled("far")
            assert s.grammars_in_flight and "far" not in scheduled(run(s))  # the rank's still runs
            run(s, [GrammarDone("far")])
        assert "near" not in scheduled(run(s))
        s.grammar_compiled("near")
        plan = run(s)
        assert scheduled(plan) == {"plain": 0, "far": 1, "near": 0}
        assert not s.take_failed() and s.num_waiting == 0
        s.check_invariants()


def test_waiting_for_the_engines_compile_alone_asks_for_no_steps():
    s = scheduler()
    s.add_request(request("near", 1), grammar_pending=True)
    assert s.requests["near"].group == 0 and not s.grammars_in_flight and s.num_waiting == 1
    plan = run(s)
    assert not plan.grammars and not scheduled(plan)
    s.grammar_compiled("near")
    assert scheduled(run(s)) == {"near": 0}


def test_a_ranks_failure_waits_for_the_engines_compile_to_say_whose_fault_it_is():
    """A grammar that cannot be compiled fails on the rank too, maybe first: that is the engine's 400
    (the engine aborts the request, never announced), not a 500 from the rank."""
    s = scheduler()
    s.add_request(request("plain", 12, constrained=False))
    s.add_request(request("bad", 2), grammar_pending=True)
    s.add_request(request("odd", 2), grammar_pending=True)
    assert s.requests["bad"].group == s.requests["odd"].group == 1
    run(s)
    run(s, [GrammarDone("bad", "regex parse error"), GrammarDone("odd", "out of memory")])
    assert not s.take_failed() and {"bad", "odd"} <= set(s.requests)
    s.abort_request("bad")  # the engine's compile failed too: its 400, and no output
    assert not s.take_failed() and "bad" in run(s).finished_request_ids
    s.grammar_compiled("odd")  # the engine's compile succeeded: the rank is at fault
    failed = s.take_failed()
    assert [(r.request_id, r.error_status) for r, _ in failed] == [("odd", 500)] and "out of memory" in failed[0][1]
    assert not s.grammars_in_flight and s.num_waiting == 0
    s.check_invariants()
