"""The published deployments of docs/capacity.md: the package's one set of efficiency factors must keep
every fitted case within 25% (the first seven, from DeepSeek, LMSYS and TensorRT-LLM, within 15%),
and the held-out and blind cases, never used to fit, must stay as close as the docs report."""
from __future__ import annotations

import math
import statistics

import pytest

from moeserve.capacity.efficiency import DEFAULT, Efficiency
from moeserve.capacity.validation import (CASES, PARTS, RECORDED_CASES, blind_parts, error, predict_case, summary,
                                           table)
from moeserve.capacity.validation_blind import BLIND
from moeserve.capacity.validation_blind2 import BLIND2, RECORDED
from moeserve.capacity.validation_blind3 import BLIND3
from moeserve.capacity.validation_blind3 import RECORDED as RECORDED3
from moeserve.capacity.validation_blind4 import BLIND4
from moeserve.capacity.validation_blind4 import RECORDED as RECORDED4
from moeserve.capacity.validation_blind5 import BLIND5
from moeserve.capacity.validation_blind5 import RECORDED as RECORDED5
from moeserve.capacity.validation_blind6 import BLIND6
from moeserve.capacity.validation_blind6 import RECORDED as RECORDED6
from moeserve.capacity.validation_blind7 import BLIND7
from moeserve.capacity.validation_blind7 import RECORDED as RECORDED7
from moeserve.capacity.validation_blind8 import BLIND8
from moeserve.capacity.validation_blind8 import RECORDED as RECORDED8
from moeserve.capacity.validation_blind9 import BLIND9
from moeserve.capacity.validation_blind9 import RECORDED as RECORDED9
from moeserve.capacity.validation_blind10 import BLIND10
from moeserve.capacity.validation_blind10 import RECORDED as RECORDED10
from moeserve.capacity.validation_blind11 import BLIND11
from moeserve.capacity.validation_blind11 import RECORDED as RECORDED11
from moeserve.capacity.validation_blind12 import BLIND12
from moeserve.capacity.validation_blind12 import RECORDED as RECORDED12
from moeserve.capacity.validation_blind13 import BLIND13
from moeserve.capacity.validation_blind13 import RECORDED as RECORDED13
from moeserve.capacity.validation_blind14 import BLIND14
from moeserve.capacity.validation_blind14 import RECORDED as RECORDED14
from moeserve.capacity.validation_blind15 import BLIND15
from moeserve.capacity.validation_blind15 import RECORDED as RECORDED15
from moeserve.capacity.validation_blind16 import BLIND16
from moeserve.capacity.validation_blind16 import RECORDED as RECORDED16
from moeserve.capacity.validation_blind17 import BLIND17
from moeserve.capacity.validation_blind17 import RECORDED as RECORDED17
from moeserve.capacity.validation_blind18 import BLIND18
from moeserve.capacity.validation_blind18 import RECORDED as RECORDED18
from moeserve.capacity.validation_blind19 import BLIND19
from moeserve.capacity.validation_blind19 import RECORDED as RECORDED19
from moeserve.capacity.validation_blind20 import BLIND20
from moeserve.capacity.validation_blind20 import RECORDED as RECORDED20
from moeserve.capacity.validation_blind21 import BLIND21
from moeserve.capacity.validation_blind21 import RECORDED as RECORDED21
from moeserve.capacity.validation_blind22 import BLIND22
from moeserve.capacity.validation_blind22 import RECORDED as RECORDED22
from moeserve.capacity.validation_blind23 import BLIND23
from moeserve.capacity.validation_blind23 import RECORDED as RECORDED23
from moeserve.capacity.validation_blind24 import BLIND24
from moeserve.capacity.validation_blind25 import BLIND25
from moeserve.capacity.validation_blind26 import BLIND26
from moeserve.capacity.validation_blind27 import BLIND27
from moeserve.capacity.validation_blind28 import BLIND28
from moeserve.capacity.validation_blind29 import BLIND29
from moeserve.capacity.validation_blind30 import BLIND30
from moeserve.capacity.validation_blind31 import BLIND31
from moeserve.capacity.validation_blind32 import BLIND32
from moeserve.capacity.validation_blind33 import BLIND33
from moeserve.capacity.validation_blind34 import BLIND34
from moeserve.capacity.validation_blind35 import BLIND35
from moeserve.capacity.validation_blind36 import BLIND36
from moeserve.capacity.validation_blind24 import RECORDED as RECORDED24
from moeserve.capacity.validation_blind25 import RECORDED as RECORDED25
from moeserve.capacity.validation_blind26 import RECORDED as RECORDED26
from moeserve.capacity.validation_blind27 import RECORDED as RECORDED27
from moeserve.capacity.validation_blind28 import RECORDED as RECORDED28
from moeserve.capacity.validation_blind29 import RECORDED as RECORDED29
from moeserve.capacity.validation_blind30 import RECORDED as RECORDED30
from moeserve.capacity.validation_blind31 import RECORDED as RECORDED31
from moeserve.capacity.validation_blind32 import RECORDED as RECORDED32
from moeserve.capacity.validation_blind33 import RECORDED as RECORDED33
from moeserve.capacity.validation_blind34 import RECORDED as RECORDED34
from moeserve.capacity.validation_blind35 import RECORDED as RECORDED35
from moeserve.capacity.validation_blind36 import RECORDED as RECORDED36
from moeserve.capacity.validation_cases import FITTED, HELD_OUT, UNITS

