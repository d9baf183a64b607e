"""Run by the vLLM venv's python (see ../shared/PEERS.md): same prompts, greedy, ignore_eos.

    VENV/bin/python benchmarks/vllm_offline.py MODEL_DIR PROMPT_SETS.json OUT.json

PROMPT_SETS.json: a list of prompt sets (each a list of token-id lists), timed one `generate` each.
Writes {"tokens": [[...], ...] of set 0, "seconds": [float per set], "cpu_seconds": [float per set]}
(timing excludes start-up and a warm-up call; CPU seconds are summed over vLLM's whole process tree:
this process, its engine core and its model worker).
"""
import json
import os
import sys
import time

for key, value in dict(HF_HUB_OFFLINE="1", TRANSFORMERS_OFFLINE="1", VLLM_NO_USAGE_STATS="1", DO_NOT_TRACK="1",
                       VLLM_HOST_IP="127.0.0.1", GLOO_SOCKET_IFNAME="lo", VLLM_CPU_KVCACHE_SPACE="2").items():
    os.environ.setdefault(key, value)

if __name__ == "__main__":
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

    model, prompts_path, out_path = sys.argv[1:4]
    prompt_sets = json.load(open(prompts_path))
    new_tokens = int(os.environ.get("NEW_TOKENS", "32"))
    llm = LLM(model=model, dtype="float32", max_model_len=512, max_num_seqs=256, skip_tokenizer_init=True)
    params = SamplingParams(temperature=0.0, max_tokens=new_tokens, ignore_eos=True, detokenize=False)
    llm.generate([{"prompt_token_ids": [5, 6, 7]}, {"prompt_token_ids": [8, 9]}], params, use_tqdm=False)
    tokens, seconds, cpu_seconds = None, [], []
    for prompts in prompt_sets:
        as_inputs = [{"prompt_token_ids": p} for p in prompts]
        t0, c0 = time.perf_counter(), tree_cpu_seconds()
        outs = llm.generate(as_inputs, params, use_tqdm=False)
        seconds.append(time.perf_counter() - t0)
        cpu_seconds.append(tree_cpu_seconds() - c0)
        tokens = tokens or [list(o.outputs[0].token_ids) for o in outs]
    json.dump({"tokens": tokens, "seconds": seconds, "cpu_seconds": cpu_seconds}, open(out_path, "w"))
