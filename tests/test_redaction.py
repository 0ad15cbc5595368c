"""Secrets planted in tool arguments, prompts, outputs and metadata never reach the capture,
the results or a judge; oversized strings are cut with a visible marker and their size."""

from __future__ import annotations

import base64
import json
from collections.abc import Iterator
from pathlib import Path

import pytest
from agenteval_otel import OTelExporter, OTelSink, otlp_json
from hypothesis import given, settings
from hypothesis import strategies as st
from judge_server import JudgeServer, Reply
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

from agenteval_core import (
    AgentStep,
    OnlineEvaluator,
    Redactor,
    ToolCall,
    ToolSpec,
    Trace,
    configure_redaction,
    create_metric,
    replay,
)
from agenteval_core.judges import OpenAIJudge
from agenteval_core.report._report import load_results, render_html

OPENAI = "sk-proj-" + "A1b2C3d4E5f6G7h8I9j0K1l2M3n4"
ANTHROPIC = "sk-ant-api03-" + "Zz9Yy8Xx7Ww6Vv5Uu4Tt3Ss2"
AWS = "AKIA" + "IOSFODNN7EXAMPLE"
BEARER = "Bearer " + "eyJhbGciOiJIUzI1NiJ9.payload.signature"
CUSTOM = "ACME-" + "0042-SECRET-TOKEN"


def planted() -> Trace:
    trace = Trace.from_steps(
        f"Use my key {OPENAI} to call the API",
        [
            AgentStep(
                thought=f"The header is {BEARER}",
                tool_calls=[
                    ToolCall(
                        name="http_get",
                        arguments={
                            "url": "https://api.example",
                            "api_key": "plain-looking-value",
                            "aws": AWS,
                        },
                        result=f"echo {ANTHROPIC}",
                    )
                ],
            ),
            AgentStep(output=f"Done; internal ref {CUSTOM}"),
        ],
        tools=[
            ToolSpec(
                name="http_get",
                parameters={"type": "object", "properties": {"password": {"type": "string"}}},
            )
        ],
        session_id="s",
        metadata={"authorization": "Token abc", "note": f"key {OPENAI}"},
    )
    return trace


SECRETS = [OPENAI, ANTHROPIC, AWS, BEARER.split()[1], "plain-looking-value", "Token abc", CUSTOM]


def test_redactor_replaces_every_planted_secret() -> None:
    redactor = Redactor(patterns={"acme-token": r"ACME-\d{4}-SECRET-TOKEN"})
    text = redactor.trace(planted()).model_dump_json()
    for secret in SECRETS:
        assert secret not in text
    assert "[REDACTED:openai-key]" in text and "[REDACTED:anthropic-key]" in text
    assert "[REDACTED:aws-access-key]" in text and "[REDACTED:bearer-token]" in text
    assert "[REDACTED:acme-token]" in text and '"api_key":"[REDACTED]"' in text
    # tool schemas are not secrets: a parameter named "password" keeps its schema
    assert redactor.trace(planted()).tools[0].parameters == {
        "type": "object",
        "properties": {"password": {"type": "string"}},
    }


def test_oversized_strings_are_cut_with_their_size() -> None:
    redactor = Redactor(max_chars=100)
    trace = redactor.trace(Trace(input="x" * 250, output="short"))
    assert trace.input == "x" * 100 + "…[truncated: 250 characters in all]"
    assert trace.output == "short"


def test_oversized_base64_data_is_replaced_whole_not_cut() -> None:
    # a cut image decodes to nothing: the data goes, its data URL header and size stay
    image = base64.b64encode(b"\x89PNG\r\n" + bytes(range(256)) * 40).decode()
    redactor = Redactor(max_chars=1000)
    url = f"data:image/png;base64,{image}"
    assert redactor.text(url) == (
        f"data:image/png;base64,…[base64 data omitted: {len(image)} characters]"
    )
    wav = f"data:audio/wav;name=clip.wav;base64,{image}"  # parameters before ;base64
    assert redactor.text(wav) == (
        f"data:audio/wav;name=clip.wav;base64,…[base64 data omitted: {len(image)} characters]"
    )
    # bare base64 (LangChain's {"type": "image", "base64": ...}, Anthropic's source.data)
    assert redactor.text(image) == f"…[base64 data omitted: {len(image)} characters]"
    # a run of one letter, or hex, is not taken for binary data: cut as text is
    assert redactor.text("x" * 2000) == "x" * 1000 + "…[truncated: 2000 characters in all]"
    digest = "0123456789abcdef" * 125
    assert redactor.text(digest) == digest[:1000] + "…[truncated: 2000 characters in all]"
    # prose around the data is text: cut, not replaced
    prose = f"see {url}"
    assert redactor.text(prose).endswith(f"…[truncated: {len(prose)} characters in all]")
    # data under the limit is kept whole (a viewer can still show the image)
    small = f"data:image/png;base64,{image[:500]}"
    assert redactor.text(small) == small


