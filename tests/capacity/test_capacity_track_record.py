"""The track record `moeserve configure` prints beside its figure: the spread of published / predicted over
the validation table's out-of-sample cases of the same regime and card class."""
from __future__ import annotations

import json
import re
from dataclasses import replace
from pathlib import Path

import numpy as np
import pytest

from moeserve.capacity import track_record, validation
from moeserve.capacity.cli import main
from moeserve.capacity.validation_cases import FITTED, HELD_OUT


@pytest.fixture
def cases(monkeypatch):
    """Swap the shipped record's cases for the test's own, run through the model."""
    def use(new):
        rows = track_record.computed(new)
        monkeypatch.setattr(track_record, "_cases", lambda: rows)
    return use


def _small_h20_decodes() -> list:
    """The held-out H20 decode cases at small batch (at most 2 sequences a GPU): the tests' raw material."""
    return [c for c in HELD_OUT if c.hardware == "h20" and c.phase == "decode" and c.batch is not None and c.batch <= 2]


def test_quantile_is_numpys_linear_one():
    v = [3.0, 0.5, 1.25, 2.0, 0.9]
    for q in (0.0, 0.1, 0.5, 0.9, 1.0):
        assert track_record.quantile(v, q) == pytest.approx(np.quantile(v, q))
    assert track_record.quantile([0.5, 1.0, 2.0], 0.1) == pytest.approx(0.6)  # 0.5 + 0.2 x 0.5


def test_regime_boundaries():
    assert track_record.regime("prefill", 16384) == "prefill"
    assert track_record.regime("decode", 0.125) == "small batch"
    assert track_record.regime("colocated", 2.0) == "small batch"
    assert track_record.regime("decode", 2.5) == "throughput"
    assert track_record.regime("disaggregated", 256) == "throughput"


def test_record_is_published_over_predicted_of_out_of_sample_cases(cases):
    # three held-out H20 decode cases at small batch, published set to 0.5, 1 and 2 times the model's figure,
    # and a fitted one at 10x that must not count
    small = _small_h20_decodes()
    assert len(small) >= 3
    made = [replace(c, published=validation.predict_case(c) * k) for c, k in zip(small, (0.5, 1.0, 2.0))]
    fitted = replace(small[0], published=validation.predict_case(small[0]) * 10, fitted=True)
    cases(made + [fitted])
    r = track_record.record("hopper_h20", "decode", 1.0)
    assert (r.regime, r.card_class, r.cases) == ("small batch", "hopper_h20", 3)
    assert (r.low, r.median, r.high) == pytest.approx((0.6, 1.0, 1.8))  # 0.5 + 0.2 x 0.5; 1 + 0.8 x 1
    # another regime on the same card has no case, and none on any card either
    assert track_record.record("hopper_h20", "decode", 64) is None
    # a card class with too few cases falls back to every card's
    assert track_record.record("blackwell", "decode", 1.0).card_class is None
    assert track_record.record("cpu", "decode", 1.0) is None


def test_an_engine_counts_its_own_deployments_first(cases):
    small = _small_h20_decodes()
    made = [replace(c, published=validation.predict_case(c) * k) for c, k in zip(small, (0.5, 1.0, 2.0))]
    vllm = [replace(c, name=c.name + " (vLLM)", published=validation.predict_case(c) * 4) for c in small[:3]]
    assert {c.engine for c in made} == {"SGLang"} and {c.engine for c in vllm} == {"vLLM"}
    cases(made + vllm)
    r = track_record.record("hopper_h20", "decode", 1.0, "vLLM")
    assert (r.engine, r.card_class, r.cases, r.median) == ("vLLM", "hopper_h20", 3, pytest.approx(4.0))
    assert track_record.record("hopper_h20", "decode", 1.0, "SGLang").median == pytest.approx(1.0)
    # no engine: all six; an engine without cases falls back to every engine's, and says so (engine None)
    assert track_record.record("hopper_h20", "decode", 1.0).cases == 6
    assert track_record.record("hopper_h20", "decode", 1.0, "TensorRT-LLM").engine is None
    assert "published vLLM deployments" in r.describe()


def test_every_case_has_an_engine():
    engines = {c.engine for c in validation.CASES}
    assert engines == {"SGLang", "vLLM", "TensorRT-LLM", "ATOM", "RTP-LLM", "DeepSeek"}
    from moeserve.capacity.cli import ENGINE_NAMES
    from moeserve.capacity.validation_cases import ENGINES
    assert set(ENGINE_NAMES.values()) == set(ENGINES)  # --engine names the engines it plans for
    assert {c.engine for c in validation.CASES if c.source.startswith("DeepSeek,")} == {"DeepSeek"}
    # vLLM with AMD's ATOM plugin is vLLM's run; ATOM's own server is ATOM's
    assert {c.engine for c in validation.CASES if c.name.startswith("vLLM-ATOM")} == {"vLLM"}
    assert {c.engine for c in validation.CASES if c.name.startswith("ATOM ")} == {"ATOM"}


