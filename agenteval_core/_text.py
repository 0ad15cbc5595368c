"""Lexical tokens for Jaccard similarity and answer-uses-result checks; short forms of text."""

from __future__ import annotations

import functools
import json
import re
from typing import Any, NamedTuple

__all__ = [
    "FIRST_WORDS_CHARS",
    "FOLLOW_UP_WORDS",
    "LOOP_STOP_WORDS",
    "STOP_WORDS",
    "Frame",
    "content_text",
    "content_tokens",
    "first_words",
    "jaccard",
    "link_words",
    "loop_tokens",
    "prose_of",
    "says_nothing_alone",
    "shared_frame",
    "without_urls",
    "words",
]

_NOT_SPACE = re.compile(r"\S")

STOP_WORDS: frozenset[str] = frozenset(
    """
    a about above after again against all am an and any are as at be because been before being
    below between both but by can could did do does doing down during each few for from further
    had has have having he her here hers herself him himself his how i if in into is it its itself
    just me more most my myself no nor not now of off on once only or other our ours ourselves out
    over own same she should so some such than that the their theirs them themselves then there
    these they this those through to too under until up very was we were what when where which
    while who whom why will with would you your yours yourself yourselves
    """.split()
)
"""A fixed English stop-word list, so token sets do not change with library versions."""


LOOP_STOP_WORDS: frozenset[str] = frozenset(
    """
    a above after all an and any are as at be been before being below both but by can could did
    do does during each either every few for from had has have in into is it its may might more
    most neither no nor not of on only or other own same shall should so some such than the
    through to too very was were will with would yet
    """.split()
)
"""The stop words PandaProbe's loop_detection removes before its Jaccard similarity (and only
those: it keeps words such as "again" or "still", which a looping agent repeats), so
loop_detection scores as PandaProbe's does. Fixed here, so token sets never change with a
library's version."""


# every ASCII character \w does not match, as a space: on ASCII text, the runs of word
# characters are then what str.split finds (a third faster than the regular expression).
# A table of bytes: translating the encoded text takes a fifth of str.translate's time.
_NOT_WORD = bytes(c if c < 128 and re.fullmatch(r"\w", chr(c)) else 32 for c in range(256))


# scripts written without spaces between words: Thai, Lao, Myanmar, Khmer, Japanese kana and
# the CJK ideographs. A run of them is one ``\w+`` "word", a whole clause (or, where \w
# stops at a vowel sign, a few letters of a word); its overlapping character pairs stand
# in for its words, as search engines index such text
_UNSPACED = re.compile(
    "[\u0e00-\u0eff\u1000-\u109f\u1780-\u17ff\u3040-\u30ff\u3400-\u4dbf\u4e00-\u9fff\uf900-\ufaff]+"
)


_WORD = re.compile(
    f"{_UNSPACED.pattern}|"
    # \w and the combining marks it leaves out: Latin accents written apart (NFD), and the
    # vowel signs of the Indic scripts ("हाँ" had read as "ह"), their dandas aside
    "[\\w\u0300-\u036f\u0900-\u0963\u0966-\u0dff]+"
)
"""A word: a run of a script written without spaces whole (its vowel signs and tone marks
included: \\w stops at them), else a run of word characters and combining marks."""


def words(text: str) -> list[str]:
    """The lower-cased ``\\w+`` runs of ``text``, in order; a run of a script written
    without spaces is a word apart from the digits or letters beside it ("订单12345" is
    订单 and 12345)."""
    lowered = text.lower()
    if lowered.isascii():
        return lowered.encode("ascii").translate(_NOT_WORD).decode("ascii").split()
    if "\u0307" in lowered:  # Turkish "İ" lowers to "i" and a combining dot, no \w: a split
        lowered = lowered.replace("i\u0307", "i")
    if _UNSPACED.search(lowered):
        lowered = _UNSPACED.sub(r" \g<0> ", lowered)
    return _WORD.findall(lowered)


def _content_words(text: str, stop_words: frozenset[str] = STOP_WORDS) -> list[str]:
    pairs: list[str] = []
    if not text.isascii() and _UNSPACED.search(text):
        pairs = [
            run[start : start + 2]
            for run in _UNSPACED.findall(text)
            for start in range(max(1, len(run) - 1))
        ]
        text = _UNSPACED.sub(" ", text)
    return [word for word in words(text) if len(word) > 1 and word not in stop_words] + pairs


@functools.lru_cache(maxsize=4096)
def content_tokens(text: str) -> frozenset[str]:
    """Lower-cased ``\\w+`` words of ``text`` minus stop words and one-letter tokens (text
    in a script written without spaces, such as Chinese or Thai: its character pairs)."""
    return frozenset(_content_words(text))


