"""The OpenAI-compatible judge against a real scripted server on 127.0.0.1, the cache,
and the LangChain chat-model judge."""

from __future__ import annotations

import asyncio
import json
import socket
import threading
from pathlib import Path

import pytest
from judge_server import JudgeServer, Reply
from langchain_core.language_models.fake_chat_models import FakeListChatModel
from langchain_openai import ChatOpenAI
from pydantic import BaseModel

from agenteval_core import (
    HTTPEmbedder,
    JudgeConfigError,
    JudgeContextOverflowError,
    JudgeParseError,
    JudgeUnavailableError,
    JudgeUnsupportedRequestError,
    Trace,
    create_metric,
)
from agenteval_core.judges import JudgeCache, JudgeRequest, LangChainJudge, OpenAIJudge, parse_reply
from agenteval_core.judges._parse import ReplyError, reply_text


class Verdict(BaseModel):
    score: float
    reason: str


def request(text: str = "Is this good?", version: str = "v1") -> JudgeRequest[Verdict]:
    return JudgeRequest(
        metric="test_metric",
        prompt_version=version,
        messages=[{"role": "system", "content": "Judge."}, {"role": "user", "content": text}],
        schema=Verdict,
    )


def judge(server: JudgeServer, **options: object) -> OpenAIJudge:
    settings: dict[str, object] = {
        "cache": None,
        "max_retries": 3,
        "timeout": 2.0,
        "backoff_base": 0.05,
    }
    settings.update(options)
    return OpenAIJudge("judge-model", base_url=server.base_url, **settings)  # type: ignore[arg-type]


def ask(j: OpenAIJudge | LangChainJudge, req: JudgeRequest[Verdict] | None = None) -> object:
    return asyncio.run(j.judge(req or request()))


def test_structured_reply_with_usage_and_cost(judge_server: JudgeServer) -> None:
    judge_server.reply(Reply(json.dumps({"score": 0.8, "reason": "fine"}), usage=(1000, 200)))
    j = judge(judge_server, prices={"judge-model": (1.0, 2.0)})
    reply = ask(j)
    assert reply.parsed == Verdict(score=0.8, reason="fine")  # type: ignore[attr-defined]
    assert (reply.input_tokens, reply.output_tokens) == (1000, 200)  # type: ignore[attr-defined]
    # 1000 × $1/M + 200 × $2/M = $0.0014
    assert reply.cost_usd == pytest.approx(0.0014)  # type: ignore[attr-defined]
    sent = judge_server.requests[0]
    assert sent["model"] == "judge-model" and sent["temperature"] == 0.0
    assert sent["response_format"]["type"] == "json_schema"
    assert sent["response_format"]["json_schema"]["schema"]["required"] == ["score", "reason"]


def test_429_with_retry_after_then_500_then_success(judge_server: JudgeServer) -> None:
    judge_server.reply(
        Reply(status=429, content="slow down", headers={"Retry-After": "0.3"}),
        Reply(status=500, content="boom"),
        {"score": 1, "reason": "ok"},
    )
    j = judge(judge_server)
    reply = ask(j)
    assert reply.parsed.score == 1.0  # type: ignore[attr-defined]
    assert len(judge_server.requests) == 3 and j.traffic.stats.retries == 2
    # the retry after the 429 waited at least the 0.3 s it asked for
    assert judge_server.arrivals[1] - judge_server.arrivals[0] >= 0.3


def test_a_timeout_is_abandoned_not_sent_again(judge_server: JudgeServer) -> None:
    judge_server.reply(
        Reply(json.dumps({"score": 0, "reason": "late"}), delay=1.5), {"score": 0.5, "reason": "ok"}
    )
    with pytest.raises(JudgeUnavailableError, match="timed out; not sent again") as raised:
        ask(judge(judge_server, timeout=0.5))
    usage = raised.value.usage
    # one call, abandoned; its prompt (the request's messages as JSON) estimated at chars / 4
    prompt = len(json.dumps(request().messages)) // 4
    assert (usage.calls, usage.abandoned, usage.estimated_input_tokens) == (1, 1, prompt)
    assert len(judge_server.requests) == 1
    # asked to, a timeout is sent again
    judge_server.script.clear()  # the first judge's unused reply
    judge_server.reply(
        Reply(json.dumps({"score": 0, "reason": "late"}), delay=1.5), {"score": 0.5, "reason": "ok"}
    )
    reply = ask(judge(judge_server, timeout=0.5, retry_timeouts=True))
    assert reply.parsed.score == 0.5 and reply.calls == 2  # type: ignore[attr-defined]


