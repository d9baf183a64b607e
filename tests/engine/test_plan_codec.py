from moeserve.core.step_plan import GroupBatch, NewRequest, PromptLogprobs, SampledToken, ScheduledSeq, StepPlan
from moeserve.engine.plan_codec import decode_plan, decode_result, encode_plan, encode_sampled
from moeserve.sampling_params import SamplingParams


def test_plan_round_trips_without_pickle():
    plan = StepPlan(
        step=7,
        groups=[GroupBatch(0, [ScheduledSeq("a", [1, 2, 3], 16, [4, 9], True),
                               ScheduledSeq("p", [4, 5], 0, [1], False, prompt_targets=[5, 6])]), GroupBatch(1)],
        new_requests=[NewRequest("a", SamplingParams(temperature=0.5, seed=3, stop=["x"], logprobs=2, logit_bias={7: -100.0})),
                      NewRequest("p", SamplingParams(prompt_logprobs=1))],
        finished_request_ids=["old"],
    )
    assert decode_plan(encode_plan(plan)) == plan
    assert decode_plan(encode_plan(None)) is None


def test_sampled_round_trip():
    sampled = [SampledToken("a", 5, -0.25, [(5, -0.25), (7, -1.5)], 1), SampledToken("b", 1)]
    assert decode_result(encode_sampled(sampled)).sampled == sampled
    assert decode_result(encode_sampled([])).sampled == []


def test_prompt_logprobs_round_trip():
    prompt = [PromptLogprobs("p", 1, [(-0.5, [(5, -0.5)], 1), (-2.25, [(3, -0.75)], 4)])]
    result = decode_result(encode_sampled([SampledToken("p", 9)], prompt))
    assert result.prompt_logprobs == prompt and result.sampled == [SampledToken("p", 9)]
    assert decode_result(encode_sampled([])).prompt_logprobs == []


def test_kv_pulls_reach_every_rank_and_their_outcomes_come_back_merged():
    from moeserve.core.step_plan import KvPull, KvPullDone, merge_pull_results

    pull = KvPull("d", 1, "engine", "cmpl-1", "127.0.0.1", 4000, [3, 4], [0, 7], remote_group=1)
    plan = StepPlan(step=2, groups=[GroupBatch(0), GroupBatch(1)], kv_pulls=[pull])
    assert decode_plan(encode_plan(plan)).kv_pulls == [pull]
    ranks = [[KvPullDone("d", 100, 0.5), KvPullDone("e", 10, 0.1)], [KvPullDone("d", 100, 0.7)],
             [KvPullDone("e", error="peer gone")]]
    parts = [decode_result(encode_sampled([], None, r)).kv_pulls for r in ranks]
    assert parts == ranks
    merged = {d.request_id: d for d in merge_pull_results(parts)}
    assert (merged["d"].num_bytes, merged["d"].seconds, merged["d"].error) == (200, 0.7, None)
    assert merged["e"].error == "peer gone"  # one rank's failure fails the request on every rank


def test_grammar_compiles_reach_the_ranks_and_their_reports_come_back():
    from moeserve.core.step_plan import GrammarCompile, GrammarDone
    from moeserve.sampling_params import StructuredOutputsParams

    specs = [StructuredOutputsParams(json={"type": "object", "properties": {"a": {"type": "number", "maximum": 1e300}}},
                                     reasoning_end=[[5, 6]], reasoning_start=4),
             StructuredOutputsParams(choice=["yes", "no"], in_reasoning=True, reasoning_end=[[9]])]
    plan = StepPlan(step=3, groups=[GroupBatch(0), GroupBatch(1)],
                    grammars=[GrammarCompile("a", 1, specs[0]), GrammarCompile("b", 1, specs[1])])
    assert decode_plan(encode_plan(plan)) == plan
    done = [GrammarDone("a"), GrammarDone("b", "the regex could not be compiled")]
    assert decode_result(encode_sampled([], grammars=done)).grammars == done
    assert decode_result(encode_sampled([])).grammars == []


def test_a_read_that_may_still_land_is_reported_as_such_across_ranks():
    from moeserve.core.step_plan import KvPullDone, merge_pull_results

    ranks = [[KvPullDone("d", error="timed out", lingering=1)], [KvPullDone("d", 100)], [KvPullDone("e", lingering=-1)]]
    parts = [decode_result(encode_sampled([], None, r)).kv_pulls for r in ranks]
    assert parts == ranks
    merged = {d.request_id: d for d in merge_pull_results(parts[:2])}
    assert merged["d"].error == "timed out" and merged["d"].lingering == 1
