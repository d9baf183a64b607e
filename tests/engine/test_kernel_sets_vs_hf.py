"""The whole model through one kernel set, against transformers' greedy `generate`, for the tiny
model of every architecture: `kernels="torch"` (the reference set) and `kernels="triton"` under
TRITON_INTERPRET=1 on CPU (docs/kernels.md). A few prompts of different lengths with a small token
budget, so prefill is chunked and mixed with decodes; a few new tokens each.

The triton runs happen in one child process (model_jobs.py) with TRITON_INTERPRET=1 set before
anything imports triton, and count the calls of each Triton kernel, so a set that quietly fell back to
torch fails. The torch set runs in the test process.
"""
from __future__ import annotations

import pytest

from model_jobs import run_in_child, run_job
from tiny_models import ALL_ARCHITECTURES, arch_params

INTERPRET = {"TRITON_INTERPRET": "1"}


@pytest.fixture(scope="module")
def triton_runs(tmp_path_factory) -> dict[str, dict]:
    """Every architecture through the Triton set, in one child (its start is most of a tiny model's run)."""
    pytest.importorskip("triton")
    jobs = [{"kind": "greedy", "arch": a, "scratch": str(tmp_path_factory.mktemp(a)), "kernels": "triton"}
            for a in ALL_ARCHITECTURES]
    return dict(zip(ALL_ARCHITECTURES, run_in_child(jobs, INTERPRET)))


@pytest.mark.slow  # the fixture's child: every model under the interpreter (tests/kernels checks each kernel)
@pytest.mark.timeout(1800)
@pytest.mark.parametrize("arch", ALL_ARCHITECTURES)
def test_triton_set_under_the_interpreter_matches_transformers(arch, triton_runs):
    out = triton_runs[arch]
    assert "error" not in out, out.get("error")
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
@pytest.mark.timeout(900)
def test_triton_mla_prefill_in_the_latent_space_matches_transformers(tmp_path):
    """Every MLA slice forced into the absorbed form: chunks of more than DECODE_QUERIES new tokens run
    through mla_decode.mla_prefill, shorter ones (and decodes) through the decode kernel's queries."""
    pytest.importorskip("triton")
    job = {"kind": "greedy", "arch": "deepseek_v3", "scratch": str(tmp_path), "kernels": "triton",
           "lens": [2, 7, 30], "batch_tokens": 40}
    out = run_in_child([job], INTERPRET, mla_path="absorb")[0]
    assert "error" not in out, out.get("error")
    assert out["got"] == out["want"]
    assert out["calls"].get("mla_prefill", 0) > 0 and out["calls"].get("mla_prefill_expanded", 0) == 0
    assert out["calls"].get("mla_decode", 0) > 0


@pytest.mark.parametrize("arch", arch_params(ALL_ARCHITECTURES))
def test_torch_set_matches_transformers(arch, tmp_path):
    out = run_job({"kind": "greedy", "arch": arch, "scratch": str(tmp_path), "kernels": "torch"})
    assert out["set"] == "KernelSet"
    assert out["got"] == out["want"]