def test_an_error_in_a_200_body_is_that_error_not_an_unparsable_reply(
    judge_server: JudgeServer,
) -> None:
    # OpenRouter answers 200 once the model started; a model failing meanwhile sends the error
    # in the body, or a choice ending in finish_reason "error"
    upstream = {"error": {"code": 502, "message": "Provider returned error"}}
    failed_choice = {
        "choices": [
            {
                "index": 0,
                "finish_reason": "error",
                "message": {"role": "assistant", "content": ""},
                "error": {"code": 429, "message": "Rate limit exceeded upstream"},
            }
        ]
    }
    judge_server.reply(
        Reply(body=json.dumps(upstream)),
        Reply(body=json.dumps(failed_choice)),
        {"score": 0.5, "reason": "ok"},
    )
    j = judge(judge_server)
    reply = ask(j)
    assert reply.parsed == Verdict(score=0.5, reason="ok")  # type: ignore[attr-defined]
    # retried as the 502 and the 429 they report, never re-asked as unparsable
    assert j.traffic.stats.failures == {"HTTP 502": 1, "HTTP 429": 1}
    assert (j.stats.reasks, j.stats.unparsable, len(judge_server.requests)) == (0, 0, 3)
    # a refusal reported so is refused as its status: not sent again
    too_long = {"error": {"code": 400, "message": "This model's maximum context length is 8192"}}
    judge_server.reply(Reply(body=json.dumps(too_long)))
    with pytest.raises(JudgeContextOverflowError, match="maximum context length is 8192"):
        ask(judge(judge_server))
    assert len(judge_server.requests) == 4
    # an error without a code is an upstream failure; an "error" beside a finished choice is
    # none (some servers send "error": null)
    verdict = {"role": "assistant", "content": json.dumps({"score": 1, "reason": "fine"})}
    judge_server.reply(
        Reply(body=json.dumps({"error": "model not loaded"})),
        Reply(
            body=json.dumps(
                {"error": None, "choices": [{"finish_reason": "stop", "message": verdict}]}
            )
        ),
    )
    j = judge(judge_server)
    assert ask(j).parsed == Verdict(score=1.0, reason="fine")  # type: ignore[attr-defined]
    assert j.traffic.stats.failures == {"HTTP 502": 1}
    # through LangChain (the model's own retries are its own affair): the error it reports,
    # by its kind, never a bare "ValueError"
    judge_server.reply(Reply(body=json.dumps(upstream)), Reply(body=json.dumps(too_long)))
    with pytest.raises(JudgeUnavailableError, match="Provider returned error"):
        ask(_chat_openai(judge_server))
    with pytest.raises(JudgeContextOverflowError, match="maximum context length is 8192"):
        ask(_chat_openai(judge_server))
    # the client retries an HTTP 502 but not one a 200 reported: that is retried here, as
    # many times as the client would (max_retries; the one above has none)
    sent = len(judge_server.requests)
    judge_server.reply(
        Reply(body=json.dumps(upstream)),
        Reply(body=json.dumps(upstream)),
        {"score": 1, "reason": "ok"},
    )
    model = ChatOpenAI(
        model="gpt-4o-mini", base_url=judge_server.base_url, api_key="sk-t", max_retries=2
    )
    reply = ask(LangChainJudge(model, cache=None))
    assert reply.parsed == Verdict(score=1.0, reason="ok")  # type: ignore[attr-defined]
    assert len(judge_server.requests) == sent + 3
    judge_server.reply(*[Reply(body=json.dumps(upstream))] * 3)
    with pytest.raises(JudgeUnavailableError, match="Provider returned error") as failed:
        ask(LangChainJudge(model, cache=None))
    assert (failed.value.usage.calls, len(judge_server.requests)) == (3, sent + 6)


def test_a_reply_the_server_refused_as_bad_json_is_read_and_re_asked(
    judge_server: JudgeServer,
) -> None:
    # Groq checks a JSON-mode reply itself and answers HTTP 400 json_validate_failed with
    # the reply in failed_generation: it was "replaying gives the same: check the judge
    # options", failing the verdict at once
    def refused(generated: str) -> Reply:
        error = {
            "message": "Failed to generate JSON. Please adjust your prompt. "
            "See 'failed_generation' for more details.",
            "type": "invalid_request_error",
            "code": "json_validate_failed",
            "failed_generation": generated,
        }
        return Reply(status=400, body=json.dumps({"error": error}))

    judge_server.reply(
        refused('```json\n{"score": 0.7, "reason": "fenced"}\n```'),  # read as it is
        refused('{"score": 0.4, "reason": "cut sho'),  # cut short: asked again
        {"score": 0.4, "reason": "whole"},
    )
    j = judge(judge_server)
    assert ask(j).parsed == Verdict(score=0.7, reason="fenced")  # type: ignore[attr-defined]
    reply = ask(j)
    assert reply.parsed == Verdict(score=0.4, reason="whole")  # type: ignore[attr-defined]
    assert (j.stats.reasks, len(judge_server.requests)) == (1, 3)
    # the re-ask shows the model its refused reply
    assert judge_server.requests[2]["messages"][-2] == {
        "role": "assistant",
        "content": '{"score": 0.4, "reason": "cut sho',
    }
    # and so through LangChain, whose SDK raises the 400 with the response on the error
    judge_server.reply(refused('```json\n{"score": 0.2, "reason": "via langchain"}\n```'))
    reply = ask(_chat_openai(judge_server))
    assert reply.parsed == Verdict(score=0.2, reason="via langchain")  # type: ignore[attr-defined]


def test_judge_down_raises_unavailable_with_the_cause(judge_server: JudgeServer) -> None:
    for _ in range(4):
        judge_server.reply(Reply(status=503, content="overloaded"))
    with pytest.raises(JudgeUnavailableError, match="gave up after 4 attempts; last: HTTP 503"):
        ask(judge(judge_server))
    nobody = OpenAIJudge(
        "m", base_url="http://127.0.0.1:9/v1", cache=None, max_retries=1, timeout=0.5
    )
    with pytest.raises(JudgeUnavailableError, match="connection error"):
        ask(nobody)


def test_malformed_then_truncated_then_good_reply_is_reasked(judge_server: JudgeServer) -> None:
    judge_server.reply(
        Reply(body="<html>not json</html>"),
        Reply('{"score": 0.9, "reason": "cut o'),
        Reply('Here you go:\n```json\n{"score": 0.9, "reason": "good"}\n```'),
    )
    j = judge(judge_server)
    reply = ask(j)
    assert reply.parsed == Verdict(score=0.9, reason="good")  # type: ignore[attr-defined]
    assert reply.attempts == 3 and j.stats.reasks == 2  # type: ignore[attr-defined]
    reask = judge_server.requests[2]["messages"]
    assert reask[-2] == {"role": "assistant", "content": '{"score": 0.9, "reason": "cut o'}
    assert "could not be used" in reask[-1]["content"]


# a reasoning model's reply when the server leaves its thinking in the content: a draft
# object and braces in the reasoning, the answer after it
THINKING = (
    '<think>\nThe format is {"score": ..., "reason": ...}. The agent answered, so maybe '
    '{"score": 0.9, "reason": "draft"}? No: it skipped the refund.\n</think>\n\n'
)