@functools.lru_cache(maxsize=4096)
def loop_tokens(text: str) -> frozenset[str]:
    """Lower-cased ``\\w+`` words of ``text`` minus :data:`LOOP_STOP_WORDS` and one-letter
    tokens (text in a script written without spaces, such as Chinese or Thai: its
    character pairs): the token sets whose Jaccard similarity loop_detection takes."""
    return frozenset(_content_words(text, LOOP_STOP_WORDS))


def content_text(text: str) -> str:
    """The content words of ``text`` in order, lower-cased and joined by single spaces."""
    return " ".join(_content_words(text))


def jaccard(a: frozenset[str] | set[str], b: frozenset[str] | set[str]) -> float:
    """|a ∩ b| / |a ∪ b|; two empty sets give 0 (nothing shared, so no evidence of repetition)."""
    shared = len(a & b)
    union = len(a) + len(b) - shared  # without building the union set
    return shared / union if union else 0.0


FOLLOW_UP_WORDS = frozenset(
    """
    yes yeah yep yup no nope ok okay sure please thanks thank thx great good fine perfect
    cool right correct exactly go ahead proceed continue one ones first second third last
    option sounds works agreed confirm confirmed done

    sí si vale claro gracias por favor perfecto de acuerdo bueno adelante hazlo sigue
    primero primera segundo segunda tercero tercera último última opción ese esa eso el la
    lo los las un uno una me

    oui ouais merci accord parfait vas allez il vous plaît plait premier première deuxième s d l
    seconde troisième dernier dernière celui celle ça bien est bon le les une

    ja jawohl klar danke bitte gerne genau gut los mach weiter erste ersten zweite zweiten
    dritte dritten letzte letzten die der das den dem ein eine einen nein

    sì certo grazie prego perfetto va bene accordo procedi vai primo prima secondo terzo
    ultimo ultima quello quella il

    sim obrigado obrigada perfeito pode certo vai em frente primeiro terceiro essa esse isso
    o os um uma não

    make shorter longer simpler clearer shorten simplify simply simple summarize summarise
    summary rephrase rewrite reword redo retry try explain elaborate expand clarify
    detail details detailed example examples source sources cite citation citations
    reference references evidence else translate format bullet bullets point points list
    table sentence sentences paragraph paragraphs word words brief briefly concise tl dr
    tldr eli5 like two three four five version another different instead give show tell
    write formal informal casual polite professional friendly tone m t re ve ll don

    corto corta breve resume resumen explica explícalo ejemplo ejemplos fuente fuentes
    detalle detalles traduce otra vez más

    court courte résume explique exemple exemples détails traduis encore plus

    kürzer fasse zusammen erkläre erklär beispiel beispiele quelle quellen details übersetze
    nochmal mehr

    più breve riassumi spiega esempio esempi fonte fonti dettagli traduci ancora

    mais curto resuma explique exemplo exemplos detalhes traduza novamente

    да нет ага угу ок окей хорошо ладно давай давайте пожалуйста спасибо конечно согласен
    согласна продолжай продолжайте дальше ещё еще раз первый первая первое первую второй
    вторая второе вторую третий третья третье третью последний последняя последнее
    последнюю вариант вариантом этот эта это этого эту тот та то его её ее их короче
    кратко покороче подробнее подробней объясни объясните поясни перескажи сократи
    переведи переведите пример примеры источник источники снова сделай сделайте так и а в
    на с одном одно предложении

    ja nee graag alsjeblieft alstublieft dank bedankt oké prima goed doe maar het dat die deze
    dit eerste tweede derde laatste optie korter vat samen leg uit uitleg voorbeeld
    voorbeelden bron bronnen meer opnieuw nog eens vertaal ga door verder een zin

    tak nie proszę poproszę dzięki dziękuję okej dobrze jasne zgoda pierwszy pierwsza
    pierwsze drugi druga drugie trzeci trzecia ostatni ostatnia opcja opcję ten tę go
    krócej streść wyjaśnij przykład przykłady źródło jeszcze przetłumacz kontynuuj dalej
    zrób w jednym zdaniu

    evet hayır lütfen tamam teşekkürler teşekkür ederim sağol olur peki birinci ilk ikinci
    üçüncü sonuncu son seçenek bu şu onu bunu daha kısa özetle açıkla örnek kaynak tekrar
    çevir devam et yap bir cümlede

    ya tidak tolong silakan terima kasih oke baik boleh setuju lanjut lanjutkan yang pertama
    kedua ketiga terakhir pilihan itu ini lebih pendek singkat ringkas ringkaskan jelaskan
    contoh sumber lagi terjemahkan dong saja aja dalam satu kalimat

    vâng dạ có không ừ được làm ơn cảm cái thứ nhất hai ba cuối cùng đầu tiên tiếp tục
    ngắn hơn gọn tóm tắt giải thích ví dụ nguồn lại nữa dịch đi nhé nha đó này câu

    हाँ हां जी नहीं ठीक है धन्यवाद शुक्रिया कृपया ज़रूर जरूर पहला पहली पहले दूसरा दूसरी दूसरे
    तीसरा तीसरी आखिरी अंतिम वाला वाली वाले विकल्प यह वह इसे उसे और छोटा संक्षेप में समझाओ
    समझाइए उदाहरण स्रोत फिर से अनुवाद करो करें कीजिए आगे बढ़ो चलो

    نعم لا من فضلك شكرا شكراً حسنا حسناً موافق تمام الأول الأولى الثاني الثانية الثالث
    الثالثة الأخير الأخيرة الخيار هذا هذه ذلك أكثر أقصر باختصار لخص اشرح مثال المصدر مرة
    أخرى ترجم استمر واصل أرجوك رجاء

    네 예 응 좋아요 좋아 좋습니다 좋네요 감사합니다 고마워요 고맙습니다 그래요 그래 그럼 맞아요
    맞아 계속 계속해 계속해주세요 진행 진행해 진행해주세요 해주세요 해줘 해 주세요 부탁해요
    부탁합니다 첫 첫번째 첫번째로 번째 번째로 번째요 번째것 두 세 마지막 마지막으로 그거
    그걸로 그것 그것으로 이거 이걸로 저거 저걸로 더 짧게 간단히 간단하게 자세히 자세하게 설명
    설명해 설명해주세요 요약 요약해 요약해주세요 번역 번역해 번역해주세요 예시 출처 다시
    """.split()
)
"""Words of a request that says nothing on its own but answers the agent's last turn
("Yes, please.", "The second one", "ok do it") or asks for something done to its last
answer ("Make it shorter.", "Summarize that in one sentence.", "Give me a source for
that.", "Tell me more."), beside the stop words; and their like in Spanish, French,
German, Italian and Portuguese ("Sí, por favor.", "Oui, s'il vous plaît.", "Ja, bitte.",
"Sì, grazie.", "Sim, o primeiro.", "Explícalo otra vez."), Russian ("Да, пожалуйста."),
Hindi ("हाँ, कृपया"),
Dutch ("Ja, graag."), Polish ("Tak, poproszę."), Turkish ("Evet, lütfen."), Indonesian
("Ya, tolong."), Vietnamese ("Vâng, làm ơn."), Arabic ("نعم من فضلك") and Korean ("네, 두
번째로 해주세요"), with the articles and pronouns such a request holds. Any other word says
something: "Reserva el hotel Roma" does, and so does "Explain recursion."."""


