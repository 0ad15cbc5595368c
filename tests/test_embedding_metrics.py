"""The local embedder, tokens and Jaccard, coherence and loop_detection."""

from __future__ import annotations

import asyncio
import json
import re
import subprocess
import sys
from collections.abc import Sequence
from typing import Any

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from pydantic import BaseModel

from agenteval_core import (
    Engine,
    EvalCase,
    HashingEmbedder,
    RunStatus,
    Span,
    SpanKind,
    Trace,
    create_metric,
    default_embedder,
)
from agenteval_core._text import (
    FIRST_WORDS_CHARS,
    FOLLOW_UP_WORDS,
    STOP_WORDS,
    content_tokens,
    first_words,
    jaccard,
    link_words,
    loop_tokens,
    prose_of,
    says_nothing_alone,
    shared_frame,
    without_urls,
    words,
)
from agenteval_core.metrics import Coherence, LoopDetection


class TableEmbedder:
    """Returns chosen vectors per text, so cosine values are known exactly."""

    name = "table"

    def __init__(self, table: dict[str, list[float]]) -> None:
        self.table = table

    def embed(self, texts: Sequence[str]) -> np.ndarray:
        return np.array([self.table[text] for text in texts], dtype=np.float32)

    async def aembed(self, texts: Sequence[str]) -> np.ndarray:
        return self.embed(texts)


def test_tokens_drop_stop_words_and_single_letters() -> None:
    assert content_tokens("The cat sat on the mat") == {"cat", "sat", "mat"}
    assert content_tokens("A cat sat on a hat, x!") == {"cat", "sat", "hat"}
    # {cat, sat, mat} vs {cat, sat, hat}: 2 shared of 4 → 0.5
    assert (
        jaccard(content_tokens("The cat sat on the mat"), content_tokens("A cat sat on a hat"))
        == 0.5
    )
    assert jaccard(frozenset(), frozenset()) == 0.0


def test_hashing_embedder_rows() -> None:
    embedder = HashingEmbedder(dim=256)
    vectors = embedder.embed(
        ["Refund issued for order 42", "Refund issued for order 42", "", "   "]
    )
    assert vectors.shape == (4, 256) and vectors.dtype == np.float32
    assert np.linalg.norm(vectors[0]) == pytest.approx(1.0, abs=1e-6)
    assert float(vectors[0] @ vectors[1]) == pytest.approx(1.0, abs=1e-6)
    assert not vectors[2].any() and not vectors[3].any()
    similar = embedder.embed(["the weather in Paris is sunny", "weather in Paris: sunny today"])
    unrelated = embedder.embed(["the weather in Paris is sunny", "invoice 7 was sent by post"])
    assert float(similar[0] @ similar[1]) > float(unrelated[0] @ unrelated[1]) + 0.3


def test_hashing_embedder_is_the_same_in_another_process() -> None:
    text = "order 42 shipped yesterday"
    here = HashingEmbedder(dim=64).embed([text])[0].tolist()
    code = (
        "import json; from agenteval_core import HashingEmbedder; "
        f"print(json.dumps(HashingEmbedder(dim=64).embed([{text!r}])[0].tolist()))"
    )
    there = json.loads(
        subprocess.run(
            [sys.executable, "-c", code],
            check=True,
            capture_output=True,
            text=True,
            env={"PYTHONHASHSEED": "12345"},
        ).stdout
    )
    assert there == here


def test_batch_equals_one_by_one() -> None:
    embedder = HashingEmbedder(dim=128)
    texts = ["alpha beta", "", "gamma\x00delta", "alpha beta"]
    batch = embedder.embed(texts)
    for row, text in zip(batch, texts, strict=True):
        assert np.allclose(row, embedder.embed([text])[0])


def trace(output: Any, input: str = "q") -> Trace:
    return Trace(input=input, output=output, session_id="s")


def test_coherence_from_cosine() -> None:
    # input (1, 0), output (0.6, 0.8): cosine 0.6, distance 0.4, score 0.6
    embedder = TableEmbedder({"question": [1, 0], "answer": [0.6, 0.8]})
    result = Coherence(embedder=embedder).measure(trace("answer", input="question"))
    assert result.score == pytest.approx(0.6)
    assert result.metadata["coherence_gap"] == pytest.approx(0.4)
    assert result.success  # threshold 0.5


def test_coherence_empty_side_is_assumed_coherent() -> None:
    result = Coherence().measure(trace("", input="question"))
    assert result.score == 1.0 and result.metadata["coherence_gap"] == 0.0
    assert "empty output" in result.reason


def test_loop_detection_hybrid_of_cosine_and_jaccard() -> None:
    # current "cat sat mat" vs previous "cat sat hat": Jaccard 2/4 = 0.5;
    # cosine of (1, 0) and (0.8, 0.6) = 0.8; hybrid 0.4; score 1 - 0.4 = 0.6
    embedder = TableEmbedder({"cat sat mat": [1, 0], "cat sat hat": [0.8, 0.6]})
    result = LoopDetection(embedder=embedder).measure(
        trace("cat sat mat"), history=[trace("cat sat hat")]
    )
    assert result.score == pytest.approx(0.6)
    assert result.metadata["max_hybrid"] == pytest.approx(0.4)
    assert result.metadata["comparisons"] == [
        {
            "trace_index": 0,
            "trace_id": result.metadata["comparisons"][0]["trace_id"],
            "cosine_similarity": 0.8,
            "jaccard_similarity": 0.5,
            "hybrid_score": 0.4,
        }
    ]


OFFER = "Hotel Roma Central has a room on Friday. Shall I book it?"
BOOKED = "I booked Hotel Roma Central for Friday."


