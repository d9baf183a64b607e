"""Prefill/decode disaggregation: vLLM's `kv_transfer_params` protocol over NIXL (docs/disaggregation.md).

params.py: the protocol's fields, parsed and checked (pure). nixl_agent.py: one-sided reads of
registered KV blocks (mechanism). side_channel.py: the JSON handshake and release endpoint of a
prefill engine. connector.py: what the engine core on rank 0 runs of it. Which blocks stay pinned
and when they are freed is the scheduler's (core/kv_pins.py).
"""
