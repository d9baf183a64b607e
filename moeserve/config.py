"""Frozen configuration, composed per concern and validated once at start-up.

Nothing mutates a config after construction; derived values are properties. Every field is also a
CLI flag, a YAML key and an `LLM(...)` keyword (one table: settings.py). `validate()` checks fields
alone; the checks that read files or the environment are engine/startup_checks.py.
"""
from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field

from moeserve import envs
from moeserve.errors import ConfigError
from moeserve.speculative_config import SpeculativeConfig

__all__ = ["ConfigError"]  # re-exported: defined in errors.py, imported from here by older code

VALID_DTYPES = ("auto", "float32", "bfloat16", "float16")  # auto: bfloat16 on cuda, float32 on cpu
QUANTIZATIONS = ("none", "fp8")  # fp8: online, into 128 x 128 block-scaled e4m3 (models/online_fp8.py)
KV_CACHE_DTYPES = ("auto", "fp8")  # auto: the model's dtype; fp8: e4m3 with a scale (vLLM's flag)


@dataclass(frozen=True)
class ModelConfig:
    model: str | None = None  # checkpoint directory; None = the built-in model
    dtype: str = "auto"
    served_model_name: str | None = None
    max_model_len: int | None = None  # None = the checkpoint's max_position_embeddings
    # a Jinja chat template (a file, read at start-up: engine/model_source.py) that replaces the checkpoint's
    chat_template: str | None = None
    quantization: str = "none"  # QUANTIZATIONS
    # most alternatives a request's logprobs / prompt_logprobs / top_logprobs may ask for (vLLM's flag and
    # default); -1: the whole vocabulary
    max_logprobs: int = 20

    def max_logprobs_for(self, vocab_size: int) -> int:
        """The bound on a request's alternatives per token, -1 read as the vocabulary."""
        return vocab_size if self.max_logprobs == -1 else self.max_logprobs

    def validate(self) -> None:
        if self.dtype not in VALID_DTYPES:
            raise ConfigError(f"--dtype {self.dtype} is not one of {', '.join(VALID_DTYPES)}")
        if self.quantization not in QUANTIZATIONS:
            raise ConfigError(f"--quantization {self.quantization!r} is not one of {', '.join(QUANTIZATIONS)}")
        if self.max_model_len is not None and self.max_model_len < 1:
            raise ConfigError(f"--max-model-len must be >= 1, got {self.max_model_len}")
        if self.max_logprobs < -1:
            raise ConfigError(f"--max-logprobs must be -1 (the whole vocabulary) or >= 0, got {self.max_logprobs}")


@dataclass(frozen=True)
class CacheConfig:
    block_size: int = 16
    num_blocks: int | None = None  # None = derived from kv_cache_memory_mb
    kv_cache_memory_mb: int = 512
    enable_prefix_caching: bool = True
    kv_cache_dtype: str = "auto"  # KV_CACHE_DTYPES

    def validate(self) -> None:
        if self.kv_cache_dtype not in KV_CACHE_DTYPES:
            raise ConfigError(f"--kv-cache-dtype {self.kv_cache_dtype!r} is not one of {', '.join(KV_CACHE_DTYPES)}")
        if self.block_size < 1 or self.block_size & (self.block_size - 1):
            raise ConfigError(f"--block-size must be a power of two, got {self.block_size}")
        if self.num_blocks is not None and self.num_blocks < 1:
            raise ConfigError(f"--kv-cache-blocks must be >= 1, got {self.num_blocks}")
        if self.kv_cache_memory_mb < 1:  # was found by each rank after loading its weights
            raise ConfigError(f"--kv-cache-memory-mb must be >= 1, got {self.kv_cache_memory_mb}")