def test_coherence_reads_a_follow_up_after_the_answer_it_accepts() -> None:
    # "Yes, please." has nothing in common with a booking: cosine 0 alone. After the offer
    # it accepts: cosine 0.6, score 0.6. "thanks!" → "You are welcome!" is coherent alone
    # (0.9 against 0.1 after the booking): the better reading counts
    embedder = TableEmbedder(
        {
            "Find me a hotel in Rome for Friday.": [1.0, 0.0, 0.0],
            OFFER: [1.0, 0.0, 0.0],
            "Yes, please.": [0.0, 0.0, 1.0],
            f"{OFFER}\nYes, please.": [0.8, 0.6, 0.0],
            BOOKED: [0.0, 1.0, 0.0],
            "thanks!": [0.0, 0.43588989, 0.9],
            f"{BOOKED}\nthanks!": [0.0, 0.99498744, 0.1],
            "You are welcome!": [0.0, 0.0, 1.0],
        }
    )
    turns = [
        ("Find me a hotel in Rome for Friday.", OFFER),
        ("Yes, please.", BOOKED),
        ("thanks!", "You are welcome!"),
    ]
    traces = [Trace(input=q, output=a, session_id="s", status=RunStatus.OK) for q, a in turns]
    results = [o.results[0] for o in Engine([Coherence(embedder=embedder)]).score_sync(traces)]
    assert [round(r.score, 4) for r in results] == [1.0, 0.6, 0.9]
    assert results[1].reason == (
        "cosine distance between input and output 0.4000, the input read after the previous "
        "answer (it says nothing on its own)"
    )
    assert results[1].metadata == {
        "coherence_gap": 0.4,
        "embedder": "table",
        "previous_answer": "Hotel Roma Central has a room on Friday. …",
        "input_read_after_previous_answer": True,
    }
    assert results[2].metadata["input_read_after_previous_answer"] is False
    # a request that says something is compared alone, as the seed does
    assert results[0].metadata == {"coherence_gap": 0.0, "embedder": "table"}


@pytest.mark.parametrize(
    ("request_text", "alone"),
    [
        ("Sí, por favor.", True),
        ("La segunda opción", True),
        ("Oui, s'il vous plaît.", True),
        ("D'accord, le premier", True),
        ("Ja, bitte.", True),
        ("Die erste, bitte", True),
        ("Sì, grazie!", True),
        ("Sim, o primeiro.", True),
        ("Reserva el hotel Roma", False),
        ("¿Dónde está mi pedido A-1?", False),
        ("Je veux le deuxième hôtel", False),
        ("Bitte buche das Hotel", False),
        # each was read as a request of its own: no word of these languages was listed
        ("Да, пожалуйста.", True),
        ("Второй вариант.", True),
        ("Объясни подробнее", True),
        ("Ja, graag.", True),
        ("De tweede, graag", True),
        ("Tak, poproszę.", True),
        ("Druga opcja", True),
        ("Evet, lütfen.", True),
        ("İkinci seçenek", True),  # "İ" lowers to "i" and a combining dot: it split the word
        ("Ya, tolong.", True),
        ("Pilihan kedua saja", True),
        ("Vâng, làm ơn.", True),
        ("Cái thứ hai", True),
        ("نعم من فضلك", True),
        ("الخيار الثاني", True),
        ("Объясни рекурсию", False),
        ("Забронируй отель в Риме", False),
        ("Boek het hotel in Rome", False),
        ("Zarezerwuj hotel w Rzymie", False),
        ("İstanbul'da bir otel ayırt", False),
        ("Pesan hotel di Roma", False),
        ("Đặt khách sạn ở Roma", False),
        ("احجز فندقا في روما", False),
        # Hindi's vowel signs are no \w: "हाँ, कृपया" read as "ह", "क", "पय"
        ("हाँ, कृपया", True),
        ("दूसरा वाला", True),
        ("दिल्ली में होटल बुक करो", False),
    ],
)
def test_a_follow_up_in_another_language_says_nothing_alone(request_text: str, alone: bool) -> None:
    # "Sí, por favor." accepting an offer was read as a request of its own: a multilingual
    # embedder's coherence compared the booking with those three words, and regression
    # cases merged the same follow-up after different offers
    assert says_nothing_alone(request_text) is alone


@pytest.mark.parametrize(
    ("request_text", "alone"),
    [
        ("第二个", True),
        ("好的，就订第二个吧", True),
        ("再简短一点", True),
        ("翻译成英文", True),
        ("二番目でお願いします", True),
        ("もっと短くして", True),
        ("네, 좋아요", True),
        ("두 번째로 해주세요", True),
        ("订一家酒店", False),
        ("帮我找一家罗马的酒店", False),
        ("第二个酒店在哪里", False),
        ("ローマのホテルを探して", False),
        ("로마 호텔 찾아줘", False),
        # Thai's vowel signs and tone marks are no \w: "ใช่ครับ" read as ใช, คร, บ
        ("ใช่ครับ", True),
        ("อันที่สองครับ", True),
        ("ช่วยสรุปหน่อย", True),
        ("จองโรงแรมที่โรม", False),
    ],
)
def test_a_follow_up_in_chinese_japanese_korean_or_thai_says_nothing_alone(
    request_text: str, alone: bool
) -> None:
    # "好的，就订第二个吧" ("OK, book the second one") is one \w+ run, no word of the lists:
    # it was read as a request of its own, so a multilingual embedder compared the booking
    # with "the second one" alone
    assert says_nothing_alone(request_text) is alone


def test_a_chinese_follow_up_is_read_after_the_offer_it_accepts() -> None:
    # the offer of three hotels, then "OK, book the second one": read alone, the booking's
    # coherence was 0.108 with the character-hashing embedder (which reads Chinese)
    offer = "我找到了三家：罗马大酒店、万神殿酒店和特雷维酒店。您想订哪一家？"
    turns = [
        ("帮我找一家罗马的酒店", offer),
        ("好的，就订第二个吧", "已为您预订万神殿酒店，入住日期为5月3日。"),
    ]
    traces = [Trace(input=q, output=a, session_id="s", status=RunStatus.OK) for q, a in turns]
    scored = Engine([Coherence(embedder=HashingEmbedder())]).score_sync(traces)
    booked = scored[1].results[0]
    assert booked.metadata["input_read_after_previous_answer"] is True
    assert booked.metadata["previous_answer"] == offer
    assert round(booked.score, 3) == 0.321


