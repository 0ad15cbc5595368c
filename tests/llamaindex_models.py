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
    (the SDK's Completion): a query engine asks it for a completion of a prompt, where a
    chat model gets messages."""

    model: str = "instruct-1"
    chat_model: bool = False
    finish_reason: str = "stop"
    prompts: list[str] = Field(default_factory=list)

    @property
    def metadata(self) -> LLMMetadata:
        return LLMMetadata(model_name=self.model, is_chat_model=self.chat_model)

    @llm_completion_callback()
    def complete(self, prompt: str, formatted: bool = False, **kwargs: Any) -> CompletionResponse:
        from openai.types import Completion

        self.prompts.append(prompt)
        text = "A-1 shipped on Monday."
        raw = Completion.model_validate(
            {"id": "r", "object": "text_completion", "created": 0, "model": "instruct-1",
             "choices": [{"index": 0, "text": text, "finish_reason": self.finish_reason}],
             "usage": {"prompt_tokens": 57, "completion_tokens": 7, "total_tokens": 64}}
        )  # fmt: skip
        return CompletionResponse(text=text, raw=raw)

    @llm_completion_callback()
    def stream_complete(
        self, prompt: str, formatted: bool = False, **kwargs: Any
    ) -> CompletionResponseGen:
        raise NotImplementedError


def orders_index() -> VectorStoreIndex:
    return VectorStoreIndex.from_documents(
        [Document(text="Order A-1 shipped on Monday.")], embed_model=MockEmbedding(embed_dim=8)
    )
