"""The default embedder is semantic: coherence passes correct answers and fails off-topic
ones on a hand-written labelled set, it loads lazily, and the shipped example capture reads
as it should (healthy sessions pass reliability, the looping one fails)."""

from __future__ import annotations

import re
import string
import subprocess
import sys
import textwrap
from pathlib import Path

import numpy as np
import pytest
from agenteval_langchain import AgentEvalCallbackHandler
from agenteval_langchain.testing import ScriptedChatModel, tool_call
from coherence_labels import ECHOES, LABELLED
from coherence_languages import LANGUAGES
from coherence_triples import TRIPLES
from hypothesis import example, given, settings
from hypothesis import strategies as st
from langchain.agents import create_agent
from langchain_core.messages import AIMessage
from langchain_core.tools import tool
from langgraph.checkpoint.memory import InMemorySaver

from agenteval_core import (
    CalibrationLabel,
    EvalCase,
    MetricResult,
    OnlineEvaluator,
    StaticEmbedder,
    Trace,
    calibrate,
    create_metric,
    default_embedder,
    read_capture,
    replay,
    text_of,
)
from agenteval_core._text import first_words
from agenteval_core.metrics import Coherence

EXAMPLE = Path(__file__).resolve().parents[1] / "examples" / "captures" / "support_agent.jsonl"


def test_coherence_with_the_default_embedder_separates_correct_from_off_topic() -> None:
    coherence = create_metric("coherence")
    assert coherence.embedder is default_embedder()
    assert isinstance(coherence.embedder, StaticEmbedder)
    correct = [coherence.measure(EvalCase(input=q, actual_output=a)) for q, a, _ in TRIPLES]
    off_topic = [coherence.measure(EvalCase(input=q, actual_output=o)) for q, _, o in TRIPLES]
    assert len(TRIPLES) >= 30
    passed = sum(bool(result.success) for result in correct) / len(TRIPLES)
    rejected = sum(not result.success for result in off_topic) / len(TRIPLES)
    assert passed >= 0.90 and rejected >= 0.95, (passed, rejected)  # measured: 31/32 and 32/32
    # and every correct answer is closer to its request than the off-topic one
    assert all(c.score > o.score for c, o in zip(correct, off_topic, strict=True))  # type: ignore[operator]


def test_coherence_agrees_with_the_labelled_set_as_the_docs_say() -> None:
    """docs/embeddings.md publishes these figures; a changed embedder must change both."""
    labels = [
        CalibrationLabel(Trace(id=f"p{i}", input=request, output=answer), "coherence", label)
        for i, (request, answer, label) in enumerate(LABELLED)
    ]
    assert len(labels) == 108
    result = calibrate(labels).metrics["coherence"]
    # at the default threshold 0.5: 41 of 52 answers labelled pass pass, 49 of 56 labelled
    # fail fail; agreement 90/108. Kappa: p_o = 90/108; the metric passes 48/108 and the
    # labels 52/108, so p_e = (48·52 + 60·56) / 108² = 5856/11664, kappa = (p_o − p_e) / (1 − p_e)
    assert result.confusion == {"pass": {"pass": 41, "fail": 11}, "fail": {"pass": 7, "fail": 49}}
    assert result.agreement == pytest.approx(90 / 108)
    p_e = (48 * 52 + 60 * 56) / 108**2
    assert result.kappa == pytest.approx((90 / 108 - p_e) / (1 - p_e))
    assert round(result.kappa or 0, 3) == 0.665
    # no other threshold agrees with more labels: the default stays
    assert (result.best_threshold, result.best_agreement) == (0.5, pytest.approx(90 / 108))
    # what the signal cannot tell: an echo of the question scores as a perfect answer
    coherence = create_metric("coherence")
    echoes = [coherence.measure(Trace(input=q, output=a)).score for q, a, _ in ECHOES]
    assert min(echoes) >= 0.75, echoes  # type: ignore[type-var]


def test_coherence_with_the_default_embedder_scores_no_other_language() -> None:
    # MiniLM reads English. Its cosines in eight other languages (english_only=False) pass
    # nearly every correct answer and, in most of them, every off-topic one: made-up scores
    anything = Coherence(embedder=StaticEmbedder(english_only=False))
    off_topic_passed = {
        language: sum(
            bool(anything.measure(EvalCase(input=q, actual_output=o)).success)
            for q, _, o in triples
        )
        for language, triples in LANGUAGES.items()
    }
    assert off_topic_passed == {
        "Spanish": 3,
        "French": 3,
        "German": 4,
        "Russian": 6,
        "Chinese": 2,
        "Japanese": 6,
        "Korean": 6,
        "Hindi": 6,
    }
    # the default gives such a text no vector: no pair of them is scored, and the error
    # names a text of the pair
    coherence = create_metric("coherence")
    for triples in LANGUAGES.values():
        for request, correct, other in triples:
            for answer in (correct, other):
                result = coherence.measure(EvalCase(input=request, actual_output=answer))
                assert (result.score, result.success) == (None, None)
                unread = re.fullmatch(
                    r"embedder error: \S+ gave (.*) a zero vector: .*", result.error or ""
                )
                assert unread is not None and unread[1] in (
                    repr(first_words(request)),
                    repr(first_words(answer)),
                )