@pytest.mark.parametrize(
    ("request_text", "alone"),
    [
        ("Make it shorter.", True),
        ("Summarize that in one sentence.", True),
        ("Explain it like I'm five.", True),
        ("Can you give me a source for that?", True),
        ("Tell me more.", True),
        ("Make it more formal.", True),
        ("Explícalo otra vez.", True),
        ("Explain recursion.", False),
        ("Tell me a joke.", False),
        ("Give me an example of a closure in Python.", False),
        ("Summarize the meeting notes.", False),
        ("Make a list of the planets.", False),
        ("Translate 'thank you' into Spanish.", False),
    ],
)
def test_a_request_about_the_last_answer_says_nothing_alone(request_text: str, alone: bool) -> None:
    # "Make it shorter." asks for something done to the agent's last answer: read alone,
    # a correct shorter answer has nothing in common with those three words
    assert says_nothing_alone(request_text) is alone


TEA = (
    "What are the health benefits of green tea?",
    "Green tea contains antioxidants called catechins, which may lower the risk of heart "
    "disease, support brain function and help with weight management. It also has less "
    "caffeine than coffee.",
)


@pytest.mark.parametrize(
    ("request_text", "answer", "alone", "in_context"),
    [
        (
            "Make it shorter.",
            "Green tea's antioxidants may protect the heart and brain and aid weight loss.",
            0.088,
            0.748,
        ),
        (
            "Summarize that in one sentence.",
            "Green tea's catechins may benefit the heart, brain and weight.",
            0.065,
            0.701,
        ),
        (
            "Explain it like I'm five.",
            "Green tea has tiny helpers that keep your heart and brain healthy.",
            0.48,
            0.659,
        ),
        # an answer about something else fails after the previous answer too
        ("Make it shorter.", "The capital of France is Paris.", 0.0, 0.085),
    ],
)
def test_a_request_about_the_last_answer_is_read_after_it(
    request_text: str, answer: str, alone: float, in_context: float
) -> None:
    # with the default embedder, correct answers to these requests failed coherence: read
    # alone, 1 − cosine distance is the cosine of request and answer. Each request is now
    # read after the answer it is about
    request_vector, answer_vector = default_embedder().embed([request_text, answer])
    assert round(max(0.0, float(request_vector @ answer_vector)), 3) == alone
    turns = [
        Trace(id="t1", session_id="s", input=TEA[0], output=TEA[1]),
        Trace(id="t2", session_id="s", input=request_text, output=answer),
    ]
    result = Engine([Coherence()]).score_sync(turns)[1].results[0]
    assert round(result.score or 0.0, 3) == in_context
    assert result.metadata["input_read_after_previous_answer"] is True
    assert result.success is (in_context >= 0.5)
    # with no earlier turn known, such a request is not scored
    assert Coherence().measure(EvalCase(input=request_text, actual_output=answer)).skipped


def test_a_follow_up_with_no_earlier_turn_is_not_scored() -> None:
    embedder = TableEmbedder({})  # nothing is embedded
    alone = Coherence(embedder=embedder).measure(
        EvalCase(input="Yes, please.", actual_output=BOOKED)
    )
    assert (alone.score, alone.skipped, alone.reason) == (
        None,
        True,
        "not scored: the request 'Yes, please.' says nothing on its own (it answers an "
        "earlier turn), and no earlier turn of its session is known",
    )
    # a regression case carries its earlier turns: the last answer is the context
    embedder = TableEmbedder(
        {BOOKED: [0.0, 1.0], "Yes, please.": [1.0, 0.0], f"{OFFER}\nYes, please.": [0.6, 0.8]}
    )
    case = EvalCase(
        input="Yes, please.",
        actual_output=BOOKED,
        conversation=[{"input": "Find me a hotel in Rome for Friday.", "output": OFFER}],
    )
    assert Coherence(embedder=embedder).measure(case).score == pytest.approx(0.8)


SHIPPED = "Your order {} has shipped via UPS today."


def test_a_template_answering_a_new_order_is_no_repeat() -> None:
    # {your, order, 48213, shipped, via, ups, today} vs the same with 51877: Jaccard 6/8;
    # cosine 1 (one vector for both): hybrid 0.75, a loop (0.25) for a support agent that
    # answered three customers' orders. Each answer carries the number its request asked
    # about, which the earlier turns did not hold: no repeat, hybrid 0
    first, second, third = (SHIPPED.format(n) for n in ("48213", "51877", "60221"))
    embedder = TableEmbedder({text: [1.0, 0.0] for text in (first, second, third)})
    turns = [
        Trace(id="t1", session_id="s", input="Where is my order 48213?", output=first),
        Trace(id="t2", session_id="s", input="And order 51877?", output=second),
        Trace(id="t3", session_id="s", input="What about 60221?", output=third),
        Trace(id="t4", session_id="s", input="Are you sure?", output=third),
    ]
    outcomes = Engine([LoopDetection(embedder=embedder)]).score_sync(turns)
    results = [outcome.results[0] for outcome in outcomes]
    assert [r.score for r in results] == [1.0, 1.0, 1.0, 0.0]
    assert results[1].metadata["comparisons"] == [
        {
            "trace_index": 0,
            "trace_id": "t1",
            "cosine_similarity": 1.0,
            "jaccard_similarity": 0.75,
            "hybrid_score": 0.0,
            "new_from_request": ["51877"],
        }
    ]
    assert results[2].reason == (
        "highest cosine × Jaccard overlap with a recent output: 0.0000 (2 of 2 no repeat: "
        "this answer carries 60221 from its request, which they did not)"
    )
    # the same answer again to a request with no number in it: a repeat, as the seed
    # scores it (hybrids 0.75, 0.75 and 1.0 with the third turn's identical answer)
    assert [
        (c["hybrid_score"], c.get("new_from_request")) for c in results[3].metadata["comparisons"]
    ] == [(0.75, None), (0.75, None), (1.0, None)]
    # a number the earlier turn's request already held is nothing new: asked about 48213
    # twice, the same answer twice is a repeat
    again = LoopDetection(embedder=embedder).measure(
        Trace(input="Order 48213, please check again", output=first),
        history=[Trace(input="Where is my order 48213?", output=first)],
    )
    assert again.score == 0.0 and "new_from_request" not in again.metadata["comparisons"][0]


