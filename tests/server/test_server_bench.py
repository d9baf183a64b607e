"""`moeserve bench`: statistics against numpy, and a short real run against the shared server."""
from __future__ import annotations

import argparse
import gc
import json

import numpy as np
import pytest
from server_settings import API_KEY

from moeserve.server import bench
from moeserve.server.bench_stats import RequestRecord, percentile, summarize


def test_percentile_matches_numpy():
    rng = np.random.default_rng(0)
    for n in (1, 2, 7, 100):
        xs = rng.random(n).tolist()
        for q in (0, 50, 90, 99, 100):
            assert percentile(xs, q) == pytest.approx(float(np.percentile(xs, q)))


def test_summary_throughput_tpot_and_goodput():
    recs = [
        RequestRecord(ok=True, input_tokens=10, output_tokens=11, ttft=0.1, e2e=1.1, itls=[0.1] * 10),  # tpot 100 ms
        RequestRecord(ok=True, input_tokens=10, output_tokens=11, ttft=0.5, e2e=0.7, itls=[0.02] * 10),  # tpot 20 ms
        RequestRecord(ok=False, input_tokens=10, error="HTTP 429: full"),
    ]
    s = summarize(recs, duration_s=2.0, slo_ttft_ms=200, slo_tpot_ms=150)
    assert s["completed"] == 2 and s["failed"] == 1 and s["errors"] == {"HTTP 429: full": 1}
    assert s["output_throughput"] == pytest.approx(11.0)
    assert s["tpot_ms"]["p50"] == pytest.approx(60.0)
    assert s["goodput"] == pytest.approx(0.5)  # only the first meets TTFT <= 200 ms
    assert s["itl_ms"]["mean"] == pytest.approx(60.0)


def test_one_token_outputs_have_no_tpot_and_the_json_stays_valid():
    """TPOT and ITL need two tokens; their mean was NaN, which strict JSON readers refuse."""
    from moeserve.server.bench_stats import format_table

    s = summarize([RequestRecord(ok=True, input_tokens=4, output_tokens=1, ttft=0.1, e2e=0.1, itls=[])], 1.0, None, None)
    assert s["tpot_ms"] == {k: None for k in s["tpot_ms"]} and s["itl_ms"]["mean"] is None
    assert json.loads(json.dumps(s, allow_nan=False))["ttft_ms"]["p50"] == pytest.approx(100.0)
    assert "n/a / n/a / n/a / n/a" in format_table(s)


def parse(argv: list[str]) -> argparse.Namespace:
    p = argparse.ArgumentParser()
    bench.add_arguments(p)
    return p.parse_args(argv)


def test_bench_against_the_server(server, tmp_path, capsys):
    out = tmp_path / "bench.json"
    args = parse(["--base-url", server.url, "--model", server.model, "--api-key", API_KEY, "--num-requests", "6",
                  "--concurrency", "3", "--input-len", "12", "--output-len", "8", "--slo-ttft-ms", "60000",
                  "--json", str(out)])  # the default --vocab-size fits the built-in model (4,096 tokens)
    assert bench.run(args) == 0
    assert gc.get_freeze_count() == 0  # the heap is frozen only while the load is timed
    table = capsys.readouterr().out
    assert "output throughput (tok/s)" in table and "TTFT ms" in table
    s = json.loads(out.read_text())
    assert s["completed"] == 6 and s["failed"] == 0
    assert s["output_tokens"] == 6 * 8 and s["input_tokens"] == 6 * 12
    assert 0 < s["ttft_ms"]["p50"] <= s["e2e_ms"]["p99"]
    assert s["tpot_ms"]["p50"] > 0 and s["goodput"] > 0


def test_bench_poisson_rate_with_a_jsonl_dataset(server, tmp_path, capsys):
    data = tmp_path / "prompts.jsonl"
    data.write_text("\n".join(json.dumps({"prompt": f"Question {i}: why?", "output_len": 4}) for i in range(3)))
    args = parse(["--base-url", server.url, "--model", server.model, "--api-key", API_KEY, "--num-requests", "4",
                  "--request-rate", "20", "--concurrency", "0", "--dataset", str(data), "--endpoint", "chat",
                  "--warmup", "0", "--json", "-"])
    assert bench.run(args) == 0
    s = json.loads(capsys.readouterr().out)
    assert s["completed"] == 4 and s["output_tokens"] == 16


