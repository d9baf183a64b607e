"""How far the model has been from published deployments like the one it predicts: its track record.

A planner's figure is one number; what a deployment runs at also depends on the engine, its release and
tuning, which the model does not take as inputs (docs/capacity.md, Limits). So `moeserve configure`
prints beside its figure what published deployments of the same regime on the same class of card ran at,
as a ratio to the model's own prediction for each of them: the spread a buyer should expect. The cases
are the validation table's out-of-sample ones (held out and blind, validation.py); the fitted ones are
left out, as they agree by construction.

A regime is the phase and the batch: prefill; decode at small batch (at most SMALL_BATCH sequences a
GPU, where per-kernel floors, launches and all-reduce latency set the step); decode at throughput. A
card class with fewer than MIN_CASES such cases falls back to the regime on every card, and says so;
the CPU has none (docs/capacity.md compares it with moeserve's own measured throughput instead). Given
an engine (`--engine`), only that engine's deployments count: on the card class, else on every card,
else every engine's, each fallback said.

Running the model over the ~700 cases takes seconds a call, too long for a planner's answer, so the
ratios ship with the package (track_record.json, written by `python -m moeserve.capacity.track_record
--write`); a test recomputes them from the validation table and fails when the file is stale.
"""
from __future__ import annotations

import json
import statistics
import sys
from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path

SMALL_BATCH = 2.0  # decode sequences per GPU at or below which a step is latency-bound
MIN_CASES = 3
LOW_Q, HIGH_Q = 0.1, 0.9
SHIPPED = Path(__file__).with_name("track_record.json")

CLASS_NAMES = {"hopper": "Hopper (H100, H200, H800)", "hopper_h20": "H20", "blackwell": "Blackwell (B200, GB200, GB300)",
               "cdna3": "MI300X", "cdna4": "MI355X"}


def regime(phase: str, batch_per_gpu: float) -> str:
    """prefill, small batch or throughput (colocated and P/D runs go by their decode batch)."""
    if phase == "prefill":
        return "prefill"
    return "small batch" if batch_per_gpu <= SMALL_BATCH else "throughput"


@dataclass(frozen=True)
class Record:
    regime: str
    card_class: str | None  # None: every card class (too few cases of this one)
    cases: int
    low: float  # the LOW_Q quantile of published / predicted speed
    median: float
    high: float  # the HIGH_Q quantile
    engine: str | None = None  # None: every engine's deployments

    def describe(self) -> str:
        where = CLASS_NAMES.get(self.card_class, self.card_class) if self.card_class else "any card"
        what = {"prefill": "prefilling", "small batch": f"decoding at <= {SMALL_BATCH:g} sequences a GPU",
                "throughput": f"decoding at > {SMALL_BATCH:g} sequences a GPU"}[self.regime]
        whose = f"{self.engine} " if self.engine else ""
        return (f"track record: {self.cases} published {whose}deployments on {where} {what} ran at {self.low:.2f}-"
                f"{self.high:.2f}x the model's figure for each (median {self.median:.2f}x, {LOW_Q:.0%}-{HIGH_Q:.0%} "
                f"of cases); the model takes no engine's kernels, release or tuning")

    def as_dict(self) -> dict:
        return {"regime": self.regime, "card_class": self.card_class, "engine": self.engine, "cases": self.cases,
                "low": self.low,
                "median": self.median, "high": self.high, "quantiles": [LOW_Q, HIGH_Q]}


def quantile(values: list[float], q: float) -> float:
    """Linear interpolation between the closest ranks (numpy's default)."""
    v = sorted(values)
    pos = q * (len(v) - 1)
    i = int(pos)
    return v[i] if i + 1 >= len(v) else v[i] + (v[i + 1] - v[i]) * (pos - i)


def computed(cases=None) -> tuple[tuple[str, str, str, float, str], ...]:
    """(regime, card class, engine, published / predicted speed, source) of every out-of-sample case of
    `cases` (the validation table's by default), each run through the model once."""
    from moeserve.capacity import validation  # the cases and the model: only to compute, never to plan

    out = []
    for case in validation.CASES if cases is None else cases:
        if case.fitted:
            continue
        batch, predicted = validation.run_case(case)
        # a time (ms/request) is slower when larger: the ratio is always published speed / predicted speed
        ratio = predicted / case.published if case.unit == "ms/request" else case.published / predicted
        out.append((regime(case.phase, batch), validation.hardware_for(case).card_class, case.engine, ratio,
                    case.source))
    return tuple(out)