@pytest.mark.parametrize(
    "content",
    [
        THINKING + '{"score": 0.4, "reason": "skipped the refund"}',
        # DeepSeek-R1's template opens the block in the prompt: the reply holds its end only
        THINKING.removeprefix("<think>") + '{"score": 0.4, "reason": "skipped the refund"}',
        THINKING.replace("think>", "THINKING>")
        + '```json\n{"score": 0.4, "reason": "skipped the refund"}\n```',
    ],
    ids=["think-block", "closing-tag-only", "thinking-then-fence"],
)
def test_a_reasoning_models_thinking_is_not_read_as_its_answer(
    judge_server: JudgeServer, content: str
) -> None:
    judge_server.reply(Reply(content))
    j = judge(judge_server)
    reply = ask(j)
    assert reply.parsed == Verdict(score=0.4, reason="skipped the refund")  # type: ignore[attr-defined]
    assert (len(judge_server.requests), j.stats.reasks) == (1, 0)


def test_a_reply_that_stops_while_thinking_is_truncated(judge_server: JudgeServer) -> None:
    """Its draft object is never the answer. Cut at the token limit, the advice is to raise
    it; cut otherwise, the judge is asked again."""
    thinking = '<think>\nMaybe {"score": 0.9, "reason": "draft"}, but'
    judge_server.reply(Reply(thinking, finish_reason="length", usage=(100, 512)))
    with pytest.raises(JudgeParseError) as failure:
        ask(judge(judge_server))
    assert str(failure.value) == (
        "unparsable after 1 replies: the reply stopped at the token limit before it was "
        "complete (the reply is truncated: it stops inside its <think> reasoning, before the "
        "answer); a reasoning model spends the limit thinking before it answers: raise "
        "max_tokens (--judge-max-tokens)"
    )
    judge_server.reply(Reply(thinking), Reply('{"score": 0.4, "reason": "skipped"}'))
    j = judge(judge_server)
    assert ask(j).parsed == Verdict(score=0.4, reason="skipped")  # type: ignore[attr-defined]
    assert (
        "stops inside its <think> reasoning" in judge_server.requests[-1]["messages"][-1]["content"]
    )
    with pytest.raises(ReplyError, match="holds reasoning and no answer after it"):
        parse_reply("<think>The agent did well.</think>", Verdict)
    # an answer that mentions the tags is an answer
    mentions = '{"score": 1, "reason": "it printed <think> and </think> tags"}'
    assert parse_reply(mentions, Verdict).reason == "it printed <think> and </think> tags"


# how Mistral's Magistral answers through its OpenAI-compatible API: content parts, its
# reasoning (a JSON draft in it) in a part of its own
MAGISTRAL = [
    {"type": "thinking", "thinking": [{"type": "text", "text": '{"score": 0.9, "reason": "x"}'}]},
    {"type": "text", "text": '{"score": 0.4, '},
    {"type": "text", "text": '"reason": "skipped the refund"}'},
]


@pytest.mark.parametrize("client", ["openai", "langchain"])
def test_a_reply_in_content_parts_is_read_without_its_reasoning(
    judge_server: JudgeServer, client: str
) -> None:
    judge_server.reply(Reply(MAGISTRAL))
    j = judge(judge_server) if client == "openai" else _chat_openai(judge_server)
    reply = ask(j)
    assert reply.parsed == Verdict(score=0.4, reason="skipped the refund")  # type: ignore[attr-defined]
    assert len(judge_server.requests) == 1
    assert reply_text([{"type": "reasoning", "text": "{}"}, "plain "]) == "plain "
    assert reply_text({"score": 1}) == '{"score": 1}'  # an object where text belongs


def test_still_unparsable_raises_with_the_raw_reply(judge_server: JudgeServer) -> None:
    judge_server.reply("no", "still no", "never")
    with pytest.raises(JudgeParseError, match="unparsable after 3 replies") as failure:
        ask(judge(judge_server))
    assert failure.value.raw_reply == "never"


def test_server_without_json_schema_falls_back_to_json_mode(judge_server: JudgeServer) -> None:
    judge_server.unsupported_formats = {"json_schema"}
    judge_server.reply({"score": 0.7, "reason": "json mode"}, {"score": 0.6, "reason": "again"})
    j = judge(judge_server)
    assert ask(j).parsed.score == 0.7  # type: ignore[attr-defined]
    assert [r.get("response_format", {}).get("type") for r in judge_server.requests] == [
        "json_schema",
        "json_object",
    ]
    assert ask(j, request("second")).parsed.score == 0.6  # type: ignore[attr-defined]
    assert judge_server.requests[-1]["response_format"]["type"] == "json_object"  # remembered


def test_a_reasoning_model_is_asked_with_the_parameters_it_takes(
    judge_server: JudgeServer,
) -> None:
    # OpenAI's o-series and gpt-5 refuse max_tokens and a temperature other than 1 with an
    # HTTP 400 each: the judge asks again without them, and remembers it
    judge_server.reasoning_model = True
    judge_server.reply({"score": 0.7, "reason": "fine"}, {"score": 0.4, "reason": "again"})
    j = judge(judge_server, api_key="sk-test-0123456789abcdef")
    asyncio.run(j.preflight())
    assert ask(j).parsed == Verdict(score=0.7, reason="fine")  # type: ignore[attr-defined]
    limits = [
        ("max_tokens" in p, p.get("max_completion_tokens"), p.get("temperature"))
        for p in judge_server.probes
    ]
    assert limits == [(True, None, 0.0), (False, 16, 0.0), (False, 16, None)]
    # the preflight found the shape: scoring asks once, its limit covering the reasoning
    [sent] = judge_server.requests
    assert "max_tokens" not in sent and "temperature" not in sent
    assert sent["max_completion_tokens"] == 512 + 8192
    # another judge on the same endpoint and model starts from what was found
    other = judge(judge_server, max_tokens=300)
    assert ask(other, request("second")).parsed.score == 0.4  # type: ignore[attr-defined]
    assert judge_server.requests[-1]["max_completion_tokens"] == 300  # the user's own limit
    assert len(judge_server.requests) == 2


