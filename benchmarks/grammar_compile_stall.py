"""How long a slow-to-compile grammar holds back the other requests' steps, and its own first token,
one layout against another.

    python benchmarks/grammar_compile_stall.py [--properties 1500] [--layouts 1,2] [--orders both] [--rounds 1]
                                               [--json out.json]

The built-in model, one engine per layout and order (`--ep E --tp 1`: E attention groups, the sampling
rank of groups 1.. in processes of their own), one after the other in this process. Each run streams a
plain request (greedy, ignore_eos), then submits a request under a JSON schema of --properties optional
integer properties (seconds to compile; the property names differ per run, so no cache helps) as the
server's engine loop does, the loop stepping meanwhile:
  - `concurrent` (the engine loop's order): added at once, held (`grammar_pending`), so a sampling rank
    in another process compiles beside the steps while the engine compiles on a worker thread
    (`EngineCore.compile_grammar`), and released by `grammar_compiled` once the engine's is done;
  - `sequential` (the order before): compiled on the worker thread first, added once compiled, and
    only then announced to the rank, which compiles in turn.
The constrained request is routed to the last attention group (the plain one holds the others' load),
whose sampling rank is another process when E > 1.

`--hold-s S` makes every process wait S seconds, off the CPU, before its first compile of the
benchmark's schema (a `sitecustomize` the spawned ranks import): a stand-in for a host whose cores
are not all busy, where two compiles overlap in time instead of sharing two cores.

Reported per run: the engine's compile seconds, when the rank reported its compile (E > 1), the largest
gap between the plain request's tokens from the submission to the constrained request's first token,
and the seconds to that first token.
"""
from __future__ import annotations

import argparse
import json
import os
import platform
import statistics
import sys
import tempfile
import threading
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from moeserve import LLM, SamplingParams  # noqa: E402


HOLD = '''"""grammar_compile_stall.py --hold-s: the first compile of the benchmark's schema in each process waits."""
import os
import time

from moeserve.engine import grammar

_compile, _seen = grammar.GrammarCompiler.compile, set()


def _held(self, spec):
    if spec.json is not None and "stall_" in spec.json and spec.json not in _seen:
        _seen.add(spec.json)
        time.sleep(float(os.environ["GRAMMAR_STALL_HOLD_S"]))
    return _compile(self, spec)


grammar.GrammarCompiler.compile = _held
'''


def hold_compiles(seconds: float) -> None:
    """This process and the ranks it spawns wait `seconds` before each new schema's compile."""
    folder = Path(tempfile.mkdtemp(prefix="grammar_stall_"))
    (folder / "sitecustomize.py").write_text(HOLD)
    os.environ["GRAMMAR_STALL_HOLD_S"] = str(seconds)
    os.environ["PYTHONPATH"] = os.pathsep.join(p for p in (str(folder), os.environ.get("PYTHONPATH")) if p)
    sys.path.insert(0, str(folder))
    import sitecustomize  # noqa: F401  (this process's compiler too)


def run(ep: int, properties: int, tag: str, concurrent: bool) -> dict:
    llm = LLM(ep=ep, tp=1)
    engine = llm.engine
    try:
        warm = SamplingParams(temperature=0, max_tokens=1, structured_outputs={"regex": "[ab]"})
        for g in range(ep):  # every sampling rank's compiler made (one request per group), untimed
            engine.add_request(f"warm{g}", llm.tokenizer.encode("Hi"), warm)
        while engine.has_unfinished_requests():
            engine.step()
        engine.add_request("plain", llm.tokenizer.encode("Once upon a time"),
                           SamplingParams(temperature=0, max_tokens=engine.max_model_len - 8, ignore_eos=True))
        for _ in range(3):
            engine.step()
        schema = {"type": "object", "properties": {f"{tag}{i}": {"type": "integer"} for i in range(properties)}}
        params = SamplingParams(temperature=0, max_tokens=4, structured_outputs={"json": schema})
        prompt = llm.tokenizer.encode("The weather today")
        compiled: dict[str, float] = {}

        def compile_() -> None:
            start = time.perf_counter()
            engine.compile_grammar(params)
            compiled["s"] = time.perf_counter() - start

        submitted = time.perf_counter()
        if concurrent:
            engine.add_request("slow", prompt, params, grammar_pending=True)
        thread = threading.Thread(target=compile_)
        thread.start()
        last_plain, gap, released, first, rank_ready = submitted, 0.0, False, None, None
        while first is None:
            if not released and not thread.is_alive():
                if concurrent:
                    engine.grammar_compiled("slow")
                else:
                    engine.add_request("slow", prompt, params)
                released = True
            for out in engine.step():
                now = time.perf_counter()
                if out.request_id == "plain" and out.new_token_ids:
                    gap, last_plain = max(gap, now - last_plain), now
                elif out.request_id == "slow" and out.new_token_ids:
                    first = now - submitted
            if rank_ready is None and "slow" in engine.scheduler.requests and not engine.scheduler.grammars_in_flight:
                rank_ready = time.perf_counter() - submitted
        group = engine.scheduler.requests["slow"].group if "slow" in engine.scheduler.requests else None
        return {"ep": ep, "order": "concurrent" if concurrent else "sequential", "compile_s": round(compiled["s"], 2),
                "rank_ready_s": round(rank_ready, 2) if ep > 1 and rank_ready is not None else None,
                "max_plain_gap_s": round(gap, 3), "first_token_s": round(first, 2), "slow_group": group}
    finally:
        llm.shutdown()


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--properties", type=int, default=1500)
    parser.add_argument("--layouts", default="1,2", help="comma-separated --ep values (tp 1)")
    parser.add_argument("--orders", default="both", choices=("both", "concurrent", "sequential"))
    parser.add_argument("--rounds", type=int, default=1, help="runs of each layout and order")
    parser.add_argument("--hold-s", type=float, default=0.0, help="an off-CPU wait before each process's compile")
    parser.add_argument("--json", help="also write the results here")
    args = parser.parse_args()
    if args.hold_s:
        hold_compiles(args.hold_s)
    orders = (True, False) if args.orders == "both" else (args.orders == "concurrent",)
    results = []
    for k in range(args.rounds):  # the orders alternate first and second, round by round
        for ep in args.layouts.split(","):
            for c in orders[::-1] if k % 2 else orders:
                results.append(run(int(ep), args.properties, f"stall_{ep}{'c' if c else 's'}{k}_", c))
    for r in results:
        print(f"ep={r['ep']} {r['order']}: compile {r['compile_s']} s, rank ready after {r['rank_ready_s']} s, largest "
              f"gap between the plain request's tokens {r['max_plain_gap_s']} s, constrained first token after "
              f"{r['first_token_s']} s (group {r['slow_group']})")
    for ep in args.layouts.split(","):
        for order in ("concurrent", "sequential"):
            runs = [r for r in results if r["ep"] == int(ep) and r["order"] == order]
            if len(runs) > 1:
                print(f"ep={ep} {order}, medians of {len(runs)}: " + ", ".join(
                    f"{key} {statistics.median(r[key] for r in runs)}" for key in ("compile_s", "max_plain_gap_s", "first_token_s")))
    if args.json:
        Path(args.json).write_text(json.dumps({"machine": platform.processor() or platform.machine(),
                                               "properties": args.properties, "hold_s": args.hold_s, "results": results},
                                              indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
