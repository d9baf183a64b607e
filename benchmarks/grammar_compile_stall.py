"""How long a slow-to-compile grammar holds back the other requests' steps, one layout against another.

    python benchmarks/grammar_compile_stall.py [--properties 1500] [--layouts 1,2] [--json out.json]

The built-in model, one engine per layout (`--ep E --tp 1`: E attention groups, the sampling rank of
groups 1.. in processes of their own), one after the other in this process. Each run streams a plain
request (greedy, ignore_eos), then submits a request under a JSON schema of --properties optional
integer properties (seconds to compile; the property names differ per run, so no cache helps) as the
server's engine loop does: compiled on a worker thread (`EngineCore.compile_grammar`), added once
compiled, the loop stepping meanwhile. The constrained request is routed to the last attention group
(the plain one holds the others' load), whose sampling rank is another process when E > 1.

Reported per layout: the engine's compile seconds, the largest gap between the plain request's tokens
from the submission to the constrained request's first token, and the seconds to that first token.
"""
from __future__ import annotations

import argparse
import json
import platform
import sys
import threading
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from moeserve import LLM, SamplingParams  # noqa: E402


def run(ep: int, properties: int, tag: str) -> dict:
    llm = LLM(ep=ep, tp=1)
    engine = llm.engine
    try:
        engine.add_request("plain", llm.tokenizer.encode("Once upon a time"),
                           SamplingParams(temperature=0, max_tokens=engine.max_model_len - 8, ignore_eos=True))
        for _ in range(3):
            engine.step()
        schema = {"type": "object", "properties": {f"{tag}{i}": {"type": "integer"} for i in range(properties)}}
        params = SamplingParams(temperature=0, max_tokens=4, structured_outputs={"json": schema})
        compiled: dict[str, float] = {}

        def compile_() -> None:
            start = time.perf_counter()
            engine.compile_grammar(params)
            compiled["s"] = time.perf_counter() - start

        submitted = time.perf_counter()
        thread = threading.Thread(target=compile_)
        thread.start()
        last_plain, gap, added, first = submitted, 0.0, False, None
        while first is None:
            if not added and not thread.is_alive():
                engine.add_request("slow", llm.tokenizer.encode("The weather today"), params)
                added = True
            for out in engine.step():
                now = time.perf_counter()
                if out.request_id == "plain" and out.new_token_ids:
                    gap, last_plain = max(gap, now - last_plain), now
                elif out.request_id == "slow" and out.new_token_ids:
                    first = now - submitted
        group = engine.scheduler.requests["slow"].group if "slow" in engine.scheduler.requests else None
        return {"ep": ep, "compile_s": round(compiled["s"], 2), "max_plain_gap_s": round(gap, 3),
                "first_token_s": round(first, 2), "slow_group": group}
    finally:
        llm.shutdown()


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--properties", type=int, default=1500)
    parser.add_argument("--layouts", default="1,2", help="comma-separated --ep values (tp 1)")
    parser.add_argument("--json", help="also write the results here")
    args = parser.parse_args()
    results = [run(int(ep), args.properties, f"p{ep}_") for ep in args.layouts.split(",")]
    for r in results:
        print(f"ep={r['ep']}: compile {r['compile_s']} s, largest gap between the plain request's tokens "
              f"{r['max_plain_gap_s']} s, constrained first token after {r['first_token_s']} s (group {r['slow_group']})")
    if args.json:
        Path(args.json).write_text(json.dumps({"machine": platform.processor() or platform.machine(),
                                               "properties": args.properties, "results": results}, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
