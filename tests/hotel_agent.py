"""A hotel-booking agent for the regression tests: LangChain's ``create_agent`` with real
tools and a scripted model that reacts to what the tools returned, so its failures (tool
errors, loops stopped by the guard, recursion limits) are real framework runs.

``fixed_agent`` and ``broken_agent`` are what ``agenteval suite --agent`` runs: each returns
the trace of its run, captured by agenteval's own handler.
"""

from __future__ import annotations

import contextvars
import re
import tempfile
import threading
import uuid
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

from agenteval_langchain import AgentEvalCallbackHandler
from agenteval_langchain.testing import ScriptedChatModel, tool_call
from langchain.agents import create_agent
from langchain.agents.middleware import ModelRefusalMiddleware
from langchain_core.messages import AIMessage, BaseMessage, HumanMessage, ToolMessage
from langchain_core.tools import ToolException, tool

from agenteval_core import OnlineEvaluator, Trace

BOOKED: dict[str, str] = {}
"""Bookings made, by city."""

# a context variable: LangGraph runs tools on pool threads with the run's context copied
_booking_fails = contextvars.ContextVar("booking_fails", default=False)


@tool
def book_hotel(city: str) -> str:
    """Book a hotel room in a city."""
    if _booking_fails.get():
        raise ToolException("503 Service Unavailable: the booking service is down")
    BOOKED[city] = f"Hotel {city} Central"
    return f"booked {BOOKED[city]}, confirmation H-{len(city)}"


book_hotel.handle_tool_error = True  # the model sees the error text, as with a remote API


@tool
def search_hotels(city: str) -> str:
    """Hotels with rooms free in a city."""
    return f"3 hotels with rooms in {city}"


def city_of(text: str) -> str:
    found = re.search(r"\bin ([A-Z][a-z]+)", text)
    return found.group(1) if found else "Rome"


def _question(messages: Sequence[BaseMessage]) -> str:
    return next(str(m.content) for m in messages if isinstance(m, HumanMessage))


def booking_model(messages: Sequence[BaseMessage]) -> AIMessage:
    """Books a hotel in the city asked for; owns up when the booking service fails."""
    last = messages[-1]
    city = city_of(_question(messages))
    if isinstance(last, ToolMessage):
        if last.status == "error" or "503" in str(last.content):
            return AIMessage(f"Sorry, I could not book a hotel in {city}: the service is down.")
        return AIMessage(f"I booked a hotel in {city}: {last.content}.")
    return AIMessage("", tool_calls=[tool_call("book_hotel", f"b-{len(messages)}", city=city)])


def looping_model(messages: Sequence[BaseMessage]) -> AIMessage:
    """Searches the same city again and again (the guard stops it at the third call)."""
    city = city_of(_question(messages))
    return AIMessage("", tool_calls=[tool_call("search_hotels", f"s-{len(messages)}", city=city)])


def endless_model(messages: Sequence[BaseMessage]) -> AIMessage:
    """Searches a new city every step and never answers: the recursion limit ends it."""
    return AIMessage(
        "", tool_calls=[tool_call("search_hotels", f"e-{len(messages)}", city=f"C{len(messages)}")]
    )


def lying_model(messages: Sequence[BaseMessage]) -> AIMessage:
    """Claims a booking without calling any tool."""
    return AIMessage("Your hotel is booked.")


REFUSAL = "I can't help with booking hotels."


def refusing_model(messages: Sequence[BaseMessage]) -> AIMessage:
    """Refuses, as OpenAI's LangChain integration returns a refusal: no text, the refusal
    in its own field."""
    return AIMessage(
        "",
        additional_kwargs={"refusal": REFUSAL},
        response_metadata={"model_provider": "openai", "finish_reason": "stop"},
    )


MODELS: dict[str, Callable[[Sequence[BaseMessage]], AIMessage]] = {
    "book": booking_model,
    "loop": looping_model,
    "endless": endless_model,
    "lie": lying_model,
    "refuse": refusing_model,
}


def run(
    question: str,
    handler: Any,
    *,
    behaviour: str = "book",
    booking_fails: bool = False,
    recursion_limit: int = 25,
    raise_refusals: bool = False,
) -> str | None:
    """One run of the agent with ``handler``; returns its answer (None when the run raised:
    a guard stop, a recursion limit, or a refusal ``raise_refusals`` raises as LangChain's
    ``ModelRefusalError``, which the trace records)."""
    token = _booking_fails.set(booking_fails)
    agent = create_agent(
        ScriptedChatModel(reply=MODELS[behaviour]),
        tools=[book_hotel, search_hotels],
        middleware=[ModelRefusalMiddleware()] if raise_refusals else [],
    )
    try:
        state = agent.invoke(
            {"messages": [("user", question)]},
            {"callbacks": [handler], "recursion_limit": recursion_limit},
        )
    except Exception:
        return None
    finally:
        _booking_fails.reset(token)
    return str(state["messages"][-1].content)


_lock = threading.Lock()
_evaluator: OnlineEvaluator | None = None


def traced(question: str, *, stop_on_loop: bool = False, **options: Any) -> Trace:
    """Run the agent once and return the trace agenteval's handler captured of that run."""
    global _evaluator
    with _lock:
        if _evaluator is None:
            folder = Path(tempfile.mkdtemp(prefix="hotel-agent-"))
            _evaluator = OnlineEvaluator(capture=folder / "capture.jsonl", log=False)
    marker = f"attempt-{uuid.uuid4().hex}"
    handler = AgentEvalCallbackHandler(_evaluator, session_id=marker, stop_on_loop=stop_on_loop)
    run(question, handler, **options)
    return next(t for t in _evaluator.captured() if t.session_id == marker)


def fixed_agent(question: str) -> Trace:
    """The agent after the fix: books, never loops."""
    return traced(question)


def broken_agent(question: str) -> Trace:
    """The agent before the fix: the booking service fails on every call."""
    return traced(question, booking_fails=True)


def lying_agent(question: str) -> Trace:
    """An agent that claims the booking without calling the booking tool."""
    return traced(question, behaviour="lie")


def refusing_agent(question: str) -> Trace:
    """An agent whose model refuses every request."""
    return traced(question, behaviour="refuse")
