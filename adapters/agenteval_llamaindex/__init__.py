"""agenteval for LlamaIndex: handlers on the instrumentation dispatcher capture and score
every agent workflow run (FunctionAgent, ReActAgent, AgentWorkflow).

    from agenteval_llamaindex import instrument
    instrument(session_id="user-42")
"""

from __future__ import annotations

try:
    import llama_index.core  # noqa: F401
except ImportError as exc:  # pragma: no cover - exercised only without the extra
    raise ImportError(
        "agenteval_llamaindex needs LlamaIndex: pip install 'agenteval[llamaindex]' (from a checkout: pip install -e '.[llamaindex]')"
    ) from exc

from ._handler import LlamaIndexInstrumentation, instrument

__all__ = ["LlamaIndexInstrumentation", "instrument"]
