"""Resuming a LangGraph run with a regression case's answers."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from langgraph.types import Command

from agenteval_core import answers_by_question

from ._translate import jsonable

__all__ = ["resume_command"]


def _pending(paused: Any) -> list[Any]:
    """The interrupts a paused run waits at, from what ``invoke`` returned, the graph's
    state, or the interrupts themselves."""
    if isinstance(paused, Mapping):
        return list(paused.get("__interrupt__") or ())
    interrupts = getattr(paused, "interrupts", None)  # a StateSnapshot
    return list(interrupts if interrupts is not None else paused)


def resume_command(answer: Any, paused: Any) -> Command[Any]:
    """The ``Command`` that resumes a paused LangGraph run with ``answer``, one entry of a
    regression case's ``resume``.

    An answer the captured run resumed with as it was (``"yes"``, a
    ``HumanInTheLoopMiddleware`` decision) is given as it is. A captured run that answered
    several interrupts at once by their ids (``Command(resume={interrupt_id: answer})``,
    interrupts raised by parallel nodes or tools) has its answers kept by what each
    interrupt asked, since a new run's interrupts have new ids: each of the interrupts
    ``paused`` waits at that asks one of those questions gets its answer (questions asked
    twice are answered in order), and one that asks something else is left waiting, so the
    run pauses again there.

    ``paused`` is what the paused run left: the result of ``invoke`` (its
    ``"__interrupt__"``), the graph's state (``graph.get_state(config)``), or the
    ``Interrupt`` objects themselves.

    Raises:
        ValueError: ``answer`` is given by question and the run waits at no interrupt
            that asks any of them.
    """
    pairs = answers_by_question(answer)
    if pairs is None:
        return Command(resume=answer)
    pending = _pending(paused)
    left = list(pairs)
    by_id: dict[str, Any] = {}
    for interrupt in pending:
        asked = jsonable(interrupt.value)
        match = next((pair for pair in left if pair[0] == asked), None)
        if match is not None:
            left.remove(match)
            by_id[interrupt.id] = match[1]
    if not by_id:
        waiting = [jsonable(interrupt.value) for interrupt in pending]
        raise ValueError(
            f"none of the questions answered ({[q for q, _ in pairs]!r:.300}) is asked by "
            f"an interrupt the run waits at ({waiting!r:.300}): the agent asks otherwise "
            "now, or did not pause"
        )
    return Command(resume=by_id)