ORIGINAL = FITTED[:7]


@pytest.mark.parametrize("case", FITTED, ids=[c.name for c in FITTED])
def test_fitted_cases_within_band(case):
    band = 0.15 if case in ORIGINAL else 0.25
    predicted = predict_case(case)
    assert abs(predicted / case.published - 1) <= band, (
        f"{case.name}: predicted {predicted:.1f} {case.unit}, published {case.published:.1f}")


def test_held_out_cases_stay_where_the_docs_put_them():
    """Not fitted, so no case is held to a band; the median and the share within 25% are (docs/capacity.md)."""
    errors = [abs(error(c)) for c in HELD_OUT]
    assert statistics.median(errors) <= 0.10  # 9.1% (docs/capacity.md)
    assert sum(e <= 0.25 for e in errors) >= 16 and sum(e <= 0.15 for e in errors) >= 15


def test_blind_cases_stay_where_the_docs_put_them():
    """Recorded before the model change, never fitted: the median and the share within 25% the docs report."""
    errors = [abs(error(c)) for c in BLIND]
    # 22.8% since the perf overview's Qwen3 rows read the ModelOpt checkpoints' FP8 KV (15.4% with BF16 KV):
    # its two Blackwell 1K/1K rows go from 12-15% below to 23-29% above
    assert statistics.median(errors) <= 0.23
    assert sum(e <= 0.25 for e in errors) >= 10 and sum(e <= 0.15 for e in errors) >= 4


def test_second_blind_set_stays_where_the_docs_put_them():
    """Recorded with the model's predictions before the changes that followed (RECORDED); since then
    the median and the share within 25% the docs report."""
    errors = [abs(error(c)) for c in BLIND2]
    assert len(BLIND2) >= 10 and set(RECORDED) == {c.name for c in BLIND2}
    assert statistics.median(errors) <= 0.15  # 14.9%
    # 5 within 15%: an eager prefill pass of a host-bound 1.34 ms a layer takes InferenceX's SGLang B200 FP4
    # run at concurrency 32 from -4.1% to -16.0%
    assert sum(e <= 0.25 for e in errors) >= 7 and sum(e <= 0.15 for e in errors) >= 5
    assert all(c.part == "blind 2" for c in BLIND2)