@dataclass(frozen=True)
class SchedulerConfig:
    max_num_seqs: int = 128  # per attention group
    max_num_batched_tokens: int = 2048  # per attention group per step
    max_queued_requests: int = 4096
    # spread a burst of waiting prompts over a few steps when that brings their first tokens sooner
    # on average (core/prefill_split.py); `moeserve serve` turns it on, the offline LLM keeps it off
    split_prefill_bursts: bool = False
    # choices (`n`, and best_of) one HTTP request may ask for: a 400 above it (docs/limits.md)
    max_n: int = 128
    # the host one step ahead: step N+1 is scheduled and queued while step N runs, its tokens filled in
    # on the device (vLLM's async scheduling; docs/gpu_runtime.md). None: on for CUDA devices, off on
    # CPUs, where the forward runs on the host thread and there is nothing to overlap
    async_scheduling: bool | None = None

    def validate(self) -> None:
        from moeserve.sampling_params import MAX_N

        if not 1 <= self.max_n <= MAX_N:
            raise ConfigError(f"--max-n must be in [1, {MAX_N}], got {self.max_n}")
        if self.max_num_seqs < 1:
            raise ConfigError(f"--max-num-seqs must be >= 1, got {self.max_num_seqs}")
        if self.max_num_batched_tokens < 1:
            raise ConfigError(f"--max-num-batched-tokens must be >= 1, got {self.max_num_batched_tokens}")
        if self.max_queued_requests < 1:
            raise ConfigError(f"--max-queued-requests must be >= 1, got {self.max_queued_requests}")


@dataclass(frozen=True)
class ParallelConfig:
    """--tp T, --ep E (docs/architecture.md, "Parallel layout"). E == 1: world is T ranks, experts TP-sharded.
    E > 1: E must be a multiple of T; world is E ranks in E/T attention groups of T ranks."""

    tp: int = 1
    ep: int = 1
    nodes: int = 1
    dispatch: str = "auto"
    backend: str = "auto"  # torch.distributed backend: auto = nccl with CUDA, else gloo
    step_timeout_s: float = 60.0  # a step slower than this is a stuck rank
    # the network interface ranks on different hosts talk over (gloo, NCCL's bootstrap); "": the one
    # that routes to the launcher's MASTER_ADDR (engine/launch_check.py `dist_interface`)
    dist_ifname: str = ""
    # torch intra-op threads per rank; None = auto (MOESERVE_NUM_THREADS, else one per 1024 hidden,
    # never more than the rank's share of the node's cores; a single-rank engine then also times
    # each step size on all of its cores and keeps the faster way): kernels/cpu/threads.py,
    # kernels/cpu/step_threads.py
    num_threads: int | None = None
    # threads the packed expert loop (and the column-split dense GEMMs) may split over; None = auto
    # (MOESERVE_EXPERT_THREADS, else the rank's cores over its intra-op threads): kernels/cpu/expert_threads.py,
    # kernels/cpu/split_linear.py
    expert_threads: int | None = None
    # cores of this node left to other processes (the HTTP front end, its clients): the ranks share the
    # rest. `moeserve serve` starts from 1 (settings.py: serve_default), as vLLM's CPU backend reserves
    # one core for its front end (on 2 cores its engine then runs one thread: docs/performance.md)
    reserved_cores: int = 0

    @property
    def world_size(self) -> int:
        return self.ep if self.ep > 1 else self.tp

    def asked_threads(self) -> int:
        """The most threads --num-threads / --expert-threads (or, unset, their environment variables)
        ask a rank for; 1 when none does."""
        asked = (self.num_threads if self.num_threads is not None else envs.NUM_THREADS.get(),
                 self.expert_threads if self.expert_threads is not None else envs.EXPERT_THREADS.get())
        return max([1, *(n for n in asked if n)])

    @property
    def num_attention_groups(self) -> int:
        return self.world_size // self.tp

    @property
    def ranks_per_node(self) -> int:
        return self.world_size // self.nodes

    def validate(self) -> None:
        if self.num_threads is not None and self.num_threads < 1:
            raise ConfigError(f"--num-threads must be >= 1, got {self.num_threads}")
        if self.expert_threads is not None and self.expert_threads < 1:
            raise ConfigError(f"--expert-threads must be >= 1, got {self.expert_threads}")
        if self.reserved_cores < 0:
            raise ConfigError(f"--reserved-cores must be >= 0, got {self.reserved_cores}")
        if self.tp < 1 or self.ep < 1 or self.nodes < 1:
            raise ConfigError(f"--tp, --ep and --nodes must be >= 1, got tp={self.tp} ep={self.ep} nodes={self.nodes}")
        if self.ep > 1 and self.ep % self.tp:
            raise ConfigError(f"--ep {self.ep} is not a multiple of --tp {self.tp}")
        if self.world_size % self.nodes:
            raise ConfigError(f"{self.world_size} ranks do not split evenly over --nodes {self.nodes}")
        if self.tp > self.ranks_per_node:
            raise ConfigError(
                f"--tp {self.tp} exceeds the {self.ranks_per_node} ranks per node: TP groups never straddle a node"
            )
        if self.dispatch not in DISPATCH_BACKENDS:
            raise ConfigError(f"--dispatch {self.dispatch!r} is not a backend; choose one of {', '.join(DISPATCH_BACKENDS)}")
        if self.ep == 1 and self.dispatch in MULTI_RANK_DISPATCH:
            raise ConfigError(f"--dispatch {self.dispatch} moves tokens between expert ranks and needs --ep > 1 "
                              "(with --ep 1 every rank holds every expert: use local or auto)")
        if self.ep > 1 and self.dispatch == "local":
            raise ConfigError(f"--dispatch local keeps every expert on one rank; --ep is {self.ep}: use a2a, agrs or auto")
        check_dispatch_host(self.dispatch, self.nodes)
        if self.dispatch == "hier" and not (self.ep > 1 and self.nodes > 1 and self.ranks_per_node > 1):
            raise ConfigError(f"--dispatch hier moves rows inside each node over its shared memory and between nodes "
                              f"once per node pair: it needs --nodes > 1 with several expert ranks per node (--ep "
                              f"{self.ep}, --nodes {self.nodes}); on one node use shm, with one rank per node a2a")
        if self.backend not in TORCH_BACKENDS:
            raise ConfigError(f"--backend {self.backend!r} is not supported; choose {', '.join(TORCH_BACKENDS)}")
        if self.dist_ifname and (len(self.dist_ifname) > 15 or not self.dist_ifname.replace("-", "").replace(
                ".", "").replace("_", "").replace(":", "").isalnum()):
            raise ConfigError(f"--dist-ifname {self.dist_ifname!r} is not a network interface name")
        if not 0 < self.step_timeout_s < float("inf"):
            raise ConfigError(f"--step-timeout-s must be a positive number of seconds, got {self.step_timeout_s}")


