"""`moeserve configure --target-rate`: the fewest GPUs (or instances of a fixed layout) that serve a request
rate within the SLOs, against hand-computed figures and brute force."""
from __future__ import annotations

import json
import math

import pytest

from moeserve.capacity import sizing
from moeserve.capacity.cli import main
from moeserve.capacity.layout import Layout
from moeserve.capacity.predict import Prediction, Workload

W = Workload(isl=1000, osl=250, tpot_slo_ms=50)


def colocated(out_per_gpu: float, tpot_ms: float = 40.0, world: int = 8) -> Prediction:
    return Prediction("colocated", Layout(tp=1, ep=world), 64, 40.0, ttft_ms=500, tpot_ms=tpot_ms,
                      input_tokens_per_s_per_gpu=4 * out_per_gpu, output_tokens_per_s_per_gpu=out_per_gpu)


def test_served_counts_output_tokens_of_a_decoding_deployment_and_input_of_a_prefill_side():
    assert sizing.served(colocated(500), 16, W) == pytest.approx(500 * 16 / 250)  # 32 requests a second
    prefill = Prediction("prefill", Layout(tp=1, ep=8), 8192, 900.0, ttft_ms=1200, input_tokens_per_s_per_gpu=6000)
    assert sizing.served(prefill, 8, W) == pytest.approx(6000 * 8 / 1000)
    split = Prediction("disaggregated", Layout(tp=1, ep=8), 64, 40.0, ttft_ms=900, tpot_ms=45,
                       output_tokens_per_s_per_gpu=700, prefill_gpus=8, decode_gpus=16)
    assert sizing.occupied(split, 32) == 24 and sizing.served(split, 32, W) == pytest.approx(700 * 24 / 250)
    assert sizing.served(colocated(500, tpot_ms=60), 16, W) == 0  # misses the TPOT objective: no goodput


def test_instances_of_a_fixed_layout():
    # 8 GPUs x 500 tok/s / 250 tokens = 16 requests a second an instance; 40 need ceil(2.5) = 3 instances
    s = sizing.instances(colocated(500), 40, W)
    assert (s.instances, s.gpus, s.served) == (3, 24, pytest.approx(48))
    assert sizing.instances(colocated(500), 16, W).instances == 1  # exactly one instance's rate
    with pytest.raises(ValueError, match="misses the SLOs"):
        sizing.instances(colocated(500, tpot_ms=60), 1, W)


def test_counts_below_a_node_then_whole_nodes():
    assert sizing.counts(8, 40) == [1, 2, 4, 8, 16, 24, 32, 40]
    assert sizing.counts(4, 12, step=2) == [2, 4, 8, 12]


@pytest.mark.parametrize("rate", [0.5, 3, 17, 33, 150, 1000, 4095])
def test_fewest_gpus_matches_brute_force_when_the_rate_per_gpu_grows_with_the_count(rate):
    """Per-GPU output rising with the count (as wider EP does) and a brute-force scan of every count agree."""
    def best_at(gpus: int) -> Prediction:
        return colocated(200 + 100 * math.log2(gpus), world=min(gpus, 8))

    s, p = sizing.fewest_gpus(best_at, rate, W, gpus_per_node=8, most=4096)
    brute = next(g for g in sizing.counts(8, 4096) if sizing.served(best_at(g), g, W) >= rate)
    assert s.planned == s.gpus == brute and s.served >= rate and s.planned in s.tried
    assert len(s.tried) <= 2 * math.ceil(math.log2(len(sizing.counts(8, 4096)))) + 2  # a search, not a scan


def test_fewest_gpus_skips_counts_where_nothing_fits_and_says_when_none_serves():
    s, _ = sizing.fewest_gpus(lambda g: None if g < 16 else colocated(400), 10, W, gpus_per_node=8, most=64)
    assert s.gpus == 16
    with pytest.raises(ValueError, match="needs more than 64 GPUs: the best GPU count tried serves 102.40 a second"):
        sizing.fewest_gpus(lambda g: colocated(400), 1000, W, gpus_per_node=8, most=64)
    with pytest.raises(ValueError, match=r"serves 0.00 a second \(none meets the SLOs\)"):
        sizing.fewest_gpus(lambda g: colocated(400, tpot_ms=99), 1, W, gpus_per_node=8, most=64)


