"""The default embedder: all-MiniLM-L6-v2 distilled to static token vectors, shipped inside
the package (``scripts/distill_embedder.py`` rebuilds it)."""

from __future__ import annotations

import re
import threading
from collections.abc import Sequence
from importlib import resources
from itertools import chain
from typing import Any, SupportsIndex

import numpy as np
import numpy.typing as npt

from ._english import english_words, reads_english
from ._local import LocalEmbedder

__all__ = ["StaticEmbedder", "default_embedder"]

_DATA = "agenteval_core.embedders.data"

# On printable ASCII, MiniLM's tokenizer (BERT normaliser and pre-tokeniser) lowercases the
# text, splits it at whitespace, and splits each word into runs of letters and digits and
# single punctuation marks; WordPiece then runs on each piece alone. So a word's ids are the
# same wherever it stands: words are cut here at whitespace (str.split, far cheaper than a
# regular expression) and their ids kept. Agent texts reuse a small vocabulary, and a known
# word costs a dict lookup, not a tokenizer pass; a new word goes through the tokenizer.
# The tokenizer's added tokens ("[UNK]", "[PAD]") are matched in the raw text before it
# is lowercased: a text that holds one goes through the tokenizer whole.
_PRINTABLE_ASCII = re.compile(r"[\t\n\r -~]*")
_WORD_CACHE_SIZE = 100_000