def test_a_template_answering_a_one_digit_id_is_no_repeat() -> None:
    # "Order A-7 has shipped." after "Order A-6 has shipped.", asked about A-7: the Jaccard's
    # tokens leave out one-letter words, so "7" was not seen as the request's and the
    # answers were a loop (hybrid 1.0: {order, shipped} both, one vector); as for 51877
    answers = [f"Order A-{n} has shipped." for n in (6, 7)]
    embedder = TableEmbedder({text: [1.0, 0.0] for text in answers})
    turns = [
        Trace(id=f"t{n}", session_id="s", input=f"Where is order A-{n}?", output=answer)
        for n, answer in zip((6, 7), answers, strict=True)
    ]
    second = Engine([LoopDetection(embedder=embedder)]).score_sync(turns)[1].results[0]
    assert second.score == 1.0
    assert second.metadata["comparisons"][0]["new_from_request"] == ["7"]
    assert second.metadata["comparisons"][0]["jaccard_similarity"] == 1.0
    # the same answer to the same id again is a repeat
    again = LoopDetection(embedder=embedder).measure(
        Trace(input="A-7, are you sure?", output=answers[1]), history=[turns[1]]
    )
    assert again.score == 0.0


HELP = "You can find step-by-step instructions in our help center: {}"


def test_a_template_linking_the_requested_article_is_no_repeat() -> None:
    # a help desk's answers that differ only in the article they link to, each named by its
    # request's words: with the default embedder the second scored 0.377 (cosine 0.906 ×
    # Jaccard 0.688), a loop, for an agent that answered two questions
    billing, password = (
        HELP.format(f"https://help.acme.com/articles/{slug}")
        for slug in ("team-billing-setup", "password-reset")
    )
    # tokens ("can" and "in" are stop words): {you, our, find, step, instructions, help,
    # center, https, acme, com, articles} shared, {team, billing, setup} and {password,
    # reset} their own: Jaccard 11/16
    assert jaccard(loop_tokens(billing), loop_tokens(password)) == 11 / 16
    embedder = TableEmbedder({billing: [1.0, 0.0], password: [1.0, 0.0]})
    turns = [
        Trace(
            id="t1", session_id="s", input="How do I set up billing for my team?", output=billing
        ),
        Trace(id="t2", session_id="s", input="And how do I reset my password?", output=password),
        Trace(id="t3", session_id="s", input="I still can't reset my password.", output=password),
    ]
    outcomes = Engine([LoopDetection(embedder=embedder)]).score_sync(turns)
    second, third = (outcome.results[0] for outcome in outcomes[1:])
    assert second.score == 1.0
    assert second.metadata["comparisons"] == [
        {
            "trace_index": 0,
            "trace_id": "t1",
            "cosine_similarity": 1.0,
            "jaccard_similarity": 0.6875,
            "hybrid_score": 0.0,
            "new_from_request": ["password", "reset"],
        }
    ]
    assert second.reason == (
        "highest cosine × Jaccard overlap with a recent output: 0.0000 (1 of 1 no repeat: "
        "this answer carries password, reset from its request, which they did not)"
    )
    # the same article again for the same trouble is a repeat (hybrid 1.0 with the second
    # turn); the first turn's article is still no repeat of it
    assert third.score == 0.0
    assert [c.get("new_from_request") for c in third.metadata["comparisons"]] == [
        ["password", "reset"],
        None,
    ]
    # the host is no request's word: "help" asked about and in help.acme.com is nothing new
    assert link_words("See https://help.acme.com/articles/password-reset?from=chat.") == {
        "articles",
        "password",
        "reset",
        "chat",
    }
    assert link_words("no link here") == frozenset()


def test_a_repeat_in_a_script_written_without_spaces_is_a_loop() -> None:
    # Chinese puts no space between words: "\w+" read each clause as one word, so the same
    # apology with one word more, "很抱歉，无法查询到您的订单。" then "很抱歉，目前无法查询到您的
    # 订单。" ("Sorry, (currently) unable to find your order."), shared only 很抱歉: Jaccard 1/3,
    # hybrid 0.333 with a cosine of 1, and the agent repeating itself passed (0.667).
    # Character pairs: {很抱, 抱歉} and {无法, 法查, 查询, 询到, 到您, 您的, 的订, 订单} in
    # both, {目前, 前无} in the second only: Jaccard 10/12
    first, again = "很抱歉，无法查询到您的订单。", "很抱歉，目前无法查询到您的订单。"
    assert loop_tokens(first) == {
        "很抱",
        "抱歉",
        "无法",
        "法查",
        "查询",
        "询到",
        "到您",
        "您的",
        "的订",
        "订单",
    }
    assert loop_tokens(again) == loop_tokens(first) | {"目前", "前无"}
    embedder = TableEmbedder({first: [1.0, 0.0], again: [1.0, 0.0]})
    result = LoopDetection(embedder=embedder).measure(
        Trace(input="还是查不到吗？", output=again),
        history=[Trace(input="我的订单在哪里？", output=first)],
    )
    assert result.score == pytest.approx(1 - 10 / 12)
    assert result.metadata["comparisons"][0]["jaccard_similarity"] == round(10 / 12, 4)
    # Japanese and Thai alike; words between them, and text with spaces, as before
    assert loop_tokens("ご注文は発送済みです") == {
        "ご注",
        "注文",
        "文は",
        "は発",
        "発送",
        "送済",
        "済み",
        "みで",
        "です",
    }
    assert loop_tokens("GPT4 模型已更新 today") == {"gpt4", "模型", "型已", "已更", "更新", "today"}
    assert loop_tokens("พบ") == {"พบ"}


