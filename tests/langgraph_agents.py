"""LangGraph agents the LangChain and import tests share, with scripted models."""

from __future__ import annotations

import operator
from typing import Annotated, Any, TypedDict

from agenteval_langchain.testing import ScriptedChatModel, tool_call
from langchain_core.decisions import BaseDecisionModel, ClassifierResponse
from langchain_core.messages import AIMessage, ToolMessage
from langchain_core.tools import InjectedToolCallId, tool
from langgraph.graph import END, START, MessagesState, StateGraph
from langgraph.types import Command, Send


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


def functional_agent(by_arguments: bool = False) -> Any:
    """The agent loop of LangGraph's functional API: an ``@entrypoint`` given the
    conversation as a list of messages, ``@task``s for the model and for each tool call (run
    concurrently), answering with the model's last message. ``by_arguments``: one task runs
    the reply's calls instead, each tool given the arguments alone, its answer made by
    hand."""
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

    @task
    def call_tools(reply: AIMessage) -> list[ToolMessage]:
        answers = []
        for call in reply.tool_calls:
            try:
                answer = ToolMessage(strict_lookup.invoke(call["args"]), tool_call_id=call["id"])
            except ValueError as error:
                answer = ToolMessage(f"Error: {error}", tool_call_id=call["id"], status="error")
            answers.append(answer)
        return answers

    @entrypoint()
    def agent(messages: list[Any]) -> AIMessage:
        reply = call_model(messages).result()
        while reply.tool_calls:
            if by_arguments:
                answers = call_tools(reply).result()
            else:
                answers = [r.result() for r in [call_tool(call) for call in reply.tool_calls]]
            messages = add_messages(messages, [reply, *answers])
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


@tool
def lookup_order(order_id: str) -> str:
    """Status of an order."""
    return "shipped"


def orders_agent(builder: Any) -> Any:
    """A worker named orders_agent that looks A-1 up once and answers."""
    return builder(
        ScriptedChatModel(
            replies=[
                AIMessage("", tool_calls=[tool_call("lookup_order", "o1", order_id="A-1")]),
                AIMessage("A-1 has shipped."),
            ]
        ),
        tools=[lookup_order],
        name="orders_agent",
    )


def handoff(agent: str) -> Any:
    """A handoff tool as langgraph-supervisor builds one: it sends the parent graph to
    ``agent`` with a tool message saying so."""

    @tool(f"transfer_to_{agent}")
    def transfer(tool_call_id: Annotated[str, InjectedToolCallId]) -> Command:  # type: ignore[type-arg]
        """Hand the conversation over."""
        said = ToolMessage(f"Transferred to {agent}", tool_call_id=tool_call_id)
        return Command(goto=agent, graph=Command.PARENT, update={"messages": [said]})

    return transfer


def supervised_team(builder: Any) -> Any:
    """langgraph-supervisor's layout, built with ``builder`` (``create_agent`` or
    ``create_react_agent``): a node named supervisor with a handoff tool to orders_agent,
    a worker node of that name that reports back; asked "Where is A-1?", the supervisor
    hands over (call h1), the worker looks A-1 up (call o1), and the supervisor answers
    "Your order A-1 has shipped."."""
    supervisor = builder(
        ScriptedChatModel(
            replies=[
                AIMessage("", tool_calls=[tool_call("transfer_to_orders_agent", "h1")]),
                AIMessage("Your order A-1 has shipped."),
            ]
        ),
        tools=[handoff("orders_agent")],
        name="supervisor",
    )
    team = StateGraph(MessagesState)
    team.add_node(supervisor, destinations=("orders_agent", END))
    team.add_node(orders_agent(builder))
    team.add_edge(START, "supervisor")
    team.add_edge("orders_agent", "supervisor")
    return team.compile()


@tool
def style_guide() -> str:
    """The house style guide."""
    return "Short sentences."


