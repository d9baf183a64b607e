"""Expert-load balancedness of a placement on routing traces: what `moeserve place --eval` reports,
folded into the one number the step model takes.

Balancedness of a layer = mean rank load / busiest rank load; a step's MoE time grows as 1 / that,
so the layers fold into 1 / mean(1 / balancedness). With no plan given, the layout's placement is
the one `moeserve place --policy robust` makes for its ep and redundant slots. Uses
moeserve.placement's numpy code (no torch).
"""
from __future__ import annotations

# Without traces: balancedness assumed with no redundant experts and with at least one per EP rank
# (EPLB on real traffic; LMSYS's large-scale-EP blog and DeepSeek's EPLB README show mean/max rising
# from about 0.6-0.75 to 0.85-0.9 with redundancy). In between, linear in redundant / ep.
ASSUMED_PLAIN = 0.70
ASSUMED_REPLICATED = 0.85


def assumed_balancedness(ep: int, redundant: int) -> float:
    if ep <= 1:
        return 1.0
    share = min(1.0, redundant / ep)
    return ASSUMED_PLAIN + (ASSUMED_REPLICATED - ASSUMED_PLAIN) * share


def load_traces(trace_paths: list[str], model_name: str, num_experts: int, num_moe_layers: int):
    """The traces' summed counts (a placement.trace.Trace), read once for every layout scored on them.
    ValueError unless every trace routes over the model's experts, in at most its MoE layers (a trace of
    another model was scored as if it were this one's, status 0)."""
    from moeserve.placement.importers import load_trace
    from moeserve.placement.trace import merge_traces

    traces = [load_trace(path) for path in trace_paths]
    for path, trace in zip(trace_paths, traces):
        layers, experts = trace.counts.shape[1:]
        if experts != num_experts or layers > num_moe_layers:
            raise ValueError(f"--trace {path} routes over {experts} experts in {layers} layers; {model_name} has "
                             f"{num_experts} experts in {num_moe_layers} MoE layers: trace this model")
    return merge_traces(traces)


def balancedness_from(trace, plan_path: str | None, ep: int, redundant: int = 0, nodes: int = 1) -> float:
    """Balancedness of `plan_path` (or of the placement planned for ep ranks and `redundant` extra
    slots) on `trace`, the traces' summed counts (load_traces)."""
    import numpy as np

    from moeserve.placement import evaluate, policies
    from moeserve.placement.optimizer import PlacementSpec
    from moeserve.placement.plan import PlacementPlan

    if plan_path:
        try:
            plan = PlacementPlan.load(plan_path)
        except OSError as e:
            raise ValueError(f"cannot read placement plan {plan_path}: {e.strerror or e}") from None
        if plan.num_ranks != ep:
            raise ValueError(f"--plan has {plan.num_ranks} ranks but the layout has ep {ep}")
    else:
        plan = policies.get_policy("robust")(trace.loads[None], PlacementSpec(ep, nodes, redundant), None, None)
    if (plan.num_layers, plan.num_experts) != trace.loads.shape:
        raise ValueError(f"plan is [layers={plan.num_layers}, experts={plan.num_experts}], traces {trace.loads.shape}")
    per_layer = evaluate.score(plan, trace.loads).balancedness  # [L]
    return float(1 / np.mean(1 / np.maximum(per_layer, 1e-9)))
