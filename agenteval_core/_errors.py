"""The exception tree of agenteval.

    AgentEvalError                  every error agenteval raises on purpose
    ├── MetricInputError            a metric got input it cannot score (value out of range, bad option)
    ├── UnknownMetricError          no metric is registered under that name
    ├── CaptureError                a capture file cannot be read
    │   └── CaptureFormatError      a line is not a valid trace (carries file, line number and field)
    │       └── SchemaVersionError  a line was written by a newer schema version
    ├── ResultsWriteError           a replay's results file lacks lines whose write failed
    │                               (a full disk); carries the replay's report
    ├── ClusterUnreachableError     nothing accepts a connection at the Ray cluster's address
    │                               (also a ConnectionError)
    └── JudgeError                  a judge could not produce a usable reply (``kind`` says
        │                           which way, ``usage`` what the attempt cost)
        ├── JudgeConfigError        found before scoring: no API key, a bad URL, a refused
        │                           connection, a rejected key (401/403), a refused output mode
        ├── JudgeUnavailableError   connection refused, timeouts, 5xx and 429 after all retries
        │                           (replaying may help)
        ├── JudgeBudgetError        the spending budget is used up
        ├── JudgeContextOverflowError  the prompt is longer than the model's context (replaying
        │                           will not help: shorten the input or use a longer context)
        ├── JudgeUnsupportedRequestError  the server refused the request itself (a 4xx, an
        │                           output mode it does not take): change the request
        └── JudgeParseError         the reply did not parse after the allowed re-asks
            └── JudgeInvalidAnswerError  a well-formed reply that breaks the metric's rules
                                    (e.g. a wrong number of verdicts), after one re-ask

Errors from the layer below (pydantic, httpx, json) are re-raised as the most specific class
above with ``raise ... from exc`` so the cause stays visible.
"""

from __future__ import annotations

import difflib
import os
from dataclasses import dataclass
from enum import StrEnum
from pathlib import Path
from typing import TYPE_CHECKING, Any, ClassVar

if TYPE_CHECKING:
    from pydantic import ValidationError

__all__ = [
    "AgentEvalError",
    "CaptureError",
    "CaptureFormatError",
    "ClusterUnreachableError",
    "ErrorKind",
    "JudgeBudgetError",
    "JudgeConfigError",
    "JudgeContextOverflowError",
    "JudgeError",
    "JudgeInvalidAnswerError",
    "JudgeParseError",
    "JudgeUnavailableError",
    "JudgeUnsupportedRequestError",
    "JudgeUsage",
    "MetricInputError",
    "ResultsWriteError",
    "SchemaVersionError",
    "UnknownMetricError",
    "describe_os_error",
    "describe_validation",
    "os_error_at",
]


class AgentEvalError(Exception):
    """Base class of every error agenteval raises on purpose."""


class ErrorKind(StrEnum):
    """Why a metric result has no score, in a word: a result's ``metadata["error_kind"]``,
    what summaries count and what the command line's advice and exit status follow (never
    the error's text)."""

    CONFIG = "config"
    """The judge is misconfigured (found before scoring)."""
    UNAVAILABLE = "unavailable"
    """The judge could not be reached, or gave no answer in time: replaying may help."""
    BUDGET = "budget"
    """The judge's spending budget was used up."""
    CONTEXT_OVERFLOW = "context_overflow"
    """The prompt is longer than the judge model's context."""
    UNSUPPORTED_REQUEST = "unsupported_request"
    """The server refused the request itself."""
    UNPARSABLE = "unparsable"
    """The judge's reply did not parse after the allowed re-asks."""
    INVALID_ANSWER = "invalid_answer"
    """A well-formed reply that breaks the metric's rules."""
    JUDGE_ERROR = "error"
    """Another judge failure."""
    INVALID_INPUT = "invalid_input"
    """The metric was given input it cannot score (``MetricInputError``)."""
    METRIC_ERROR = "metric_error"
    """The metric raised: a bug in it, logged with its traceback."""


class MetricInputError(AgentEvalError, ValueError):
    """A metric was given input it cannot score, or an invalid option."""


