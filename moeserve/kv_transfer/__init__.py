"""Prefill/decode disaggregation: vLLM's `kv_transfer_params` protocol over NIXL (docs/disaggregation.md).

params.py: the protocol's fields, parsed and checked (pure). head_slices.py and cache_layout.py:
which bytes of which prefill rank's blocks a decode rank reads when the two sides' --tp or --ep
differ (pure); staging.py: whole source blocks through a staging buffer, then the heads this rank
holds. nixl_agent.py: one-sided reads of registered KV memory (mechanism). rank_agent.py: a
rank's reads of a step's pulls. side_channel.py: the JSON handshake and release endpoint of a
prefill engine. connector.py: what the engine core on rank 0 runs of it. Which blocks stay pinned
and when they are freed is the scheduler's (core/kv_pins.py).
"""
