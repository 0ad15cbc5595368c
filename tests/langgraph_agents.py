"""LangGraph agents the LangChain and import tests share, with scripted models."""

from __future__ import annotations

from typing import Any

from agenteval_langchain.testing import ScriptedChatModel, tool_call
from langchain_core.decisions import BaseDecisionModel, ClassifierResponse
from langchain_core.messages import AIMessage, ToolMessage
from langchain_core.tools import tool


@tool
def strict_lookup(order_id: str) -> str:
    """Status of an order; raises for one that does not exist."""
    if order_id.startswith("Z"):
        raise ValueError(f"no order {order_id}")
    return "shipped"


def retrying_agent() -> tuple[Any, list[str]]:
    """A ``create_agent`` agent whose model asks once to look A-1 up, with a lookup that
    times out twice and ``ToolRetryMiddleware`` running it again until it answers (three
    runs of one call), then answers "A-1 has shipped."; and the order ids of every run."""
    from langchain.agents import create_agent
    from langchain.agents.middleware import ToolRetryMiddleware

    runs: list[str] = []

    @tool
    def lookup(order_id: str) -> str:
        """Look up an order."""
        runs.append(order_id)
        if len(runs) <= 2:
            raise ConnectionError("orders API timed out")
        return f"{order_id} shipped"

    model = ScriptedChatModel(
        replies=[
            AIMessage("", tool_calls=[tool_call("lookup", "c1", order_id="A-1")]),
            AIMessage("A-1 has shipped."),
        ]
    )
    retry = ToolRetryMiddleware(max_retries=2, initial_delay=0, retry_on=(ConnectionError,))
    return create_agent(model, tools=[lookup], middleware=[retry]), runs


ORDER_STATUS = "Order A-1 has shipped and arrives Friday."


def answered_by_its_tool(build: Any = None) -> Any:
    """An agent (``create_agent``, or ``build``) whose model asks once for the status of
    A-1, from a tool made with ``return_direct=True``: the run ends with that tool's result,
    :data:`ORDER_STATUS`, as its answer."""
    from langchain.agents import create_agent

    @tool(return_direct=True)
    def order_status(order_id: str) -> str:
        """Status of an order."""
        return f"Order {order_id} has shipped and arrives Friday."

    model = ScriptedChatModel(
        replies=[AIMessage("", tool_calls=[tool_call("order_status", "c1", order_id="A-1")])]
    )
    return (build or create_agent)(model, tools=[order_status])


def functional_agent() -> Any:
    """The agent loop of LangGraph's functional API: an ``@entrypoint`` given the
    conversation as a list of messages, ``@task``s for the model and for each tool call (run
    concurrently), answering with the model's last message."""
    from langgraph.func import entrypoint, task
    from langgraph.graph import add_messages

    model = ScriptedChatModel(
        replies=[
            AIMessage(
                "",
                tool_calls=[
                    tool_call("strict_lookup", "c1", order_id="A-1"),
                    tool_call("strict_lookup", "c2", order_id="Z-9"),
                ],
            ),
            AIMessage("A-1 has shipped; I could not find order Z-9."),
        ]
    )

    @task
    def call_model(messages: list[Any]) -> AIMessage:
        return model.invoke(messages)

    @task
    def call_tool(call: dict[str, Any]) -> ToolMessage:
        try:
            return strict_lookup.invoke(call)
        except ValueError as error:
            return ToolMessage(f"Error: {error}", tool_call_id=call["id"], status="error")

    @entrypoint()
    def agent(messages: list[Any]) -> AIMessage:
        reply = call_model(messages).result()
        while reply.tool_calls:
            running = [call_tool(call) for call in reply.tool_calls]
            messages = add_messages(messages, [reply, *(r.result() for r in running)])
            reply = call_model(messages).result()
        return reply

    return agent


class Classifier(BaseDecisionModel):
    """A decision model built on a chat model (``langchain_core.decisions``): it asks
    ``llm`` and answers every question with ``choice`` (a Choice) or ``risk`` (a Noul)."""

    model: str = "classifier"
    llm: Any = None
    choice: str = "fast"
    risk: float = 0.0

    @property
    def _provider(self) -> str:
        return "scripted"

    def _classify(self, state: Any, questions: dict[str, Any]) -> ClassifierResponse:
        self.llm.invoke(f"Classify: {state}")
        answers = {
            key: {"type": "choice", "choice": self.choice, "probabilities": {self.choice: 1.0},
                  "confidence": 1.0}
            if type(question).__name__ == "Choice"
            else {"type": "noul", "noul": self.risk}
            for key, question in questions.items()
        }  # fmt: skip
        return ClassifierResponse.model_validate({"model": self.model, "answers": answers})