def test_time_units_count_as_speed(cases):
    (ms,) = [c for c in HELD_OUT if c.unit == "ms/request"][:1]
    slow = replace(ms, published=validation.predict_case(ms) * 2)  # took twice the model's time: half its speed
    cases([slow] * 3)
    r = track_record.record(validation.hardware_for(ms).card_class, "decode", 0.125)
    assert r.median == pytest.approx(0.5)


def test_the_shipped_record_is_the_validation_tables_and_leaves_the_fitted_cases_out():
    shipped, fresh = track_record._cases(), track_record.computed()
    stale = [f"{f[4][:60]}: shipped {s[3]:.4f}, the model {f[3]:.4f}" for s, f in zip(shipped, fresh)
             if s[:3] != f[:3] or s[4] != f[4] or s[3] != pytest.approx(f[3], rel=1e-9)]
    assert len(shipped) == len(fresh) and not stale, (
        "track_record.json is stale: run `python -m moeserve.capacity.track_record --write`\n" + "\n".join(stale[:10]))
    regimes = [reg for reg, *_ in track_record._ratios()]
    counted = sum(regimes.count(g) for g in ("prefill", "small batch", "throughput"))
    assert counted == len(regimes) == len(validation.CASES) - len(FITTED)


def test_configure_prints_and_reports_it(capsys):
    assert main(["--model", "deepseek-r1", "--hardware", "h200", "--phase", "decode", "--tp", "8",
                 "--batch", "0.125"]) == 0
    last = capsys.readouterr().out.strip().splitlines()[-1]
    assert last.startswith("track record: ") and "Hopper" in last and "at <= 2 sequences a GPU" in last
    assert main(["--model", "deepseek-r1", "--hardware", "h200", "--phase", "decode", "--tp", "8",
                 "--batch", "0.125", "--json"]) == 0
    past = json.loads(capsys.readouterr().out)["track_record"]
    assert past["regime"] == "small batch" and past["card_class"] == "hopper" and past["cases"] >= 3
    assert past["low"] <= past["median"] <= past["high"] and past["engine"] is None
    assert main(["--model", "deepseek-r1", "--hardware", "h200", "--phase", "decode", "--tp", "8",
                 "--batch", "0.125", "--engine", "sglang", "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["track_record"]["engine"] == "SGLang"
    assert main(["--hardware", "cpu", "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["track_record"] is None


def test_the_docs_example_is_what_configure_prints():
    from pathlib import Path

    docs = " ".join((Path(__file__).resolve().parents[2] / "docs" / "capacity.md").read_text().split())
    printed = track_record.record("hopper", "decode", 0.125).describe()
    assert printed in docs
    sglang, vllm = (track_record.record("hopper", "decode", 0.125, e) for e in ("SGLang", "vLLM"))
    assert f"{sglang.cases} SGLang deployments at {sglang.low:.2f}-{sglang.high:.2f}x (median {sglang.median:.2f}x)" in docs
    assert f"{vllm.cases} at {vllm.low:.2f}-{vllm.high:.2f}x" in docs


def test_fold_in_corrects_a_bias_and_not_a_spread(cases):
    """Leave one source out: cases of four sources all at 2x the model's figure are corrected to it
    exactly; at 0.5x / 2x / 0.5x / 2x the other sources' median misleads at least as much as it helps."""
    small = _small_h20_decodes()

    def made(factors, sources=None):
        return [replace(small[i % len(small)], name=f"case {i}", source=sources[i] if sources else f"source {i}",
                        published=validation.predict_case(small[i % len(small)]) * k) for i, k in enumerate(factors)]
    cases(made((2.0, 2.0, 2.0, 2.0)))
    f = track_record.fold_in()
    assert f.cases == 4 and f.within_15 == (0, 4) and f.median_error == pytest.approx((0.5, 0.0))
    cases(made((0.5, 2.0, 0.5, 2.0)))
    f = track_record.fold_in()
    assert f.within_15 == (0, 0) and f.median_error[1] >= f.median_error[0]
    # a case never borrows from its own source: one source alone has nothing to borrow
    cases(made((2.0, 2.0, 2.0, 2.0), ["one"] * 4))
    assert track_record.fold_in().median_error == pytest.approx((0.5, 0.5))


def test_docs_report_the_fold_in_check():
    text = (Path(__file__).resolve().parents[2] / "docs" / "capacity.md").read_text()
    m = re.search(r"within 15% from (\d+) to (\d+) of (\d+) \(within 25%: (\d+) to (\d+); median error ([\d.]+)% to\s+"
                  r"([\d.]+)%\), and by engine as well from (\d+) to (\d+)\.", text)
    assert m, "docs/capacity.md lost the fold-in sentence"
    f, e = track_record.fold_in(), track_record.fold_in(by_engine=True)
    assert [int(g) for g in m.groups()[:5]] == [*f.within_15, f.cases, *f.within_25]
    assert (m.group(6), m.group(7)) == (f"{f.median_error[0]:.1%}"[:-1], f"{f.median_error[1]:.1%}"[:-1])
    assert [int(m.group(8)), int(m.group(9))] == list(e.within_15)