def run_json(capsys, *argv: str) -> dict:
    assert main([*argv, "--json"]) == 0
    return json.loads(capsys.readouterr().out)


BASE = ["--model", "deepseek-v3", "--hardware", "h200", "--isl", "1024", "--osl", "256", "--ttft-slo-ms", "2000",
        "--tpot-slo-ms", "50"]


def test_configure_target_rate_ranked(capsys):
    """20 requests a second of DeepSeek-V3 on H200s: one node's best deployment does not serve it, two nodes'
    does; the table is the ranking at two nodes and says so."""
    out = run_json(capsys, *BASE, "--target-rate", "20", "--top", "3")
    s = out["sizing"]
    assert s["planned"] == 16 and s["gpus"] <= 16 and s["served"] >= 20 and 8 in s["tried"]
    one_node = run_json(capsys, *BASE, "--gpus", "8", "--top", "1")
    assert one_node["goodput_tokens_per_s_per_gpu"] * 8 / 256 < 20
    two_nodes = run_json(capsys, *BASE, "--gpus", "16", "--top", "3")
    assert [r["goodput_tokens_per_s_per_gpu"] for r in out["deployments"]] == \
        [r["goodput_tokens_per_s_per_gpu"] for r in two_nodes["deployments"]]
    assert any(n.startswith("to serve 20 requests a second (20,480 input and 5,120 output tokens/s) within the SLOs: ")
               for n in out["notes"])


def test_configure_target_rate_fixed_layout(capsys):
    out = run_json(capsys, *BASE, "--phase", "colocated", "--tp", "8", "--ep", "8", "--target-rate", "20")
    one = out["goodput_tokens_per_s_per_gpu"] * 8 / 256  # requests a second of one instance
    n = math.ceil(20 / one)
    assert out["sizing"]["instances"] == n and out["sizing"]["gpus"] == 8 * n
    assert out["sizing"]["served"] == pytest.approx(n * one)


@pytest.mark.parametrize("argv, needle", [
    (["--target-rate", "0"], "--target-rate 0 is out of range"),
    (["--target-rate", "20", "--gpus", "8"], "needs more than 8 GPUs"),
    (["--target-rate", "20", "--phase", "colocated", "--tp", "8", "--ep", "8", "--gpus", "16"], "more than --gpus 16"),
])
def test_configure_target_rate_refusals(capsys, argv, needle):
    assert main([*BASE, *argv]) == 2
    err = capsys.readouterr().err
    assert needle in err and "Traceback" not in err


def test_gpu_price_costs_a_million_tokens_of_each_row_and_the_sized_gpus_an_hour(capsys):
    """--gpu-price 3.5: a row's dollars a million tokens is 3.5 / (its tokens/s a GPU x 3,600) x 10^6 (output
    tokens; input for a prefill side), and the sizing line prices its GPUs an hour and a thousand requests."""
    out = run_json(capsys, *BASE, "--target-rate", "20", "--gpu-price", "3.5", "--top", "3")
    for r in out["deployments"]:
        assert r["usd_per_million_tokens"] == pytest.approx(3.5 / (r["output_tokens_per_s_per_gpu"] * 3600) * 1e6)
    gpus = out["sizing"]["gpus"]
    line = next(n for n in out["notes"] if n.startswith("to serve 20"))
    assert line.endswith(f"; ${gpus * 3.5:,.2f} an hour at $3.5 a GPU-hour, "
                         f"${gpus * 3.5 / (20 * 3600) * 1000:,.4f} a thousand requests at the rate")
    prefill = run_json(capsys, *BASE, "--gpus", "8", "--phase", "prefill", "--gpu-price", "2", "--top", "1")
    assert prefill["usd_per_million_tokens"] == pytest.approx(2 / (prefill["input_tokens_per_s_per_gpu"] * 3600) * 1e6)
    assert main([*BASE, "--gpus", "8", "--gpu-price", "2", "--top", "2"]) == 0
    table = capsys.readouterr().out
    assert "goodput  $/Mtok  GB/GPU" in table
    assert "usd_per_million_tokens" not in run_json(capsys, *BASE, "--gpus", "8", "--top", "1")  # no price, no field