UNSPACED_FOLLOW_UPS = frozenset(
    """
    好 好的 好吧 好啊 行 可以 是 是的 对 对的 嗯 嗯嗯 没问题 谢谢 谢 请 麻烦 就 这 那 这个 那个
    个 一 二 三 四 五 第一 第二 第三 第四 第五 最后 选项 吧 啊 呢 吗 了 的 我 你 您 要 用 选 订
    给 看 看看 说 讲 继续 开始 确认 同意 再 更 一点 一些 一下 点 些 简短 简单 短 长 详细 具体
    解释 说明 总结 概括 翻译 成 换 改 写 重新 例子 举例 来源 出处 英文 中文

    はい ええ うん いいえ お願い します ください して です ます で を に が は の も と ね よ
    それ それで これ あれ この その あの 番目 最初 最後 一つ 二つ 三つ 目 もっと 短く 簡単
    詳しく 説明 要約 翻訳 続けて 続き 例 出典 英語 日本語 ありがとう ございます 了解 大丈夫
    いい 良い

    ใช่ ครับ ค่ะ คะ จ้ะ จ้า นะ ได้ เลย โอเค ตกลง ขอบคุณ ไม่ อัน แรก ที่ หนึ่ง สอง สาม
    สุดท้าย ตัวเลือก นั้น นี้ เอา ช่วย หน่อย สั้น ลง กว่า อธิบาย สรุป แปล เป็น ภาษา อังกฤษ
    ตัวอย่าง ต่อ อีก ครั้ง
    """.split()
)
""":data:`FOLLOW_UP_WORDS` in Chinese, Japanese and Thai, written without spaces: a run of
these scripts says nothing alone when it can be cut into these from start to end
("好的，就订第二个吧" is 好的 and 就 订 第二 个 吧; "二番目でお願いします" is 二 番目 で お願い
します; "อันที่สองครับ" is อัน ที่ สอง ครับ; "订一家酒店" is not)."""
_LONGEST_FOLLOW_UP = max(map(len, UNSPACED_FOLLOW_UPS))


