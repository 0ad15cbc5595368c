"""Add agenteval to a CrewAI crew: create one listener before kickoff.

Offline: the LLM replies from a script (CrewAI's ReAct text format), the tool is real.

    pip install -e '.[crewai]' && python examples/crewai_quickstart.py
"""

from __future__ import annotations

import os

os.environ.setdefault("CREWAI_DISABLE_TELEMETRY", "true")

from agenteval_crewai import AgentEvalListener
from agenteval_crewai.testing import ScriptedLLM
from crewai import Agent, Crew, Task
from crewai.tools import tool

from agenteval_core import ConsoleSink, OnlineEvaluator


@tool("get_weather")
def get_weather(city: str) -> str:
    """Current weather for a city."""
    return {"Paris": "sunny, 21°C", "Oslo": "snow, -3°C"}.get(city, "unknown")


llm = ScriptedLLM(
    model="scripted",
    replies=[
        'Thought: I need the weather.\nAction: get_weather\nAction Input: {"city": "Paris"}',
        "Thought: I know it now.\nFinal Answer: It is sunny and 21°C in Paris.",
    ],
)
agent = Agent(
    role="assistant",
    goal="answer weather questions",
    backstory="helpful",
    llm=llm,
    tools=[get_weather],
)
task = Task(
    description="What's the weather in Paris?", expected_output="a short answer", agent=agent
)

if __name__ == "__main__":
    with OnlineEvaluator(
        capture="crewai-capture.jsonl",
        sinks=[ConsoleSink()],  # a line per scored trace, and a summary at the end
    ) as evaluator:
        listener = AgentEvalListener(evaluator, session_id="user-42")  # the one line
        print(Crew(agents=[agent], tasks=[task]).kickoff())
        listener.flush(10)
        listener.close()
