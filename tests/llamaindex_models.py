"""LlamaIndex models and indexes the LlamaIndex tests share."""

from __future__ import annotations

from typing import Any

from llama_index.core import Document, VectorStoreIndex
from llama_index.core.base.llms.types import (
    CompletionResponse,
    CompletionResponseGen,
    LLMMetadata,
)
from llama_index.core.embeddings import MockEmbedding
from llama_index.core.llms import CustomLLM
from llama_index.core.llms.callbacks import llm_completion_callback
from pydantic import Field


class CompletionModel(CustomLLM):
    """A completion model, as llama-index-llms-openai keeps a legacy completion's reply
    (the SDK's Completion; streamed, its last chunk's): a query engine asks it for a
    completion of a prompt, where a chat model gets messages. Like the local models of
    LlamaIndex's integrations (a CustomLLM), its chat methods complete a prompt made of the
    messages. It answers with ``replies`` in turn (the last one repeats)."""

    model: str = "instruct-1"
    chat_model: bool = False
    finish_reason: str = "stop"
    replies: list[str] = Field(default_factory=lambda: ["A-1 shipped on Monday."])
    prompts: list[str] = Field(default_factory=list)

    @property
    def metadata(self) -> LLMMetadata:
        return LLMMetadata(model_name=self.model, is_chat_model=self.chat_model)

    def _reply(self, prompt: str) -> str:
        self.prompts.append(prompt)
        return self.replies[min(len(self.prompts), len(self.replies)) - 1]

    def _raw(self, text: str) -> Any:
        from openai.types import Completion

        return Completion.model_validate(
            {"id": "r", "object": "text_completion", "created": 0, "model": self.model,
             "choices": [{"index": 0, "text": text, "finish_reason": self.finish_reason}],
             "usage": {"prompt_tokens": 57, "completion_tokens": 7, "total_tokens": 64}}
        )  # fmt: skip

    @llm_completion_callback()
    def complete(self, prompt: str, formatted: bool = False, **kwargs: Any) -> CompletionResponse:
        text = self._reply(prompt)
        return CompletionResponse(text=text, raw=self._raw(text))

    @llm_completion_callback()
    def stream_complete(
        self, prompt: str, formatted: bool = False, **kwargs: Any
    ) -> CompletionResponseGen:
        text = self._reply(prompt)
        words = text.split(" ")

        def chunks() -> CompletionResponseGen:
            for count in range(1, len(words) + 1):
                last = count == len(words)
                yield CompletionResponse(
                    text=" ".join(words[:count]),
                    delta=(" " if count > 1 else "") + words[count - 1],
                    raw=self._raw(text) if last else None,
                )

        return chunks()


def orders_index() -> VectorStoreIndex:
    return VectorStoreIndex.from_documents(
        [Document(text="Order A-1 shipped on Monday.")], embed_model=MockEmbedding(embed_dim=8)
    )