class StaticEmbedder(LocalEmbedder):
    """Semantic embeddings with no torch and no download: each token of MiniLM's vocabulary
    has a fixed vector (made by running it through all-MiniLM-L6-v2, reduced to 256
    dimensions, stored as int8), and a text's vector is the mean of its tokens' vectors,
    L2-normalised.

    About 10 µs per text on one core once its words have been seen (a text of new words:
    about 30 µs). On agenteval's labelled set of requests with a correct
    and an off-topic answer, it puts 97% of correct answers at or above coherence's 0.5
    threshold and every off-topic one below it (MiniLM itself: see the embeddings docs).
    The model (7 MB) loads on first use, once per process.

    It reads English, as MiniLM does: a text in another language (mostly another script, or
    more function words of another European language than of English) gets a zero vector,
    which the metrics do not score. In eight other languages its cosines put off-topic
    answers above coherence's threshold as often as correct ones (see the embeddings docs);
    use a multilingual embedder for such texts.

    Args:
        max_tokens: tokens per text that count (a longer text is cut; MiniLM's own limit).
        cache_size: recent texts whose vectors are kept.
        english_only: ``False`` embeds every text, whatever its language (its cosines in
            other languages may still rank answers, but do not meet coherence's threshold
            the way English ones do).
    """

    dim = 256

    def __init__(
        self, *, max_tokens: int = 512, cache_size: int = 4096, english_only: bool = True
    ) -> None:
        super().__init__(cache_size)
        self.max_tokens = max_tokens
        self.english_only = english_only
        self._model: tuple[Any, npt.NDArray[np.float32], int | None] | None = None
        self._lock = threading.Lock()
        self._word_ids: dict[str, list[int]] = {}
        self._added: tuple[str, ...] = ()
        """The tokenizer's added tokens, known once the model is loaded."""

    @property
    def name(self) -> str:
        return "minilm-l6-static-256" if self.english_only else "minilm-l6-static-256-any-language"

    def __reduce_ex__(self, protocol: SupportsIndex) -> str | tuple[Any, ...]:
        # the default embedder, sent to another process (a replay's workers), is that
        # process's default embedder: the one its fork server loaded
        if self is _DEFAULT:
            return default_embedder, ()
        return super().__reduce_ex__(protocol)

    def __getstate__(self) -> dict[str, Any]:
        # the model loads again in the receiving process (a replay's workers), on first use
        state = super().__getstate__()
        state.update(_model=None, _lock=None, _word_ids={})
        return state

    def __setstate__(self, state: dict[str, Any]) -> None:
        self.__dict__.update(state)
        self._lock = threading.Lock()

    def load(self) -> None:
        """Load the model now, not on first use."""
        self._load()

    def _load(self) -> tuple[Any, npt.NDArray[np.float32], int | None]:
        with self._lock:
            if self._model is None:
                from tokenizers import Tokenizer  # a Rust tokenizer; imported on first use

                files = resources.files(_DATA)
                tokenizer = Tokenizer.from_str(
                    (files / "minilm_static_tokenizer.json").read_text(encoding="utf-8")
                )
                tokenizer.no_truncation()  # max_tokens is the one cut, whichever path
                with (files / "minilm_static.npz").open("rb") as handle, np.load(handle) as data:
                    vectors = data["vectors"].astype(np.float32) * data["scales"][:, None]
                added = tokenizer.get_added_tokens_decoder().values()
                self._added = tuple(token.content for token in added)
                self._model = (tokenizer, vectors, tokenizer.token_to_id("[UNK]"))
            return self._model

    def _token_ids(self, texts: Sequence[str]) -> list[list[int]]:
        """Each text's first ``max_tokens`` MiniLM token ids, unknown tokens then left out;
        none for a text that is not English (:func:`reads_english`), when ``english_only``."""
        tokenizer, _, unknown = self._load()
        # a token is at least one character: cutting the text first bounds the tokenizer's
        # work on a 2 MB tool result without changing which tokens count
        cut = [text[: self.max_tokens * 32] for text in texts]
        added = self._added
        # each text's words (None: the whole text goes through the tokenizer); a text in
        # another language has none, so its row is zero, which the metrics do not score
        # (MiniLM's vectors of its word pieces are no measure of its meaning)
        split: list[list[str] | None] = []
        for text in cut:
            if _PRINTABLE_ASCII.fullmatch(text) and (
                "[" not in text or not any(token in text for token in added)
            ):
                found = text.lower().split()
                split.append(found if not self.english_only or english_words(found) else [])
            else:
                split.append(None if not self.english_only or reads_english(text) else [])
        known = self._word_ids
        seen = set().union(*(words for words in split if words))  # one pass in C
        new = list(seen.difference(known))
        if len(known) + len(new) > _WORD_CACHE_SIZE:  # start afresh; a thread still
            known = self._word_ids = {}  # reading the old cache keeps its own reference
            new = list(seen)
        # words the cache lacks, then whole texts that are not printable ASCII: one call
        whole = [text for text, words in zip(cut, split, strict=True) if words is None]
        encodings = (
            tokenizer.encode_batch_fast(new + whole, add_special_tokens=False)
            if new or whole
            else []
        )
        encoded = [encoding.ids for encoding in encodings]
        known.update(zip(new, encoded, strict=False))
        others = iter(encoded[len(new) :])
        token_ids = []
        for words in split:
            ids = (
                next(others)
                if words is None
                else list(chain.from_iterable(map(known.__getitem__, words)))
            )[: self.max_tokens]  # MiniLM's limit counts unknown tokens too
            token_ids.append([i for i in ids if i != unknown] if unknown in ids else ids)
        return token_ids

    def _embed_batch(self, texts: Sequence[str]) -> npt.NDArray[np.float32]:
        _, vectors, _ = self._load()
        out = np.zeros((len(texts), self.dim), dtype=np.float32)
        for row, ids in enumerate(self._token_ids(texts)):
            if ids:  # the mean's direction: the sum, normalised below
                np.add.reduce(vectors.take(ids, axis=0), axis=0, out=out[row])
        norms = np.linalg.norm(out, axis=1, keepdims=True)
        return np.divide(out, norms, out=out, where=norms > 0)


_DEFAULT: StaticEmbedder | None = None


def default_embedder() -> StaticEmbedder:
    """The shared default embedder: one :class:`StaticEmbedder` per process."""
    global _DEFAULT
    if _DEFAULT is None:
        _DEFAULT = StaticEmbedder()
    return _DEFAULT