def test_a_reasoning_model_is_given_the_time_it_reasons_in(
    judge_server: JudgeServer, monkeypatch: pytest.MonkeyPatch
) -> None:
    # 20 s a call suits a verdict; a reasoning model thinks for thousands of tokens first,
    # and three timeouts in a row stop a judge. Here 0.5 s and 3 s stand for 20 and 180 s
    from agenteval_core.judges import _openai

    monkeypatch.setattr(_openai, "DEFAULT_TIMEOUT", 0.5)
    monkeypatch.setattr(_openai, "REASONING_TIMEOUT", 3.0)
    answer = json.dumps({"score": 0.6, "reason": "thought it over"})
    judge_server.reply(Reply(answer, delay=1.0))  # answers in a second
    plain = OpenAIJudge("judge-model", base_url=judge_server.base_url, cache=None)
    assert plain.timeout == 0.5
    with pytest.raises(JudgeUnavailableError, match="timed out"):
        ask(plain)
    judge_server.reasoning_model = True  # refuses max_tokens: found to be a reasoning model
    judge_server.reply(Reply(answer, delay=1.0))
    thinking = OpenAIJudge("reasoner", base_url=judge_server.base_url, cache=None)
    assert thinking.timeout == 0.5  # not known yet
    reply = ask(thinking)
    assert reply.parsed == Verdict(score=0.6, reason="thought it over")  # type: ignore[attr-defined]
    assert thinking.timeout == 3.0
    # a timeout given is kept, reasoning model or not
    given = OpenAIJudge("reasoner", base_url=judge_server.base_url, cache=None, timeout=0.5)
    assert given.timeout == 0.5


def test_gpt_5_mini_is_priced_with_its_reasoning_tokens_as_output(
    judge_server: JudgeServer,
) -> None:
    # its reasoning tokens are in completion_tokens: 1,000 in, 2,000 out (most of them
    # reasoning) cost 1,000 × $0.25/M + 2,000 × $2.00/M = $0.00425
    judge_server.reply(Reply(json.dumps({"score": 1.0, "reason": "ok"}), usage=(1000, 2000)))
    j = OpenAIJudge("gpt-5-mini", base_url=judge_server.base_url, cache=None, budget_usd=1.0)
    assert ask(j).cost_usd == pytest.approx(0.00425)  # type: ignore[attr-defined]


def test_prompt_tokens_read_from_the_providers_cache_are_priced_as_cached(
    judge_server: JudgeServer,
) -> None:
    # OpenAI reads a repeated prompt prefix (a re-ask's, a long trace judged again) from its
    # cache and bills it at the cached rate: 2,000 in, 1,536 of them cached, 50 out on gpt-4.1-mini
    # cost 464 × $0.40/M + 1,536 × $0.10/M + 50 × $1.60/M = $0.0004192, not the $0.00088 of
    # every prompt token at the full price
    judge_server.reply(
        Reply(json.dumps({"score": 1.0, "reason": "ok"}), usage=(2000, 50), cached=1536),
        Reply(json.dumps({"score": 1.0, "reason": "ok"}), usage=(2000, 50), cached=0),
    )
    j = OpenAIJudge("gpt-4.1-mini", base_url=judge_server.base_url, cache=None, budget_usd=1.0)
    first = ask(j)
    assert (first.input_tokens, first.cached_input_tokens, first.output_tokens) == (2000, 1536, 50)  # type: ignore[attr-defined]
    assert first.cost_usd == pytest.approx(0.0004192)  # type: ignore[attr-defined]
    # nothing cached: the full price, 2,000 × $0.40/M + 50 × $1.60/M
    assert ask(j, request("again")).cost_usd == pytest.approx(0.00088)  # type: ignore[attr-defined]
    assert j.stats.spent_usd == pytest.approx(0.0004192 + 0.00088)
    # a price without a cached rate bills cached tokens as input: (2,000 × 1 + 50 × 2) / 1M
    judge_server.reply(
        Reply(json.dumps({"score": 1.0, "reason": "ok"}), usage=(2000, 50), cached=1536)
    )
    mine = judge(judge_server, prices={"judge-model": (1.0, 2.0)})
    assert ask(mine).cost_usd == pytest.approx(0.0021)  # type: ignore[attr-defined]


@pytest.mark.parametrize(
    "price", [(1.0,), (1.0, "2"), (1.0, -2.0), (1.0, float("nan")), "cheap", (1, 2, 3, 4)]
)
def test_a_price_that_is_no_price_is_refused_when_the_judge_is_made(price: object) -> None:
    # (1.0,) was taken, and every judged result then ended in an IndexError of the cost
    with pytest.raises(JudgeConfigError) as refused:
        OpenAIJudge("judge-model", base_url="http://127.0.0.1:9", prices={"judge-model": price})  # type: ignore[dict-item]
    assert str(refused.value) == (
        f"the price of 'judge-model' is {price!r}; give USD per million tokens as (input, "
        "output), or (input, output, cached input), each a number >= 0"
    )


def test_a_judged_result_counts_its_cached_prompt_tokens(judge_server: JudgeServer) -> None:
    # the same through a metric and LangChain's ChatOpenAI, which reports the cached tokens
    # as usage_metadata's input_token_details.cache_read: gpt-4o-mini, 1,200 in (1,024
    # cached), 40 out: 176 × $0.15/M + 1,024 × $0.075/M + 40 × $0.60/M = $0.0001272
    judge_server.reply(
        Reply(json.dumps({"score": 0.9, "reason": "sure"}), usage=(1200, 40), cached=1024)
    )
    result = create_metric("confidence", judge=_chat_openai(judge_server)).measure(
        Trace(input="What is 2 + 2?", output="4")
    )
    assert result.score == 0.9
    assert (result.input_tokens, result.output_tokens) == (1200, 40)
    assert result.metadata["cached_input_tokens"] == 1024
    assert result.cost_usd == pytest.approx(0.0001272)


def test_a_reply_cut_at_the_token_limit_says_so_without_asking_again(
    judge_server: JudgeServer,
) -> None:
    judge_server.reply(Reply("", finish_reason="length", usage=(100, 512)))
    j = judge(judge_server)
    with pytest.raises(JudgeParseError) as failure:
        ask(j)
    assert str(failure.value) == (
        "unparsable after 1 replies: the reply stopped at the token limit before it was "
        "complete (the reply is empty); a reasoning model spends the limit thinking before it "
        "answers: raise max_tokens (--judge-max-tokens)"
    )
    assert len(judge_server.requests) == 1 and j.stats.reasks == 0
    assert failure.value.usage.output_tokens == 512  # the tokens it spent still count