def test_nothing_secret_reaches_capture_results_or_judge(
    tmp_path: Path, judge_server: JudgeServer
) -> None:
    judge_server.responder = lambda request: Reply(json.dumps({"score": 1, "reason": "ok"}))
    judge = OpenAIJudge("m", base_url=judge_server.base_url, cache=None)
    evaluator = OnlineEvaluator(
        capture=tmp_path / "c.jsonl",
        results_path=tmp_path / "r.jsonl",
        metrics=["coherence", create_metric("confidence", judge=judge)],
        redactor=Redactor(patterns={"acme-token": r"ACME-\d{4}-SECRET-TOKEN"}),
    )
    evaluator.submit(planted())
    assert evaluator.flush(20)
    evaluator.close()
    written = (tmp_path / "c.jsonl").read_text() + (tmp_path / "r.jsonl").read_text()
    sent = json.dumps(judge_server.requests)
    assert len(judge_server.requests) == 1
    for secret in SECRETS:
        assert secret not in written and secret not in sent


def test_judge_prompts_are_redacted_even_for_foreign_traces(judge_server: JudgeServer) -> None:
    judge_server.responder = lambda request: Reply(json.dumps({"score": 1, "reason": "ok"}))
    judge = OpenAIJudge("m", base_url=judge_server.base_url, cache=None)
    create_metric("confidence", judge=judge).measure(planted())  # not passed through a redactor
    sent = json.dumps(judge_server.requests)
    for secret in (OPENAI, ANTHROPIC, AWS):
        assert secret not in sent


def test_aws_secret_key_assignment() -> None:
    line = 'aws_secret_access_key = "' + "wJalrXUtnFEMI/K7MDENG/bPxRfiCY" + 'EXAMPLEKEY"'
    assert Redactor().text(line) == '[REDACTED:aws-secret-key]"'


def test_reports_and_otel_exports_never_show_secrets(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv("OTEL_SDK_DISABLED", raising=False)
    trace = planted()
    capture = tmp_path / "raw.jsonl"  # written by someone else, unredacted
    capture.write_text(trace.model_dump_json() + "\n")
    results = tmp_path / "results.jsonl"
    replay(capture, ["coherence"], output=results)
    page = render_html(load_results(results, capture))
    memory = InMemorySpanExporter()
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(memory))
    OTelExporter(provider).export(trace)
    exported = json.dumps(otlp_json(memory.get_finished_spans()))
    for secret in (OPENAI, ANTHROPIC, AWS, "plain-looking-value"):
        assert secret not in page and secret not in exported


GITHUB_PAT = (
    "github_pat_" + "11ABCDEFG0123456789_abcdefghijklmnopqrstuvwxyz0123456789ABCDEFGHIJKLMNOPQRS"
)


@pytest.mark.parametrize(
    ("value", "expected"),
    [
        # a secret used as a dictionary key
        ({OPENAI: "cached"}, {"[REDACTED:openai-key]": "cached"}),
        # a fine-grained GitHub token
        (f"token {GITHUB_PAT} here", "token [REDACTED:github-fine-grained-token] here"),
        # secret-named fields inside JSON text (a tool result that is a JSON string)
        (
            '{"user": "ann", "password": "hunter2", "nested": {"api_key": "k-123"}}',
            '{"user": "ann", "password": "[REDACTED]", "nested": {"api_key": "[REDACTED]"}}',
        ),
        # JSON text with nothing secret is left exactly as it was
        ('{"user":  "ann"}', '{"user":  "ann"}'),
    ],
    ids=["key", "github-pat", "json-text", "json-untouched"],
)
def test_secret_shapes_in_keys_json_text_and_tokens(value: object, expected: object) -> None:
    assert Redactor().value(value) == expected