class UnknownMetricError(AgentEvalError, KeyError):
    """No metric is registered under the requested name."""

    def __init__(self, name: str, known: list[str]) -> None:
        self.name = name
        self.known = known
        super().__init__(name)

    def __reduce__(self) -> tuple[Any, ...]:
        # raised where a replay's worker builds its metrics (a Ray actor), and sent back
        return (type(self), (self.name, self.known))

    def __str__(self) -> str:
        close = difflib.get_close_matches(self.name, self.known, n=3, cutoff=0.6)
        if close:
            return f"unknown metric {self.name!r}; did you mean {' or '.join(close)}?"
        return (
            f"unknown metric {self.name!r}; known metrics: {', '.join(self.known)} "
            "(run `agenteval metrics` for descriptions)"
        )


class CaptureError(AgentEvalError):
    """A capture file cannot be read."""


class ClusterUnreachableError(AgentEvalError, ConnectionError):
    """The Ray cluster a replay was sent to does not accept connections at its address (a
    typo, a cluster that is down, a port not forwarded): found before Ray is started, which
    would otherwise retry in silence for minutes."""


class ResultsWriteError(AgentEvalError):
    """A replay scored every trace, but some of its results lines could not be written (a
    full disk): the results file is incomplete. ``report`` is the replay's report (``None``
    when the failed write was a worker process's); ``lines_lost`` counts the lines the file
    lacks (with ``at_least``, those of one worker's share; others may lack lines too) and
    ``cause`` is the first failed write's error."""

    def __init__(
        self,
        path: str,
        lines_lost: int,
        cause: OSError,
        report: Any = None,
        *,
        at_least: bool = False,
    ) -> None:
        self.path = path
        self.lines_lost = lines_lost
        self.cause = cause
        self.report = report
        self.at_least = at_least
        count = f"{'at least ' if at_least else ''}{lines_lost:,}"
        super().__init__(
            f"{describe_os_error(cause, path)}: {count} results line(s) were not written, so "
            "the results file is incomplete (the traces were scored); make room and replay again"
        )

    def __reduce__(self) -> tuple[Any, ...]:
        # a worker process sends it back; its report stays behind (the parent has its own)
        return (_rebuild_results_error, (self.path, self.lines_lost, self.cause, self.at_least))


def _rebuild_results_error(
    path: str, lines_lost: int, cause: OSError, at_least: bool
) -> ResultsWriteError:
    return ResultsWriteError(path, lines_lost, cause, at_least=at_least)


class CaptureFormatError(CaptureError):
    """One line of a capture file is not a valid trace."""

    def __init__(
        self, path: str, line: int, field: str | None, problem: str, *, truncated: bool = False
    ) -> None:
        self.path = path
        self.line = line
        self.field = field
        self.problem = problem
        self.truncated = truncated
        where = f"{path}:{line}" + (f" field {field!r}" if field else "")
        super().__init__(f"{where}: {problem}")

    def __reduce__(self) -> tuple[Any, ...]:
        # rebuilt from its fields (a replay's worker processes send their bad lines back)
        return (
            _rebuild_format_error,
            (type(self), self.path, self.line, self.field, self.problem, self.truncated),
        )


def _rebuild_format_error(
    cls: type[CaptureFormatError],
    path: str,
    line: int,
    field: str | None,
    problem: str,
    truncated: bool,
) -> CaptureFormatError:
    return cls(path, line, field, problem, truncated=truncated)


class SchemaVersionError(CaptureFormatError):
    """A trace was written by a newer schema version than this agenteval understands."""


@dataclass
class JudgeUsage:
    """What asking a judge cost, kept whatever came of it."""

    calls: int = 0
    """HTTP requests (or model calls) made: re-asks and retries included."""
    input_tokens: int = 0
    output_tokens: int = 0
    cached_input_tokens: int = 0
    """Of ``input_tokens``, those the provider read from its prompt cache."""
    abandoned: int = 0
    """Calls given up at their timeout: the server may have gone on generating."""
    estimated_input_tokens: int = 0
    """The abandoned calls' prompt tokens, estimated (characters / 4): their real count is
    never known, and a budget counts this estimate."""

    def add(self, other: JudgeUsage) -> None:
        """Count ``other``'s calls and tokens in these."""
        self.calls += other.calls
        self.input_tokens += other.input_tokens
        self.output_tokens += other.output_tokens
        self.cached_input_tokens += other.cached_input_tokens
        self.abandoned += other.abandoned
        self.estimated_input_tokens += other.estimated_input_tokens


