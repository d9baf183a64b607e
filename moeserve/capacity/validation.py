"""Published deployments the step model is checked against (docs/capacity.md, tests/capacity).

Each case fixes what its source states and, where the source is silent, what is assumed (`assumed`).
`fitted` cases are the ones the efficiency factors and the kernel floor were fitted to; the others
are held out: never used to choose a factor, reported beside them; the `blind` ones (every
validation_blindN.py of this package, found by name: validation_blind.py is the first, validation_blind2.py
the second, ...) were moreover recorded before a model change and not predicted while it was made.
`predict_case` runs the model with the package's one set of efficiency factors. The cases themselves
(and `Case`) are in validation_cases.py.

    python -m moeserve.capacity.validation          # the table of docs/capacity.md
    python -m moeserve.capacity.validation --docs docs/capacity.md   # its before/after table's after side
"""
from __future__ import annotations

import functools
import importlib
import math
import pkgutil
import sys
from dataclasses import replace

from moeserve.capacity import bench_run
from moeserve.capacity.efficiency import DEFAULT, Efficiency
from moeserve.capacity.hardware import Hardware, load_hardware
from moeserve.capacity.model_spec import load_model
from moeserve.capacity.predict import Predictor
from moeserve.capacity.validation_cases import FITTED, HELD_OUT, Case
from moeserve.capacity.validation_runs import as_runs


def blind_parts() -> list[tuple[int, list[Case]]]:
    """(number, cases) of every blind part of the package, by number: validation_blind.py (BLIND) is the first,
    validation_blindN.py (BLINDN) the N-th. The numbers run from 1 without a gap."""
    import moeserve.capacity as capacity

    parts = []
    for info in pkgutil.iter_modules(capacity.__path__):
        if info.name.startswith("validation_blind"):
            number = int(info.name.removeprefix("validation_blind") or 1)
            module = importlib.import_module(f"moeserve.capacity.{info.name}")
            parts.append((number, getattr(module, "BLIND" if number == 1 else f"BLIND{number}")))
    parts.sort(key=lambda p: p[0])
    if [n for n, _ in parts] != list(range(1, len(parts) + 1)):
        raise ImportError(f"blind parts {[n for n, _ in parts]} do not run from 1 without a gap")
    return parts


_BLIND_PARTS = blind_parts()
# every part's cases as recorded (a part recorded as runs carries them itself), then those RUNS reads again as runs
RECORDED_CASES = FITTED + HELD_OUT + [c for _, cases in _BLIND_PARTS for c in cases]
CASES = as_runs(RECORDED_CASES)
PARTS = ("fitted", "held out", *("blind" if n == 1 else f"blind {n}" for n, _ in _BLIND_PARTS))


def hardware_for(case: Case) -> Hardware:
    hw = load_hardware(case.hardware)
    return replace(hw, **dict(case.hw_overrides)) if case.hw_overrides else hw


def predictor_for(case: Case, eff: Efficiency = DEFAULT, hw: Hardware | None = None) -> Predictor:
    return Predictor(load_model(case.model), hw or hardware_for(case), case.precision, eff)


def predict_case(case: Case, eff: Efficiency = DEFAULT, hw: Hardware | None = None) -> float:
    return run_case(case, eff, hw)[1]


def run_case(case: Case, eff: Efficiency = DEFAULT, hw: Hardware | None = None) -> tuple[float, float]:
    """(the batch the case runs at: its own, or the largest its rule allows; the model's figure in its unit)."""
    if eff is DEFAULT and hw is None:
        return _run_shipped(case)
    return _run(case, eff, hw)


@functools.lru_cache(maxsize=None)
def _run_shipped(case: Case) -> tuple[float, float]:
    """`run_case` with the shipped factors and the case's own card, once a process: the docs' table, the
    track record and the tests each run every case."""
    return _run(case, DEFAULT, None)


def _run(case: Case, eff: Efficiency, hw: Hardware | None) -> tuple[float, float]:
    pred = predictor_for(case, eff, hw)
    lay, w, o = case.layout, case.workload, case.options
    if case.run:  # the whole run, filling and draining, as the benchmark measured it
        prompts, dist, rate = case.run
        r = bench_run.simulate(pred, lay, w, o, prompts, dist, rate)
        batch = case.batch or r.peak_running / lay.gpus  # the run's fullest batch where the case gives none
        if case.unit == "tok/s/user":
            return batch, 1000 / r.mean_tpot_ms
        return batch, r.input_tokens_per_s_per_gpu if case.phase == "prefill" else r.output_tokens_per_s_per_gpu
    if case.phase == "prefill":
        return case.batch, pred.prefill(lay, case.batch, w, o).input_tokens_per_s_per_gpu
    batch = case.batch or largest_batch(pred, case)
    if case.phase == "colocated":
        c = pred.colocated(lay, batch, w, o)
        # a serving benchmark's mean TPOT with prefills sharing the GPUs: the colocated TPOT, stalls included
        return batch, 1000 / c.tpot_ms if case.unit == "tok/s/user" else c.output_tokens_per_s_per_gpu
    d = pred.decode(lay, batch, w, o)
    if case.unit == "tok/s/user":
        return batch, 1000 / d.tpot_ms
    if case.unit in ("ms/request", "tok/s/request"):
        first = pred.prefill(lay, w.computed_input / lay.tp, w, replace(o, tbo=False))
        ms = first.step_ms + (w.osl - 1) * d.tpot_ms
        return batch, ms if case.unit == "ms/request" else (w.isl + w.osl) / ms * 1e3
    return batch, d.output_tokens_per_s_per_gpu


