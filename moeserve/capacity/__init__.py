"""Capacity planning for MoE serving (`moeserve configure`): a pure library, no torch.

    model_spec   a model's shape from its Hugging Face config.json (MLA or GQA, experts, dense layers)
    hardware     accelerator profiles (YAML under hardware/, every number with its source)
    efficiency   the few named efficiency factors, one set shared by every profile
    memory       the fit calculator: weights, KV cache, activations and dispatch buffers per GPU
    step_time    per-layer roofline step-time model (attention, GEMMs, experts, dispatch, all-reduce)
    predict      one deployment's TTFT, TPOT, tokens/s per GPU and goodput
    planner      enumerate and rank deployments (colocated or prefill/decode split)
    validation   published deployments the model is checked against (docs/capacity.md)

Only `calibrate` (the micro-benchmarks behind `--calibrate`) imports torch, and only when it runs.
"""
