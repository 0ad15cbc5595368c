"""A hotel-booking agent for the regression walkthrough (docs/regressions.md), offline.

    python examples/regression_agent.py capture.jsonl

runs the agent as it was in production, captured by agenteval: some runs fail (the booking
API refused an ambiguous city name, and a search with no results looped until the guard
stopped it).
``run_agent`` is the agent after the fixes, what ``agenteval suite`` runs:

    agenteval suite cases.jsonl --agent examples/regression_agent.py:run_agent

Set ``AGENT_VERSION=old`` to run the agent as it was when the failures were captured.
The model is scripted (no API key, no network); swap in your own chat model.
"""

from __future__ import annotations

import contextlib
import os
import re
import sys
import tempfile
import threading
import uuid
from collections.abc import Sequence
from pathlib import Path

from agenteval_langchain import AgentEvalCallbackHandler
from agenteval_langchain.testing import ScriptedChatModel, tool_call
from langchain.agents import create_agent
from langchain_core.messages import AIMessage, BaseMessage, HumanMessage, ToolMessage
from langchain_core.tools import ToolException, tool

from agenteval_core import OnlineEvaluator, Trace

CITY_CODES = {"Rome": "ROM", "Lisbon": "LIS", "Oslo": "OSL", "Paris": "PAR"}
FREE_ROOMS = {"ROM": 4, "LIS": 2, "OSL": 7, "PAR": 0}


@tool
def city_code(city: str) -> str:
    """The code of a city that the booking API takes."""
    return CITY_CODES.get(city, "unknown")


@tool
def search_rooms(code: str) -> str:
    """How many rooms are free in a city (by its code)."""
    return f"{FREE_ROOMS.get(code, 0)} rooms free"


AMBIGUOUS = {"Rome"}  # Rome, Italy or Rome, Georgia: the API wants the code


@tool
def book_hotel(code: str) -> str:
    """Book a room in a city (by its code)."""
    code = CITY_CODES.get(code, code) if code not in AMBIGUOUS else code  # names still work
    if code not in FREE_ROOMS:
        raise ToolException(f"400 Bad Request: ambiguous or unknown city {code!r}; send its code")
    return f"booked, confirmation {code}-1"


book_hotel.handle_tool_error = True  # the model sees the error, as with a remote API


def _city(messages: Sequence[BaseMessage]) -> str:
    question = next(str(m.content) for m in messages if isinstance(m, HumanMessage))
    found = re.search(r"\bin ([A-Z][a-z]+)", question)
    return found.group(1) if found else "Rome"


def model(version: str) -> ScriptedChatModel:
    """The agent's policy, as a scripted model that reads the tool results."""

    def reply(messages: Sequence[BaseMessage]) -> AIMessage:
        city, last = _city(messages), messages[-1]
        step = len(messages)
        if not isinstance(last, ToolMessage):  # the user asked
            if city == "Paris":
                return AIMessage("", tool_calls=[tool_call("search_rooms", f"s{step}", code="PAR")])
            if version == "old":  # the old agent sent the city's name: ambiguous ones fail
                return AIMessage("", tool_calls=[tool_call("book_hotel", f"b{step}", code=city)])
            return AIMessage("", tool_calls=[tool_call("city_code", f"c{step}", city=city)])
        if last.name == "search_rooms" and last.content.startswith("0 "):
            if version == "old":  # the old agent searched again, and again
                return AIMessage("", tool_calls=[tool_call("search_rooms", f"s{step}", code="PAR")])
            return AIMessage(f"Sorry, there are no free rooms in {city} right now.")
        if last.name == "city_code":
            return AIMessage(
                "", tool_calls=[tool_call("book_hotel", f"b{step}", code=last.content)]
            )
        if last.status == "error":
            return AIMessage(f"Sorry, I could not book a hotel in {city}.")
        return AIMessage(f"Your hotel in {city} is booked ({last.content}).")

    return ScriptedChatModel(reply=reply)


def agent(version: str):  # type: ignore[no-untyped-def]
    return create_agent(model(version), tools=[city_code, search_rooms, book_hotel])


def production(capture: str) -> None:
    """The old agent serving four users, every run captured (the guard stops loops)."""
    with OnlineEvaluator(capture=capture, log=False) as evaluator:
        for user, question in [
            ("user-1", "Book a hotel in Lisbon"),
            ("user-1", "Book a hotel in Rome"),
            ("user-2", "Book a hotel in Rome"),
            ("user-3", "Find a free room in Paris"),
            ("user-4", "Book a hotel in Oslo"),
        ]:
            handler = AgentEvalCallbackHandler(evaluator, session_id=user, stop_on_loop=True)
            try:
                agent("old").invoke({"messages": [("user", question)]}, {"callbacks": [handler]})
            except Exception as exc:  # the guard's stop: the run is captured as stopped
                print(f"{user}: {type(exc).__name__}")


_evaluator: OnlineEvaluator | None = None
_lock = threading.Lock()  # a suite runs several attempts at once, on threads


def run_agent(question: str) -> Trace:
    """The agent under test: one run, returned as the trace agenteval captured of it."""
    global _evaluator
    with _lock:
        if _evaluator is None:
            folder = Path(tempfile.mkdtemp(prefix="regression-agent-"))
            _evaluator = OnlineEvaluator(capture=folder / "runs.jsonl", log=False)
    run_id = uuid.uuid4().hex  # a session of its own, to find this run's trace
    # the guard as in production: a looping run stops (and fails its attempt) at once
    handler = AgentEvalCallbackHandler(_evaluator, session_id=run_id, stop_on_loop=True)
    version = os.environ.get("AGENT_VERSION", "new")
    with contextlib.suppress(Exception):  # the trace records how the run ended
        agent(version).invoke({"messages": [("user", question)]}, {"callbacks": [handler]})
    return next(t for t in _evaluator.captured() if t.session_id == run_id)


if __name__ == "__main__":
    production(sys.argv[1] if len(sys.argv) > 1 else "capture.jsonl")