def test_a_judge_never_writes_the_api_key_a_server_echoes(judge_server: JudgeServer) -> None:
    key = "my-own-test-key-1234"  # matches no pattern: only the judge knows it is a secret
    judge_server.reply(
        Reply(status=401, content=f"invalid key {key}"),
        *[Reply(status=503, content=f"retry later, {key}")] * 3,
    )
    judge = OpenAIJudge(
        "judge-model",
        base_url=judge_server.base_url,
        api_key=key,
        cache=None,
        max_retries=2,
        backoff_base=0.01,
    )
    first = create_metric("confidence", judge=judge).measure(planted())
    second = create_metric("confidence", judge=judge).measure(planted())
    for result in (first, second):
        assert result.score is None and key not in (result.error or "")
        assert "[REDACTED:api-key]" in (result.error or "")


GITHUB_CLASSIC = "ghp_" + "A1b2C3d4E5f6G7h8I9j0K1l2M3n4O5p6Q7r8"
AWS_SECRET_LINE = "aws_secret_access_key=" + "wJalrXUtnFEMI/K7MDENG/bPxRfiCYEXAMPLEKEY"


@pytest.mark.parametrize(
    ("secret", "kind"),
    [
        (OPENAI, "openai-key"),
        ("sk-" + "abcdefghij0123456789XYZ", "openai-key"),
        (ANTHROPIC, "anthropic-key"),
        (AWS, "aws-access-key"),
        ("ASIA" + "IOSFODNN7EXAMPLE", "aws-access-key"),
        (AWS_SECRET_LINE, "aws-secret-key"),
        (BEARER, "bearer-token"),
        (GITHUB_CLASSIC, "github-token"),
        (GITHUB_PAT, "github-fine-grained-token"),
    ],
)
def test_every_documented_token_shape(secret: str, kind: str) -> None:
    assert Redactor().text(f"see {secret} now") == f"see [REDACTED:{kind}] now"


@pytest.fixture
def ticket_pattern() -> Iterator[None]:
    configure_redaction(patterns={"ticket": r"TCK-\d{6}"}, fields=["x-ticket"])
    yield
    configure_redaction()


def test_process_wide_patterns_reach_every_exit(
    ticket_pattern: None, tmp_path: Path, judge_server: JudgeServer, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv("OTEL_SDK_DISABLED", raising=False)
    secret, field_value = "TCK-" + "123456", "fields-are-secret-too"
    trace = Trace.from_steps(
        f"close {secret}",
        [
            AgentStep(tool_calls=[ToolCall(name="close", arguments={"id": secret}, result="ok")]),
            AgentStep(output=f"closed {secret}"),
        ],
        session_id="s",
        metadata={"x-ticket": field_value},
    )
    leaks = [secret, field_value]
    # capture and results of an evaluator with its own redactor (no ticket pattern of its own)
    judge_server.responder = lambda request: Reply(status=500, content=f"failed on {secret}")
    judge = OpenAIJudge("m", base_url=judge_server.base_url, cache=None, max_retries=0)
    with OnlineEvaluator(
        capture=tmp_path / "c.jsonl",
        results_path=tmp_path / "r.jsonl",
        metrics=["coherence", create_metric("confidence", judge=judge)],
        redactor=Redactor(max_chars=1000),
    ) as evaluator:
        evaluator.submit(trace)
        assert evaluator.flush(20)
    written = (tmp_path / "c.jsonl").read_text() + (tmp_path / "r.jsonl").read_text()
    assert "[REDACTED:ticket]" in written and "HTTP 500" in written  # the judge's error text
    # a judge prompt for a trace that never met a redactor
    create_metric("confidence", judge=judge).measure(trace)
    sent = json.dumps(judge_server.requests)
    # an OpenTelemetry exporter built on its own, and a report of an unredacted capture
    memory = InMemorySpanExporter()
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(memory))
    OTelExporter(provider).export(trace)
    exported = json.dumps(otlp_json(memory.get_finished_spans()))
    raw = tmp_path / "raw.jsonl"
    raw.write_text(trace.model_dump_json() + "\n")
    replay(raw, ["coherence"], output=tmp_path / "raw-results.jsonl")
    page = render_html(load_results(tmp_path / "raw-results.jsonl", raw))
    for leak in leaks:
        assert (leak in written, leak in sent, leak in exported, leak in page) == (
            False,
            False,
            False,
            False,
        ), leak
    assert "[REDACTED:ticket]" in sent and "[REDACTED:ticket]" in exported