# the blind sets recorded with the predictions of the model of their day (RECORDED) while a model change was
# made without seeing them: (cases, recorded predictions, part, median |error| at most, at least within 25%,
# at least within 15%) as the docs report them now (blind 3: model 529c01b; 4: 850fd9a; 5: 55bf35c; 6: e32201f;
# 7: ea09f12; 8: 294e9ee; 9: 61249df; 10 and 11: 985e947; 12: e281b5e; 13: b3c7409;
# 14 to 16: c99b6a0; 17 and 18: a193eec; 19: 5148a94; 20: 0b1b550; 21: c3b162f; 22: 49fc96b; 23: ccf8b77; 24: d5e4167; 25 and 26: 8327ee4; 27: 6506675; 28: 52b6b74; 29: 6e92d8a; 30: ec80b35; 31: b3b484a; 32: b260c42; 33: 3cb8740; 34: 4bd7c0e; 35: cceb246; 36: c62d8f4), and the set's size
RECORDED_SETS = [(BLIND3, RECORDED3, "blind 3", 0.17, 11, 8, 18),  # 16.5% (the docs' upper middle: 17.8%; 12.5% before the card memory correction)
                 (BLIND4, RECORDED4, "blind 4", 0.21, 9, 6, 14),  # 20.7%
                 (BLIND5, RECORDED5, "blind 5", 0.71, 4, 1, 15),  # 70.7%
                 (BLIND6, RECORDED6, "blind 6", 0.21, 7, 6, 13),  # 20.9% (13.6% before the mixed-steps change)
                 (BLIND7, RECORDED7, "blind 7", 0.14, 12, 8, 12),  # 13.6%
                 (BLIND8, RECORDED8, "blind 8", 1.49, 0, 0, 6),  # 148.8%
                 (BLIND9, RECORDED9, "blind 9", 0.15, 4, 3, 6),  # 14.6% (the docs' upper middle: 21.8%)
                 (BLIND10, RECORDED10, "blind 10", 0.38, 7, 6, 16),  # 37.4% (the docs' upper middle: 38.4%)
                 (BLIND11, RECORDED11, "blind 11", 0.15, 12, 9, 15),  # 14.6%
                 (BLIND12, RECORDED12, "blind 12", 1.93, 0, 0, 8),  # 192.2% read steady (the docs' upper middle, its runs replayed: 87.5%)
                 (BLIND13, RECORDED13, "blind 13", 0.20, 5, 1, 9),  # 19.7% (19.4% and 2 within 15% before the card memory correction)
                 (BLIND14, RECORDED14, "blind 14", 0.28, 9, 7, 25),  # 27.4%
                 (BLIND15, RECORDED15, "blind 15", 0.12, 13, 10, 17),  # 11.8%
                 (BLIND16, RECORDED16, "blind 16", 1.63, 2, 2, 20),  # 162.2% read steady (the docs' upper middle, its runs replayed: 57.4%)
                 (BLIND17, RECORDED17, "blind 17", 0.21, 11, 5, 18),  # 20.2% (the docs' upper middle: 20.6%)
                 (BLIND18, RECORDED18, "blind 18", 0.65, 1, 1, 4),
                 (BLIND19, RECORDED19, "blind 19", 0.43, 0, 0, 5),  # 42.3%
                 (BLIND20, RECORDED20, "blind 20", 0.13, 2, 1, 2),  # 12.9% (the docs' upper middle: 15.4%)
                 (BLIND21, RECORDED21, "blind 21", 0.39, 1, 1, 2),  # 38.2% (the docs' upper middle: 70.1%)
                 (BLIND22, RECORDED22, "blind 22", 0.12, 20, 16, 26),  # 11.6%
                 (BLIND23, RECORDED23, "blind 23", 0.07, 36, 32, 36),  # 6.8% (the docs' upper middle: 6.9%; 14.1% recorded)
                 (BLIND24, RECORDED24, "blind 24", 0.10, 30, 24, 30),  # 9.8%
                 (BLIND25, RECORDED25, "blind 25", 0.11, 35, 30, 43),  # 10.4%
                 (BLIND26, RECORDED26, "blind 26", 1.05, 0, 0, 46),  # 104.0%
                 (BLIND27, RECORDED27, "blind 27", 0.18, 28, 21, 48),  # 17.5%
                 (BLIND28, RECORDED28, "blind 28", 0.17, 13, 7, 16),  # 16.8%
                 (BLIND29, RECORDED29, "blind 29", 0.14, 20, 15, 20),  # 13.9%
                 (BLIND30, RECORDED30, "blind 30", 0.08, 5, 5, 5),  # 7.3%
                 (BLIND31, RECORDED31, "blind 31", 0.04, 2, 2, 2),  # 2.8% (the docs' upper middle: 3.7%)
                 (BLIND32, RECORDED32, "blind 32", 0.06, 27, 26, 33),  # 5.9%
                 (BLIND33, RECORDED33, "blind 33", 0.88, 0, 0, 16),  # 87.8% (the docs' upper middle: 88.6%)
                 (BLIND34, RECORDED34, "blind 34", 0.15, 4, 4, 7),  # 14.5%
                 # 15.2% (the docs' upper middle: 16.4%); recorded 16.7%, 42 / 52 (W4A16 FP4 on Hopper came after)
                 (BLIND35, RECORDED35, "blind 35", 0.16, 54, 44, 88),
                 # 4.4%; recorded 17.0%, 19 / 45 (W4A8 MXFP4, which it informed, came after)
                 (BLIND36, RECORDED36, "blind 36", 0.05, 52, 51, 53)]


@pytest.mark.parametrize("cases, recorded, part, median, within_25, within_15, size", RECORDED_SETS,
                         ids=[s[2] for s in RECORDED_SETS])
def test_recorded_blind_sets_stay_where_the_docs_put_them(cases, recorded, part, median, within_25, within_15,
                                                           size):
    """Each recorded prediction is finite and positive and names a case of the set; since then the
    median and the counts within 15% and 25% the docs report."""
    assert len(cases) == size and set(recorded) == {c.name for c in cases} and len(recorded) == len(cases)
    assert all(c.part == part for c in cases)
    assert all(math.isfinite(v) and v > 0 for v in recorded.values())
    errors = [abs(error(c)) for c in cases]
    assert statistics.median(errors) <= median
    assert sum(e <= 0.25 for e in errors) >= within_25 and sum(e <= 0.15 for e in errors) >= within_15