def test_a_template_in_chinese_answering_a_new_order_is_no_repeat() -> None:
    # "您的订单12345已发货，预计周五送达。" ("Your order 12345 has shipped, due Friday."), then the
    # same for 67890 asked about 67890: \w+ read 您的订单12345已发货 as one word, so the
    # request's number was not seen in it, and the answers' character pairs (all ten shared,
    # beside the two numbers: Jaccard 10/12) made the second a loop (0.167)
    first, second = (f"您的订单{n}已发货，预计周五送达。" for n in ("12345", "67890"))
    assert words(second) == ["您的订单", "67890", "已发货", "预计周五送达"]
    embedder = TableEmbedder({first: [1.0, 0.0], second: [1.0, 0.0]})
    turns = [
        Trace(id="t1", session_id="s", input="订单12345在哪里？", output=first),
        Trace(id="t2", session_id="s", input="那订单67890呢？", output=second),
        Trace(id="t3", session_id="s", input="你确定吗？", output=second),  # "are you sure?"
    ]
    outcomes = Engine([LoopDetection(embedder=embedder)]).score_sync(turns)
    second_result, third_result = (outcome.results[0] for outcome in outcomes[1:])
    assert second_result.score == 1.0
    assert second_result.metadata["comparisons"][0] == {
        "trace_index": 0,
        "trace_id": "t1",
        "cosine_similarity": 1.0,
        "jaccard_similarity": round(10 / 12, 4),
        "hybrid_score": 0.0,
        "new_from_request": ["67890"],
    }
    # the same answer again, asked nothing new: a repeat
    assert third_result.score == 0.0


DISCLAIMER = (
    "This information is provided for general educational purposes only and does not "
    "constitute financial, investment, tax or legal advice. Past performance is not "
    "indicative of future results. Please consult a licensed financial advisor before making "
    "any investment decisions."
)
ADVISOR = [
    ("What did Apple stock close at today?", "Apple (AAPL) closed at $189.20 today, up 1.2%."),
    ("How about Microsoft?", "Microsoft (MSFT) closed at $402.10, down 0.4% on the day."),
    ("Should I buy Tesla?", "Tesla has been volatile; analysts are split between buy and hold."),
    ("What is an index fund?", "An index fund tracks a market index such as the S&P 500."),
]


GREETING = (
    "Thanks for contacting Acme Support! I'm Ava, your virtual assistant, and I'm happy to "
    "help you today."
)


def _session(turns: Sequence[tuple[str, str]], opening: str = "", ending: str = "") -> list[Trace]:
    return [
        Trace(
            id=f"t{i}", session_id="s", input=request, output=f"{opening} {answer} {ending}".strip()
        )
        for i, (request, answer) in enumerate(turns)
    ]


@pytest.mark.parametrize(
    ("opening", "ending", "said"),
    [
        (
            "",
            DISCLAIMER,
            "the ending 'This information is provided for general educational purposes …'",
        ),
        (GREETING, "", 'the opening "Thanks for contacting Acme Support! I\'m Ava, your …"'),
        (
            GREETING,
            DISCLAIMER,
            'the opening "Thanks for contacting Acme Support! I\'m Ava, your …" and the ending '
            "'This information is provided for general educational purposes …'",
        ),
    ],
)
def test_a_greeting_or_disclaimer_on_every_answer_is_neither_a_loop_nor_off_topic(
    opening: str, ending: str, said: str
) -> None:
    # a financial assistant adds the same 40-word disclaimer to each answer: with the
    # default embedder, loop_detection scored 0.359, 0.453 and 0.436 after the first turn
    # (hybrids of the disclaimer's words) and coherence failed 3 of 4 correct answers; a
    # support assistant that opened each short answer with the same greeting scored 0.553,
    # 0.506 and 0.392 (these answers: 0.524, 0.630, 0.605, coherence down to 0.508). Each
    # now scores what the answers say: as the same session
    # without them (the texts compared are those), except coherence on the first turn, which
    # has no earlier answer to tell its frame is one
    metrics = [LoopDetection(), Coherence()]
    with_it = Engine(metrics).score_sync(_session(ADVISOR, opening, ending))
    without = Engine(metrics).score_sync(_session(ADVISOR))
    scores = [[r.score for r in outcome.results] for outcome in with_it]
    plain = [[r.score for r in outcome.results] for outcome in without]
    assert scores[1:] == plain[1:]
    assert scores[0][0] == plain[0][0] == 1.0  # loop_detection: no earlier output
    assert [s > 0.9 for s, _ in scores] == [True] * 4
    assert [c >= 0.5 for _, c in plain] == [True, False, True, True]  # "How about Microsoft?"
    loop, coherence = with_it[1].results
    note = f"(left out: {said} it shares with an earlier answer, about no request"
    assert note in loop.reason and note in coherence.reason
    parts = {
        f"{part}_left_out" for part, text in (("opening", opening), ("ending", ending)) if text
    }
    assert {key for key in loop.metadata if key.endswith("_left_out")} == parts
    assert {key for key in coherence.metadata if key.endswith("_left_out")} == parts
    assert not any(key.endswith("_left_out") for key in with_it[0].results[1].metadata)