# the names moeserve.dispatch.registry builds (kept here so validating a config imports no torch)
TORCH_BACKENDS = ("auto", "gloo", "nccl")  # torch.distributed's; auto = nccl with CUDA, else gloo
DISPATCH_BACKENDS = ("auto", "local", "a2a", "a2a_ll", "agrs", "shm", "nvshmem", "hier")
MULTI_RANK_DISPATCH = ("a2a", "a2a_ll", "agrs", "shm", "nvshmem", "hier")


def check_dispatch_host(dispatch: str, nodes: int) -> None:
    """The one-sided backends' needs that a config can see (docs/dispatch.md): shm maps one node's
    shared memory (hier maps one per node); nvshmem needs nvshmem4py (or MOESERVE_NVSHMEM_EMULATE=1,
    which is shm underneath)."""
    import importlib.util

    emulated = envs.NVSHMEM_EMULATE.get()
    if nodes > 1 and (dispatch == "shm" or (dispatch == "nvshmem" and emulated)):
        raise ConfigError(f"--dispatch shm maps one node's shared memory; --nodes is {nodes}: use hier, a2a or auto")
    if dispatch == "nvshmem" and not emulated and importlib.util.find_spec("nvshmem") is None:
        raise ConfigError("--dispatch nvshmem needs nvshmem4py: pip install 'moeserve[nvshmem]' "
                          f"(or set {envs.NVSHMEM_EMULATE.name}=1 to run its kernels over shared memory)")
DEVICES = ("auto", "cpu", "cuda")
# the names moeserve.kernels.registry builds, and auto
KERNEL_SET_NAMES = ("auto", "torch", "cpu", "triton")


