"""The whole model through one kernel set, against transformers' greedy `generate`, for the tiny
model of every architecture: `kernels="torch"` (the reference set) and `kernels="triton"` under
TRITON_INTERPRET=1 on CPU (docs/kernels.md). A few prompts of different lengths with a small token
budget, so prefill is chunked and mixed with decodes; a few new tokens each.

The triton run happens in a child process with TRITON_INTERPRET=1 set before anything imports
triton, and counts the calls of each Triton kernel, so a set that quietly fell back to torch fails.
"""
from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from tiny_models import ALL_ARCHITECTURES, arch_params

NEW_TOKENS = 4

# run in a child process: argv = architecture, checkpoint scratch dir, kernel set; prints one JSON line
CHILD = textwrap.dedent('''
    import json, os, random, sys
    from pathlib import Path
    import torch
    sys.path.insert(0, sys.argv[4])
    from tiny_models import make_any_checkpoint
    from moeserve import LLM, SamplingParams

    arch, scratch, kernels = sys.argv[1], Path(sys.argv[2]), sys.argv[3]
    if len(sys.argv) > 5:  # an MLA path forced for every slice of sequences
        from moeserve.dense.mla import MultiHeadLatentAttention
        MultiHeadLatentAttention._use_absorb = lambda self, part: sys.argv[5] == "absorb"
    calls = {}
    if kernels == "triton":
        from moeserve.kernels.triton import fused_moe, mla_decode, mla_prefill, norm, paged_attention, paged_prefill

        def counted(module, name):
            fn = getattr(module, name)
            def wrapped(*args, **kwargs):
                calls[name] = calls.get(name, 0) + 1
                return fn(*args, **kwargs)
            setattr(module, name, wrapped)

        for module, name in ((fused_moe, "fused_moe"), (fused_moe, "fused_experts"), (paged_attention, "paged_decode"),
                             (paged_prefill, "paged_prefill"), (mla_decode, "mla_decode"),
                             (mla_decode, "mla_prefill"), (mla_prefill, "mla_prefill_expanded"), (norm, "rms_norm")):
            counted(module, name)
    torch.manual_seed(0)
    hf, path = make_any_checkpoint(arch, scratch)
    rng = random.Random(0)
    lens = [int(n) for n in os.environ.get("CHILD_PROMPT_LENS", "2,7,13").split(",")]
    prompts = [[rng.randrange(3, hf.config.vocab_size) for _ in range(n)] for n in lens]
    hf.generation_config.eos_token_id = None
    want = []
    with torch.no_grad():
        for p in prompts:
            ids = torch.tensor([p])
            gen = hf.generate(ids, attention_mask=torch.ones_like(ids), max_new_tokens=NEW_TOKENS, do_sample=False,
                              pad_token_id=0)
            want.append(gen[0, len(p):].tolist())
    llm = LLM(model=str(path), block_size=4, max_num_batched_tokens=int(os.environ.get("CHILD_BATCH_TOKENS", "12")),
              kernels=kernels)
    kernel_set = type(llm.engine.executor.worker.runner.kernels).__name__
    outs = llm.generate(prompts, SamplingParams(temperature=0.0, max_tokens=NEW_TOKENS, ignore_eos=True))
    llm.shutdown()
    print(json.dumps({"got": [o.token_ids for o in outs], "want": want, "calls": calls, "set": kernel_set}))
''').replace("NEW_TOKENS", str(NEW_TOKENS))


def run_child(arch: str, kernels: str, tmp_path: Path, env: dict, mla_path: str | None = None) -> dict:
    models = Path(__file__).resolve().parents[1] / "models"
    done = subprocess.run(
        [sys.executable, "-c", CHILD, arch, str(tmp_path), kernels, str(models)] + ([mla_path] if mla_path else []),
        env={**os.environ, **env}, capture_output=True, text=True, timeout=600,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    return json.loads(done.stdout.strip().splitlines()[-1])


@pytest.mark.slow  # 25-40 s each: the whole model under the interpreter (tests/kernels checks each kernel)
@pytest.mark.parametrize("arch", ALL_ARCHITECTURES)
def test_triton_set_under_the_interpreter_matches_transformers(arch, tmp_path):
    pytest.importorskip("triton")
    out = run_child(arch, "triton", tmp_path, {"TRITON_INTERPRET": "1"})
    assert out["set"] == "TritonKernels"
    assert out["got"] == out["want"]
    # the step kinds the prompts make: prefills (chunked, mixed with decodes) and decode steps
    # one rank holds every expert: the fused path (gather and routing weights in the kernels) runs them
    assert out["calls"].get("fused_moe", 0) > 0 and out["calls"].get("rms_norm", 0) > 0
    if arch.startswith("deepseek"):  # prefills take the expanded form at these sizes (dense/mla.py)
        assert out["calls"].get("mla_decode", 0) > 0 and out["calls"].get("mla_prefill_expanded", 0) > 0
    else:
        assert out["calls"].get("paged_prefill", 0) > 0 and out["calls"].get("paged_decode", 0) > 0


@pytest.mark.slow
def test_triton_mla_prefill_in_the_latent_space_matches_transformers(tmp_path):
    """Every MLA slice forced into the absorbed form: chunks of more than DECODE_QUERIES new tokens run
    through mla_decode.mla_prefill, shorter ones (and decodes) through the decode kernel's queries."""
    pytest.importorskip("triton")
    out = run_child("deepseek_v3", "triton", tmp_path, {"TRITON_INTERPRET": "1", "CHILD_PROMPT_LENS": "2,7,30",
                                                         "CHILD_BATCH_TOKENS": "40"}, mla_path="absorb")
    assert out["got"] == out["want"]
    assert out["calls"].get("mla_prefill", 0) > 0 and out["calls"].get("mla_prefill_expanded", 0) == 0
    assert out["calls"].get("mla_decode", 0) > 0


@pytest.mark.parametrize("arch", arch_params(ALL_ARCHITECTURES))
def test_torch_set_matches_transformers(arch, tmp_path):
    out = run_child(arch, "torch", tmp_path, {})
    assert out["set"] == "KernelSet"
    assert out["got"] == out["want"]