@lru_cache(maxsize=1)
def _cases() -> tuple[tuple[str, str, str, float, str], ...]:
    """The shipped rows of `computed()` (track_record.json, where a row names its source by number)."""
    shipped = json.loads(SHIPPED.read_text())
    return tuple((*row[:4], shipped["sources"][row[4]]) for row in shipped["cases"])


def write(path: Path = SHIPPED) -> None:
    """track_record.json from `computed()`: a case a line, so that a change to the model reads as a diff."""
    rows = computed()
    sources = list(dict.fromkeys(row[4] for row in rows))
    lines = ",\n".join(json.dumps([*row[:4], sources.index(row[4])]) for row in rows)
    path.write_text('{"about": "published / predicted speed of every out-of-sample validation case; '
                    'python -m moeserve.capacity.track_record --write",\n'
                    '"columns": ["regime", "card_class", "engine", "ratio", "source"],\n'
                    f'"sources": {json.dumps(sources, indent=0)},\n'
                    f'"cases": [\n{lines}\n]}}\n')


def _ratios() -> tuple[tuple[str, str, str, float], ...]:
    """(regime, card class, engine, published / predicted speed) of every out-of-sample case."""
    return tuple(c[:4] for c in _cases())


def _nearest(cases: list[tuple[str, str, float]], card_class: str, engine: str | None) -> tuple | None:
    """(card class or None, engine or None, ratios) of the first of `record`'s fallbacks with MIN_CASES of
    `cases` ((card class, engine, ratio) each): the card class and engine, every card of the engine, the card
    class of every engine, every case; without an engine only the last two."""
    tries = [(card_class, engine), (None, engine), (card_class, None), (None, None)] if engine else \
        [(card_class, None), (None, None)]
    for cls, eng in tries:
        chosen = [r for c, e, r in cases if cls in (None, c) and eng in (None, e)]
        if len(chosen) >= MIN_CASES:
            return cls, eng, chosen
    return None


def record(card_class: str, phase: str, batch_per_gpu: float, engine: str | None = None) -> Record | None:
    """The track record of a prediction's regime on its card class (else on every card), of `engine`'s
    deployments (else every engine's), or None for a card no published case resembles (a CPU)."""
    if card_class == "cpu":
        return None
    name = regime(phase, batch_per_gpu)
    found = _nearest([(c, e, r) for reg, c, e, r in _ratios() if reg == name], card_class, engine)
    if found is None:
        return None
    cls, eng, chosen = found
    return Record(name, cls, len(chosen), quantile(chosen, LOW_Q), quantile(chosen, 0.5), quantile(chosen, HIGH_Q), eng)


@dataclass(frozen=True)
class FoldIn:
    """What folding the record into the figure would have done, judged on sources it had not seen."""
    cases: int
    within_15: tuple[int, int]  # (the model's figure, the figure times the median of the other sources)
    within_25: tuple[int, int]
    median_error: tuple[float, float]  # median |error| of the speed


def fold_in(by_engine: bool = False) -> FoldIn:
    """Leave one source out: each out-of-sample case's figure scaled by the median published / predicted of
    the cases of its regime from OTHER sources, chosen as `record` chooses them (its card class, else every
    card's; with `by_engine` its engine's first), against the figure alone. It answers whether the record is
    a bias the figure should absorb (the scaled figure closer to the published one) or a spread (further)."""
    rows = _cases()
    raw, scaled = [], []
    for reg, cls, eng, ratio, source in rows:
        others = [(c, e, r) for rg, c, e, r, s in rows if rg == reg and s != source]
        found = _nearest(others, cls, eng if by_engine else None)
        factor = statistics.median(found[2]) if found else 1.0
        raw.append(abs(1 / ratio - 1))  # |predicted / published speed - 1|
        scaled.append(abs(factor / ratio - 1))
    return FoldIn(len(rows), (_within(raw, 0.15), _within(scaled, 0.15)), (_within(raw, 0.25), _within(scaled, 0.25)),
                  (statistics.median(raw), statistics.median(scaled)))


def _within(errors: list[float], bound: float) -> int:
    return sum(e <= bound for e in errors)


if __name__ == "__main__":
    if sys.argv[1:] != ["--write"]:
        sys.exit("usage: python -m moeserve.capacity.track_record --write  (recomputes track_record.json)")
    write()