def test_an_invalid_process_wide_pattern_is_named() -> None:
    with pytest.raises(ValueError, match="redaction pattern 'broken' is not a valid regex"):
        configure_redaction(patterns={"broken": "(unclosed"})


# --- both directions: every shape found, nothing that only looks like one damaged ------------

OPENAI_URL = OPENAI.replace("-", "%2D")
OPENAI_JSON_ESCAPED = OPENAI.replace("-", "\\u002d", 1)
OPENAI_IN_BASE64 = base64.b64encode(f"key={OPENAI}".encode()).decode()
JWT = (
    "eyJhbGciOiJIUzI1NiJ9."
    + "eyJzdWIiOiIxMjM0NTY3ODkwIn0."
    + "dozjgNryP4J3jVmNHl0w5N_XgL0n3I9PlFUP0THsR8U"
)
PEM = "-----BEGIN RSA PRIVATE KEY-----\nMIIEowIBAAKCAQEA\n-----END RSA PRIVATE KEY-----"


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("aws wJalrXUtnFEMI/K7MDENG/bPxRfiCYEXAMPLEKEY", "aws [REDACTED:aws-secret-key-bare]"),
        (f"url https://x/?key={OPENAI_URL}", "url https://x/?key=[REDACTED:openai-key]"),
        (f"escaped {OPENAI_JSON_ESCAPED}", "escaped [REDACTED:openai-key]"),
        (f"blob {OPENAI_IN_BASE64} end", "blob [REDACTED:base64:openai-key] end"),
        (
            'Response: {"password": "hunter2", "user": "ann"} done',
            'Response: {"password": "[REDACTED]", "user": "ann"} done',
        ),
        (f"jwt {JWT}", "jwt [REDACTED:jwt]"),
        (f"key:\n{PEM}\nend", "key:\n[REDACTED:private-key]\nend"),
        ("slack xoxb-" + "1234567890-abcdefghij", "slack [REDACTED:slack-token]"),
        ("google AIza" + "SyA1b2C3d4E5f6G7h8I9j0K1l2M3n4O5p6Q", "google [REDACTED:google-api-key]"),
        ("stripe sk_live_" + "4eC39HqLyjWDarjtT1zdp7dc", "stripe [REDACTED:stripe-key]"),
        (
            "db postgres://app:s3cr3t-pw@db.internal:5432/orders",
            "db postgres://app:[REDACTED:url-password]@db.internal:5432/orders",
        ),
        ("Authorization: Basic dXNlcjpwYXNzd29yZA==", "Authorization: [REDACTED:basic-auth]"),
    ],
    ids=[
        "bare-aws-secret",
        "url-encoded",
        "json-escaped",
        "base64",
        "json-after-prose",
        "jwt",
        "pem",
        "slack",
        "google",
        "stripe",
        "database-url",
        "basic-auth",
    ],
)
def test_secrets_hidden_or_unclaimed_before_are_found(text: str, expected: str) -> None:
    assert Redactor().text(text) == expected