def _follow_ups_only(run: str) -> bool:
    """Whether ``run`` (of a script written without spaces) cuts into
    :data:`UNSPACED_FOLLOW_UPS` from start to end."""
    cut = [True] + [False] * len(run)  # cut[i]: run[:i] cuts into them
    for end in range(1, len(run) + 1):
        cut[end] = any(
            cut[start] and run[start:end] in UNSPACED_FOLLOW_UPS
            for start in range(max(0, end - _LONGEST_FOLLOW_UP), end)
        )
    return cut[-1]


_FOLLOW_UP_CHARS = 80
"""The longest request read as a follow-up: one that says nothing on its own is short."""


def says_nothing_alone(request: str) -> bool:
    """Whether every word of ``request`` is a stop word or one of :data:`FOLLOW_UP_WORDS`
    (in Chinese or Japanese: of :data:`UNSPACED_FOLLOW_UPS`); a number or an id, "Where is
    A-1?", says something."""
    return len(request) <= _FOLLOW_UP_CHARS and all(
        word in STOP_WORDS
        or word in FOLLOW_UP_WORDS
        or (_UNSPACED.fullmatch(word) is not None and _follow_ups_only(word))
        for word in words(request)
    )


_SENTENCE_BREAK = re.compile(r"(?<=[.!?。！？])\s+|\n\s*|(?<=[。！？])")


class Frame(NamedTuple):
    """The sentences an answer opens and ends with that another answer of the agent's also
    opens or ends with, when they are about no request: a greeting, a sign-off, a
    disclaimer (see :func:`shared_frame`)."""

    opening: str = ""
    ending: str = ""

    def strip(self, text: str) -> str:
        """``text`` without the frame's opening and ending, each where ``text`` has it and
        something of its own besides."""
        if self.opening and text.startswith(self.opening) and text[len(self.opening) :].strip():
            text = text[len(self.opening) :].lstrip()
        if self.ending and text.endswith(self.ending) and text[: -len(self.ending)].strip():
            text = text[: -len(self.ending)].rstrip()
        return text

    @property
    def size(self) -> int:
        """How much of an answer the frame is, in characters (0: no frame)."""
        return len(self.opening) + len(self.ending)


_NO_FRAME = Frame()


def shared_frame(answer: str, other: str, request: str) -> Frame:
    """The sentences ``answer`` and ``other`` both open and end with, when they read as a
    greeting, a sign-off or a disclaimer the agent adds to its answers: each says something
    between them, ``answer``'s part between them shares a word with its ``request`` (it
    answers it), and what is left out shares none (it is about no request). An opening or
    ending that is about the request ("I could not find your order."), or a frame around
    filler ("Let me try again."), is what the agent said; so is all of an answer that the
    other holds whole."""
    if not answer or not other:
        return _NO_FRAME
    opening = ending = ""
    limit = min(len(answer), len(other))
    if answer[0] == other[0]:
        shared = 0
        while shared < limit and answer[shared] == other[shared]:
            shared += 1
        if shared == limit:
            return _NO_FRAME  # one opens with all of the other: it says it again
        breaks = list(_SENTENCE_BREAK.finditer(answer, 0, shared))
        opening = answer[: breaks[-1].end()] if breaks else ""
    if answer[-1] == other[-1]:  # most pairs of answers end differently: no more work
        shared = 0
        while shared < limit and answer[-1 - shared] == other[-1 - shared]:
            shared += 1
        if shared == limit:
            return _NO_FRAME  # one ends with all of the other
        # the break's sentence end among the shared characters: one the other text has too
        found = _SENTENCE_BREAK.search(answer, len(answer) - shared + 1)
        ending = answer[found.end() :] if found is not None else ""
    if not opening and not ending:
        return _NO_FRAME
    middle = answer[len(opening) : len(answer) - len(ending)]
    if not _NOT_SPACE.search(other, len(opening), len(other) - len(ending)):
        return _NO_FRAME
    asked = content_tokens(request)
    if not content_tokens(middle) & asked:
        return _NO_FRAME
    return Frame(
        "" if content_tokens(opening) & asked else opening,
        "" if content_tokens(ending) & asked else ending,
    )