def test_every_english_text_of_the_tests_keeps_its_vector() -> None:
    # the language check must cost no English text its score: the labelled set, the
    # triples, the example capture, and English that quotes other languages
    texts = {text for request, answer, _ in LABELLED for text in (request, answer)}
    texts |= {text for triple in TRIPLES for text in triple}
    texts |= {
        text_of(value) for t in read_capture(EXAMPLE) for value in (t.input, t.output) if value
    }
    texts |= {
        "'Good morning' in Spanish is 'buenos días'.",
        "We met at Le Café.",
        "I ordered a crème brûlée at the café.",
        "Charles de Gaulle Airport is north of Paris.",
        "Gracias.",  # too little to tell: read
    }
    vectors = default_embedder().embed(sorted(texts))
    assert len(texts) > 150 and np.all(np.linalg.norm(vectors, axis=1) > 0.99)
    # sentences of other languages written apart from the word lists: most lose their vector
    held_out = [
        "Necesito cambiar la dirección de entrega.",
        "Je voudrais changer mon adresse de livraison.",
        "Sie können mit Karte oder per Überweisung bezahlen.",
        "Il pacco arriverà domani pomeriggio.",
        "A sua reserva para duas pessoas está confirmada.",
        "No tenemos ese modelo en stock ahora mismo.",  # one function word: read
    ]
    norms = np.linalg.norm(default_embedder().embed(held_out), axis=1)
    assert norms.round(2).tolist() == [0.0, 0.0, 0.0, 0.0, 0.0, 1.0]
    assert StaticEmbedder(english_only=False).name == "minilm-l6-static-256-any-language"


def test_a_conversation_turn_that_accepts_an_offer_is_coherent(tmp_path: Path) -> None:
    # a real LangGraph thread: the agent offers a room, the user says "Yes, please.", the
    # agent books it. Alone, "Yes, please." and the booking have cosine 0.23, a failure of
    # a correct turn; after the offer it accepts, the turn is coherent
    offer = "Hotel Roma Central has a room on Friday for 120 euros. Shall I book it?"
    booked = "I booked Hotel Roma Central for Friday; your confirmation is H-4."

    @tool
    def book_hotel(hotel: str) -> str:
        """Book a hotel room."""
        return "confirmation H-4"

    model = ScriptedChatModel(
        replies=[
            AIMessage(offer),
            AIMessage("", tool_calls=[tool_call("book_hotel", "b1", hotel="Hotel Roma Central")]),
            AIMessage(booked),
        ]
    )
    agent = create_agent(model, tools=[book_hotel], checkpointer=InMemorySaver())
    capture = tmp_path / "capture.jsonl"
    with OnlineEvaluator(capture=capture, log=False) as evaluator:
        config = {
            "configurable": {"thread_id": "t1"},
            "callbacks": [AgentEvalCallbackHandler(evaluator)],
        }
        for request in ("Find me a hotel in Rome for Friday.", "Yes, please."):
            agent.invoke({"messages": [("user", request)]}, config)
    scored: dict[str, MetricResult] = {}
    replay(
        capture,
        ["coherence"],
        on_trace=lambda trace, results: scored.update({str(trace.input): results[0]}),
    )
    turn = scored["Yes, please."]
    assert turn.success and turn.metadata["input_read_after_previous_answer"] is True
    assert turn.metadata["previous_answer"] == first_words(offer)
    vectors = default_embedder().embed(["Yes, please.", booked])
    assert round(float(vectors[0] @ vectors[1]), 2) == 0.23 < 0.5  # what the seed compares


