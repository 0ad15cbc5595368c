"""agenteval for LangChain and LangGraph: one callback handler captures and scores every run.

from agenteval_langchain import AgentEvalCallbackHandler
agent.invoke(inputs, config={"callbacks": [AgentEvalCallbackHandler()]})
"""

from __future__ import annotations

try:
    import langchain_core  # noqa: F401
except ImportError as exc:  # pragma: no cover - exercised only without the extra
    raise ImportError(
        "agenteval_langchain needs LangChain: pip install 'agenteval[langchain]' (from a checkout: pip install -e '.[langchain]')"
    ) from exc

from ._handler import AgentEvalCallbackHandler, AgentLoopError, AsyncAgentEvalCallbackHandler
from ._resume import resume_command

__all__ = [
    "AgentEvalCallbackHandler",
    "AgentLoopError",
    "AsyncAgentEvalCallbackHandler",
    "resume_command",
]
