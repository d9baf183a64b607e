"""One client must not hurt the others: a wide request does not starve short ones, huge prompts do
not hold up normal ones, deep JSON is a 400 (docs/limits.md). A server of its own, small enough that
one request with n = --max-num-seqs fills every seat."""
from __future__ import annotations

import asyncio
import random
import re
import string

import httpx
import pytest
from server_harness import ServerProcess

pytestmark = pytest.mark.slow  # spawns ranks, servers or builds: left out of the quick run

MAX_SEQS = 4


@pytest.fixture(scope="module")
def srv():
    with ServerProcess("--max-num-seqs", str(MAX_SEQS), "--max-model-len", "2048", "--kv-cache-blocks", "640",
                       "--max-body-bytes", str(16 << 20)) as server:
        yield server


def metric(server, name: str) -> float:
    m = re.search(rf"^{re.escape(name)} ([0-9.e+-]+)$", httpx.get(server.url + "/metrics", timeout=30).text, re.M)
    return float(m.group(1)) if m else 0.0


async def _drain(lines) -> None:
    async for _ in lines:
        pass


def test_a_short_request_finishes_while_a_wide_one_holds_every_seat(srv):
    """{"n": max_num_seqs, "max_tokens": 2000, "ignore_eos": true, "stream": true} held every seat until
    its sequences ended (FIFO admission; minutes with the issue's n 128 and max_tokens 4000); a short
    request sent after it now finishes while the engine still runs the wide one's sequences (the
    engine's own count, from its heartbeat: what a client reads of a stream may lag behind)."""
    wide = {"prompt": "x", "n": MAX_SEQS, "max_tokens": 2000, "ignore_eos": True, "stream": True, "temperature": 0}
    short = {"prompt": "Hello there", "max_tokens": 8, "temperature": 0}

    async def scenario() -> float:
        async with httpx.AsyncClient(base_url=srv.url, timeout=300) as client:
            async with client.stream("POST", "/v1/completions", json=wide) as stream:
                lines = stream.aiter_lines()  # held: dropping it would close the stream (an abort)
                async for line in lines:  # the wide request runs: its first tokens are out
                    if '"text"' in line:
                        break
                reader = asyncio.create_task(_drain(lines))
                answer = await asyncio.wait_for(client.post("/v1/completions", json=short), 240)
                assert answer.status_code == 200, answer.text
                await asyncio.sleep(0.5)  # a heartbeat (every 0.2 s) from after the short one ended
                metrics = (await client.get("/metrics")).text
                reader.cancel()
        # leaving the block disconnected the stream: the wide request is aborted
        return float(re.search(r"^moeserve_num_requests_running ([0-9.e+-]+)$", metrics, re.M).group(1))

    running = asyncio.run(scenario())
    assert running == MAX_SEQS, f"the wide request had ended before the short one did ({running} running)"


def test_preemption_for_fairness_never_changes_greedy_tokens(srv):
    """The wide request's choices are preempted and recomputed to make room for short ones; greedy,
    every choice still equals the same prompt's output served alone."""
    body = {"prompt": "The capital of France is", "max_tokens": 48, "temperature": 0, "ignore_eos": True}
    alone = httpx.post(srv.url + "/v1/completions", json=body, timeout=120).json()["choices"][0]["text"]
    before = metric(srv, "moeserve_preemptions_total")

    async def scenario() -> tuple[dict, list[httpx.Response]]:
        async with httpx.AsyncClient(base_url=srv.url, timeout=300) as client:
            wide = asyncio.create_task(client.post("/v1/completions", json=dict(body, n=MAX_SEQS)))
            await asyncio.sleep(0.3)
            shorts = [client.post("/v1/completions", json={"prompt": f"Hi {i}", "max_tokens": 4}) for i in range(3)]
            return (await wide).json(), await asyncio.gather(*shorts)

    wide, shorts = asyncio.run(scenario())
    assert all(r.status_code == 200 for r in shorts)
    assert [c["text"] for c in wide["choices"]] == [alone] * MAX_SEQS
    assert metric(srv, "moeserve_preemptions_total") >= before  # (how many depends on timing; tokens never do)


