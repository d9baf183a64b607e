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
    sampled = [SampledToken("a", 5, -0.25, [(5, -0.25), (7, -1.5)]), SampledToken("b", 1)]
    assert decode_result(encode_sampled(sampled)).sampled == sampled
    assert decode_result(encode_sampled([])).sampled == []


def test_prompt_logprobs_round_trip():
    prompt = [PromptLogprobs("p", 1, [(-0.5, [(5, -0.5)]), (-2.25, [(3, -0.75)])])]
    result = decode_result(encode_sampled([SampledToken("p", 9)], prompt))
    assert result.prompt_logprobs == prompt and result.sampled == [SampledToken("p", 9)]
    assert decode_result(encode_sampled([])).prompt_logprobs == []
