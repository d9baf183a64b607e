"""msgpack encoding of StepPlan / StepResult for the control plane (never pickle)."""
from __future__ import annotations

import dataclasses

import msgpack

from moeserve.core.step_plan import (
    GrammarCompile,
    GrammarDone,
    GroupBatch,
    KvPull,
    KvPullDone,
    NewRequest,
    PromptLogprobs,
    SampledToken,
    ScheduledSeq,
    StepPlan,
    StepResult,
)
from moeserve.sampling_params import SamplingParams, StructuredOutputsParams, params_to_plain

_SEQ_FIELDS = ("request_id", "token_ids", "start_pos", "block_table", "sample", "prompt_targets", "num_drafts",
               "next_token_id")
_PULL_FIELDS = ("request_id", "group", "engine_id", "remote_request_id", "host", "port", "remote_block_ids",
                "local_block_ids", "remote_group", "release_token")
_DONE_FIELDS = ("request_id", "num_bytes", "seconds", "error", "lingering")


DRAIN = msgpack.packb({"drain": True})  # ranks send the results they still hold (multiproc_executor.py)


def encode_plan(plan: StepPlan | None, report_now: bool = True) -> bytes:
    """None encodes the shutdown message. report_now: the ranks send this step's result as soon as it
    is read back; False: they hold it until the next plan or a DRAIN (the host one step ahead)."""
    if plan is None:
        return msgpack.packb({"shutdown": True})
    return msgpack.packb(
        {
            "now": report_now,
            "step": plan.step,
            "groups": [[[getattr(s, f) for f in _SEQ_FIELDS] for s in g.seqs] for g in plan.groups],
            "new": [[n.request_id, params_to_plain(n.sampling), n.prompt_token_ids] for n in plan.new_requests],
            "finished": plan.finished_request_ids,
            "rebalance": plan.rebalance,
            "collect": plan.collect_routing,
            "pulls": [[getattr(p, f) for f in _PULL_FIELDS] for p in plan.kv_pulls],
            "grammars": [[g.request_id, g.group, dataclasses.asdict(g.spec)] for g in plan.grammars],
        }
    )


def decode_plan(data: bytes) -> StepPlan | None:
    """The plan, or None for shutdown (a DRAIN message: see `decode_message`)."""
    return decode_message(data)[0]


def decode_message(data: bytes) -> tuple[StepPlan | None, str]:
    """(plan, kind): kind "plan" (report now), "plan-ahead" (hold its result), "drain" or "shutdown"."""
    raw = msgpack.unpackb(data)
    if raw.get("shutdown"):
        return None, "shutdown"
    if raw.get("drain"):
        return None, "drain"
    return _plan(raw), "plan" if raw.get("now", True) else "plan-ahead"


def _plan(raw: dict) -> StepPlan:
    return StepPlan(
        step=raw["step"],
        groups=[GroupBatch(g, [ScheduledSeq(*s) for s in seqs]) for g, seqs in enumerate(raw["groups"])],
        new_requests=[NewRequest(rid, SamplingParams(**params), prompt) for rid, params, prompt in raw["new"]],
        finished_request_ids=raw["finished"],
        rebalance=raw.get("rebalance"),
        collect_routing=raw.get("collect", False),
        kv_pulls=[KvPull(*p) for p in raw.get("pulls", ())],
        grammars=[GrammarCompile(rid, g, StructuredOutputsParams(**spec)) for rid, g, spec in raw.get("grammars", ())],
    )


def encode_sampled(sampled: list[SampledToken], prompt_logprobs: list[PromptLogprobs] | None = None,
                   kv_pulls: list[KvPullDone] | None = None, drafts: dict[str, list[int]] | None = None,
                   grammars: list[GrammarDone] | None = None) -> bytes:
    """One rank's share of a StepResult: its sampled tokens, its prompt logprobs, how its KV reads
    went and the grammars it finished compiling. A failing rank sends nothing: it exits, and the executor's watchdog names it (rank_worker.py)."""
    return msgpack.packb(
        {
            "sampled": [[s.request_id, s.token_id, s.logprob, s.top_logprobs, s.rank] for s in sampled],
            "prompt": [[p.request_id, p.start, p.entries] for p in prompt_logprobs or ()],
            "pulls": [[getattr(d, f) for f in _DONE_FIELDS] for d in kv_pulls or ()],
            "drafts": drafts or {},
            "grammars": [[g.request_id, g.error] for g in grammars or ()],
        }
    )


def decode_result(data: bytes) -> StepResult:
    """A rank's share as a StepResult (step -1: the caller knows the step)."""
    raw = msgpack.unpackb(data)
    sampled = [
        SampledToken(rid, tok, lp, [tuple(x) for x in top] if top is not None else None, rank)
        for rid, tok, lp, top, rank in raw["sampled"]
    ]
    prompt = [
        PromptLogprobs(rid, start, [(lp, [tuple(x) for x in top], rank) for lp, top, rank in entries])
        for rid, start, entries in raw.get("prompt", ())
    ]
    pulls = [KvPullDone(*d) for d in raw.get("pulls", ())]
    grammars = [GrammarDone(rid, error) for rid, error in raw.get("grammars", ())]
    return StepResult(step=-1, sampled=sampled, prompt_logprobs=prompt, kv_pulls=pulls, drafts=raw.get("drafts") or {},
                      grammars=grammars)