@pytest.mark.parametrize("client", ["openai", "langchain"])
def test_a_reply_the_provider_filtered_or_cut_is_not_asked_again(
    judge_server: JudgeServer, client: str
) -> None:
    """Azure OpenAI's content filter ends a reply with finish_reason content_filter (no
    content, or part of it): the same prompt is filtered again. A reply cut at the token
    limit would stop at the same place. Through LangChain too, which passes the finish
    reason on in response_metadata."""

    def make() -> OpenAIJudge | LangChainJudge:
        return judge(judge_server) if client == "openai" else _chat_openai(judge_server)

    judge_server.reply(Reply(None, finish_reason="content_filter"))
    with pytest.raises(JudgeParseError) as failure:
        ask(make())
    assert str(failure.value) == (
        "unparsable after 1 replies: the provider's content filter withheld the reply (finish "
        "reason content_filter); asking again gives the same: judge these traces with another "
        "model or provider"
    )
    judge_server.reply(Reply('{"score": 0.9, "rea', finish_reason="length"))
    with pytest.raises(JudgeParseError, match="raise max_tokens"):
        ask(make())
    assert len(judge_server.requests) == 2
    # the filter may refuse the prompt instead: Azure's HTTP 400 content_filter. It read as
    # an unsupported request, and a replay ended saying to change the output mode or model
    filtered_prompt = {
        "message": "The response was filtered due to the prompt triggering Azure OpenAI's "
        "content management policy. Please modify your prompt and retry.",
        "type": None,
        "param": "prompt",
        "code": "content_filter",
        "status": 400,
        "innererror": {"code": "ResponsibleAIPolicyViolation"},
    }
    judge_server.reply(Reply(status=400, body=json.dumps({"error": filtered_prompt})))
    with pytest.raises(JudgeParseError) as failure:
        ask(make())
    assert str(failure.value) == (
        "unparsable after 1 replies: the provider's content filter refused the prompt (HTTP "
        "400 content_filter: The response was filtered due to the prompt triggering Azure "
        "OpenAI's content management policy); asking again gives the same: judge these traces "
        "with another model or provider"
    )
    assert len(judge_server.requests) == 3


def test_a_model_that_declines_to_answer_says_why_without_asking_again(
    judge_server: JudgeServer,
) -> None:
    # OpenAI's structured outputs: no content, the refusal beside it
    judge_server.reply(Reply(None, refusal="I'm sorry, I can't assist with that request."))
    j = judge(judge_server)
    with pytest.raises(JudgeParseError) as failure:
        ask(j)
    assert str(failure.value) == (
        "unparsable after 1 replies: the judge model declined to answer: "
        "I'm sorry, I can't assist with that request."
    )
    assert len(judge_server.requests) == 1 and j.stats.reasks == 0


def test_a_placeholder_api_key_is_not_scrubbed_from_error_texts(
    judge_server: JudgeServer,
) -> None:
    # vLLM's docs use "EMPTY", Ollama's "ollama": no secret, and words hold them
    judge_server.reply(Reply(status=404, content="model not found, try: ollama pull llama3"))
    with pytest.raises(JudgeUnsupportedRequestError, match="try: ollama pull llama3"):
        ask(judge(judge_server, api_key="ollama"))
    secret = "sk-proj-abcdefghijklmnop0123456789"
    judge_server.reply(Reply(status=404, content=f"key {secret} has no access"))
    with pytest.raises(JudgeUnsupportedRequestError, match=r"key \[REDACTED:api-key\] has"):
        ask(judge(judge_server, api_key=secret))


def test_a_base_url_with_a_query_keeps_it_after_each_path(judge_server: JudgeServer) -> None:
    # Azure OpenAI's classic endpoints: a deployment's URL with ?api-version=..., the key in
    # an api-key header. The path was appended after the query, so every call hit the root
    base = f"{judge_server.base_url}?api-version=2024-10-21"
    judge_server.reply({"score": 0.5, "reason": "ok"})
    secret = "azure-key-0123456789abcdef"
    j = OpenAIJudge("gpt-4o", base_url=base, headers={"api-key": secret}, cache=None)
    asyncio.run(j.preflight())
    assert ask(j).parsed.score == 0.5  # type: ignore[attr-defined]
    HTTPEmbedder("emb", base_url=base).embed(["aa"])
    assert judge_server.paths == [
        "/v1/models?api-version=2024-10-21",
        "/v1/chat/completions?api-version=2024-10-21",  # the output mode's probe
        "/v1/chat/completions?api-version=2024-10-21",
        "/v1/embeddings?api-version=2024-10-21",
    ]
    judge_server.reply(Reply(status=400, content=f"bad request for key {secret}"))
    with pytest.raises(JudgeUnsupportedRequestError) as refused:
        ask(j, request("again"))
    assert secret not in str(refused.value) and "key [REDACTED:api-key]" in str(refused.value)


def test_cache_hits_make_no_call_and_prompt_versions_miss(
    judge_server: JudgeServer, tmp_path: Path
) -> None:
    cache = JudgeCache(tmp_path / "judge.sqlite")
    judge_server.reply({"score": 0.4, "reason": "first"}, {"score": 0.9, "reason": "new prompt"})
    j = judge(judge_server, cache=cache)
    first = ask(j)
    again = ask(judge(judge_server, cache=JudgeCache(tmp_path / "judge.sqlite")))
    assert again.parsed == first.parsed and again.cached and again.cost_usd == 0.0  # type: ignore[attr-defined]
    assert len(judge_server.requests) == 1
    changed = ask(j, request(version="v2"))
    assert changed.parsed.reason == "new prompt" and len(judge_server.requests) == 2  # type: ignore[attr-defined]
    assert cache.clear() == 2 and len(cache) == 0


