"""Speculative decoding's counters: vLLM's spec_decode names with the moeserve_ prefix on /metrics,
and `moeserve bench`'s summary of what changed over a timed run (from moeserve's or vLLM's names)."""
from __future__ import annotations

from prometheus_client import CollectorRegistry, generate_latest

from moeserve.core.request import Request
from moeserve.core.spec_scheduling import SpecDecodeStats, may_draft
from moeserve.sampling_params import SamplingParams
from moeserve.server.bench_stats import RequestRecord, format_table, spec_decode_summary, summarize
from moeserve.server.metrics import EngineStatsCollector


def test_counters_and_mean_acceptance_length():
    s = SpecDecodeStats()
    s.observe(0, 0)  # a decode without drafts counts nothing
    s.observe(3, 2)
    s.observe(3, 0)
    s.observe(2, 2)
    assert (s.num_drafts, s.num_draft_tokens, s.num_accepted_tokens) == (3, 8, 4)
    assert s.accepted_per_pos == [2, 2, 0]
    assert s.mean_acceptance_length == 1 + 4 / 3
    assert SpecDecodeStats().mean_acceptance_length == 0.0


def test_requests_whose_sampling_reads_their_own_tokens_get_no_drafts():
    assert may_draft(Request("a", [1], SamplingParams(temperature=0.7, top_k=5, logit_bias={3: 1.0}, logprobs=2,
                                                      allowed_token_ids=[3, 4])))
    for params in (SamplingParams(presence_penalty=0.1), SamplingParams(frequency_penalty=0.1),
                   SamplingParams(repetition_penalty=1.1), SamplingParams(min_tokens=2),
                   SamplingParams(bad_words=["x"], bad_words_token_ids=[[3, 4]])):
        assert not may_draft(Request("a", [1], params))
    r = Request("a", [1], SamplingParams(min_tokens=1))
    r.append_output_token(5)
    assert may_draft(r)  # the min_tokens mask is off from here on


def _page(drafts: int, accepted: int, per_pos: list[int]) -> str:
    stats = {"spec_decode_num_drafts": drafts, "spec_decode_num_draft_tokens": 3 * drafts,
             "spec_decode_num_accepted_tokens": accepted, "spec_decode_num_accepted_tokens_per_pos": per_pos,
             "spec_decode_mean_acceptance_length": 1 + accepted / max(1, drafts)}
    registry = CollectorRegistry()
    registry.register(EngineStatsCollector(lambda: stats, lambda: True))
    return generate_latest(registry).decode()


def test_metrics_use_vllms_names_with_our_prefix():
    page = _page(4, 6, [3, 2, 1])
    for line in ("moeserve_spec_decode_num_drafts_total 4.0", "moeserve_spec_decode_num_draft_tokens_total 12.0",
                 "moeserve_spec_decode_num_accepted_tokens_total 6.0",
                 'moeserve_spec_decode_num_accepted_tokens_per_pos_total{position="2"} 1.0',
                 "moeserve_spec_decode_mean_acceptance_length 2.5"):
        assert line in page
    registry = CollectorRegistry()
    registry.register(EngineStatsCollector(lambda: {"num_running": 1}, lambda: True))
    assert "spec_decode" not in generate_latest(registry).decode()  # off: no such metrics


def test_bench_summary_of_a_run():
    summary = spec_decode_summary(_page(10, 12, [6, 4, 2]), _page(30, 42, [20, 14, 8]))
    assert summary == {"num_drafts": 20, "num_draft_tokens": 60, "num_accepted_tokens": 30, "acceptance_rate": 0.5,
                       "mean_acceptance_length": 2.5, "per_position_acceptance_rate": [0.7, 0.5, 0.3]}
    vllm = ("vllm:spec_decode_num_drafts_total 5.0\nvllm:spec_decode_num_draft_tokens_total 10.0\n"
            "vllm:spec_decode_num_accepted_tokens_total 7.0\n"
            'vllm:spec_decode_num_accepted_tokens_per_pos_total{position="0"} 4.0\n'
            'vllm:spec_decode_num_accepted_tokens_per_pos_total{position="1"} 3.0\n')
    assert spec_decode_summary("", vllm)["mean_acceptance_length"] == 2.4
    assert spec_decode_summary("", "") is None and spec_decode_summary("", "not prometheus {") is None
    s = summarize([RequestRecord(ok=True, input_tokens=4, output_tokens=3, ttft=0.1, e2e=0.3, itls=[0.1, 0.1])], 1.0,
                  None, None)
    s["spec_decode"] = summary
    table = format_table(s)
    assert "50.0% / 2.50" in table and "0.70, 0.50, 0.30" in table


def test_drafts_travel_in_plans_and_results():
    from moeserve.core.step_plan import GroupBatch, SampledToken, ScheduledSeq, StepPlan
    from moeserve.engine.plan_codec import decode_plan, decode_result, encode_plan, encode_sampled

    seq = ScheduledSeq("a", [5, 6, 7], 9, [1, 2, 3], True, num_drafts=2, next_token_id=-1)
    chunk = ScheduledSeq("b", [1, 2], 0, [4], False, next_token_id=8)
    plan = decode_plan(encode_plan(StepPlan(3, [GroupBatch(0, [seq, chunk])])))
    assert plan.groups[0].seqs == [seq, chunk]
    assert seq.draft_token_ids == [6, 7] and seq.num_sampled_rows == 3 and chunk.num_sampled_rows == 0
    result = decode_result(encode_sampled([SampledToken("a", 6), SampledToken("a", 11)], drafts={"a": [4, 4]}))
    assert [s.token_id for s in result.sampled] == [6, 11] and result.drafts == {"a": [4, 4]}
