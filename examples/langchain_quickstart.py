"""Add agenteval to an existing LangChain / LangGraph agent: one handler, nothing else.

Offline: the chat model replies from a script, the tools are real functions. Swap in your own
model (e.g. ChatOpenAI) and the handler works the same.

    pip install -e '.[langchain]' && python examples/langchain_quickstart.py
"""

from __future__ import annotations

from agenteval_langchain import AgentEvalCallbackHandler
from agenteval_langchain.testing import ScriptedChatModel, tool_call
from langchain.agents import create_agent
from langchain_core.messages import AIMessage
from langchain_core.tools import tool

from agenteval_core import ConsoleSink, OnlineEvaluator


@tool
def get_weather(city: str) -> str:
    """Current weather for a city."""
    return {"Paris": "sunny, 21°C", "Oslo": "snow, -3°C"}.get(city, "unknown")


model = ScriptedChatModel(
    replies=[
        AIMessage(
            content="Let me check.", tool_calls=[tool_call("get_weather", "w1", city="Paris")]
        ),
        AIMessage(content="It is sunny and 21°C in Paris."),
    ]
)
agent = create_agent(model, tools=[get_weather])

if __name__ == "__main__":
    with OnlineEvaluator(
        capture="quickstart-capture.jsonl",
        sinks=[ConsoleSink()],  # a line per scored trace, and a summary at the end
    ) as evaluator:
        handler = AgentEvalCallbackHandler(evaluator, session_id="user-42")  # the one line
        answer = agent.invoke(
            {"messages": [("user", "What's the weather in Paris?")]},
            config={"callbacks": [handler]},
        )
        print(answer["messages"][-1].content)
        evaluator.flush(10)
    print("captured to quickstart-capture.jsonl; try: agenteval replay quickstart-capture.jsonl")