def test_gpu_price_out_of_range(capsys):
    assert main([*BASE, "--gpu-price", "0"]) == 2
    assert "--gpu-price 0 is out of range" in capsys.readouterr().err


def test_several_cards_compared_cheapest_first_each_as_configured_alone(capsys):
    """--hardware h200,b200 with --target-rate and a price a card: one row a card, each the first row and sizing
    configure gives that card alone, its GPUs times its price an hour, the cheapest first."""
    common = [*BASE[:2], *BASE[4:], "--target-rate", "20"]  # BASE without its --hardware
    out = run_json(capsys, *common, "--hardware", "h200,b200", "--gpu-price", "3.5,6")
    rows = out["comparison"]
    assert {r["hardware"] for r in rows} == {"h200", "b200"} and all(r["error"] is None for r in rows)
    assert [r["usd_per_hour"] for r in rows] == sorted(r["usd_per_hour"] for r in rows)
    for r in rows:
        price = {"h200": 3.5, "b200": 6.0}[r["hardware"]]
        alone = run_json(capsys, *common, "--hardware", r["hardware"], "--gpu-price", str(price))
        assert r["gpus"] == alone["sizing"]["gpus"] == r["sizing"]["gpus"]
        assert r["usd_per_hour"] == pytest.approx(r["gpus"] * price)
        assert r["goodput_tokens_per_s_per_gpu"] == pytest.approx(alone["goodput_tokens_per_s_per_gpu"])
        assert r["usd_per_million_tokens"] == pytest.approx(alone["usd_per_million_tokens"])
    assert main([*common, "--hardware", "h200,b200", "--gpu-price", "3.5,6"]) == 0
    table = capsys.readouterr().out
    assert "deepseek-v3 on" in table and "; 20 requests a second" in table and "$/hour" in table


def test_several_cards_without_a_rate_rank_by_goodput_and_name_the_card_where_nothing_fits(capsys):
    out = run_json(capsys, "--model", "deepseek-v3", "--hardware", "h100,h200,b200", "--gpus", "8", "--top", "1")
    rows = [r for r in out["comparison"] if r["error"] is None]
    assert [r["hardware"] for r in rows] == sorted(("h200", "b200"), key=lambda c: -next(
        r["goodput_tokens_per_s_per_gpu"] for r in rows if r["hardware"] == c))
    assert all(r["gpus"] == 8 and r["usd_per_hour"] is None for r in rows)
    failed = [r for r in out["comparison"] if r["error"]]
    assert [r["hardware"] for r in failed] == ["h100"] and failed[0]["error"].startswith("nothing fits: deepseek-v3 on 8 x h100")


@pytest.mark.parametrize("argv, needle", [
    (["--hardware", "h200,b200", "--emit", "serve.yaml"], "--emit is for one card: name one --hardware (not h200,b200)"),
    (["--hardware", "h200,h200"], "--hardware h200,h200: name each card once"),
    (["--hardware", "h200,b200", "--gpu-price", "1,2,3"], "--gpu-price gives 3 prices for 2 --hardware cards"),
    (["--hardware", "h200", "--gpu-price", "cheap"], "--gpu-price cheap: expected dollars a GPU-hour"),
])
def test_several_cards_refusals(capsys, argv, needle):
    assert main(["--model", "deepseek-v3", "--gpus", "8", *argv]) == 2
    err = capsys.readouterr().err
    assert needle in err and "Traceback" not in err