class _DiskWaitingCache(JudgeCache):
    """A cache whose disk answers only once the event loop has run something else: were
    SQLite called on the loop, nothing else could run and the wait would time out."""

    def __init__(self, path: Path) -> None:
        super().__init__(path)
        self.waiting, self.disk = threading.Event(), threading.Event()
        self.waited: list[bool] = []

    def _wait_for_the_disk(self) -> None:
        self.waiting.set()
        self.waited.append(self.disk.wait(5))
        self.disk.clear()

    def get(self, key: str) -> dict[str, object] | None:
        self._wait_for_the_disk()
        return super().get(key)

    def put(self, key: str, value: dict[str, object]) -> None:
        self._wait_for_the_disk()
        super().put(key, value)


def test_the_cache_never_stalls_the_event_loop(judge_server: JudgeServer, tmp_path: Path) -> None:
    judge_server.reply({"score": 0.4, "reason": "first"})
    cache = _DiskWaitingCache(tmp_path / "judge.sqlite")
    j = judge(judge_server, cache=cache)

    async def main() -> object:
        asked = asyncio.create_task(j.judge(request()))
        while not asked.done():  # the loop runs this while the cache waits on its disk
            if cache.waiting.is_set():
                cache.waiting.clear()
                cache.disk.set()
            await asyncio.sleep(0)
        return asked.result()

    reply = asyncio.run(main())
    assert reply.parsed == Verdict(score=0.4, reason="first")  # type: ignore[attr-defined]
    assert cache.waited == [True, True]  # the lookup and the store, each off the loop
    assert len(cache) == 1