def test_a_repeat_is_still_a_repeat_whatever_ending_it_shares() -> None:
    embedder = HashingEmbedder()
    loop = LoopDetection(embedder=embedder)

    def score(request: str, answer: str, earlier: str) -> float | None:
        return loop.measure(
            Trace(input=request, output=answer), history=[Trace(input=request, output=earlier)]
        ).score

    # the same answer and disclaimer again: one text, hybrid 1
    answer = f"Apple (AAPL) closed at $189.20 today. {DISCLAIMER}"
    assert score("What did Apple close at?", answer, answer) == 0.0
    # the earlier answer again after an apology: it ends with all of it, compared whole
    sorry = f"Sorry for the confusion. {answer}"
    again = score("What did Apple close at?", sorry, answer)
    assert again == pytest.approx(1.0 - _hybrid(embedder, sorry, answer), abs=1e-6)
    assert again < 0.5
    # the same failure after new filler: the filler does not answer the request, so the
    # ending is what the agent said, compared whole as before
    failed = "Sorry, I could not book Hotel Roma Central, the booking service is down."
    kept = score("Book Hotel Roma Central", f"Let me try again. {failed}", f"Checking. {failed}")
    hybrid = _hybrid(embedder, f"Let me try again. {failed}", f"Checking. {failed}")
    assert kept == pytest.approx(1.0 - hybrid, abs=1e-6)
    assert kept is not None and kept < 0.5
    # an ending about the request is part of the answer
    refund = "I could not find a refund for order 48213 either."
    assert shared_frame(
        f"Order 48213 shipped. {refund}", f"It rains. {refund}", "Refund for 48213?"
    ) == ("", "")


def _hybrid(embedder: HashingEmbedder, first: str, second: str) -> float:
    vectors = embedder.embed([first, second])
    cosine = float(
        vectors[0] @ vectors[1] / np.linalg.norm(vectors[0]) / np.linalg.norm(vectors[1])
    )
    return cosine * jaccard(loop_tokens(first), loop_tokens(second))


@given(
    st.text(max_size=40),
    st.text(max_size=60),
    st.text(max_size=60),
    st.text(max_size=40),
    st.text(max_size=30),
)
@settings(max_examples=300)
def test_a_shared_frame_is_around_something_of_each_text_and_about_no_request(
    opening: str, first: str, second: str, ending: str, request: str
) -> None:
    answer, other = f"{opening}. {first}. {ending}", f"{opening}. {second}. {ending}"
    frame = shared_frame(answer, other, request)
    asked = content_tokens(request)
    for text in (answer, other):
        assert text.startswith(frame.opening) and text.endswith(frame.ending)
        middle = text[len(frame.opening) : len(text) - len(frame.ending)]
        assert middle.strip() or not frame.size
    for part in frame:
        assert not content_tokens(part) & asked
    if frame.size:
        kept = answer[len(frame.opening) : len(answer) - len(frame.ending)]
        assert content_tokens(kept) & asked
        assert frame.strip(answer).strip() == kept.strip()


def test_loop_detection_window_uses_last_three_outputs_with_their_indices() -> None:
    history = [trace("one"), trace("two"), trace(""), trace("three"), trace("four"), trace("")]
    result = LoopDetection().measure(trace("five"), history=history)
    assert [c["trace_index"] for c in result.metadata["comparisons"]] == [1, 3, 4]
    assert result.metadata["window_size"] == 3


def test_repeated_output_is_flagged_and_edge_cases_score_one() -> None:
    same = "I could not find the order, let me search for the order again."
    result = LoopDetection().measure(trace(same), history=[trace(same)])
    assert result.score == pytest.approx(0.0, abs=1e-6) and result.success is False
    assert LoopDetection().measure(trace(same)).score == 1.0
    assert LoopDetection().measure(trace(""), history=[trace(same)]).score == 1.0


def test_async_path_gives_the_same_result() -> None:
    history = [trace("alpha beta gamma")]
    sync = LoopDetection().measure(trace("alpha beta delta"), history=history)
    asynchronous = asyncio.run(LoopDetection().ameasure(trace("alpha beta delta"), history=history))
    assert sync.score == asynchronous.score


@settings(max_examples=60)
@given(
    current=st.text(max_size=80),
    previous=st.lists(st.text(max_size=80), max_size=5),
    source=st.text(max_size=80),
)
def test_scores_in_unit_interval(current: str, previous: list[str], source: str) -> None:
    case = EvalCase(trace=trace(current, input=source))
    loop = LoopDetection().measure(case, history=[trace(p) for p in previous])
    coherence = Coherence().measure(case)
    embedder = Coherence().embedder
    if coherence.skipped:  # only a request of follow-up words, with no earlier turn
        assert coherence.reason.startswith("not scored: the request ")
        assert all(w in STOP_WORDS or w in FOLLOW_UP_WORDS for w in words(source.strip()))
    for result in (loop, coherence):
        if result.skipped:
            continue
        if result.score is None:  # only for a text the embedder has no vector for
            unread = re.fullmatch(r"embedder error: \S+ gave (.*) a zero vector: .*", result.error)
            assert unread is not None, result.error
            texts = [t.strip() for t in (current, source, *previous) if t.strip()]
            named = [t for t in texts if repr(first_words(t)) == unread[1]]
            assert named and not embedder.embed(named).any()
        else:
            assert 0.0 <= result.score <= 1.0


THAI_REQUEST, THAI_ANSWER = "ฉันสั่งของที่ไหน", "สินค้าของคุณจัดส่งแล้ว"  # "where is my order"
UNREAD = (
    "a zero vector: it does not read the text (a language its model was not trained on, or "
    "no token it knows), so this case is not scored (use an embedder that reads this "
    "language: see the embeddings docs)"
)


def test_a_text_the_embedder_cannot_read_is_not_scored_as_off_topic() -> None:
    # the default embedder knows no Thai token: both texts were zero vectors, whose cosine 0
    # made coherence 0.0, a confident failure of an answer nothing had read
    embedder = Coherence().embedder
    assert not embedder.embed([THAI_REQUEST, THAI_ANSWER]).any()
    result = Coherence().measure(trace(THAI_ANSWER, input=THAI_REQUEST))
    assert (result.score, result.success, result.metadata) == (
        None,
        None,
        {"error_kind": "error"},
    )
    assert result.error == f"embedder error: minilm-l6-static-256 gave {THAI_REQUEST!r} {UNREAD}"
    # an English request answered with an emoji alone: the answer is the text named
    emoji = Coherence().measure(trace("👍", input="Can you confirm the refund?"))
    assert emoji.error == f"embedder error: minilm-l6-static-256 gave '👍' {UNREAD}"
    # an English text with a Thai word still has a vector, and a score
    assert Coherence().measure(trace("A-1 shipped สินค้า", input=THAI_REQUEST)).error is not None
    mixed = Coherence().measure(trace("A-1 shipped สินค้า", input="Where is A-1?"))
    assert mixed.score is not None