FIRST_WORDS_CHARS = 80
"""The most characters :func:`first_words` keeps: a text in a script written without spaces
(Chinese, Japanese, Thai) is one long word."""


def first_words(text: str, count: int = 8) -> str:
    """The first ``count`` words of ``text`` on one line, at most :data:`FIRST_WORDS_CHARS`
    characters, with "…" when there was more."""
    found = _NOT_SPACE.search(text)
    start = found.start() if found is not None else len(text)
    end = start + FIRST_WORDS_CHARS * 4  # never all of a text of megabytes
    words = text[start:end].split()
    short = " ".join(words[:count])
    if len(short) > FIRST_WORDS_CHARS:
        return short[:FIRST_WORDS_CHARS].rstrip() + "…"
    more = len(words) > count or _NOT_SPACE.search(text, end) is not None
    return short + (" …" if more else "")


_JSON_OPENS = re.compile(r"\s*[\[{]")
# an address ends before the punctuation that closes its sentence
_URL = re.compile(
    r"(?:\b(?:https?|ftp)://|\bwww\.)[^\s<>\"'`)\]]*[^\s<>\"'`)\].,;:!?]", re.IGNORECASE
)
_MARKDOWN_LINK = re.compile(r"\[([^\]\n]*)\]\((?:https?://|www\.)[^)\s]*\)", re.IGNORECASE)
# one token that holds a digit: an id, a model name, a version ("a1b2-c3", "gpt-4o", "v2")
_ID = re.compile(r"[\w.:/#@+\-]*\d[\w.:/#@+\-]*")
_LETTER = re.compile(r"[^\W\d_]")
PROSE_LEAVES = 200
"""The most texts :func:`prose_of` takes from one structured value (in order)."""


def prose_of(value: Any) -> str:
    """A request or answer as a person reads it, for comparing meanings: a text as it is;
    of a structured value (an agent's JSON answer, ``{"answer": ..., "sources": [...],
    "confidence": 0.93, "request_id": ...}``, or a JSON object or array written as text)
    its texts in order, without the keys, numbers, ids and web addresses around them, which
    made a right answer read as off-topic and any two answers of one shape alike. A value
    that holds no such text is read as its JSON."""
    if isinstance(value, str):
        if not _JSON_OPENS.match(value):
            return value
        try:
            value = json.loads(value)  # an object or an array: it opens as one
        except ValueError:
            return value
    if value is None:
        return ""
    if not isinstance(value, dict | list | tuple | int | float):
        # a live run's structured answer is an object (a pydantic model, a dataclass):
        # its fields, as its capture line holds them
        from .schema._values import plain

        value = plain(value)
    texts = _texts_in(value)
    if texts:
        return "\n".join(texts)
    try:
        return json.dumps(value, ensure_ascii=False, sort_keys=True, default=str)
    except (TypeError, ValueError):
        return str(value)


def _texts_in(value: Any) -> list[str]:
    """The texts a structured value holds that read as words (see :func:`prose_of`), in
    order, at most :data:`PROSE_LEAVES`; each container visited once."""
    found: list[str] = []
    pending = [value]
    seen: set[int] = set()
    while pending and len(found) < PROSE_LEAVES:
        item = pending.pop()
        if isinstance(item, str):
            text = item.strip()
            if _LETTER.search(text) and not (_ID.fullmatch(text) or _URL.fullmatch(text)):
                found.append(text)
        elif isinstance(item, dict | list | tuple) and id(item) not in seen:
            seen.add(id(item))
            children = item.values() if isinstance(item, dict) else item
            pending.extend(reversed(list(children)))
    return found


def link_words(text: str) -> frozenset[str]:
    """The content words of the paths of ``text``'s web addresses, hosts left out: what a
    link says it is about ("password", "reset" of ``https://help.acme.com/articles/password-reset``)."""
    if "://" not in text and "www." not in text and "WWW." not in text:
        return frozenset()
    found: set[str] = set()
    for address in _URL.findall(text):
        path = address.split("://", 1)[-1].partition("/")[2]  # after the host
        found.update(_content_words(path))
    return frozenset(found)


def without_urls(text: str) -> tuple[str, int]:
    """``text`` without its web addresses (a markdown link keeps its words), and how many
    were left out: a list of sources under an answer is about no request. ``text`` itself
    when nothing but addresses is left (the answer to "the link to the docs?")."""
    if "://" not in text and "www." not in text and "WWW." not in text:
        return text, 0
    linked = _MARKDOWN_LINK.subn(r"\1", text)
    bare = _URL.subn("", linked[0])
    rest = bare[0]
    if not _LETTER.search(rest):
        return text, 0
    return rest, linked[1] + bare[1]