def _huge(n_bytes: int) -> str:
    return ("hello world " * (n_bytes // 12 + 1))[:n_bytes]


def _varied_words(n_bytes: int) -> str:
    """n_bytes of made-up lower-case words, the same every run."""
    rng = random.Random(0)
    vocab = ["".join(rng.choice(string.ascii_lowercase) for _ in range(rng.randint(2, 9))) for _ in range(5000)]
    words: list[str] = []
    size = 0
    while size < n_bytes:
        words.append(rng.choice(vocab))
        size += len(words[-1]) + 1
    return " ".join(words)[:n_bytes]


def test_a_prompt_that_cannot_fit_is_refused_before_it_is_tokenized(srv):
    r = httpx.post(srv.url + "/v1/completions", json={"prompt": _huge(3 << 20), "max_tokens": 4}, timeout=120)
    assert r.status_code == 400, r.text
    error = r.json()["error"]
    assert error["code"] == "context_length_exceeded" and "bytes are at least" in error["message"]
    chat = {"messages": [{"role": "user", "content": _huge(3 << 20)}], "max_tokens": 4}
    r = httpx.post(srv.url + "/v1/chat/completions", json=chat, timeout=120)
    assert r.status_code == 400 and "bytes are at least" in r.json()["error"]["message"], r.text


def test_huge_prompts_being_tokenized_do_not_hold_up_a_normal_request(srv):
    """Three 4 MB prompts that must be tokenized (truncate_prompt_tokens keeps their tails, so none
    is refused from its length) took seconds each on the one tokenizer thread, and a normal request
    queued behind all three; now it has a lane of its own and finishes before the second of them.
    The words are varied so that each huge prompt keeps the tokenizer busy for several seconds (a
    repeated phrase tokenizes too fast to hold anything up)."""
    huge = {"prompt": _varied_words(4 << 20), "max_tokens": 1, "truncate_prompt_tokens": 16}
    normal = {"prompt": "Hello there", "max_tokens": 2}

    async def scenario() -> list[str]:
        done: list[str] = []

        async def send(name: str, body: dict) -> None:
            r = await client.post("/v1/completions", json=body)
            assert r.status_code == 200, r.text
            done.append(name)

        async with httpx.AsyncClient(base_url=srv.url, timeout=600) as client:
            huge_tasks = [asyncio.create_task(send(f"huge {i}", huge)) for i in range(3)]
            await asyncio.sleep(3.0)  # the huge bodies are uploaded and queued for the tokenizer
            await send("normal", normal)
            await asyncio.gather(*huge_tasks)
        return done

    done = asyncio.run(scenario())
    assert done.index("normal") <= 1, f"the normal request waited behind the huge ones: {done}"


def _nested(depth: int) -> dict:
    value: dict = {"leaf": 1}
    for _ in range(depth):
        value = {"a": value}
    return value


@pytest.mark.parametrize("where", ["chat_template_kwargs", "tool_calls", "documents", "tokenize"])
def test_deep_nesting_anywhere_is_a_400(srv, where):
    """~500 levels inside a field the chat template walks raised RecursionError there: a 500."""
    deep = _nested(500)
    user = {"role": "user", "content": "hi"}
    bodies = {
        "chat_template_kwargs": ("/v1/chat/completions", {"messages": [user], "chat_template_kwargs": {"x": deep}}),
        "tool_calls": ("/v1/chat/completions", {"messages": [user, {"role": "assistant", "tool_calls": [deep]}]}),
        "documents": ("/v1/chat/completions", {"messages": [user], "documents": [deep]}),
        "tokenize": ("/tokenize", {"messages": [user, {"role": "assistant", "content": "x", "tool_calls": [deep]}]}),
    }
    path, body = bodies[where]
    r = httpx.post(srv.url + path, json=dict(body, max_tokens=2), timeout=60)
    assert r.status_code == 400, r.text
    assert "nests deeper than" in r.json()["error"]["message"]
    ok = {"messages": [user], "chat_template_kwargs": {"x": _nested(20)}, "max_tokens": 2}  # ordinary depth still served
    assert httpx.post(srv.url + "/v1/chat/completions", json=ok, timeout=60).status_code == 200