def summarisers_sent_at_once(reads: dict[str, int]) -> Any:
    """A graph that sends one plain summariser node per document at once (LangGraph's
    Send, map-reduce); the summariser of document D reads the style guide ``reads[D]``
    times."""

    class Documents(TypedDict):
        docs: list[str]
        summaries: Annotated[list[str], operator.add]

    def summarise(state: dict[str, Any]) -> dict[str, Any]:
        guide = ""
        for _ in range(reads[state["doc"]]):
            guide = style_guide.invoke({})
        return {"summaries": [f"{state['doc']}: summarised ({guide})"]}

    graph = StateGraph(Documents)
    graph.add_node("summarise", summarise)
    graph.add_conditional_edges(
        START, lambda state: [Send("summarise", {"doc": d}) for d in state["docs"]], ["summarise"]
    )
    graph.add_edge("summarise", END)
    return graph.compile()


@tool
def job_status(job: str) -> str:
    """A deploy job's status."""
    return "running"


def jobs_checked_at_once() -> Any:
    """A functional-API entrypoint that checks each job it is given in an ``@task`` of its
    own, all started at once (a job named twice is checked twice)."""
    from langgraph.func import entrypoint, task

    @task
    def check(job: str) -> str:
        return str(job_status.invoke({"job": job}))

    @entrypoint()
    def jobs(names: list[str]) -> list[str]:
        return [future.result() for future in [check(name) for name in names]]

    return jobs


def assert_job_checks_stepped(trace: Any, steps: list[int]) -> None:
    """The ``check`` tasks of a :func:`jobs_checked_at_once` run say ``steps`` (sorted:
    tasks end in any order), and ``tool_call_loops`` reads them so: a loop when a job was
    checked three times."""
    from agenteval_core import GRAPH_STEP
    from agenteval_core.metrics import ToolCallLoops

    checks = [s for s in trace.spans if s.name.removeprefix("execute_task ") == "check"]
    assert sorted(s.attributes.get(GRAPH_STEP) for s in checks) == steps
    assert ToolCallLoops().measure(trace).score == (0.0 if max(steps) >= 2 else 1.0)


def flaky_fetch(failures: int) -> Any:
    """A functional-API entrypoint that fetches a document in an ``@task`` its retry policy
    runs up to three times; the fetch (a tool) times out ``failures`` times first."""
    from langgraph.func import entrypoint, task
    from langgraph.types import RetryPolicy

    fetched: list[str] = []

    @tool
    def fetch(doc: str) -> str:
        """A document's text."""
        fetched.append(doc)
        if len(fetched) <= failures:
            raise ConnectionError("timed out")
        return f"text of {doc}"

    policy = RetryPolicy(
        max_attempts=3, initial_interval=0.01, jitter=False, retry_on=ConnectionError
    )

    @task(retry_policy=policy)
    def get(doc: str) -> str:
        return str(fetch.invoke({"doc": doc}))

    @entrypoint()
    def read(doc: str) -> str:
        return get(doc).result()

    return read


def assert_fetched_once(trace: Any, failures: int, arguments: dict[str, Any] | None = None) -> None:
    """A :func:`flaky_fetch` run is one fetch (given ``arguments``, by default as the
    tool was called), as its last run ended, its earlier runs retries: no failed call when
    a run worked, no loop."""
    from agenteval_core.metrics import ToolCallLoops, ToolFailures

    ended = ("text of a", None) if failures < 3 else (None, "ConnectionError: timed out")
    assert [(c.name, c.arguments, c.result, c.error) for c in trace.tool_calls()] == [
        ("fetch", arguments or {"doc": "a"}, *ended)
    ]
    assert len(trace.tool_calls(every_run=True)) == min(failures + 1, 3)
    failed = ToolFailures().measure(trace)
    # worked: no call failed; three timeouts: 1 − (1 failed + 1 not recovered) / (2 × 1)
    assert (failed.score, failed.metadata.get("runs_retried")) == (
        1.0 if failures < 3 else 0.0,
        min(failures, 2) or None,
    )
    assert ToolCallLoops().measure(trace).score == 1.0
