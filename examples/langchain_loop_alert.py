"""A session in which the agent loops: the alert fires while the run is going, and the guard
stops it before the third identical tool call runs.

    pip install -e '.[langchain]' && python examples/langchain_loop_alert.py
"""

from __future__ import annotations

import sys

from agenteval_langchain import AgentEvalCallbackHandler, AgentLoopError
from agenteval_langchain.testing import ScriptedChatModel, tool_call
from langchain.agents import create_agent
from langchain_core.messages import AIMessage
from langchain_core.tools import tool

from agenteval_core import OnlineEvaluator


@tool
def check_status(job_id: str) -> str:
    """Status of a background job."""
    return "pending"


# A model that keeps polling the same job with the same arguments.
stuck = ScriptedChatModel(
    replies=[
        AIMessage(
            content="Checking.", tool_calls=[tool_call("check_status", f"c{i}", job_id="job-7")]
        )
        for i in range(10)
    ]
)
agent = create_agent(stuck, tools=[check_status])


def say(line: str) -> None:
    # one write per line: the alert is printed from the evaluator's thread while the main
    # thread prints the stop, and print() writes its parts (and the newline) separately
    sys.stdout.write(line + "\n")


if __name__ == "__main__":
    with OnlineEvaluator(
        capture="loop-capture.jsonl", on_alert=lambda alert: say(f"ALERT: {alert.message}")
    ) as evaluator:
        handler = AgentEvalCallbackHandler(evaluator, session_id="s-1", stop_on_loop=True)
        try:
            agent.invoke(
                {"messages": [("user", "Is job-7 done?")]}, config={"callbacks": [handler]}
            )
        except AgentLoopError as stopped:
            say(f"stopped: {stopped.alert.pattern} {stopped.alert.count} calls")