def test_a_follow_up_of_an_app_that_sends_the_history_itself_is_read_after_it(
    tmp_path: Path,
) -> None:
    # no thread and no session: the app keeps the conversation and sends all of it. The
    # run's own model call holds the offer "Yes, please." accepts
    offer = "Hotel Roma Central has a room on Friday for 120 euros. Shall I book it?"
    booked = "I booked Hotel Roma Central for Friday; your confirmation is H-4."
    agent = create_agent(ScriptedChatModel(replies=[AIMessage(booked)]), tools=[])
    capture = tmp_path / "capture.jsonl"
    with OnlineEvaluator(capture=capture, log=False) as evaluator:
        history = [("user", "Find me a hotel in Rome for Friday."), ("ai", offer)]
        agent.invoke(
            {"messages": [*history, ("user", "Yes, please.")]},
            {"callbacks": [AgentEvalCallbackHandler(evaluator)]},
        )
    [trace] = read_capture(capture)
    assert (trace.session_id, trace.input, trace.previous_answer()) == (
        None,
        "Yes, please.",
        offer,
    )
    result = create_metric("coherence").measure(trace)
    assert result.success and result.metadata["input_read_after_previous_answer"] is True


def test_the_quickstart_answer_is_coherent() -> None:
    result = create_metric("coherence").measure(
        EvalCase(
            input="What is the weather in Paris today?",
            actual_output="It is sunny and 21°C in Paris.",
        )
    )
    assert result.success and result.metadata["embedder"] == "minilm-l6-static-256"


def test_vectors_are_normalised_and_empty_text_is_a_zero_row() -> None:
    vectors = StaticEmbedder().embed(["a refund for order 42", "", "a refund for order 42"])
    assert vectors.shape == (3, 256) and vectors.dtype.name == "float32"
    assert abs(float(vectors[0] @ vectors[0]) - 1.0) < 1e-5
    assert not vectors[1].any() and (vectors[0] == vectors[2]).all()


def test_importing_and_creating_metrics_loads_no_model() -> None:
    probe = textwrap.dedent(
        """
        import sys
        import agenteval_core
        coherence = agenteval_core.create_metric("coherence")
        before = "tokenizers" in sys.modules
        coherence.measure(agenteval_core.EvalCase(input="hi", actual_output="hello"))
        print(before, "tokenizers" in sys.modules)
        """
    )
    done = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, check=True)
    assert done.stdout.split() == ["False", "True"]


def test_the_example_capture_flags_only_the_unhealthy_sessions() -> None:
    report = replay(EXAMPLE)
    reliability = {
        session: next(r for r in results if r.name == "agent_reliability")
        for session, results in report.session_results.items()
    }
    assert reliability["session-1"].success  # a normal conversation
    assert not reliability["session-2"].success  # a refund tool that failed
    assert not reliability["session-3"].success  # the agent repeating itself


def _tokenizer_ids(embedder: StaticEmbedder, texts: list[str]) -> list[list[int]]:
    """What MiniLM's tokenizer itself gives: the first max_tokens, unknown ones left out."""
    tokenizer, _, unknown = embedder._load()
    return [
        [i for i in encoding.ids[: embedder.max_tokens] if i != unknown]
        for encoding in tokenizer.encode_batch(texts, add_special_tokens=False)
    ]


# printable ASCII with runs of punctuation, digits glued to letters, long words, control
# characters; and some text that is not ASCII, which goes through the tokenizer whole
_ASCII_TEXT = st.lists(
    st.sampled_from(
        [
            *(string.ascii_letters + string.digits + string.punctuation + " \t\n\r\x0b\x7f"),
            "refund",
            "Order",
            "tracking",
        ]
    ),
    max_size=40,
).map("".join)
_ANY_TEXT = st.one_of(_ASCII_TEXT, st.text(max_size=40))


_SHARED = StaticEmbedder(english_only=False)  # one model load; its word cache grows


@settings(max_examples=300)
@given(st.lists(_ANY_TEXT, max_size=6), st.integers(min_value=1, max_value=40))
# the tokenizer's added tokens, which it matches before lowercasing (found by this test)
@example(["[UNK]"], 1)
@example(["refund [PAD] Order", "x[UNK]y", "[unk]"], 40)
def test_token_ids_are_the_tokenizers_own(texts: list[str], max_tokens: int) -> None:
    _SHARED.max_tokens = max_tokens
    assert _SHARED._token_ids(texts) == _tokenizer_ids(_SHARED, texts)
    # and again, every piece now from the cache
    assert _SHARED._token_ids(texts) == _tokenizer_ids(_SHARED, texts)


def test_token_ids_of_a_long_word_and_a_long_text() -> None:
    embedder = StaticEmbedder(english_only=False)
    texts = ["x" * 150 + " refund", "Order A-42 shipped; " * 200, "Café déjà vu, naïve ☕"]
    ids = embedder._token_ids(texts)
    assert ids == _tokenizer_ids(embedder, texts)
    assert ids[0] == embedder._token_ids(["refund"])[0]  # a 150-letter word is unknown
    assert len(ids[1]) == 512  # cut to max_tokens
