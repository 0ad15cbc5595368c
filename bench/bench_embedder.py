"""The default embedder's speed and separation, against the hashing embedder, in one run.

Texts are the labelled set's requests and answers (short, like most agent turns); each
embedder starts with an empty cache, so every text is embedded. Separation is coherence's
verdict on the labelled set: correct answers at or above the 0.5 threshold, off-topic ones
below it (goals: >= 90% and >= 95%, at <= 100 µs per text). Then the same verdicts in
eight other languages with the language check off, and the pairs the default embedder
still scores there (goal: none; it reads English).

    python -m bench embedder [--quick]
"""

from __future__ import annotations

import sys
import time
from pathlib import Path

import numpy as np

from agenteval_core import HashingEmbedder, StaticEmbedder

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests"))
from coherence_languages import LANGUAGES
from coherence_triples import TRIPLES


def _separation(embedder: StaticEmbedder | HashingEmbedder) -> tuple[float, float]:
    correct = off_topic = 0
    for request, answer, other in TRIPLES:
        vectors = embedder.embed([request, answer, other])
        correct += float(vectors[0] @ vectors[1]) >= 0.5
        off_topic += float(vectors[0] @ vectors[2]) < 0.5
    return correct / len(TRIPLES), off_topic / len(TRIPLES)


def _microseconds_per_text(
    embedder: StaticEmbedder | HashingEmbedder, texts: list[str], *, cold: bool = False
) -> float:
    """Every text embedded afresh; ``cold`` also forgets the static embedder's known words."""
    embedder.embed(texts[:3])  # loads the model, if any
    batch = 64
    started = time.perf_counter()
    for start in range(0, len(texts), batch):
        embedder._cache.clear()
        if cold and isinstance(embedder, StaticEmbedder):
            embedder._word_ids.clear()
        embedder.embed(texts[start : start + batch])
    return (time.perf_counter() - started) / len(texts) * 1e6


def main(quick: bool = False) -> None:
    rounds = 5 if quick else 40
    texts = [f"{text} ({n})" for n in range(rounds) for triple in TRIPLES for text in triple]
    print(f"{len(TRIPLES)} labelled triples; {len(texts)} distinct texts timed in batches of 64")
    for embedder in (StaticEmbedder(), HashingEmbedder()):
        correct, off_topic = _separation(embedder)
        speed = _microseconds_per_text(embedder, texts)
        print(
            f"{embedder.name:>24}: correct >= 0.5: {correct:.0%}, off-topic < 0.5: "
            f"{off_topic:.0%}, {speed:.0f} µs per text"
        )
        if isinstance(embedder, StaticEmbedder):
            cold = _microseconds_per_text(embedder, texts, cold=True)
            print(f"{'':>24}  {cold:.0f} µs per text when no word of the batch was seen before")
    print("goals: >= 90%, >= 95%, <= 100 µs per text")
    languages()


def languages() -> None:
    """What MiniLM's cosines do in other languages (the language check off), and how many
    of those pairs the default embedder still scores (goal: none)."""
    anything, default = StaticEmbedder(english_only=False), StaticEmbedder()
    print("other languages, 6 triples each: correct >= 0.5, off-topic >= 0.5 (passed),")
    print("  with english_only=False; then the pairs the default embedder scores")
    for language, triples in {"English": TRIPLES[:6], **LANGUAGES}.items():
        counts = [0, 0, 0]
        for request, correct, other in triples:
            for index, answer in enumerate((correct, other)):
                vectors = anything.embed([request, answer])
                counts[index] += float(vectors[0] @ vectors[1]) >= 0.5
                counts[2] += bool(np.all(np.linalg.norm(default.embed([request, answer]), axis=1)))
        print(
            f"{language:>10}: correct {counts[0]} of 6, off-topic {counts[1]} of 6; "
            f"scored {counts[2]} of 12"
        )