def test_the_band_can_fail():
    """Halving GEMM efficiency moves some prediction out of the band: the check has teeth."""
    slow = Efficiency(**{**vars(DEFAULT), "gemm": DEFAULT.gemm / 2})
    assert any(abs(predict_case(c, slow) / c.published - 1) > 0.25 for c in FITTED)


def test_every_case_states_its_source_and_assumptions():
    assert len(FITTED) == 10 and len(HELD_OUT) >= 15 and len(BLIND) >= 8 and len({c.name for c in CASES}) == len(CASES)
    parts, wired = blind_parts(), {id(c) for c in RECORDED_CASES}
    numbers = [int(p[len("blind "):] or 1) for p in PARTS if p.startswith("blind")]  # "blind" is the first
    assert [number for number, _ in parts] == list(range(1, len(parts) + 1)) == numbers
    for number, part in parts:  # every part file's cases flagged with its number, and wired in
        assert part and all(c.blind == number and not c.fitted for c in part)
        assert all(id(c) in wired for c in part), f"validation_blind{number}.py is not wired in"
    assert not any(c.blind for c in FITTED + HELD_OUT)
    for case in CASES:
        assert case.source and len(case.assumed) > 10 and case.unit in UNITS


def test_the_table_reports_every_part():
    assert len(PARTS) == 38 and set(PARTS) == {c.part for c in CASES}  # no case in a part the summary skips
    some = [next(c for c in CASES if c.part == part) for part in PARTS]
    text = table(some)
    assert all(f"| {part} |" in text for part in PARTS)
    assert summary(some).count("within 15%") == 38


def test_request_units_by_hand():
    """ms/request: the prompt's prefill step plus osl - 1 decode steps; tok/s/request: (isl + osl) over that."""
    from dataclasses import replace

    from moeserve.capacity.hardware import load_hardware
    from moeserve.capacity.model_spec import load_model
    from moeserve.capacity.predict import Predictor

    case = next(c for c in BLIND if c.unit == "tok/s/request")
    pred = Predictor(load_model(case.model), load_hardware(case.hardware), case.precision)
    w, lay = case.workload, case.layout
    first = pred.prefill(lay, w.isl / lay.tp, w, case.options).step_ms
    tpot = pred.decode(lay, case.batch, w, case.options).tpot_ms
    assert predict_case(case) == pytest.approx((w.isl + w.osl) / (first + (w.osl - 1) * tpot) * 1e3)
    assert predict_case(replace(case, unit="ms/request")) == pytest.approx(first + (w.osl - 1) * tpot)


def test_colocated_tpot_counts_the_prefill_stalls():
    """A colocated case in tok/s/user is 1 / the colocated TPOT (a serving benchmark's mean TPOT, other
    requests' prefills included): slower than the same decode batch alone when prefills stall it."""
    from dataclasses import replace

    from moeserve.capacity.hardware import load_hardware
    from moeserve.capacity.model_spec import load_model
    from moeserve.capacity.predict import Predictor

    case = next(c for c in CASES if c.phase == "colocated" and c.batch)
    case = replace(case, unit="tok/s/user", options=replace(case.options, prefill="stalled"))
    pred = Predictor(load_model(case.model), load_hardware(case.hardware), case.precision)
    c = pred.colocated(case.layout, case.batch, case.workload, case.options)
    alone = pred.decode(case.layout, case.batch, case.workload, case.options)
    assert predict_case(case) == pytest.approx(1000 / c.tpot_ms)
    assert predict_case(case) < 1000 / alone.tpot_ms
    assert predict_case(replace(case, unit="tok/s/GPU")) == pytest.approx(c.output_tokens_per_s_per_gpu)


def test_the_docs_before_after_table_is_this_models():
    """docs/capacity.md's before/after table and its "<part>, after:" lines are what the model gives now
    (`python -m moeserve.capacity.validation --docs docs/capacity.md` rewrites them), and a stale cell is
    rewritten."""
    from pathlib import Path

    from moeserve.capacity.validation import BEFORE_AFTER_HEADER, docs_after

    text = (Path(__file__).resolve().parents[2] / "docs" / "capacity.md").read_text()
    assert docs_after(text) == text, "run python -m moeserve.capacity.validation --docs docs/capacity.md"
    lines = text.split("\n")
    first = lines.index(BEFORE_AFTER_HEADER) + 2
    cells = lines[first].split("|")
    cells[8] = " 1.0 "  # the after cell of the first row
    stale = "\n".join(lines[:first] + ["|".join(cells)] + lines[first + 1:])
    assert docs_after(stale) == text
    with pytest.raises(ValueError, match="names no validation case"):
        docs_after(text.replace(lines[first], lines[first].replace(cells[2], " no such deployment ")))
