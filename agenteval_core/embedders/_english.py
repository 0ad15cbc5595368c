"""Whether a text is one the default embedder reads: English.

all-MiniLM-L6-v2, and so the static model distilled from it, was trained on English. Its
WordPiece vocabulary cuts other languages into letters and word pieces whose vectors say
little about meaning: on requests with a correct and an off-topic answer written in Spanish,
German, Russian, Chinese, Japanese, Korean, Arabic or Hindi, the off-topic answer scored as
high as the correct one or higher, and both well above coherence's 0.5 threshold (see the
embeddings docs). A cosine of such a text is made up, so the default embedder gives it no
vector, and the metrics do not score it.

Two checks, both cheap: a text whose letters are mostly outside the Latin script is not
English; a text in the Latin script is not English when at least two of its distinct words
are function words of another European language (a letter with an accent counts as one)
and they outnumber its distinct English ones.
"""

from __future__ import annotations

from .._text import words

__all__ = ["english_words", "reads_english"]

_SAMPLE = 1000
"""The characters of a text read: its language shows in its first sentences."""

# Function words of the languages most agents answer in besides English, none of them an
# English word ("die", "do", "per", "pour", "van", "ai" are left out for that reason).
_OTHER = frozenset(
    """
    el la los las que de del al en por para con una es su sus se lo pero como muy hay usted ya
    porque cuando donde puede puedo tiene tengo este esta estos estas hoy
    le les des est et une du pas qui dans sur avec vous votre vos nous je il elle ils sont au
    aux ce cette mais ou être été avez
    der das und ist nicht ein eine einen einem mit zu auf für den dem ich sie wir ihr ihre
    ihren sind wird wurde von bei oder aber auch noch nur nach wie kann haben unser unsere
    uns sich im vom zum zur sollte dieses diese dieser
    gli della di che sono non suo sua mio questo ho hai
    os da dos em uma com não seu meu minha foi você
    het een niet zijn ik je uw mijn wordt werd op voor naar bij ook maar dat
    og ikke det til på jeg med av att och inte är jag
    bir ve bu için ile çok değil ben siz biz
    jest nie się że czy jak co moje twoje jego jej są został zostało była było
    """.split()
)
_ENGLISH = frozenset(
    """
    the is are was were you your it this that to of and for with at be have has not can will
    from by my we they what where when how which please there here an does or do
    """.split()
)

_ACCENTED = frozenset("àáâãäåçèéêëìíîïñòóôõöùúûüýÿßœæ")


def _mostly_latin(sample: str) -> bool:
    letters = [c for c in sample if c.isalpha()]
    latin = sum(1 for c in letters if c <= "\u024f" or "\u1e00" <= c <= "\u1eff")
    return 2 * latin >= len(letters)


def reads_english(text: str) -> bool:
    """Whether ``text`` reads as English, or could (a number, a name, a word or two of
    another language: too little to tell is read)."""
    sample = text[:_SAMPLE]
    # letters with accents, which English words seldom carry, count as one more such word
    accented = False
    if not sample.isascii():
        if not _mostly_latin(sample):
            return False
        accented = not _ACCENTED.isdisjoint(sample.lower())
    return english_words(words(sample), accented)


def english_words(found: list[str], accented: bool = False) -> bool:
    """The function-word check of :func:`reads_english` on a text's lower-cased words (a
    word with a mark still attached, "lunes.", is no function word: a cheaper split of an
    ASCII text misses a few); ``accented``: the text has a letter with an accent."""
    other = len(_OTHER.intersection(found)) + accented  # distinct words: set work in C
    return other < 2 or other <= len(_ENGLISH.intersection(found))