class JudgeError(AgentEvalError):
    """A judge could not produce a usable reply. ``kind`` names the way it failed (what the
    result's ``error`` begins with and what a command's advice follows); ``usage`` holds the
    calls and tokens spent before it did."""

    kind: ClassVar[ErrorKind] = ErrorKind.JUDGE_ERROR
    label: ClassVar[str] = "judge error"
    """How a result's ``error`` begins for this kind."""

    def __init__(self, *args: Any) -> None:
        super().__init__(*args)
        self.usage = JudgeUsage()


class JudgeConfigError(JudgeError):
    """The judge is misconfigured, found by its preflight check before anything is scored;
    the message names the option or variable to fix."""

    kind = ErrorKind.CONFIG
    label = "judge misconfigured"


class JudgeUnavailableError(JudgeError):
    """The judge could not be reached or kept failing after all retries: replaying may help."""

    kind = ErrorKind.UNAVAILABLE
    label = "judge unavailable"


class JudgeBudgetError(JudgeError):
    """The judge's spending budget is used up: no more calls are made (answers already in the
    cache still count)."""

    kind = ErrorKind.BUDGET
    label = "budget exhausted"


class JudgeContextOverflowError(JudgeError):
    """The prompt is longer than the judge model's context: replaying gives the same error."""

    kind = ErrorKind.CONTEXT_OVERFLOW
    label = "context overflow"


class JudgeUnsupportedRequestError(JudgeError):
    """The server refused the request itself (an HTTP 4xx, an output mode it does not take):
    replaying gives the same error; the request or the options must change."""

    kind = ErrorKind.UNSUPPORTED_REQUEST
    label = "unsupported request"


class JudgeParseError(JudgeError):
    """The judge's reply did not parse into the expected schema after the allowed re-asks."""

    kind = ErrorKind.UNPARSABLE
    label = "unparsable"

    def __init__(self, message: str, raw_reply: str) -> None:
        super().__init__(message)
        self.raw_reply = raw_reply

    def __reduce__(self) -> tuple[Any, ...]:
        # a worker process or Ray actor sends it back: its usage goes with it
        return (type(self), (self.args[0], self.raw_reply), self.__dict__)


class JudgeInvalidAnswerError(JudgeParseError):
    """A well-formed reply that breaks the metric's rules (a wrong number of verdicts), after
    one re-ask that stated the rule; such a reply is never cached."""

    kind = ErrorKind.INVALID_ANSWER
    label = "invalid answer"


def describe_validation(exc: ValidationError) -> str:
    """The first problem pydantic found, as ``field.path: message`` for a one-line error (the
    field path and message cut short: a key can be a megabyte long)."""
    error = exc.errors(include_url=False)[0]
    where = ".".join(str(part) for part in error["loc"])[:120] or "value"
    return f"{where}: {str(error['msg']).removeprefix('Value error, ')[:200]}"


def os_error_at(exc: OSError, path: str | os.PathLike[str]) -> OSError:
    """``exc`` naming ``path``: a failed write of a buffered file (a full disk) does not say
    which file it was, and the command line's one-line error should."""
    return OSError(exc.errno, exc.strerror, os.fspath(path))


def describe_os_error(exc: OSError, path: str | os.PathLike[str] | None = None) -> str:
    """A file-system error as one line, ``path: what went wrong``: a folder on the path that
    is a file is named (the system says only "File exists" or "Not a directory")."""
    where = Path(path if path is not None else exc.filename or "")
    for parent in where.parents:
        if parent != Path(".") and parent.is_file():
            return f"{where}: {parent} is a file, not a directory"
    reason = exc.strerror or str(exc)
    return f"{where}: {reason[:1].lower()}{reason[1:]}" if str(where) != "." else reason