def test_a_cache_another_process_holds_locked_costs_a_call_never_a_result(
    judge_server: JudgeServer, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    # another replay (another worker) writing to the same cache held its lock past SQLite's
    # 5 s wait: the answer, paid for, became "OperationalError: database is locked"
    import sqlite3

    judge_server.reply({"score": 0.4, "reason": "first"}, {"score": 0.7, "reason": "again"})
    cache = JudgeCache(tmp_path / "judge.sqlite")
    other = sqlite3.connect(tmp_path / "judge.sqlite", isolation_level=None)
    other.execute("BEGIN IMMEDIATE")  # a writer that does not let go
    j = judge(judge_server, cache=cache)
    with caplog.at_level("WARNING", logger="agenteval"):
        reply = ask(j)
    assert reply.parsed == Verdict(score=0.4, reason="first")  # type: ignore[attr-defined]
    assert cache.errors == 1 and len(caplog.records) == 1
    assert caplog.records[0].getMessage() == (
        f"agenteval: judge cache {tmp_path / 'judge.sqlite'}: database is locked; answers "
        "go on being asked of the judge and those it cannot keep are left out (further "
        "refusals are counted in the cache's errors, not logged)"
    )
    other.execute("ROLLBACK")
    other.close()
    assert len(cache) == 0  # the answer was not kept: asked again, and kept now
    again = ask(j)
    assert again.parsed == Verdict(score=0.7, reason="again") and len(cache) == 1  # type: ignore[attr-defined]
    assert len(judge_server.requests) == 2 and cache.errors == 1


def test_a_cache_that_cannot_be_opened_says_where_and_what_to_do(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # a container whose home is read-only: the judge failed to start with
    # "agenteval: error: /home/app/.cache: read-only file system", naming no cache
    from click.testing import CliRunner

    from agenteval_core.cli import cli

    blocked = tmp_path / "a-file"
    blocked.write_text("")
    monkeypatch.setenv("AGENTEVAL_CACHE_DIR", str(blocked / "cache"))
    said = (
        f"the judge cache {blocked / 'cache' / 'judge.sqlite'} cannot be opened (Not a "
        "directory): set AGENTEVAL_CACHE_DIR to a writable directory, or judge without a "
        "cache (--no-cache, cache=None)"
    )
    with pytest.raises(JudgeConfigError) as refused:
        OpenAIJudge("gpt-4o-mini", api_key="sk-test")
    assert str(refused.value) == said
    capture = tmp_path / "c.jsonl"
    capture.write_text(Trace(input="q", output="a").model_dump_json() + "\n")
    done = CliRunner().invoke(
        cli, ["replay", str(capture), "--metrics", "confidence", "--judge-model", "gpt-4o-mini"]
    )
    assert (done.exit_code, done.output) == (2, f"agenteval: error: {said}\n")


def test_rate_limit_is_honoured(judge_server: JudgeServer) -> None:
    judge_server.responder = lambda _: Reply(json.dumps({"score": 1, "reason": "ok"}))
    j = judge(judge_server, requests_per_period=5, period=0.5)

    async def burst() -> None:
        await asyncio.gather(*(j.judge(request(f"q{i}")) for i in range(10)))

    asyncio.run(burst())
    # 10 requests at 5 per 0.5 s: the sixth cannot start before 0.5 s after the first
    arrivals = sorted(judge_server.arrivals)
    assert arrivals[5] - arrivals[0] >= 0.45


def test_langchain_chat_model_judge() -> None:
    model = FakeListChatModel(responses=["not json", '{"score": 0.25, "reason": "weak"}'])
    j = LangChainJudge(model, cache=None)
    reply = ask(j)
    assert reply.parsed == Verdict(score=0.25, reason="weak")  # type: ignore[attr-defined]
    assert reply.model == "FakeListChatModel" and j.stats.reasks == 1  # type: ignore[attr-defined]


def _chat_openai(server: JudgeServer | str, api_key: str = "sk-test-key") -> LangChainJudge:
    """LangChain's ChatOpenAI, the model most LangChain judges use, against ``server``."""
    base_url = server if isinstance(server, str) else server.base_url
    model = ChatOpenAI(model="gpt-4o-mini", base_url=base_url, api_key=api_key, max_retries=0)
    return LangChainJudge(model, cache=None)


def test_a_chat_openai_judge_answers_every_call_from_sync_code(judge_server: JudgeServer) -> None:
    # langchain-openai keeps one HTTP client per process, bound to the event loop of its
    # first call; each sync call here (as metric.measure makes) runs on a new loop, and
    # every other one used to fail with "Connection error."
    judge_server.reply(*[{"score": score, "reason": "ok"} for score in (0.25, 0.5, 0.75)])
    j = _chat_openai(judge_server)
    scores = [ask(j, request(f"q{i}")).parsed.score for i in range(3)]  # type: ignore[attr-defined]
    assert scores == [0.25, 0.5, 0.75]
    assert [r["model"] for r in judge_server.requests] == ["gpt-4o-mini"] * 3
    assert [r["messages"][-1]["content"] for r in judge_server.requests] == ["q0", "q1", "q2"]


@pytest.mark.parametrize(
    ("reply", "error", "words"),
    [
        (
            Reply(status=429, content="Rate limit reached for gpt-4o-mini"),
            JudgeUnavailableError,
            "RateLimitError: Error code: 429",
        ),
        (
            Reply(status=503, content="overloaded"),
            JudgeUnavailableError,
            "Error code: 503",
        ),
        (
            Reply(status=400, content="This model's maximum context length is 128000 tokens"),
            JudgeContextOverflowError,
            "maximum context length is 128000 tokens",
        ),
        (  # the server echoes the key: it never reaches a result or a report
            Reply(status=401, content="Incorrect API key provided: sk-test-0123456789"),
            JudgeUnsupportedRequestError,
            "Incorrect API key provided: [REDACTED:api-key]",
        ),
    ],
)
def test_a_langchain_model_s_errors_are_judge_errors_of_their_kind(
    judge_server: JudgeServer, reply: Reply, error: type[Exception], words: str
) -> None:
    # they used to escape as the SDK's own errors: each result a "metric_error" with a
    # traceback logged as a bug, the key in its text, and no advice to replay an outage
    judge_server.reply(reply)
    with pytest.raises(error) as raised:
        ask(_chat_openai(judge_server, api_key="sk-test-0123456789"))
    assert type(raised.value) is error
    assert str(raised.value).startswith("gpt-4o-mini: ") and words in str(raised.value)
    assert "sk-test-0123456789" not in str(raised.value)
    assert raised.value.usage.calls == 1  # type: ignore[attr-defined]


def test_a_langchain_model_that_cannot_connect_is_unavailable() -> None:
    with socket.socket() as closed:  # a port where nothing listens
        closed.bind(("127.0.0.1", 0))
        port = closed.getsockname()[1]
    with pytest.raises(JudgeUnavailableError, match=r"^gpt-4o-mini: \w*ConnectionError: "):
        ask(_chat_openai(f"http://127.0.0.1:{port}/v1"))


def test_parser_rejects_what_it_cannot_read() -> None:
    assert parse_reply('{"score": 1, "reason": "x"}', Verdict).score == 1
    with pytest.raises(ReplyError, match="truncated: its JSON object never closes"):
        parse_reply('{"score": 1, "reason": "x"', Verdict)
    with pytest.raises(ReplyError, match="not JSON: it holds no"):
        parse_reply("Yes, the agent did well.", Verdict)
    with pytest.raises(ReplyError, match="Expecting ',' delimiter at line 1, column 13"):
        parse_reply('{"score": 1 "reason": "x"}', Verdict)
    # a raw newline inside a string: the complete object the model meant, not "truncated"
    assert parse_reply('{"score": 1, "reason": "line one\nline two"}', Verdict).reason == (
        "line one\nline two"
    )
    with pytest.raises(ReplyError, match="not an object"):
        parse_reply("[1, 2]", Verdict)
    with pytest.raises(ReplyError, match="score"):
        parse_reply('{"reason": "missing score"}', Verdict)


@pytest.mark.parametrize("score", [True, "0.8"], ids=["boolean", "string"])
def test_a_score_that_is_not_a_number_is_asked_again_then_an_error(
    judge_server: JudgeServer, score: object
) -> None:
    # JSON true would read as 1.0 and "0.8" as 0.8 in lax validation: neither is a score
    judge_server.reply(*[{"score": score, "reason": "yes"}] * 3)
    j = judge(judge_server, max_parse_retries=2)
    with pytest.raises(JudgeParseError, match="score: Input should be a valid number"):
        ask(j)
    assert len(judge_server.requests) == 3 and j.stats.reasks == 2


def test_retry_after_is_honoured_up_to_its_maximum_and_every_retry_is_logged(
    judge_server: JudgeServer, caplog: pytest.LogCaptureFixture
) -> None:
    judge_server.reply(
        Reply(status=429, content="slow down", headers={"Retry-After": "30"}),
        Reply(status=503, content="busy", headers={"Retry-After": "600"}),
        {"score": 1, "reason": "ok"},
    )
    j = judge(judge_server)
    waits: list[float] = []

    async def record(seconds: float) -> None:  # the waits are asserted, not slept
        waits.append(seconds)

    j.traffic.sleep = record  # type: ignore[method-assign]
    with caplog.at_level("INFO", logger="agenteval"):
        reply = ask(j)
    assert reply.parsed.score == 1.0  # type: ignore[attr-defined]
    assert waits == [30.0, 120.0]  # 30 s as asked (the backoff cap is 20 s); 600 s capped
    retries = [r.getMessage() for r in caplog.records if "retry" in r.getMessage()]
    url = f"{judge_server.base_url}/chat/completions"
    assert retries == [
        f"agenteval: judge request failed (HTTP 429 from {url}: "
        + json.dumps({"error": {"message": "slow down"}})
        + "); retry 1 of 3 in 30.0 s",
        f"agenteval: judge request failed (HTTP 503 from {url}: "
        + json.dumps({"error": {"message": "busy"}})
        + "); retry 2 of 3 in 120.0 s",
    ]


def test_retry_after_ms_is_read_before_the_rounded_retry_after(judge_server: JudgeServer) -> None:
    # Azure OpenAI sends both (Retry-After rounded to whole seconds); a gateway may send the
    # milliseconds alone; a garbled value falls back to Retry-After
    judge_server.reply(
        Reply(status=429, content="slow", headers={"retry-after-ms": "250", "Retry-After": "1"}),
        Reply(status=429, content="slow", headers={"retry-after-ms": "1500"}),
        Reply(status=429, content="slow", headers={"retry-after-ms": "soon", "Retry-After": "2"}),
        {"score": 1, "reason": "ok"},
    )
    j = judge(judge_server)
    waits: list[float] = []

    async def record(seconds: float) -> None:
        waits.append(seconds)

    j.traffic.sleep = record  # type: ignore[method-assign]
    assert ask(j).parsed.score == 1.0  # type: ignore[attr-defined]
    assert waits == [0.25, 1.5, 2.0]


GEMINI_BAD_KEY = json.dumps(
    [
        {
            "error": {
                "code": 400,
                "message": "API key not valid. Please pass a valid API key.",
                "status": "INVALID_ARGUMENT",
                "details": [
                    {
                        "@type": "type.googleapis.com/google.rpc.ErrorInfo",
                        "reason": "API_KEY_INVALID",
                        "domain": "googleapis.com",
                    }
                ],
            }
        }
    ]
)


def _closed_port() -> int:
    import socket

    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])  # closed again when the block ends