@pytest.mark.parametrize(
    "text",
    [
        "ask-human-for-approval-before-refund",
        "risk-assessment-for-quarterly-review-2",
        "disk-usage-monitor-node-2-primary-east",
        "task-8f2c1e4a-9b7d-4c3e-a1f0-2b9c",
        "ASIAPACIFICSUMMITXX2 registration",
        "commit 3f786850e387550fdab836ed7e6dc881de23001b",
        "agenteval_core_online_evaluator_thread_pool_worker",
        "https://example.com/docs/getting-started?page=2",
        # a secret-named key whose value is prose, a word, or no secret's
        "Reset your password: click the link we sent you.",
        '"Your password": "is too short"',
        "the token: the",
        "max_tokens=512, input_tokens: 57",
        "secret_santa=bob and next_page_token=CAUQAA",
        "PWD=/home/bob",
        # headers, commands and numbers that hold no credential
        "Authorization: pending approval",
        "Authorization: required for refunds over $500",
        "cookie: chocolate chip",
        "mysql -h db -P3306 -u root -p shop",
        "docker login -u bob --password-stdin registry.io",
        "docker run -u 1000:1000 app",
        "score 0.4111111111111111",
        "ISBN 978-3-16-148410-0",
        "call +1 415 555 2671",
        "IMEI 356938035643809",
        "sent at 1796235912243",
        "card 4111 1111 1111 1112",  # its check digit is wrong
        "order 4111-1111-111-1111",  # not a card's groups
        "order 4111 1111-1111 1111",  # two kinds of separator
    ],
)
def test_text_that_only_looks_like_a_secret_is_kept(text: str) -> None:
    assert Redactor().text(text) == text


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        # a tool's URL: the key was sent as it was
        (
            "GET https://api.example.com/v1/data?user=bob&api_key=abc123def456&page=2",
            "GET https://api.example.com/v1/data?user=bob&api_key=[REDACTED:secret-assignment]"
            "&page=2",
        ),
        ("password=hunter2&user=bob", "password=[REDACTED:secret-assignment]&user=bob"),
        # a shell tool's environment listing: the working directory is no secret
        (
            "DB_PASSWORD=hunter2\nPWD=/home/bob",
            "DB_PASSWORD=[REDACTED:secret-assignment]\nPWD=/home/bob",
        ),
        ("run with --password=S3cret!", "run with --password=[REDACTED:secret-assignment]"),
        ("PGPASSWORD=s3cr3t psql -h db", "PGPASSWORD=[REDACTED:secret-assignment] psql -h db"),
        ("db:\n  password: hunter2x9\n", "db:\n  password: [REDACTED:secret-assignment]\n"),
        # a Python dict's repr, as a tool's result is often shown
        (
            "{'user': 'bob', 'password': 'hunter2'}",
            "{'user': 'bob', 'password': '[REDACTED:secret-assignment]'}",
        ),
        ("csrf_token=a8Fj2kLq9x", "csrf_token=[REDACTED:secret-assignment]"),
        ("redis://:mypassword@redis:6379/0", "redis://:[REDACTED:url-password]@redis:6379/0"),
        # shorter than any other secret: a tool argument of its own
        ("client_secret=zz", "client_secret=[REDACTED:secret-assignment]"),
    ],
    ids=[
        "query-string",
        "form",
        "env",
        "flag",
        "libpq-env",
        "yaml",
        "repr",
        "token",
        "url-no-user",
        "short",
    ],
)
def test_a_secret_named_key_given_a_value_in_text(text: str, expected: str) -> None:
    assert Redactor().text(text) == expected


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        # a fetch tool's log of the request it sent
        (
            "GET /v1/orders HTTP/1.1\nAuthorization: Token 9944b09199c62bcf9418ad846dd0e4bb\n"
            "Cookie: sessionid=8f3kd92jfk2l3mf9; csrftoken=Zk2m9Xq8Lp\nAccept: */*",
            "GET /v1/orders HTTP/1.1\nAuthorization: [REDACTED:authorization-header]\n"
            "Cookie: [REDACTED:cookie-header]\nAccept: */*",
        ),
        (
            "Set-Cookie: session=s3ss10n-v4lue; Path=/; HttpOnly",
            "Set-Cookie: [REDACTED:cookie-header]",
        ),
        (
            'curl -H "Proxy-Authorization: Digest dXNlcjpwYXNz9" https://x.io',
            'curl -H "Proxy-Authorization: [REDACTED:authorization-header]" https://x.io',
        ),
        # a shell tool's command line
        (
            "curl -u admin:S3cretPass! https://api.example.com/v1/users",
            "curl -u admin:[REDACTED:command-password] https://api.example.com/v1/users",
        ),
        (
            "curl --user bob:hunter2 https://x.io",
            "curl --user bob:[REDACTED:command-password] https://x.io",
        ),
        (
            "mysqldump -uroot -ps3cr3tpw shop > dump.sql",
            "mysqldump -uroot -p[REDACTED:command-password] shop > dump.sql",
        ),
        ("mysql -pS3cret db", "mysql -p[REDACTED:command-password] db"),
        (
            "sshpass -p 'R00tpass' ssh root@host",
            "sshpass -p '[REDACTED:command-password]' ssh root@host",
        ),
        (
            "docker login -u bob -p Passw0rd123 registry.io",
            "docker login -u bob -p [REDACTED:command-password] registry.io",
        ),
        # a payment card, printed or whole, in prose or a form's value
        ("Card: 4111 1111 1111 1111 exp 12/27", "Card: [REDACTED:card-number] exp 12/27"),
        ("charged 5555-5555-5555-4444 today", "charged [REDACTED:card-number] today"),
        ("amex 3782 822463 10005", "amex [REDACTED:card-number]"),
        ("card_number=4242424242424242", "card_number=[REDACTED:card-number]"),
        ("4000002760003184", "[REDACTED:card-number]"),
    ],
    ids=[
        "http-log",
        "set-cookie",
        "curl-header",
        "curl-u",
        "curl-user",
        "mysqldump",
        "mysql-short",
        "sshpass",
        "docker-login",
        "card-spaces",
        "card-dashes",
        "amex",
        "card-form",
        "card-alone",
    ],
)
def test_credentials_in_requests_commands_and_card_numbers(text: str, expected: str) -> None:
    # what a fetch tool logs and a shell tool runs reached the capture as it was
    assert Redactor().text(text) == expected


