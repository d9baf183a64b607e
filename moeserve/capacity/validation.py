"""Published deployments the step model is checked against (docs/capacity.md, tests/capacity).

Each case fixes what its source states and, where the source is silent, what is assumed (`assumed`).
`fitted` cases are the ones the efficiency factors and the kernel floor were fitted to; the others
are held out: never used to choose a factor, reported beside them; the `blind` ones
(validation_blind.py, the second set validation_blind2.py, the third validation_blind3.py, the fourth
validation_blind4.py, the fifth validation_blind5.py, the sixth validation_blind6.py, the seventh
validation_blind7.py, the eighth validation_blind8.py, the ninth validation_blind9.py, the tenth
validation_blind10.py, the eleventh validation_blind11.py, the twelfth validation_blind12.py, the thirteenth
validation_blind13.py, the fourteenth validation_blind14.py, the fifteenth validation_blind15.py,
the sixteenth validation_blind16.py, the seventeenth validation_blind17.py, the eighteenth
validation_blind18.py, the nineteenth validation_blind19.py, the twentieth validation_blind20.py, the twenty-first
validation_blind21.py, the twenty-second validation_blind22.py, the twenty-third validation_blind23.py, the
twenty-fourth validation_blind24.py, the twenty-fifth validation_blind25.py, the twenty-sixth validation_blind26.py,
the twenty-seventh validation_blind27.py, the twenty-eighth validation_blind28.py, the twenty-ninth
validation_blind29.py, the thirtieth validation_blind30.py, the thirty-first validation_blind31.py) were moreover
recorded before a model change and not predicted while it was made.
`predict_case` runs the model with the package's one set of efficiency factors. The cases themselves
(and `Case`) are in validation_cases.py.

    python -m moeserve.capacity.validation          # the table of docs/capacity.md
    python -m moeserve.capacity.validation --docs docs/capacity.md   # its before/after table's after side
"""
from __future__ import annotations

import math
import sys
from dataclasses import replace

from moeserve.capacity import bench_run
from moeserve.capacity.efficiency import DEFAULT, Efficiency
from moeserve.capacity.hardware import Hardware, load_hardware
from moeserve.capacity.model_spec import load_model
from moeserve.capacity.predict import Predictor
from moeserve.capacity.validation_blind import BLIND
from moeserve.capacity.validation_blind2 import BLIND2
from moeserve.capacity.validation_blind3 import BLIND3
from moeserve.capacity.validation_blind4 import BLIND4
from moeserve.capacity.validation_blind5 import BLIND5
from moeserve.capacity.validation_blind6 import BLIND6
from moeserve.capacity.validation_blind7 import BLIND7
from moeserve.capacity.validation_blind8 import BLIND8
from moeserve.capacity.validation_blind9 import BLIND9
from moeserve.capacity.validation_blind10 import BLIND10
from moeserve.capacity.validation_blind11 import BLIND11
from moeserve.capacity.validation_blind12 import BLIND12
from moeserve.capacity.validation_blind13 import BLIND13
from moeserve.capacity.validation_blind14 import BLIND14
from moeserve.capacity.validation_blind15 import BLIND15
from moeserve.capacity.validation_blind16 import BLIND16
from moeserve.capacity.validation_blind17 import BLIND17
from moeserve.capacity.validation_blind18 import BLIND18
from moeserve.capacity.validation_blind19 import BLIND19
from moeserve.capacity.validation_blind20 import BLIND20
from moeserve.capacity.validation_blind21 import BLIND21
from moeserve.capacity.validation_blind22 import BLIND22
from moeserve.capacity.validation_blind23 import BLIND23
from moeserve.capacity.validation_blind24 import BLIND24
from moeserve.capacity.validation_blind25 import BLIND25
from moeserve.capacity.validation_blind26 import BLIND26
from moeserve.capacity.validation_blind27 import BLIND27
from moeserve.capacity.validation_blind28 import BLIND28
from moeserve.capacity.validation_blind29 import BLIND29
from moeserve.capacity.validation_blind30 import BLIND30
from moeserve.capacity.validation_blind31 import BLIND31
from moeserve.capacity.validation_cases import FITTED, HELD_OUT, Case
from moeserve.capacity.validation_runs import as_runs

# every part's cases as recorded (a part recorded as runs carries them itself), then those RUNS reads again as runs
RECORDED_CASES = (FITTED + HELD_OUT + BLIND + BLIND2 + BLIND3 + BLIND4 + BLIND5 + BLIND6 + BLIND7 + BLIND8 + BLIND9
                  + BLIND10 + BLIND11 + BLIND12 + BLIND13 + BLIND14 + BLIND15 + BLIND16 + BLIND17 + BLIND18
                  + BLIND19 + BLIND20 + BLIND21 + BLIND22 + BLIND23 + BLIND24 + BLIND25 + BLIND26 + BLIND27
                  + BLIND28 + BLIND29 + BLIND30 + BLIND31)
CASES = as_runs(RECORDED_CASES)
PARTS = ("fitted", "held out", "blind", "blind 2", "blind 3", "blind 4", "blind 5", "blind 6", "blind 7", "blind 8",
         "blind 9", "blind 10", "blind 11", "blind 12", "blind 13", "blind 14",
         "blind 15", "blind 16", "blind 17", "blind 18", "blind 19", "blind 20", "blind 21", "blind 22",
         "blind 23", "blind 24", "blind 25", "blind 26", "blind 27", "blind 28", "blind 29", "blind 30", "blind 31")

def hardware_for(case: Case) -> Hardware:
    hw = load_hardware(case.hardware)
    return replace(hw, **dict(case.hw_overrides)) if case.hw_overrides else hw


def predictor_for(case: Case, eff: Efficiency = DEFAULT, hw: Hardware | None = None) -> Predictor:
    return Predictor(load_model(case.model), hw or hardware_for(case), case.precision, eff)


def predict_case(case: Case, eff: Efficiency = DEFAULT, hw: Hardware | None = None) -> float:
    return run_case(case, eff, hw)[1]


def run_case(case: Case, eff: Efficiency = DEFAULT, hw: Hardware | None = None) -> tuple[float, float]:
    """(the batch the case runs at: its own, or the largest its rule allows; the model's figure in its unit)."""
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
