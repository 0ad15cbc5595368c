"""Pollers that run at once and take turns: each checks its own deploy job a number of
times, and the checks start in turn (A, B, A, B, ...) once every poller has called its
model. The frameworks' tests build their agents around one :class:`TakingTurns`."""

from __future__ import annotations

import threading

from agenteval_core import LoopAlert, RunStatus, Trace
from agenteval_core.metrics import ToolCallLoops


class TakingTurns:
    """The checks of pollers ``polls`` (job → how many times its poller checks it)."""

    def __init__(self, polls: dict[str, int]) -> None:
        self.polls = polls
        order = [f"{job}{n}" for n in range(1, max(polls.values()) + 1) for job in polls]
        self.order = [check for check in order if int(check[1:]) <= polls[check[0]]]
        self.started = {check: threading.Event() for check in self.order}
        self.asked = {job: threading.Event() for job in polls}  # each poller's model called
        self.checks: dict[str, int] = dict.fromkeys(polls, 0)

    def checked(self, job: str) -> str:
        """The tool's run for ``job``: what the job's status is now."""
        self.checks[job] += 1
        self.started[f"{job}{self.checks[job]}"].set()
        return "done" if self.checks[job] >= self.polls[job] else "running"

    def next_check(self, job: str, done: int) -> str | None:
        """The id of the next check the poller of ``job`` asks for after ``done`` of them,
        once it is its turn; None when it has checked enough."""
        self.asked[job].set()
        if done == self.polls[job]:
            return None
        check = f"{job}{done + 1}"
        place = self.order.index(check)
        before = self.order[place - 1] if place else None
        if before is not None and before[0] != job:  # the other poller's has started
            assert self.started[before].wait(10)
        elif before is None:  # every poller is running before the first check
            assert all(event.wait(10) for event in self.asked.values())
        return check


def assert_each_poller_loops_alone(worked: Trace, looped: Trace, stopped: bool) -> LoopAlert:
    """Two pollers that checked their jobs twice each (``worked``) made no loop, live or
    scored; a poller that checked a third time (``looped``) did, alone: its alert."""
    assert [(c.id, c.arguments, c.result) for c in worked.tool_calls()] == [
        ("A1", {"job": "A"}, "running"),
        ("B1", {"job": "B"}, "running"),
        ("A2", {"job": "A"}, "done"),
        ("B2", {"job": "B"}, "done"),
    ]
    assert (worked.status, worked.alerts) == (RunStatus.OK, [])
    loops = ToolCallLoops().measure(worked)
    assert (loops.score, loops.reason) == (1.0, "no repeated calls or cycles among 4 tool calls")
    assert looped.status is (RunStatus.STOPPED if stopped else RunStatus.OK)
    assert ToolCallLoops().measure(looped).reason == (
        'job_status called 3 times with the same arguments {"job": "A"}'
    )
    [alert] = looped.alerts
    return alert