@pytest.mark.parametrize(
    ("options", "env", "message"),
    [
        (
            [],
            {},
            "agenteval: error: no API key for https://api.openai.com/v1; "
            "set OPENAI_API_KEY or pass --judge-api-key",
        ),
        (
            ["--judge-base-url", "notaurl"],
            {},
            "agenteval: error: judge base URL 'notaurl' is not an http(s) URL; set "
            "--judge-base-url (or OPENAI_BASE_URL) to an API root such as http://localhost:8000/v1",
        ),
        (
            ["--judge-base-url", "http://127.0.0.1:{port}/v1"],
            {},
            "agenteval: error: cannot reach the judge at http://127.0.0.1:{port}/v1 (ConnectError); "
            "check --judge-base-url and that the server is running",
        ),
        (
            ["--judge-base-url", "{server}"],
            {"status": "401"},
            "agenteval: error: the judge at {server} rejected the API key (HTTP 401); "
            "set OPENAI_API_KEY or pass --judge-api-key",
        ),
        (
            ["--judge-base-url", "{server}"],
            {"status": "403"},
            "agenteval: error: the judge at {server} rejected the API key (HTTP 403); "
            "set OPENAI_API_KEY or pass --judge-api-key",
        ),
        (
            # Gemini's OpenAI-compatible API refuses a bad key with a 400, a list body
            ["--judge-base-url", "{server}"],
            {"status": "400", "body": GEMINI_BAD_KEY},
            "agenteval: error: the judge at {server} rejected the API key (HTTP 400: API key "
            "not valid. Please pass a valid API key.); set OPENAI_API_KEY or pass "
            "--judge-api-key",
        ),
        (
            ["--judge-base-url", "{root}"],
            {},
            "agenteval: error: the judge at {root} has no API there (HTTP 404), but "
            "{server} answers; set --judge-base-url to {server}",
        ),
    ],
    ids=["no-key", "bad-url", "refused", "401", "403", "400-bad-key", "404-missing-v1"],
)
def test_a_misconfigured_judge_stops_replay_before_scoring(
    judge_server: JudgeServer,
    tmp_path: Path,
    options: list[str],
    env: dict[str, str],
    message: str,
) -> None:
    import os
    import subprocess
    import sys

    from agenteval_core import CaptureWriter, Trace

    capture = tmp_path / "c.jsonl"
    with CaptureWriter(capture) as writer:
        writer.write(Trace(input="q", output="a"))
    judge_server.models_status = int(env.get("status", 200))
    judge_server.models_body = env.get("body")
    port = _closed_port()

    def fill(text: str) -> str:
        root = judge_server.base_url.removesuffix("/v1")
        return (
            text.replace("{port}", str(port))
            .replace("{server}", judge_server.base_url)
            .replace("{root}", root)
        )

    environment = {
        k: v for k, v in os.environ.items() if k not in ("OPENAI_API_KEY", "OPENAI_BASE_URL")
    }
    command = [sys.executable, "-m", "agenteval_core.cli", "replay", str(capture), "-q"]
    command += ["--metrics", "confidence", "--judge-model", "gpt-4o-mini", "--no-cache"]
    done = subprocess.run(
        command + [fill(option) for option in options],
        capture_output=True,
        text=True,
        env={**environment, "AGENTEVAL_CACHE_DIR": str(tmp_path)},
        timeout=30,
    )
    assert done.returncode == 2
    assert done.stderr.strip() == fill(message)
    assert judge_server.requests == []  # nothing was scored, no judge call was made


def test_a_judge_that_stops_answering_mid_run_ends_replay_non_zero(
    judge_server: JudgeServer, tmp_path: Path
) -> None:
    from click.testing import CliRunner

    from agenteval_core import CaptureWriter, Trace
    from agenteval_core.cli import cli

    capture, results = tmp_path / "c.jsonl", tmp_path / "r.jsonl"
    with CaptureWriter(capture) as writer:
        for index in range(3):
            writer.write(Trace(input=f"q{index}", output=f"a{index}"))
    answered: list[int] = []

    def first_only(request: dict[str, object]) -> Reply:
        answered.append(1)
        if len(answered) == 1:
            return Reply(json.dumps({"score": 0.9, "reason": "ok"}))
        return Reply(status=503, content="gone", headers={"Retry-After": "0"})

    judge_server.responder = first_only
    command = ["replay", str(capture), "--metrics", "confidence", "--json", str(results)]
    command += ["--judge-model", "judge-model", "--judge-base-url", judge_server.base_url]
    command += ["--judge-api-key", "k", "--judge-concurrency", "1", "--no-cache", "-q"]
    done = CliRunner().invoke(cli, command)
    assert done.exit_code == 1
    assert done.output.strip().endswith(
        f"agenteval: error: judge unavailable: 2 result(s) not scored (see the table); "
        f"the rest is in {results}; replay again to score them (raise --judge-timeout for a "
        "slow server)"
    )
    lines = [json.loads(line) for line in results.read_text().splitlines()]
    scores = [line["results"][0]["score"] for line in lines]
    assert scores == [0.9, None, None]  # what was scored was saved