def test_loop_detection_decides_what_an_unreadable_output_cannot_change() -> None:
    loop = LoopDetection()
    # an earlier output with a word in common (Jaccard 1/2) and no vector: its cosine, the
    # weight of that overlap, is unknown
    shared = loop.measure(trace("สินค้า shipped"), history=[trace("สินค้า")])
    assert (shared.score, shared.error) == (
        None,
        f"embedder error: minilm-l6-static-256 gave 'สินค้า' {UNREAD}",
    )
    # the agent's own unreadable answer again: no cosine of it either
    again = loop.measure(trace(THAI_ANSWER), history=[trace(THAI_ANSWER)])
    assert again.error == f"embedder error: minilm-l6-static-256 gave {THAI_ANSWER!r} {UNREAD}"
    # an earlier thumbs-up shares no word with the answer: cosine × Jaccard is 0 whatever
    # the cosine, so the answer repeats nothing
    earlier = trace("👍")
    after = loop.measure(trace("Order A-1 shipped on Monday."), history=[earlier])
    assert after.score == 1.0
    assert after.metadata["comparisons"] == [
        {
            "trace_index": 0,
            "trace_id": earlier.id,
            "cosine_similarity": None,
            "jaccard_similarity": 0.0,
            "hybrid_score": 0.0,
        }
    ]


@settings(max_examples=300)
@given(
    st.one_of(
        st.text(max_size=60),
        st.text(alphabet=st.characters(max_codepoint=127), max_size=60),  # every ASCII mark
        st.text(alphabet=st.sampled_from("订单已发货12ab _，。ก่"), max_size=60),
    )
)
def test_words_are_the_regular_expressions_word_runs(text: str) -> None:
    # the ASCII path cuts with bytes.translate and str.split; \w+ is what it must equal.
    # Elsewhere a word holds the combining marks \w leaves out (accents written apart, the
    # vowel signs of Indic scripts, Thai's tone marks), and a run of a script written
    # without spaces is cut from what stands beside it ("订单12" is 订单 and 12): the same
    # characters, each word of one kind. Turkish "İ" lowers to "i"
    unspaced_blocks = (
        "\u0e00-\u0eff\u1000-\u109f\u1780-\u17ff\u3040-\u30ff\u3400-\u4dbf"
        "\u4e00-\u9fff\uf900-\ufaff"
    )
    marks = "\u0300-\u036f\u0900-\u0963\u0966-\u0dff"
    lowered = text.lower().replace("i\u0307", "i")
    runs = re.findall(f"[\\w{marks}{unspaced_blocks}]+", lowered)
    unspaced = re.compile(f"[{unspaced_blocks}]")  # Thai, Lao, Myanmar, Khmer, kana, CJK
    if not any(unspaced.search(run) for run in runs):
        assert words(text) == runs
    else:
        assert "".join(words(text)) == "".join(runs)
        assert all(
            all(unspaced.match(c) for c in word) or not unspaced.search(word)
            for word in words(text)
        )


@settings(max_examples=300)
@given(st.text(alphabet=st.sampled_from("ab 我\n\t"), max_size=1500))
def test_first_words_is_the_start_of_the_text_in_at_most_80_characters(text: str) -> None:
    short, split = first_words(text), text.split()
    assert len(short) <= FIRST_WORDS_CHARS + 2  # and " …"
    whole = " ".join(split)
    if len(split) <= 8 and len(whole) <= FIRST_WORDS_CHARS:
        assert short == whole
    else:
        assert short.endswith("…") and whole.startswith(short.removesuffix("…").rstrip())


@given(a=st.text(max_size=60), b=st.text(max_size=60))
def test_jaccard_symmetric_and_bounded(a: str, b: str) -> None:
    ta, tb = content_tokens(a), content_tokens(b)
    assert jaccard(ta, tb) == jaccard(tb, ta)
    assert 0.0 <= jaccard(ta, tb) <= 1.0


def test_loop_detection_keeps_the_words_pandaprobe_keeps() -> None:
    # PandaProbe's stop words drop "the", "will"; they keep "again", "me", "now", which a
    # stuck agent repeats. {let, me, check, order, again} vs {check, order, again, now}:
    # 3 shared of 6 → 0.5 (a broader stop-word list would give {let, check, order} vs
    # {check, order}: 2/3)
    first, second = "Let me check the order again.", "I will check the order again now."
    assert loop_tokens(first) == {"let", "me", "check", "order", "again"}
    assert jaccard(loop_tokens(first), loop_tokens(second)) == 0.5
    history = [Trace(id="t0", input="q", output=first, session_id="s")]
    current = Trace(id="t1", input="q", output=second, session_id="s")
    result = create_metric("loop_detection").measure(current, history=history)
    [comparison] = result.metadata["comparisons"]
    assert comparison["jaccard_similarity"] == 0.5
    assert result.score == pytest.approx(1 - comparison["cosine_similarity"] * 0.5, abs=1e-4)


class DownEmbedder:
    name = "down"

    def embed(self, texts: Sequence[str]) -> np.ndarray:
        raise ConnectionError("embedding service down")

    async def aembed(self, texts: Sequence[str]) -> np.ndarray:
        return self.embed(texts)


def test_a_batch_whose_embedding_fails_reports_it_on_each_case_that_needed_it() -> None:
    # the empty answer needs no vector: it keeps its own score; the others carry the error,
    # the same one a case scored alone reports
    cases = [
        EvalCase.from_trace(trace("It shipped.", input="Where is my order?")),
        EvalCase.from_trace(trace("", input="Where is my order?")),
        EvalCase.from_trace(trace("Refund sent.", input="Refund me")),
    ]
    metric = Coherence(embedder=DownEmbedder())
    for results in (
        metric.measure_batch(cases, [(), (), ()]),
        asyncio.run(metric.ameasure_batch(cases, [(), (), ()])),
    ):
        assert [(r.score, r.error) for r in results] == [
            (None, "ConnectionError: embedding service down"),
            (1.0, None),
            (None, "ConnectionError: embedding service down"),
        ]
        assert results[0].model_dump(exclude={"latency_ms"}) == metric.measure(cases[0]).model_dump(
            exclude={"latency_ms"}
        )