def test_bench_counts_refusals_as_failures(server, capsys):
    args = parse(["--base-url", server.url, "--model", "no-such-model", "--api-key", API_KEY, "--num-requests", "2",
                  "--warmup", "0", "--json", "-"])
    assert bench.run(args) == 1
    s = json.loads(capsys.readouterr().out)
    assert s["failed"] == 2 and any("HTTP 404" in e for e in s["errors"])


BAD_DATASETS = {  # file content -> what the error names
    "missing": (None, "cannot read"),
    "truncated JSON": ('{"prompt": "a", "output_len": 4}\n{"prompt": "b", "outp', "line 2: not valid JSON"),
    "not an object": ("[1, 2]\n", "line 1: want an object"),
    "prompt a number": ('{"prompt": 5, "output_len": 4}\n', '"prompt" must be'),
    "empty prompt": ('{"prompt": [], "output_len": 4}\n', '"prompt" must be'),
    "output_len huge": ('{"prompt": "a", "output_len": 1e400}\n', '"output_len" must be'),
    "output_len negative": ('{"prompt": "a", "output_len": -4}\n', '"output_len" must be'),
    "no requests": ("\n\n", "has no requests"),
}


@pytest.mark.parametrize("case", sorted(BAD_DATASETS))
def test_bench_refuses_a_dataset_it_cannot_use_before_sending_anything(case, tmp_path, capsys):
    content, expected = BAD_DATASETS[case]
    data = tmp_path / "prompts.jsonl"
    if content is not None:
        data.write_text(content)
    # an unreachable server: nothing may be sent, the dataset is refused first
    args = parse(["--base-url", "http://127.0.0.1:9", "--model", "m", "--dataset", str(data)])
    assert bench.run(args) == 2
    err = capsys.readouterr().err
    assert err.startswith("moeserve bench: error: ") and expected in err and "Traceback" not in err


@pytest.mark.parametrize("argv, expected", [
    (["--vocab-size", "5"], "--vocab-size must be > 10"),
    (["--warmup", "-1"], "--warmup must be >= 0"),
    (["--timeout-s", "0"], "--timeout-s must be a positive number of seconds"),
    (["--timeout-s", "inf"], "--timeout-s must be a positive number of seconds"),  # was an unbounded run
    (["--request-rate", "nan"], "--request-rate must be a positive number"),  # was accepted: sleep(NaN)
    (["--slo-ttft-ms", "-5"], "must be > 0"),
    (["--json", "/no/such/dir/x.json"], "no such directory"),
    (["--json", "/"], "not a directory"),  # was IsADirectoryError's traceback, after the whole run
    (["--json", ""], "--json ''"),  # was ignored
    (["--base-url", "127.0.0.1:8000"], "--base-url"),  # was every request failing, status 1
    (["--base-url", ""], "--base-url"),
    (["--tokenizer", "/no/such/checkpoint"], "cannot load a tokenizer"),
    (["--endpoint", "chat"], "--endpoint chat needs text prompts"),
])
def test_bench_refuses_bad_arguments_with_one_line(argv, expected, capsys):
    args = parse(["--base-url", "http://127.0.0.1:9", "--model", "m", *argv])
    assert bench.run(args) == 2
    err = capsys.readouterr().err
    assert err.startswith("moeserve bench: error: ") and expected in err and "Traceback" not in err


def test_a_non_utf8_dataset_is_refused(tmp_path, capsys):
    data = tmp_path / "prompts.jsonl"
    data.write_bytes(b"\xff\xfe{\"prompt\": \"a\"}\n")
    assert bench.run(parse(["--base-url", "http://127.0.0.1:9", "--model", "m", "--dataset", str(data)])) == 2
    assert "cannot read" in capsys.readouterr().err


def test_extra_body_joins_every_request(capsys):
    args = parse(["--model", "m", "--extra-body", '{"structured_outputs": {"regex": "[a-z]+"}, "top_k": 5}'])
    path, body = bench._payload(args, bench.Item([11, 12], 2, 4))
    assert path == "/v1/completions" and body["structured_outputs"] == {"regex": "[a-z]+"} and body["top_k"] == 5
    assert body["prompt"] == [11, 12] and body["max_tokens"] == 4
    for bad in ("[1]", "{nope"):
        with pytest.raises(SystemExit):
            parse(["--model", "m", "--extra-body", bad])
    assert "--extra-body" in capsys.readouterr().err
