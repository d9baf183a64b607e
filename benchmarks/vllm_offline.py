"""Run by the vLLM venv's python (docs/performance.md, "How to measure"): same prompts, greedy, ignore_eos.

    VENV/bin/python benchmarks/vllm_offline.py MODEL_DIR

A long-lived peer, so the caller can interleave its own batches with vLLM's (on a noisy machine a
ratio of batches run minutes apart measures the machine, not the engines). After start-up and a
warm-up call it prints `@@READY`; then for each line on stdin, a JSON prompt set (a list of
token-id lists), it runs one timed `generate` and prints one line
`@@RESULT {"tokens": [[...], ...], "seconds": s, "cpu_seconds": c}` (CPU seconds summed over vLLM's
whole process tree: this process, its engine core and its model worker). Only the `@@` lines go to
stdout: before vLLM is imported, stdout is moved to a private descriptor and descriptor 1 is pointed
at stderr, so vLLM's logs (and its child processes') cannot interleave with a result line or fill a
pipe nobody reads. EOF on stdin ends it.
"""
import json
import os
import sys
import time

for key, value in dict(HF_HUB_OFFLINE="1", TRANSFORMERS_OFFLINE="1", VLLM_NO_USAGE_STATS="1", DO_NOT_TRACK="1",
                       VLLM_HOST_IP="127.0.0.1", GLOO_SOCKET_IFNAME="lo", VLLM_CPU_KVCACHE_SPACE="2").items():
    os.environ.setdefault(key, value)

if __name__ == "__main__":
    results = os.fdopen(os.dup(1), "w")  # the protocol channel
    os.dup2(2, 1)  # everything else printed to stdout, here and in vLLM's children, goes to stderr
    sys.stdout = os.fdopen(1, "w", closefd=False)

    import psutil
    from vllm import LLM, SamplingParams

    def tree_cpu_seconds() -> float:
        me = psutil.Process()
        total = 0.0
        for p in [me, *me.children(recursive=True)]:
            try:
                t = p.cpu_times()
                total += t.user + t.system
            except psutil.Error:
                pass
        return total

    model = sys.argv[1]
    new_tokens = int(os.environ.get("NEW_TOKENS", "32"))
    llm = LLM(model=model, dtype="float32", max_model_len=512, max_num_seqs=256, skip_tokenizer_init=True)
    params = SamplingParams(temperature=0.0, max_tokens=new_tokens, ignore_eos=True, detokenize=False)
    llm.generate([{"prompt_token_ids": [5, 6, 7]}, {"prompt_token_ids": [8, 9]}], params, use_tqdm=False)
    print("@@READY", file=results, flush=True)
    for line in sys.stdin:
        prompts = json.loads(line)
        as_inputs = [{"prompt_token_ids": p} for p in prompts]
        t0, c0 = time.perf_counter(), tree_cpu_seconds()
        outs = llm.generate(as_inputs, params, use_tqdm=False)
        seconds, cpu_seconds = time.perf_counter() - t0, tree_cpu_seconds() - c0
        tokens = [list(o.outputs[0].token_ids) for o in outs]
        print("@@RESULT " + json.dumps({"tokens": tokens, "seconds": seconds, "cpu_seconds": cpu_seconds}), file=results,
              flush=True)