def largest_batch(pred: Predictor, case: Case) -> float:
    """The largest decode batch per GPU whose TPOT meets the case's SLO ("slo") or that fits ("fit")."""
    def ok(b: float) -> bool:
        d = pred.decode(case.layout, b, case.workload, case.options)
        return d.fits if case.batch_rule == "fit" else d.tpot_ms <= case.workload.tpot_slo_ms

    lo, hi = 1.0, 4096.0
    for _ in range(40):
        mid = (lo + hi) / 2
        lo, hi = (mid, hi) if ok(mid) else (lo, mid)
    return lo


def error(case: Case, eff: Efficiency = DEFAULT) -> float:
    """Predicted / published - 1 (for ms/request a slower prediction is positive)."""
    return predict_case(case, eff) / case.published - 1


def table(cases=None) -> str:
    """The validation table of docs/capacity.md, as markdown rows: fitted, held-out, then blind cases."""
    cases = CASES if cases is None else cases
    rows = ["| part | deployment | model | hardware | unit | published | predicted | error |",
            "|---|---|---|---|---|---:|---:|---:|"]
    for c in sorted(cases, key=lambda c: PARTS.index(c.part)):
        p = predict_case(c)
        rows.append(f"| {c.part} | {c.name} | {c.model} | {c.hardware} | {c.unit} | "
                    f"{c.published:,.1f} | {p:,.1f} | {p / c.published - 1:+.1%} |")
    return "\n".join(rows)


def summary(cases=None) -> str:
    cases = CASES if cases is None else cases
    out = []
    for label in PARTS:
        part = [c for c in cases if c.part == label]
        if not part:
            continue
        signed = [error(c) for c in part]
        out.append(f"{label}: {_counts([abs(e) for e in signed])}, geometric-mean |log ratio| "
                   f"{math.exp(sum(abs(math.log1p(e)) for e in signed) / len(signed)) - 1:.1%}")
    return "\n".join(out)


def _counts(errs: list[float]) -> str:
    """A part's cases, those within 15% and 25%, the median (the upper middle) and worst |error|."""
    e = sorted(errs)
    return (f"{len(e)} cases, {sum(x <= 0.15 for x in e)} within 15%, {sum(x <= 0.25 for x in e)} within 25%, "
            f"median |error| {e[len(e) // 2]:.1%}, worst {e[-1]:.1%}")


# docs/capacity.md keeps a table of every case's prediction before the current round of changes and after it
# (this model), and one "<part>, after:" summary line a part; `docs_after` rewrites the after side from the model
BEFORE_AFTER_HEADER = ("| part | deployment | model | hardware | unit | published | before | after | error before | "
                       "error after |")


def docs_after(text: str) -> str:
    """`text` (docs/capacity.md) with the before/after table's after and error-after cells and the parts'
    "<part>, after:" lines as this model gives them; every row must name a case."""
    by_name = {(c.part, c.name): c for c in CASES}
    lines = text.split("\n")
    row = lines.index(BEFORE_AFTER_HEADER) + 2
    errors: dict[str, list[float]] = {}
    while lines[row].startswith("|"):
        cells = [c.strip() for c in lines[row].strip("|").split("|")]
        case = by_name.get((cells[0], cells[1]))
        if case is None:
            raise ValueError(f"docs row names no validation case: {cells[0]} / {cells[1]}")
        predicted = predict_case(case)
        err = predicted / case.published - 1
        cells[7], cells[9] = f"{predicted:,.1f}", f"{err:+.1%}"
        errors.setdefault(case.part, []).append(abs(err))
        lines[row] = "| " + " | ".join(cells) + " |"
        row += 1
    for i, line in enumerate(lines):
        part = line.split(", after: ")[0]
        if part in errors and line.startswith(part + ", after: "):
            lines[i] = f"{part}, after: {_counts(errors[part])}"
    return "\n".join(lines)


if __name__ == "__main__":
    if sys.argv[1:2] == ["--docs"]:  # python -m moeserve.capacity.validation --docs docs/capacity.md
        path = sys.argv[2]
        with open(path) as f:
            text = f.read()
        with open(path, "w") as f:
            f.write(docs_after(text))
        sys.exit(0)
    print(table())
    print()
    print(summary())
    sys.exit(0)
