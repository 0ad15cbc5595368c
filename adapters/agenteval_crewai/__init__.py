"""agenteval for CrewAI: a listener on the event bus captures and scores every crew run.

from agenteval_crewai import AgentEvalListener
listener = AgentEvalListener(session_id="user-42")   # before crew.kickoff()
"""

from __future__ import annotations

try:
    import crewai  # noqa: F401
except ImportError as exc:  # pragma: no cover - exercised only without the extra
    raise ImportError(
        "agenteval_crewai needs CrewAI: pip install 'agenteval[crewai]' (from a checkout: pip install -e '.[crewai]')"
    ) from exc

from ._listener import AgentEvalListener

__all__ = ["AgentEvalListener"]