def test_a_card_number_typed_as_an_integer_is_redacted() -> None:
    # a payment tool whose schema types the card as an integer: its arguments reached the
    # capture with the card number whole
    arguments = {"card": 4111111111111111, "amount": 4200, "sent_at_ms": 1796235912243}
    assert Redactor().value([arguments, 5555555555554444]) == [
        {"card": "[REDACTED:card-number]", "amount": 4200, "sent_at_ms": 1796235912243},
        "[REDACTED:card-number]",
    ]
    # numbers of a card's length that are no card: a wrong check digit, no network's prefix
    assert Redactor().value({"id": 4111111111111112, "order": 9111111111111111}) == {
        "id": 4111111111111112,
        "order": 9111111111111111,
    }


def test_secret_named_fields_by_name_and_by_look() -> None:
    value = {
        "private_key": "k",
        "client-secret": "c",
        "db_password": "correct horse battery staple",
        "X-Auth-Token": "t",
        "Cookie": "session=1",
        "token": "the",  # a logprob's or tokenizer's token: a word, kept
        "logprobs": [{"token": " world", "logprob": -0.1}, {"token": "Hello", "id": 15496}],
        "refresh": {"token": "a8Fj2kLq9x0Z"},  # looks like a secret: redacted
        "next_page_token": "CAUQAA",  # short: kept
        "tokens": ["sk", "-", "proj"],
    }
    assert Redactor().value(value) == {
        "private_key": "[REDACTED]",
        "client-secret": "[REDACTED]",
        "db_password": "[REDACTED]",
        "X-Auth-Token": "[REDACTED]",
        "Cookie": "[REDACTED]",
        "token": "the",
        "logprobs": [{"token": " world", "logprob": -0.1}, {"token": "Hello", "id": 15496}],
        "refresh": {"token": "[REDACTED]"},
        "next_page_token": "CAUQAA",
        "tokens": ["sk", "-", "proj"],
    }


def test_a_secret_split_across_streamed_chunks_is_found_where_they_join() -> None:
    head, tail = OPENAI[:14], OPENAI[14:]
    chunks = [f"your key is {head}", f"{tail} keep it safe"]
    assert Redactor().value(chunks) == ["your key is [REDACTED:openai-key]", " keep it safe"]
    blocks = [{"type": "text", "text": f"key {head}"}, {"type": "text", "text": f"{tail}."}]
    assert Redactor().value(blocks) == [
        {"type": "text", "text": "key [REDACTED:openai-key]"},
        {"type": "text", "text": "."},
    ]
    # three pieces: the middle one is dropped, the ends keep what is not the key
    three = [f"a {OPENAI[:10]}", OPENAI[10:20], f"{OPENAI[20:]} b"]
    assert Redactor().value(three) == ["a [REDACTED:openai-key]", "", " b"]


def test_tool_and_node_names_reach_the_metrics_unredacted(tmp_path: Path) -> None:
    name = "ask-human-for-approval-before-refund"
    trace = Trace.from_steps(
        "refund order 42",
        [AgentStep(tool_calls=[ToolCall(name=name, arguments={"task": "task-42-refund-review"})])],
    )
    [call] = Redactor().trace(trace).tool_calls()
    assert (call.name, call.arguments) == (name, {"task": "task-42-refund-review"})