def test_coherence_does_not_score_a_request_that_came_with_media() -> None:
    # the request's text alone: a correct answer to "Describe this image." is off-topic
    # text to an embedder (the default one put it at 0.0, a failure)
    image = {"type": "image_url", "image_url": {"url": "data:image/png;base64,iVBORw0KGgo="}}
    audio = {"type": "input_audio", "input_audio": {"data": "UklGRg==", "format": "wav"}}
    earlier = {"role": "human", "content": "Hello."}
    asked = {"role": "human", "content": [{"type": "text", "text": "Describe this."}, image, audio]}
    model_call = Span(kind=SpanKind.LLM, name="m", input=[[earlier, asked]], output="A dog.")
    answer = "A golden retriever is catching a red frisbee on a beach."
    trace = Trace(input="Describe this.", output=answer, spans=[model_call])
    assert trace.request_media() == ["image", "audio"]
    result = Coherence().measure(trace)
    assert (result.score, result.skipped, result.metadata) == (
        None,
        True,
        {"media": ["image", "audio"]},
    )
    assert result.reason == (
        "not scored: the request came with media (audio, image) beside its text, and "
        "coherence compares the text alone"
    )
    # media only in an earlier message of the conversation: the request is text
    model_call.input = [
        [{**asked, "role": "user"}, {"role": "assistant", "content": "A dog."}, earlier]
    ]
    assert trace.request_media() == []
    assert Coherence().measure(trace).score is not None


class RecordingEmbedder:
    """The default embedder, keeping the texts it was given."""

    name = "recording"

    def __init__(self) -> None:
        self.inner = default_embedder()
        self.texts: list[str] = []

    def embed(self, texts: Sequence[str]) -> np.ndarray:
        self.texts.extend(texts)
        return self.inner.embed(texts)

    async def aembed(self, texts: Sequence[str]) -> np.ndarray:
        return self.embed(texts)


ANSWER = "Paris is the capital of France."
STRUCTURED = {
    "answer": ANSWER,
    "sources": ["https://en.wikipedia.org/wiki/Paris"],
    "confidence": 0.93,
    "request_id": "a1b2c3d4-e5f6-7890-abcd-ef1234567890",
    "model": "gpt-4o-mini",
}


def test_a_structured_or_cited_answer_is_scored_by_what_it_says() -> None:
    question = "What is the capital of France?"
    plain = Coherence().measure(trace(ANSWER, input=question)).score
    # as JSON, the keys, the id, the model's name and the address drowned the answer: 0.276
    # with the default embedder, a failure, where the same words alone score 0.857
    assert plain is not None and plain > 0.8

    class Answer(BaseModel):  # create_agent(response_format=Answer), scored live
        answer: str
        sources: list[str]
        confidence: float
        request_id: str
        model: str

    for output in (STRUCTURED, json.dumps(STRUCTURED), Answer(**STRUCTURED)):
        embedder = RecordingEmbedder()
        result = Coherence(embedder=embedder).measure(trace(output, input=question))
        assert embedder.texts == [question, ANSWER]
        assert result.score == pytest.approx(plain)
    # a list of sources under an answer is about no request: 0.487, a failure, with it
    cited = f"{ANSWER}\n\nSources:\n[1] https://en.wikipedia.org/wiki/Paris\n[2] [Britannica](https://www.britannica.com/place/Paris)"
    embedder = RecordingEmbedder()
    result = Coherence(embedder=embedder).measure(trace(cited, input=question))
    assert embedder.texts == [question, f"{ANSWER}\n\nSources:\n[1] \n[2] Britannica"]
    assert result.success and result.metadata["urls_left_out"] == 2
    assert result.reason.endswith("(2 web address(es) of the answer left out)")


def test_answers_of_one_shape_are_compared_by_what_they_say() -> None:
    answered = {**STRUCTURED, "request_id": "a1", "status": "success"}
    first = trace(answered, input="What is the capital of France?")
    other = {
        **answered,
        "answer": "Mount Everest is 8,849 metres tall.",
        "sources": ["https://en.wikipedia.org/wiki/Mount_Everest"],
        "confidence": 0.88,
        "request_id": "b2",
    }
    # the keys and the model's name every answer holds made two answers about a capital
    # and a mountain 0.393 alike (cosine 0.734 x Jaccard 0.536), a score of 0.607
    result = LoopDetection().measure(trace(other, input="How tall is Everest?"), history=[first])
    assert result.score == 1.0
    assert result.metadata["comparisons"][0]["jaccard_similarity"] == 0.0
    again = {**answered, "request_id": "c3"}  # the same answer: still a repeat
    result = LoopDetection().measure(trace(again, input="And the capital?"), history=[first])
    assert result.score == pytest.approx(0.0, abs=1e-6)


def test_prose_of_and_without_urls_keep_what_a_person_reads() -> None:
    assert prose_of("plain text") == "plain text"
    assert prose_of({"messages": [{"role": "assistant", "content": "It is sunny."}]}) == (
        "assistant\nIt is sunny."
    )
    assert prose_of('["Paris", "v2", "https://x.org"]') == "Paris"
    # nothing that reads as words: the value as JSON, as before
    assert prose_of({"temperature": 21, "unit": "C1"}) == '{"temperature": 21, "unit": "C1"}'
    assert prose_of("{not json") == "{not json"
    assert prose_of(None) == ""
    assert without_urls("See https://docs.example.com/install.") == ("See .", 1)
    # the answer to "what is the link?" is its link
    link = "https://docs.example.com/install"
    assert without_urls(link) == (link, 0)
