"""Capacity planning for MoE serving (`moeserve configure`): a pure library, no torch.

    model_spec        a model's shape from its Hugging Face config.json (MLA or GQA, experts, dense layers)
    hardware          accelerator profiles (YAML under hardware/, every number with its source)
    layout            the parallel layout (tp, ep, moe_tp, redundant) and the number formats per module
    efficiency        the few named efficiency factors, one set shared by every profile
    gemm              GEMM rows padded to the kernels' tiles; published efficiency by rows per group
    memory            the fit calculator: weights, KV cache, activations, dispatch buffers, host offload
    step_time, comm   per-layer roofline step time with latency floors; all-reduce, dispatch and combine
    predict           one deployment's TTFT, TPOT, tokens/s per GPU and goodput
    planner           enumerate and rank deployments (colocated or prefill/decode split), bounded
    report, emit      the ranked table and JSON rows; `moeserve serve` config files
    validation(_cases), fit   published deployments the model is checked against (docs/capacity.md), refit

Only `calibrate` (the micro-benchmarks behind `--calibrate`) imports torch, and only when it runs.
"""