@dataclass(frozen=True)
class DeviceConfig:
    """--device and --kernels (docs/kernels.md). device auto = cuda when torch.cuda.is_available(),
    else cpu; kernels auto = triton on cuda, cpu on cpu (moeserve.kernels.registry.resolve)."""

    device: str = "auto"
    kernels: str = "auto"
    gpu_memory_utilization: float = 0.9  # share of a GPU's memory weights + KV cache may take (vLLM's)
    # every step eager: no CUDA graphs of the decode forward (vLLM's --enforce-eager; docs/gpu_runtime.md)
    enforce_eager: bool = False

    def validate(self) -> None:
        if self.device not in DEVICES:
            raise ConfigError(f"--device {self.device!r} is not one of {', '.join(DEVICES)}")
        if self.kernels not in KERNEL_SET_NAMES:
            raise ConfigError(f"--kernels {self.kernels!r} is not a kernel set; choose one of {', '.join(KERNEL_SET_NAMES)}")
        if not 0 < self.gpu_memory_utilization <= 1:
            raise ConfigError(f"--gpu-memory-utilization must be in (0, 1], got {self.gpu_memory_utilization}")


def _unspecified(host: str) -> bool:
    """An IP literal meaning every interface, however spelled (::0, 0:0::0); names and "0" (which
    inet_aton reads as 0.0.0.0) are resolved at start-up (engine/startup_checks.py)."""
    import ipaddress

    try:
        return ipaddress.ip_address(host.split("%")[0]).is_unspecified
    except ValueError:
        return False


KV_ROLES = ("both", "prefill", "decode")
KV_TRANSFERS = ("auto", "none", "nixl")


@dataclass(frozen=True)
class KvTransferConfig:
    """The prefill/decode split (docs/disaggregation.md). role both (the default) serves prompts and
    their tokens here; prefill keeps a finished prompt's KV blocks for a remote decoder; decode takes
    a prompt's KV from a prefill engine. transfer auto = nixl for prefill and decode, none for both."""

    role: str = "both"
    transfer: str = "auto"
    side_channel_host: str = "127.0.0.1"
    side_channel_port: int = 0  # 0: any free port; the prefill answer names it
    expiry_s: float = 120.0  # vLLM's VLLM_NIXL_ABORT_REQUEST_TIMEOUT
    # the pool's shared secret (kv_transfer/trust.py); None: MOESERVE_KV_SECRET, or this user's secret
    # file. Never the server's --api-key (clients hold it); never shown in a repr or a log.
    secret: str | None = field(default=None, repr=False)
    max_pinned_blocks: int = 0  # per attention group; 0: half of the group's KV blocks

    @property
    def enabled(self) -> bool:
        return self.transfer == "nixl" or (self.transfer == "auto" and self.role != "both")

    def validate(self) -> None:
        if self.role not in KV_ROLES:
            raise ConfigError(f"--kv-role {self.role!r} is not one of {', '.join(KV_ROLES)}")
        if self.transfer not in KV_TRANSFERS:
            raise ConfigError(f"--kv-transfer {self.transfer!r} is not one of {', '.join(KV_TRANSFERS)}")
        if self.role != "both" and self.transfer == "none":
            raise ConfigError(f"--kv-role {self.role} moves KV blocks: use --kv-transfer nixl (or auto)")
        if not 0 <= self.side_channel_port < 65536:
            raise ConfigError(f"--kv-side-channel-port must be in [0, 65535], got {self.side_channel_port}")
        if not 0 < self.expiry_s < float("inf"):  # inf: pins never expire, a decoder that died holds them
            raise ConfigError(f"--kv-expiry-s must be positive and finite, got {self.expiry_s}")
        if self.side_channel_host in ("0.0.0.0", "::", "") or _unspecified(self.side_channel_host):
            raise ConfigError(f"--kv-side-channel-host {self.side_channel_host!r} would listen on every interface and "
                              "prefill answers would name an address no decoder can reach: give the address of "
                              "this host that its peers reach (127.0.0.1 on one machine)")
        if self.secret is not None and not self.secret:
            raise ConfigError("--kv-secret must not be empty")
        if self.max_pinned_blocks < 0:
            raise ConfigError(f"--kv-max-pinned-blocks must be >= 0 (0: half of each group's KV blocks), got "
                              f"{self.max_pinned_blocks}")
        import importlib.util

        if self.enabled and importlib.util.find_spec("nixl_cu12") is None and importlib.util.find_spec("nixl") is None:
            raise ConfigError("--kv-transfer nixl needs NIXL: pip install 'moeserve[pd]' (nixl-cu12, UCX bundled)")


