"""Every Triton kernel compiles for the GPUs it is meant for (sm_90, and sm_80 in the slow set), on a
machine without one.

The interpreter runs a kernel as numpy and checks its arithmetic, not that Triton's compiler accepts
it (globals, constexpr branches, dot shapes and dtypes, shared memory). Here each public function runs
with its launches recorded instead of made (bf16 tensors, the tile sizes it picks itself at
DeepSeek-V3 / Mixtral-like widths), and each recorded launch is compiled to a cubin with the ptxas
bundled in the triton wheel. A kernel that would fail to compile, or would need more shared memory
than the card has, fails here."""
from __future__ import annotations

import contextlib

import pytest
import torch

triton = pytest.importorskip("triton")
from triton.backends.compiler import GPUTarget  # noqa: E402
from triton.compiler import ASTSource  # noqa: E402
from triton.runtime.jit import JITFunction  # noqa: E402

from moeserve.kernels.triton import (  # noqa: E402
    fp8_linear,
    fused_moe,
    launch,
    mla_decode,
    mla_prefill,
    norm,
    paged_attention,
    paged_prefill,
)

TARGETS = {"sm90": (GPUTarget("cuda", 90, 32), 227 * 1024), "sm80": (GPUTarget("cuda", 80, 32), 163 * 1024)}
DTYPES = {torch.float8_e4m3fn: "fp8e4nv", torch.bfloat16: "bf16", torch.float16: "fp16", torch.float32: "fp32", torch.int8: "i8", torch.int16: "i16",
          torch.int32: "i32", torch.int64: "i64"}
OPTIONS = ("num_warps", "num_stages", "enable_fp_fusion")


@contextlib.contextmanager
def recorded_launches():
    """Kernel launches inside become records (fn, args, keyword args), nothing runs."""
    launches = []

    def record(kernel, grid):
        jit = JITFunction(kernel.fn, do_not_specialize=list(kernel.do_not_specialize))  # as Kernel builds it
        return lambda *args, **kwargs: launches.append((jit, args, kwargs))

    saved = launch.Kernel.__getitem__
    launch.Kernel.__getitem__ = record
    try:
        yield launches
    finally:
        launch.Kernel.__getitem__ = saved


def arg_type(value) -> str:
    if isinstance(value, torch.Tensor):
        return "*" + DTYPES[value.dtype]
    if isinstance(value, bool):
        return "i1"
    if isinstance(value, int):
        return "i32" if -(2**31) <= value < 2**31 else "i64"
    return "fp32"


def divisible_by_16(value, unspecialized: bool) -> bool:
    """Whether Triton's launcher hints an argument as divisible by 16 (`tt.divisibility`), as it does
    for a tensor whose address is 16-byte aligned and for an integer that divides by 16 (unless the
    kernel lists it in do_not_specialize). Without the hints loads are not vectorised, and register
    counts and spills differ from what the GPU compiles."""
    if isinstance(value, torch.Tensor):
        return value.data_ptr() % 16 == 0
    return type(value) is int and not unspecialized and value % 16 == 0


def unspecialized(jit: JITFunction) -> set[str]:
    """The names of the arguments the kernel lists in do_not_specialize (names or indices, by Triton
    version)."""
    return {jit.arg_names[i] if isinstance(i, int) else i for i in (jit.do_not_specialize or ())}


def compile_launch(fn, args, kwargs, target):
    jit = fn if isinstance(fn, JITFunction) else JITFunction(fn)
    names = list(jit.arg_names)
    constexprs = {k: v for k, v in kwargs.items() if k not in OPTIONS}
    # as Triton's launcher does: an int argument equal to 1 becomes the constant 1 (no .to, no tensor
    # methods) unless the kernel lists it in do_not_specialize
    keep = unspecialized(jit)
    constexprs.update({n: 1 for n, v in zip(names, args)
                       if type(v) is int and v == 1 and n not in keep})  # fmt: skip
    signature = {n: arg_type(v) for n, v in zip(names, args)}
    signature.update({n: "constexpr" for n in constexprs})
    source = ASTSource(fn=jit, signature=signature,
                       constexprs={(names.index(n),): v for n, v in constexprs.items()},
                       attrs={(i,): [["tt.divisibility", 16]] for i, (n, v) in enumerate(zip(names, args))
                              if n not in constexprs and divisible_by_16(v, n in keep)})  # fmt: skip
    options = {k: v for k, v in kwargs.items() if k in OPTIONS}
    return triton.compile(source, target=target, options=options)


