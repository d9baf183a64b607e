"""Run by the vLLM venv's python (see ../shared/PEERS.md): same prompts, greedy, ignore_eos.

    VENV/bin/python benchmarks/vllm_offline.py MODEL_DIR PROMPT_SETS.json OUT.json

PROMPT_SETS.json: a list of prompt sets (each a list of token-id lists), timed one `generate` each.
Writes {"tokens": [[...], ...] of set 0, "seconds": [float per set]} (timing excludes start-up and
a warm-up call).
"""
import json
import os
import sys
import time

for key, value in dict(HF_HUB_OFFLINE="1", TRANSFORMERS_OFFLINE="1", VLLM_NO_USAGE_STATS="1", DO_NOT_TRACK="1",
                       VLLM_HOST_IP="127.0.0.1", GLOO_SOCKET_IFNAME="lo", VLLM_CPU_KVCACHE_SPACE="2").items():
    os.environ.setdefault(key, value)

if __name__ == "__main__":
    from vllm import LLM, SamplingParams

    model, prompts_path, out_path = sys.argv[1:4]
    prompt_sets = json.load(open(prompts_path))
    new_tokens = int(os.environ.get("NEW_TOKENS", "32"))
    llm = LLM(model=model, dtype="float32", max_model_len=512, max_num_seqs=256, skip_tokenizer_init=True)
    params = SamplingParams(temperature=0.0, max_tokens=new_tokens, ignore_eos=True, detokenize=False)
    llm.generate([{"prompt_token_ids": [5, 6, 7]}, {"prompt_token_ids": [8, 9]}], params, use_tqdm=False)
    tokens, seconds = None, []
    for prompts in prompt_sets:
        as_inputs = [{"prompt_token_ids": p} for p in prompts]
        t0 = time.perf_counter()
        outs = llm.generate(as_inputs, params, use_tqdm=False)
        seconds.append(time.perf_counter() - t0)
        tokens = tokens or [list(o.outputs[0].token_ids) for o in outs]
    json.dump({"tokens": tokens, "seconds": seconds}, open(out_path, "w"))