@dataclass(frozen=True)
class PlacementRuntimeConfig:
    """The routing recorder and online rebalancing of a running engine (placement/recorder.py,
    placement/rebalancer.py). Defined in this leaf, which every package imports, so that config.py
    imports no placement code. Plain data: it travels to rank processes as JSON."""

    record_trace_dir: str | None = None  # record routing from start-up, one trace file per window here
    record_window_steps: int = 100  # engine steps per recorded window
    eplb_interval: int = 0  # re-plan and move experts every this many engine steps; 0 = never
    eplb_window: int = 0  # steps of routing counts each re-plan uses; 0 = eplb_interval
    eplb_num_groups: int = 1  # expert groups handed to the optimizer (locality needs > 1 and a node count)

    @property
    def window(self) -> int:
        return self.eplb_window or self.eplb_interval

    def validate(self) -> None:
        if self.record_window_steps < 1:
            raise ConfigError(f"--record-window-steps must be >= 1, got {self.record_window_steps}")
        if self.eplb_interval < 0 or self.eplb_window < 0:
            raise ConfigError(
                f"--eplb-interval and --eplb-window must be >= 0, got {self.eplb_interval} and {self.eplb_window}"
            )
        if self.eplb_window and not self.eplb_interval:
            raise ConfigError("--eplb-window needs --eplb-interval (the steps between re-plans)")
        if self.eplb_num_groups < 1:
            raise ConfigError(f"--eplb-num-groups must be >= 1, got {self.eplb_num_groups}")


@dataclass(frozen=True)
class EngineConfig:
    model: ModelConfig = field(default_factory=ModelConfig)
    cache: CacheConfig = field(default_factory=CacheConfig)
    scheduler: SchedulerConfig = field(default_factory=SchedulerConfig)
    parallel: ParallelConfig = field(default_factory=ParallelConfig)
    device: DeviceConfig = field(default_factory=DeviceConfig)
    placement: str | None = None  # path of a placement plan JSON
    placement_runtime: PlacementRuntimeConfig = field(default_factory=PlacementRuntimeConfig)
    kv_transfer: KvTransferConfig = field(default_factory=KvTransferConfig)
    speculative: SpeculativeConfig = field(default_factory=SpeculativeConfig)
    seed: int = 0

    def validate(self) -> "EngineConfig":
        """Field checks of every part; what needs files or the environment (the model's sizes, the
        --placement plan, the launcher) is engine/startup_checks.py."""
        for part in (self.model, self.cache, self.scheduler, self.parallel, self.device, self.placement_runtime,
                     self.kv_transfer, self.speculative):
            part.validate()
        if not 0 <= self.seed < 2**63:  # a signed 64-bit int on every wire; torch refused 2**64 at the first sample
            raise ConfigError(f"--seed must be in [0, 2**63), got {self.seed}")
        if self.model.quantization == "fp8" and self.placement_runtime.eplb_interval:
            raise ConfigError("--quantization fp8 with --eplb-interval: moving online-quantized FP8 experts between "
                              "ranks is not supported yet; drop one of the two")
        return self


def config_to_dict(config: EngineConfig) -> dict:
    """Plain JSON-able dict (for handing the config to rank processes without pickle)."""
    return dataclasses.asdict(config)


def config_from_dict(data: dict) -> EngineConfig:
    """Inverse of config_to_dict; a section left out keeps its defaults."""
    kwargs = {}
    for f in dataclasses.fields(EngineConfig):
        if f.name in data:
            factory = f.default_factory
            kwargs[f.name] = factory().__class__(**data[f.name]) if factory is not dataclasses.MISSING else data[f.name]
    return EngineConfig(**kwargs)