def launches_of_every_kernel(dtype=torch.bfloat16, variants: bool = False):
    """One call of each public function at production widths (small row counts): each kernel once at
    the tiles its wrapper picks. variants: the other specializations as well (decode and prefill FP8
    tiles, windows and sinks, FP8 caches, MTP and --tp 8 MLA rows), compiled in the slow set."""
    g = torch.Generator().manual_seed(0)

    def randn(*shape):
        return torch.randn(*shape, generator=g).to(dtype)

    fp8 = torch.float8_e4m3fn
    with recorded_launches() as launches:
        S, H, I = 4, 512, 256
        fused_moe.fused_experts(randn(8, H), torch.tensor([2, 4, 6, 8], dtype=torch.int32), randn(S, 2 * I, H),
                                randn(S, H, I))  # fmt: skip
        fused_moe.fused_experts(randn(512, H), torch.tensor([128, 256, 384, 512], dtype=torch.int32),
                                randn(S, 2 * I, H), randn(S, H, I))  # fmt: skip
        slots = torch.tensor([[0, 3], [1, 3], [2, 0]])
        fused_moe.fused_moe(randn(3, H), slots, torch.rand(3, 2), randn(S, 2 * I, H), randn(S, H, I))
        kv = randn(64, 16, 8, 128)
        tables = torch.arange(64, dtype=torch.int32).view(2, 32)
        lens = torch.tensor([500, 7])
        paged_attention.paged_decode(randn(2, 32, 128), kv, kv, tables, lens, 0.1, splits=1)
        paged_attention.paged_decode(randn(2, 32, 128), kv, kv, tables, lens, 0.1, 4096, splits=4)
        paged_prefill.paged_prefill(randn(500, 32, 128), kv, kv, tables, torch.tensor([0, 495, 500]), lens, 0.1)
        cache = randn(64, 16, 576)
        for splits in (1, 4):  # 128 heads (data-parallel attention), 64-head tiles
            mla_decode.mla_decode(randn(2, 128, 512), randn(2, 128, 64), cache, tables.long(), lens, 0.1, splits=splits)
        mla_decode.mla_prefill(randn(12, 16, 512), randn(12, 16, 64), cache, tables, torch.tensor([0, 5, 12]), lens,
                               0.1)  # fmt: skip
        kv_b = randn(2, 40, 16, 256)  # kv_b_proj's output at DeepSeek-V3's head dims: k_nope and v are views
        k_nope, v = kv_b.split([128, 128], dim=-1)
        mla_prefill.mla_prefill_expanded(randn(12, 16, 128), randn(12, 16, 64), k_nope, randn(2, 40, 64), v,
                                         torch.tensor([0, 5, 12]), torch.tensor([30, 7]), 0.1)  # fmt: skip
        scales = fused_moe.Fp8Weights(torch.ones(S, 2 * I // 128, H // 128), torch.ones(S, H // 128, I // 128),
                                      (128, 128))  # fmt: skip
        for T in (3, 300) if variants else (3,):  # FP8 block-scaled weights (sm_90's FP8 tensor cores)
            fp8_linear.fp8_linear(randn(T, 7168), torch.zeros(512, 7168, dtype=fp8), torch.ones(4, 56), (128, 128))
            fused_moe.fused_moe(randn(T, H), torch.randint(0, S, (T, 2)), torch.rand(T, 2),
                                torch.zeros(S, 2 * I, H, dtype=fp8), torch.zeros(S, H, I, dtype=fp8), fp8=scales)
        x = randn(3, 7168)
        norm.rms_norm(x, randn(7168), 1e-6)
        norm.rms_norm(x, randn(7168), 1e-6, x)
        if variants:
            sinks = torch.zeros(32)
            paged_prefill.paged_prefill(randn(12, 32, 128), kv, kv, tables, torch.tensor([0, 5, 12]), lens, 0.1, 128,
                                        sinks)  # fmt: skip
            paged_attention.paged_decode(randn(2, 32, 128), kv, kv, tables, lens, 0.1, 128, splits=4, sinks=sinks)
            # --tp 8 (16 heads), two tokens a sequence (MTP verify): 32-row tiles
            mla_decode.mla_decode(randn(2, 2, 16, 512), randn(2, 2, 16, 64), cache, tables, lens, 0.1, splits=4)
            kv8 = torch.zeros(64, 16, 8, 128, dtype=fp8)  # --kv-cache-dtype fp8: caches read upcast
            paged_attention.paged_decode(randn(2, 32, 128), kv8, kv8, tables, lens, 0.1, splits=4)
            paged_prefill.paged_prefill(randn(12, 32, 128), kv8, kv8, tables, torch.tensor([0, 5, 12]), lens, 0.1)
            mla_decode.mla_decode(randn(2, 128, 512), randn(2, 128, 64), torch.zeros(64, 16, 576, dtype=fp8), tables,
                                  lens, 0.1)  # fmt: skip
    return launches


@pytest.mark.parametrize("target", [
    "sm90",
    pytest.param("sm80", marks=pytest.mark.slow),
])
def test_every_kernel_compiles_for_the_gpu(monkeypatch, target):
    check_compiles(monkeypatch, target, variants=False)


@pytest.mark.slow
def test_every_variant_compiles_for_sm90(monkeypatch):
    """FP8 prefill tiles, windows and sinks, FP8 caches, MTP rows: each its own specialization."""
    check_compiles(monkeypatch, "sm90", variants=True)


def check_compiles(monkeypatch, target: str, variants: bool) -> None:
    monkeypatch.delenv("TRITON_INTERPRET", raising=False)  # the tensor-core path, as on a GPU
    monkeypatch.setenv("TRITON_DEFAULT_FP_FUSION", "1")  # triton 3.9's default, without its warning
    gpu, shared_limit = TARGETS[target]
    launches = launches_of_every_kernel(variants=variants)
    assert {fn.__name__ for fn, _, _ in launches} == {
        "_gate_up_kernel", "_down_kernel", "_decode_kernel", "_combine_kernel", "_prefill_kernel",
        "_mla_kernel", "_mla_expanded_kernel", "_rms_norm_kernel", "_fp8_linear_kernel"}  # fmt: skip
    seen = set()
    for fn, args, kwargs in launches:
        key = specialization_key(fn, args, kwargs)
        if key in seen:
            continue  # the same compiled kernel as an earlier launch
        seen.add(key)
        if target == "sm80" and any(isinstance(a, torch.Tensor) and a.dtype == torch.float8_e4m3fn for a in args):
            continue  # FP8 tensor cores start at sm_89: the FP8 kernels are for Hopper
        compiled = compile_launch(fn, args, kwargs, gpu)
        assert "cubin" in compiled.asm, fn.__name__
        shared = compiled.metadata.shared
        assert shared <= shared_limit, f"{fn.__name__} needs {shared} B of shared memory, {target} has {shared_limit}"
        if fn.__name__ == "_mla_kernel" and target == "sm90" and kwargs["BLOCK_M"] == 64:
            # 64 heads x R 512 in fp32 fill two warp groups' registers (255 a thread): ptxas spills 4-96 B
            # a thread by variant; 1 KiB before the loads were vectorised, which would waste the bandwidth
            # the kernel exists for
            spills = ptxas_spill_bytes(compiled)
            assert spills is None or spills <= 128, f"MLA at its default tiles spills {spills} B a thread"


def ptxas_spill_bytes(compiled) -> int | None:
    """Spill stores per thread ptxas reports for the compiled kernel's PTX (None: no ptxas to ask)."""
    import re
    import subprocess
    import tempfile

    from triton import knobs

    try:
        ptxas = knobs.nvidia.ptxas_blackwell.path  # the one triton compiles sm_90 with
    except Exception:  # noqa: BLE001 - another triton layout: nothing to check with
        return None
    with tempfile.TemporaryDirectory() as tmp:
        ptx = f"{tmp}/kernel.ptx"
        with open(ptx, "w") as f:
            f.write(compiled.asm["ptx"])
        proc = subprocess.run([ptxas, "-arch=sm_90a", "-v", ptx, "-o", f"{tmp}/kernel.o"], capture_output=True,
                              text=True)  # fmt: skip
    found = re.search(r"(\d+) bytes spill stores", proc.stderr)
    return int(found[1]) if found else None


def test_the_dispatch_put_kernels_compile_for_the_gpu(monkeypatch):
    """put_kernels.py (the nvshmem backend): each phase's launch as TritonPuts makes it, for one, two and
    four ranks, bf16, fp32 and fp16, counts and epochs of 1 included (Triton's launcher would otherwise
    turn an int argument equal to 1 into a constant)."""
    monkeypatch.delenv("TRITON_INTERPRET", raising=False)
    import importlib.util

    from moeserve.dispatch.heap_layout import Layout

    # a private copy, decorated now: an import would fix the kernels of sys.modules' copy in one mode for
    # the whole process (an engine with emulated nvshmem needs them interpreted, this test compiled)
    origin = importlib.util.find_spec("moeserve.dispatch.put_kernels").origin
    spec = importlib.util.spec_from_file_location("put_kernels_compiled", origin)
    put_kernels = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(put_kernels)
    launches = []

    class Recorded:
        def __init__(self, fn):
            self.fn = fn

        def __getitem__(self, grid):
            return lambda *args, **kwargs: launches.append((self.fn, args, kwargs))

    for name in ("_send", "_expand", "_partial", "_total"):
        monkeypatch.setattr(put_kernels, name, Recorded(getattr(put_kernels, name)))

    class Regions:
        def __init__(self, nbytes, world):
            self.regions = [torch.zeros(nbytes, dtype=torch.uint8) for _ in range(world)]

        def region(self, rank):
            return self.regions[rank]

    for world, dtype, tokens, k in ((1, torch.bfloat16, 1, 8), (4, torch.bfloat16, 64, 4), (2, torch.float32, 3, 1),
                                    (2, torch.float16, 5, 2), (2, torch.bfloat16, 300, 8)):  # 300: the prefix path
        layout = Layout(world, max(64, tokens), 4096, k, dtype, torch.int8, dtype)
        heap = Regions(layout.nbytes, world)
        puts = put_kernels.TritonPuts()
        tables = puts.tables(heap, layout, 0)[1]
        blocks = layout.blocks(heap.region(0), 1)
        x, ids = torch.zeros(tokens, 4096, dtype=dtype), torch.zeros(tokens, k, dtype=torch.int64)
        back = puts.send(heap, tables, layout, x, ids, torch.zeros(tokens, k, dtype=dtype), 8, blocks.slots, 1,
                         0, False)
        rows, _, _, term_index, row_weights = puts.expand(tables, blocks, 8, 1, 1)
        puts.partial(heap, tables, rows, row_weights, term_index, 1, 1, 0)
        puts.total(layout.partial_rows(heap.region(0), 1), back, dtype)
    assert {fn.__name__ for fn, _, _ in launches} == {"_send", "_expand", "_partial", "_total"}
    assert {kw["HAS_STARTS"] for fn, _, kw in launches if fn.__name__ == "_send"} == {False, True}
    gpu, _ = TARGETS["sm90"]
    for fn, args, kwargs in launches:
        assert "cubin" in compile_launch(fn, args, kwargs, gpu).asm, fn.__name__


def specialization_key(jit: JITFunction, args, kwargs) -> tuple:
    """What Triton's launcher compiles a launch for: each tensor's dtype, each integer argument's
    specialization (its value where it equals 1, else whether it divides by 16; neither where the
    kernel lists it in do_not_specialize), and the constexprs."""
    from triton._C.libtriton import native_specialize_impl
    from triton.backends.compiler import BaseBackend

    keep = unspecialized(jit)
    key = []
    for name, value in zip(jit.arg_names, args):
        if isinstance(value, torch.Tensor):
            key.append(value.dtype)
        elif type(value) is int:
            key.append(native_specialize_impl(BaseBackend, value, False, name not in keep, name not in keep))
        else:
            key.append(type(value))
    return tuple(key) + tuple(sorted((k, v) for k, v in kwargs.items()))


def test_decode_compiles_once_for_every_split_count_and_table_width():
    """Paged and MLA decode split a context into P parts (split_combine.num_splits: 1-32 as batches
    and contexts change) and read block tables as wide as the batch's longest sequence. Neither may
    make Triton compile a new variant in the middle of serving: one compiled decode kernel per
    split-or-not, one combine per power of two of P."""
    pytest.importorskip("triton._C.libtriton")
    torch.manual_seed(0)
    with recorded_launches() as launches:
        for B, blocks in ((1, 1), (1, 17), (1, 32), (1, 48), (1, 80), (1, 112), (1, 176), (1, 368), (1, 512),
                          (2, 64), (3, 33), (8, 128), (16, 16), (64, 256)):  # blocks of 16 positions
            tables = torch.zeros(B, blocks, dtype=torch.int32)
            lens = torch.full((B,), blocks * 16)
            kv = torch.zeros(4, 16, 8, 128, dtype=torch.bfloat16)
            paged_attention.paged_decode(torch.zeros(B, 32, 128, dtype=torch.bfloat16), kv, kv, tables, lens, 0.1)
            cache = torch.zeros(4, 16, 576, dtype=torch.bfloat16)
            mla_decode.mla_decode(torch.zeros(B, 16, 512, dtype=torch.bfloat16),
                                  torch.zeros(B, 16, 64, dtype=torch.bfloat16), cache, tables, lens, 0.1)  # fmt: skip
    splits = {(dict(zip(fn.arg_names, args)) | kwargs)["P"] for fn, args, kwargs in launches
              if fn.__name__ == "_decode_kernel"}  # fmt: skip
    assert len(splits) >= 8, f"the shapes above should need many split counts, got {sorted(splits)}"
    variants: dict[str, set] = {}
    for fn, args, kwargs in launches:
        variants.setdefault(fn.__name__, set()).add(specialization_key(fn, args, kwargs))
    assert len(variants["_decode_kernel"]) == 2  # P == 1 writes the output, P > 1 the parts
    assert len(variants["_mla_kernel"]) == 2
    widths = {kwargs["BLOCK_D"] for fn, _, kwargs in launches if fn.__name__ == "_combine_kernel"}
    assert len(variants["_combine_kernel"]) <= 5 * len(widths)  # BLOCK_P 2-32 for each decoder's width