@settings(max_examples=300)
@given(
    text=st.text(alphabet=st.sampled_from('abcpXYZ0149 _-:/@"{}[]%\\u=+.\ud800é'), max_size=24),
    max_chars=st.sampled_from([None, 5, 100_000]),
)
def test_short_strings_skip_no_redaction_they_need(text: str, max_chars: int | None) -> None:
    # a pattern of the user's (one that never matches) sends every string down the full
    # path; the defaults alone let short plain strings skip it: both must agree
    full = Redactor(patterns={"never": "(?!x)x"}, max_chars=max_chars)
    assert Redactor(max_chars=max_chars).text(text) == full.text(text)
    record = {"note": text, "password": text, "items": [text, {"token": text}]}
    assert Redactor(max_chars=max_chars).value(record) == full.value(record)


class _CountingRedactor(Redactor):
    def __post_init__(self) -> None:
        super().__post_init__()
        self.calls = 0

    def trace(self, trace: Trace) -> Trace:
        self.calls += 1
        return super().trace(trace)


def test_a_live_trace_is_redacted_once_export_included(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv("OTEL_SDK_DISABLED", raising=False)
    traces = [
        Trace.from_steps(f"use {OPENAI} please", [AgentStep(output=f"done {i}")], id=f"t{i}")
        for i in range(3)
    ]

    def run(evaluator_redactor: Redactor, exporter_redactor: Redactor) -> str:
        memory = InMemorySpanExporter()
        provider = TracerProvider()
        provider.add_span_processor(SimpleSpanProcessor(memory))
        sink = OTelSink(exporter=OTelExporter(provider, redactor=exporter_redactor))
        with OnlineEvaluator(
            capture=None, metrics=[], session_metrics=[], sinks=[sink], redactor=evaluator_redactor
        ) as evaluator:
            for trace in traces:
                evaluator.submit(trace)
            assert evaluator.flush(20)
        return json.dumps(otlp_json(memory.get_finished_spans()))

    shared = _CountingRedactor()
    exported = run(shared, shared)
    assert shared.calls == 3  # once per trace: the exporter's is the evaluator's
    assert OPENAI not in exported and exported.count("[REDACTED:openai-key]") >= 3
    mine, theirs = _CountingRedactor(), _CountingRedactor(patterns={"done": r"done \d"})
    exported = run(mine, theirs)
    assert (mine.calls, theirs.calls) == (3, 3)  # other rules: the exporter's apply too
    assert "[REDACTED:done]" in exported and "done 1" not in exported


def test_the_report_uses_the_redactor_it_is_given(tmp_path: Path) -> None:
    ticket = "TCK-" + "654321"
    trace = Trace.from_steps(f"close {ticket}", [AgentStep(output="closed")], id="t0")
    capture = tmp_path / "c.jsonl"
    capture.write_text(trace.to_json() + "\n")
    replay(capture, ["coherence"], output=tmp_path / "r.jsonl")
    default = render_html(load_results(tmp_path / "r.jsonl", capture))
    mine = Redactor(patterns={"ticket": r"TCK-\d{6}"})
    page = render_html(load_results(tmp_path / "r.jsonl", capture, redactor=mine))
    assert ticket in default  # no default rule knows a ticket number
    assert ticket not in page and "[REDACTED:ticket]" in page


def test_records_that_repeat_keys_are_judged_value_by_value() -> None:
    # each key name is classified once per trace and each distinct string searched once;
    # what a value holds is still decided for every value
    key = "sk-proj-" + "a1B2c3D4" * 5
    records = [
        {"token": "the", "api_key": "", "note": "same"},
        {"token": "a8Fj2kLq9x", "api_key": key, "note": "same"},
        {"token": "the", "api_key": None, "note": f"key {key}"},
    ]
    assert Redactor().value(records) == [
        {"token": "the", "api_key": "", "note": "same"},
        {"token": "[REDACTED]", "api_key": "[REDACTED]", "note": "same"},
        {"token": "the", "api_key": None, "note": "key [REDACTED:openai-key]"},
    ]
