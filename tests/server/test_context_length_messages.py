"""A request that cannot fit the context is told which field to change. In-process, fake engine."""
from __future__ import annotations

import asyncio

from server_fakes import FakeEngine, make_app
from test_server_bad_requests import check_error


def post(*requests: tuple[str, dict]) -> list:
    async def main():
        http, client, _ = await make_app(FakeEngine())
        out = [await http.post(path, json=body) for path, body in requests]
        await http.aclose()
        await client.shutdown(1.0)
        return out

    return asyncio.run(main())


def test_a_max_tokens_no_prompt_could_leave_room_for_names_only_max_tokens():
    """max_tokens of 10**8: it said the 1-byte prompt was 'at least 0 tokens' and to shorten the prompt."""
    plain, chat = post(
        ("/v1/completions", {"prompt": "a", "max_tokens": 10**8}),
        ("/v1/chat/completions", {"messages": [{"role": "user", "content": "a"}], "max_completion_tokens": 10**8}))
    check_error(plain, 400, "max_tokens")
    check_error(chat, 400, "max_completion_tokens")
    for r, field in ((plain, "max_tokens"), (chat, "max_completion_tokens")):
        err = r.json()["error"]
        assert err["code"] == "context_length_exceeded"
        assert f"{field} asks for 100000000" in err["message"] and err["message"].endswith(f"lower {field}")
        assert "shorten the prompt" not in err["message"] and "bytes" not in err["message"], err["message"]


def test_token_prompts_that_do_not_fit_carry_the_context_length_code():
    """OpenAI's code for it: a text prompt refused from its byte length had it, a prompt refused once
    tokenized (token ids, or text that tokenized longer) had code null."""
    fills, asks_more = post(("/v1/completions", {"prompt": [5] * 1000, "max_tokens": 1}),
                            ("/v1/completions", {"prompt": [5] * 990, "max_tokens": 20}))
    check_error(fills, 400, "prompt")
    check_error(asks_more, 400, "max_tokens")
    assert fills.json()["error"]["code"] == asks_more.json()["error"]["code"] == "context_length_exceeded"


def test_every_context_length_refusal_has_its_code():
    """A prompt too long for the context, and a prompt plus max_tokens over it, answered `code: null`
    while a max_tokens no prompt could fit said "context_length_exceeded" (OpenAI's code, which clients
    test to tell a context overflow from other 400s): all three say it now."""
    long_prompt, over = post(
        ("/v1/chat/completions", {"messages": [{"role": "user", "content": "a" * 1200}]}),
        ("/v1/chat/completions", {"messages": [{"role": "user", "content": "a"}], "max_tokens": 990}))
    check_error(long_prompt, 400, "messages")
    check_error(over, 400, "max_tokens")
    assert long_prompt.json()["error"]["code"] == over.json()["error"]["code"] == "context_length_exceeded"
