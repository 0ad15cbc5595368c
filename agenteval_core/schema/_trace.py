"""The one trace schema that adapters, replay and EvalSuite produce and metrics read.

Span kinds and attribute names follow the OpenTelemetry GenAI semantic conventions, so a
``Trace`` can be exported as ``invoke_agent`` / ``chat`` / ``execute_tool`` spans and imported back.
"""

from __future__ import annotations

import ast
import json
import math
import random
import re
import time
from collections import OrderedDict
from collections.abc import Hashable, Iterator, Mapping, Sequence
from enum import StrEnum
from typing import Any, Generic, Literal, TypeVar

from pydantic import BaseModel, ConfigDict, Field, field_validator, model_validator

from .._errors import MetricInputError
from .._fork import renew_after_fork
from ._conversation import SHARED_INPUT, rebuild_conversations, written_conversations
from ._unvalidated import unvalidated_with_defaults

__all__ = [
    "AGENT_NAME",
    "COMPLETED_STATUSES",
    "CONTROL_FLOW",
    "FINISH_REASONS",
    "GRAPH_STEP",
    "GUARD_REFUSED",
    "HANDOFF_TARGET",
    "HUMAN_ANSWERS",
    "HUMAN_QUESTIONS",
    "INCOMPLETE_STATUSES",
    "INPUT_TOKENS",
    "INTERNAL_CALL",
    "OPERATION_NAME",
    "OTEL_OPERATION_NAMES",
    "OUTPUT_TOKENS",
    "PROVIDER_NAME",
    "REFUSAL",
    "REQUEST_MODEL",
    "RESUME",
    "RESUMES_TRACE_ID",
    "RESUME_QUESTIONS",
    "SCHEMA_VERSION",
    "STEPS_UNRECORDED",
    "TOKEN_LIMIT_REASONS",
    "AgentStep",
    "EvalCase",
    "ExpectedToolCall",
    "LatestKept",
    "LoopAlert",
    "NewerVersionError",
    "RecentRuns",
    "RunStatus",
    "Span",
    "SpanKind",
    "ToolCall",
    "ToolCallLimit",
    "ToolSpec",
    "Trace",
    "answers_by_question",
    "known_version",
    "last_answer",
    "new_id",
    "read_again",
    "resume_by_question",
    "resume_questions",
    "run_fingerprint",
    "text_of",
]

SCHEMA_VERSION = 3
"""Version of the JSON form; a reader refuses traces from a newer version.

Version 3 writes each message of a run's conversation once: a model call's messages that
an earlier model call of the run was sent too are left out of its ``input`` and named by
reference (:data:`~agenteval_core.schema._conversation.SHARED_INPUT`). Version 2 writes each
tool call once: a tool span's ``input``, ``output`` and ``error`` are left out of its line
where they are its ``tool_call``'s arguments, result and error (as they are whenever
agenteval records the call), and the LLM span's requests carry no results. Lines of
versions 1 and 2, which hold the copies, read as before."""

GUARD_REFUSED = "agenteval.guard.refused"
"""Span attribute set to ``True`` on a tool call that the loop guard refused."""

CONTROL_FLOW = "agenteval.control_flow"
"""Span attribute: ``interrupt`` or ``handoff`` when a span ended by the framework's control
flow (a pause for a human, a handoff to another agent) rather than by an error."""

HANDOFF_TARGET = "agenteval.handoff.goto"
"""Span attribute: where a handoff went."""

GRAPH_STEP = "agenteval.graph_step"
"""Span attribute of a task a graph ran as one of its steps (a LangGraph node run): the
step's number. Tasks under one parent with the same number ran side by side (a ``Send``
fan-out, parallel edges, a model's parallel tool calls), none seeing what the others found
before the step ended: the loop guard counts a call they each made as often as the task
that made it most, a task that calls a model is read as an agent, and a call of one of
them recovers no failure of another (see :class:`~agenteval_core.LoopGuard`)."""

REFUSAL = "agenteval.refusal"
"""Span attribute of an LLM span whose reply was the provider's explicit refusal (OpenAI's
refusal field, Anthropic's refusal stop reason, a Gemini safety stop): the refusal's text,
``""`` when the provider gave none. A run that ends on one has no answer to score as one."""

REASONING = "agenteval.reasoning"
"""Span attribute of an LLM span: the reasoning the model gave with its reply, apart from
the reply's text (Anthropic's thinking, OpenAI's reasoning summary, a reasoning model's
``reasoning_content``). A call that asked for tools has it in its ``thought`` too, before
its text, so a judge reads why the agent chose its calls."""

TOOL_NOT_RUN = "agenteval.tool.not_run"
"""Span attribute set to ``True`` on a tool call the framework answered without running a
tool: a call of a tool the agent does not have (LangChain's ``Error: <name> is not a valid
tool``), or one a middleware answered in the tool's place (``AutoModeMiddleware`` blocking
a risky call, ``ToolCallLimitMiddleware`` refusing calls over its limit). Its result, or
its error, is what the model was shown."""

STEPS_UNRECORDED = "agenteval.steps_unrecorded"
"""Trace metadata key set to ``True`` on a trace imported from spans that record no model
call and no tool call, only the run's input and output (OpenInference's and OpenLLMetry's
CrewAI instrumentors write no others): the run's steps are unknown, not absent, so the
metrics that check them do not score it (:attr:`Trace.steps_recorded`)."""

RESUME = "resume"
"""Trace metadata key: the answer a human gave a run that paused for one (a LangGraph
interrupt's resume value, a CrewAI flow's feedback), in the run that went on from it."""

RESUME_QUESTIONS = "resume_questions"
"""Trace metadata key, beside a :data:`RESUME` that answers the paused run's interrupts by
their ids (LangGraph's ``Command(resume={interrupt_id: answer, ...})``, as for interrupts
raised by parallel nodes or tools): what each of those interrupts asked, by id. The ids are
new in every run, so a run asked the same again is answered by the questions
(:func:`agenteval_core.answers_by_question`)."""

HUMAN_ANSWERS = "human_answers"
"""Trace metadata key: the answers a human gave a run while it ran, in order (a CrewAI
flow's ``@human_feedback`` its provider answered, a LlamaIndex workflow's step given a
``HumanResponseEvent``); the answer a resumed run went on from is :data:`RESUME`."""

HUMAN_QUESTIONS = "human_questions"
"""Trace metadata key: what the human was asked for each answer of :data:`HUMAN_ANSWERS`,
in the same order, ``None`` where the framework does not say (a CrewAI flow's ``ask()``
message, a LlamaIndex ``InputRequiredEvent``'s prefix); present only when one is known."""

RESUMES_TRACE_ID = "resumes_trace_id"
"""Trace metadata key: the id of the paused (or failed) run's trace a run went on from."""

PROVIDER_TOOL = "agenteval.tool.provider_run"
"""Span attribute set to ``True`` on a tool call the model's provider ran inside the model
call (a built-in web search, code execution): the call is a tool span under that LLM span,
with the result the provider gave. No tool of the agent's ran it, so the loop guard could
alert on it but not refuse it."""

MEDIA_BLOCK_TYPES = frozenset(
    {
        "image",
        "image_url",
        "input_image",
        "audio",
        "input_audio",
        "video",
        "file",
        "input_file",
        "document",
    }
)
"""Content-block types that carry media in a model's messages: LangChain's standard
blocks, OpenAI's (chat and Responses), Anthropic's, and those the LlamaIndex adapter
records."""


def media_kind(block_type: str) -> str:
    """The kind of media a block of ``block_type`` (one of :data:`MEDIA_BLOCK_TYPES`) holds:
    ``image``, ``audio``, ``video``, ``file`` or ``document``."""
    return block_type.removeprefix("input_").removesuffix("_url")


INTERNAL_CALL = "agenteval.internal_call"
"""Span attribute set to ``True`` on a span the framework ran inside the run for its own ends
(a middleware summarising the history or choosing the tools, a guardrail checking an
answer). Its LLM calls stay in the trace and count in its tokens, but none of them is a step
of the agent (:meth:`Trace.steps`): a judge told they were would read a summary of the
history as the agent's answer."""

AGENT_NAME = "gen_ai.agent.name"
"""Span attribute (OpenTelemetry GenAI): the agent a span ran for, in multi-agent runs."""

# the OpenTelemetry GenAI span attributes the adapters write and metrics, export and import
# read: spelled here once
OPERATION_NAME = "gen_ai.operation.name"
REQUEST_MODEL = "gen_ai.request.model"
PROVIDER_NAME = "gen_ai.provider.name"
INPUT_TOKENS = "gen_ai.usage.input_tokens"
OUTPUT_TOKENS = "gen_ai.usage.output_tokens"
FINISH_REASONS = "gen_ai.response.finish_reasons"

TOKEN_LIMIT_REASONS = frozenset({"length", "max_tokens"})
"""Finish reasons (lower-cased) that say a reply was cut at the model's output token limit:
OpenAI's and Ollama's ``length``, Anthropic's, Bedrock's and Gemini's ``max_tokens``."""


class NewerVersionError(ValueError):
    """Raised inside validation by :func:`known_version`: a file format's version is newer
    than this agenteval reads (readers tell it from other errors by this type)."""


def known_version(value: int, newest: int, what: str) -> int:
    """A file format's version as a validator checks it: one this agenteval reads, or an
    error that says to upgrade."""
    if value > newest:
        raise NewerVersionError(
            f"{what} {value} is newer than this agenteval understands ({newest}); "
            "upgrade agenteval to read it"
        )
    if value < 1:
        raise ValueError(f"{what} must be >= 1, got {value}")
    return value


class _Ids(random.Random):
    """The source of ids: seeded from the OS once (and again in a forked child, so parent
    and child never share a sequence), then no system call per id. An id is made on the
    recorder thread for every span, and each system call there gives up the interpreter lock
    to agent threads that may hold it for tens of milliseconds (serialising a tool's large
    result), which delays every finished run's line behind it. Private: a program that seeds
    ``random`` for its own reproducibility must not make ids repeat. Ids are not secrets."""

    def _after_fork(self) -> None:
        self.seed()


_ids = _Ids()
renew_after_fork(_ids)


def new_id() -> str:
    """A fresh random identifier (32 hex characters, like an OpenTelemetry trace id)."""
    return f"{_ids.getrandbits(128):032x}"


def run_fingerprint(trace: Trace) -> int:
    """What tells the same run read twice (a capture line shipped twice) from another run
    given the same id (a capture written by hand, ids from elsewhere): when it started, its
    spans, its request and answer, hashed, so that a reader keeps a number per trace, never
    its texts."""
    return hash((trace.start_time, len(trace.spans), text_of(trace.input), text_of(trace.output)))


def read_again(runs: dict[str, int], trace: Trace) -> bool:
    """Whether ``trace`` is a run ``runs`` holds already (the same id and
    :func:`run_fingerprint`): a repeat. Otherwise it is kept there, and False."""
    fingerprint = run_fingerprint(trace)
    if runs.get(trace.id) == fingerprint:
        return True
    runs[trace.id] = fingerprint
    return False


_K = TypeVar("_K")
_V = TypeVar("_V")

SESSIONLESS_KEPT = 65_536
"""Runs with no session a reader remembers to tell a repeat (the latest; a shipper's retry
repeats a line soon after it): about 7 MiB."""


class LatestKept(OrderedDict[_K, _V], Generic[_K, _V]):
    """A dict that keeps its latest ``most`` entries: one more set, the oldest goes (what a
    reader remembers of a stream of runs, for runs that may never come back)."""

    def __init__(self, most: int) -> None:
        super().__init__()
        self.most = most

    def __setitem__(self, key: _K, value: _V) -> None:
        super().__setitem__(key, value)
        if len(self) > self.most:
            self.popitem(last=False)


class RecentRuns(LatestKept[str, int]):
    """The runs :func:`read_again` keeps for traces with no session: the latest
    :data:`SESSIONLESS_KEPT` (the oldest go first)."""

    def __init__(self) -> None:
        super().__init__(SESSIONLESS_KEPT)


def text_of(value: Any) -> str:
    """Serialise a span input or output to text for embedding and judging.

    Strings pass through; ``None`` becomes ``""``; anything else becomes compact JSON
    (non-JSON values through ``str``) so the same value always gives the same text.
    """
    if value is None:
        return ""
    if isinstance(value, str):
        return value
    import json

    try:
        return json.dumps(value, ensure_ascii=False, sort_keys=True, default=str)
    except (TypeError, ValueError):
        return str(value)


_USER_ROLES = ("human", "user")
_ASSISTANT_ROLES = ("ai", "assistant")


def _message_text(content: Any) -> str:
    """A message's text: its content, or the text of its text blocks."""
    if isinstance(content, list):
        return "\n".join(
            block["text"]
            for block in content
            if isinstance(block, dict) and block.get("type") == "text" and "text" in block
        )
    return text_of(content)


def last_answer(turns: Sequence[Mapping[str, Any]]) -> str:
    """The last non-empty ``output`` of a conversation's turns (``{"input": ...,
    "output": ...}``, oldest first), as text, stripped; ``""`` when none has one."""
    for turn in reversed(turns):
        text = text_of(turn.get("output")).strip()
        if text:
            return text
    return ""


BY_QUESTION = "answers_by_question"
"""The key of a resume answer given by question (:func:`resume_by_question`)."""


def resume_questions(resume: Any, asked: Any) -> dict[str, Any] | None:
    """A resumed run's :data:`RESUME_QUESTIONS`: what each interrupt its ``resume`` answer
    answers by id asked, from ``asked`` (interrupt id → question, of the interrupts the run
    paused at); ``None`` when the answer is not given by those ids."""
    if not (isinstance(resume, dict) and resume and isinstance(asked, dict)):
        return None
    if not all(str(key) in asked for key in resume):
        return None
    return {str(key): asked[str(key)] for key in resume}


def resume_by_question(resume: Any, asked: Any) -> Any:
    """A run's :data:`RESUME` answer as another run can be given it: answers by interrupt
    id whose interrupts' questions are known (``asked``, the run's
    :data:`RESUME_QUESTIONS`) as ``{"answers_by_question": [{"question": ..., "answer":
    ...}, ...]}``, in the order given (a new run's interrupts have new ids, and ask the
    same); any other answer as it is."""
    questions = resume_questions(resume, asked)
    if questions is None:
        return resume
    return {
        BY_QUESTION: [
            {"question": questions[str(key)], "answer": answer} for key, answer in resume.items()
        ]
    }


def answers_by_question(answer: Any) -> list[tuple[Any, Any]] | None:
    """The ``(question, answer)`` pairs of a resume answer given by question (a regression
    case's ``resume`` entry for a run that answered several interrupts at once, see
    :func:`resume_by_question`), in order; ``None`` for any other answer, which the run is
    resumed with as it is."""
    if not (isinstance(answer, dict) and set(answer) == {BY_QUESTION}):
        return None
    pairs = answer[BY_QUESTION]
    if not isinstance(pairs, list) or not all(
        isinstance(p, dict) and set(p) == {"question", "answer"} for p in pairs
    ):
        raise ValueError(
            f"a resume answer given by question holds a list of "
            f'{{"question": ..., "answer": ...}} objects, got {pairs!r:.200}'
        )
    return [(p["question"], p["answer"]) for p in pairs]


_SCALARS = (bool, int, float, type(None))


# a key that holds an error report: "error", "errors", "errorMessage", "error_code",
# "exception_type"; not a figure about errors ("error_rate", "error_count": data)
_ERROR_KEY = re.compile(
    r"(last[_\-.]?)?(error|errors|err|exception|fault)"
    r"([_\-.]?(message|msg|code|type|detail|details|description|info|reason|text|name|"
    r"class|string|str|trace|stack|stacktrace))?",
    re.IGNORECASE,
)
# fields that hold what a tool found (a search hit, a document), not how the call went
_CONTENT_KEYS = frozenset(
    """
    title content contents page_content snippet snippets text body summary description
    document documents passage passages chunk chunks excerpt abstract html markdown
    """.split()
)
# a text that opens as an error report: "Error: ...", "ERROR 503", "ValueError: ...",
# "ToolException('...')", "Traceback (most recent call last)", "HTTP 500", "502 Bad Gateway"
_OPENS_AS_ERROR = re.compile(
    r"\W*(error\s*([:\-–(\[#]|\d|$)|\w*(error|exception)\s*[:(]|exception\b|traceback\b|"
    r"fatal\b|http\s*(error|[45]\d\d)|[45]\d\d\s+(internal|bad|not|service|gateway|"
    r"forbidden|unauthori[sz]ed|too))",
    re.IGNORECASE,
)
# a text that reports a failure without saying "error": "Traceback (most recent call
# last)", "Exception: ...", "requests.exceptions.ReadTimeout: ...", "fatal: ...", "HTTP 404",
# "HTTP/1.1 403 Forbidden", "404 Not Found", "503 Service Unavailable", "Request failed with
# status code 429" (an HTTP status with its reason phrase, never a figure: "500 service
# members"); the str() of Python's OSError ("[Errno 2] No such file or directory: 'a.txt'",
# "[Errno 111] Connection refused") and CalledProcessError ("Command '['ls', 'x']' returned
# non-zero exit status 2."), a shell's "bash: jq: command not found", "/bin/sh: 1: jq: not
# found", "ls: cannot access 'x': No such file or directory"
_OPENS_AS_FAILURE = re.compile(
    r"\W*(traceback \(most recent call last\)|[\w.]*exception[\w.]*\s*[:(]|fatal:|"
    r"http(/\d(\.\d)?)?\s*[45]\d\d\b|request failed with status code [45]\d\d\b|"
    r"[45]\d\d\s+(bad request|unauthori[sz]ed|payment required|forbidden|not found|"
    r"method not allowed|not acceptable|request timeout|conflict|gone|unprocessable|"
    r"too many requests|not implemented|bad gateway|service unavailable|gateway timeout)\b|"
    r"\[errno -?\d+\]|command '[^\n]*' returned non-zero exit status|"
    r"[\w./-]+:( \d+:)?( [^\s:]+:)? (command not found|not found$|no such file or directory|"
    r"permission denied)|[\w./-]+: cannot (access|open|stat|create|remove|read)\b)",
    re.IGNORECASE | re.MULTILINE,
)
# the same said in words, as a tool that catches what it raised returns it ("Failed to
# fetch: ...", "Unable to find order 991", "Connection refused", "Permission denied", "Rate
# limit exceeded", Playwright's "Timeout 30000ms exceeded."): a report only in a short text
# (a longer one that opens so is a document: a troubleshooting page's "Unable to connect?")
_SAYS_FAILURE = re.compile(
    r"\W*(failed to \w|unable to \w|could ?n[o']t \w|can ?n[o']t (connect|reach|access|find|"
    r"open|read|resolve|load|fetch|locate)\b|(permission|access) denied\b|"
    r"connection (refused|reset|timed out|aborted)\b|((read|connect|request|operation) )?"
    r"timed out\b|timeout (of )?\d+ ?m?s exceeded|rate limit(ed\b| exceeded| reached)|"
    r"quota exceeded|no such file or directory|all connection attempts failed|"
    r"name or service not known)",
    re.IGNORECASE,
)
_SHORT = 500
"""The longest text read as a status message: a longer one mentioning an error is content
(a documentation page about error handling, a log search's hits) unless it opens as one."""


# a field of a repr() whose name says error: error=None, error_message='', errors=[],
# error_rate=0.02 (a value with a comma, bracket or space in it is not taken apart)
_REPR_ERROR_FIELD = re.compile(
    r"""\b(\w*(?:error|exception|fault)\w*)=('[^']*'|"[^"]*"|\[\]|\{\}|\(\)|[\w.+\-]+)""",
    re.IGNORECASE,
)
_EMPTY_REPR = frozenset({"None", "''", '""', "[]", "{}", "()", "0", "0.0", "False"})
# a flag that says the call failed: MCP's CallToolResult(isError=True), as LlamaIndex shows
# the model an MCP tool's result (its str(): "meta=None content=[...] isError=True")
_FAILED_FLAG = re.compile(r"is_?error", re.IGNORECASE)


def _reads_as_error(text: str, content: bool) -> bool:
    """Whether a text that says "error" is a report of one: it opens as one, or it is short
    and no content field's (a status, "Sorry, an error occurred"). A field of an object's
    ``repr()`` (``Order(id='A-1', error=None)``, pydantic's ``id='A-1' error=None``) is read
    as a key of a result object is: an error report's that holds something says so, one
    that holds nothing or a figure about errors (``error_rate=0.02``) does not; an
    ``isError=True`` says the call failed (MCP's result)."""
    fields = _REPR_ERROR_FIELD.findall(text)
    if fields:
        if any(
            (_ERROR_KEY.fullmatch(key) and value not in _EMPTY_REPR)
            or (value == "True" and _FAILED_FLAG.fullmatch(key))
            for key, value in fields
        ):
            return True
        text = _REPR_ERROR_FIELD.sub("", text)
        if "error" not in text.lower():
            return False
    if _OPENS_AS_ERROR.match(text) is not None:
        return True
    return not content and (len(text) <= _SHORT or _page_of_failure(text))


# a server's error page: its title, near the start, says what went wrong
_HTML_TITLE = re.compile(r"<title[^>]*>\s*([^<]{0,200})</title>", re.IGNORECASE)
_TITLE_OF_ERROR = re.compile(r"\W*error\s*([:\-–(\[#|]|\d)", re.IGNORECASE)


def _page_of_failure(text: str) -> bool:
    """Whether ``text`` is an HTML page whose title reports a failure: a server's error
    page (``<title>404 Not Found</title>``, ``<title>502 Bad Gateway</title>``, ``<title>Error
    404 (Not Found)</title>``), which a fetch tool returns as the page it got."""
    if text.lstrip()[:1] != "<":
        return False
    title = _HTML_TITLE.search(text, 0, 4096)
    return title is not None and (
        _OPENS_AS_FAILURE.match(title[1]) is not None or _TITLE_OF_ERROR.match(title[1]) is not None
    )


def _opens_as_failure(text: str) -> bool:
    """Whether a text that does not say "error" reports a failure all the same (see
    :data:`_OPENS_AS_FAILURE`; a short one also in words, :data:`_SAYS_FAILURE`), or is a
    server's error page."""
    return (
        _OPENS_AS_FAILURE.match(text) is not None
        or (len(text) <= _SHORT and _SAYS_FAILURE.match(text) is not None)
        or _page_of_failure(text)
    )


def _mentions_error(value: Any) -> bool:
    """Whether ``value`` reports an error, found without writing it out as text: a key of an
    error report that holds something (``{"error": "timeout"}``, not ``{"error": null}``,
    ``"errors": []`` nor ``{"error_rate": 0.02}``, a figure), a text that opens as an error
    (``"Error: ..."``, ``"ValueError: ..."``, a traceback; outside a content field also
    ``"404 Not Found"``, ``"Exception: ..."``, ``"fatal: ..."``), a short text that says "error"
    (a status: ``"Sorry, an error occurred"``), or the ``str()`` of a value JSON has no type
    for that says it. What a tool found is not how it fared: a text over 500 characters, or
    in a content field (``title``, ``content``, ``snippet``, ...), that mentions errors
    without opening as one is data (documentation on error handling, a search hit titled
    "KeyError"). A JSON object or array written as text is read as one. Each distinct text
    is looked at once and each container visited once (a shared or self-containing one
    too). Writing 2.6 MB of records out as JSON took ~31 ms here in one C call that holds
    the interpreter, so a scoring thread doing it stalled the capture's writer for as long;
    this takes ~22 ms and lets other threads run."""
    clean: set[str] = set()
    visited: set[int] = set()
    stack: list[tuple[Any, bool]] = [(value, False)]  # (value, held by a content field)
    while stack:
        item, content = stack.pop()
        kind = type(item)
        if kind is dict or kind is list or kind is tuple:
            if id(item) in visited:
                continue
            visited.add(id(item))
            if kind is not dict:
                stack.extend((inner, content) for inner in item)
                continue
            for key, inner in item.items():
                if type(key) is str:
                    if _ERROR_KEY.fullmatch(key) and not _empty(inner):
                        return True
                    found = content or key.lower() in _CONTENT_KEYS
                else:
                    found = content
                if type(inner) is str:
                    if inner not in clean:
                        if "error" in inner.lower():
                            stack.append((inner, found))  # looked at whole below
                        elif not found and _opens_as_failure(inner):
                            return True
                        else:
                            clean.add(inner)
                elif not isinstance(inner, _SCALARS):
                    stack.append((inner, found))
        elif isinstance(item, str):
            if item not in clean:
                if "error" in item.lower():
                    written = _json_container(item)
                    if written is None:
                        if _reads_as_error(item, content):
                            return True
                    else:
                        stack.append((written, content))  # its keys and values
                elif not content and _opens_as_failure(item):
                    return True
                clean.add(item)
        elif not isinstance(item, _SCALARS) and "error" in str(item).lower():
            return True
    return False


# the fields in which a response says how the call went (checked before a text is parsed)
_OUTCOME_FIELD = re.compile(
    r"""(["'])(isError|success|ok|status|statusCode|status_code|httpStatus|http_status|"""
    r"""exitCode|exit_code|returncode|return_code)\1\s*:"""
)
_OUTCOME_TEXT_CHARS = 65_536
"""The longest JSON text read for a response's outcome fields: a response that reports a
failure is short, and a longer one (megabytes of records, often with a "status" of their
own) would be parsed whole each time a metric asks."""
_HTTP_STATUS_KEYS = ("status_code", "statusCode", "http_status", "httpStatus", "status")
_EXIT_CODE_KEYS = ("exit_code", "exitCode", "returncode", "return_code")


def _reports_failure(result: Any) -> bool:
    """Whether a tool's response says in a field made for it that the call failed: MCP's
    ``isError: true``, ``success`` or ``ok`` false, an HTTP status of 400 or more, or an exit
    code other than 0 with something on stderr (``grep`` that finds nothing exits 1 and
    says nothing). Only the response's own fields, as an object or as a JSON object's text
    (of at most :data:`_OUTCOME_TEXT_CHARS`): records it returned
    (``[{"build": 7, "success": false}]``) are data."""
    if type(result) is str:
        if len(result) > _OUTCOME_TEXT_CHARS or not result.lstrip().startswith("{"):
            return False
        if not _OUTCOME_FIELD.search(result):
            return False
        result = _json_container(result)
    if type(result) is not dict:
        return False
    if result.get("isError") is True or result.get("success") is False or result.get("ok") is False:
        return True
    for key in _HTTP_STATUS_KEYS:
        status = result.get(key)
        if type(status) is int and 400 <= status < 600:
            return True
    return any(
        type(code := result.get(key)) is int and code != 0 and not _empty(result.get("stderr"))
        for key in _EXIT_CODE_KEYS
    )


def _empty(value: Any) -> bool:
    """Whether a value says nothing: ``None``, ``False``, zero, or an empty string or
    container (a numpy array or another object is never empty here)."""
    if value is None or value is False:
        return True
    kind = type(value)
    if kind is int or kind is float:
        return value == 0
    if kind is str or kind is list or kind is dict or kind is tuple:
        return not value
    return False


def _json_container(text: str) -> Any:
    """A JSON object or array written as text (a tool that returns ``json.dumps`` of an API
    response), or a Python dict or list written as text of at most
    :data:`_OUTCOME_TEXT_CHARS` (what LlamaIndex and CrewAI show the model of a tool that
    returned one: its ``str()``, ``{'output': '42', 'error': None}``), else ``None``."""
    start = text.lstrip()[:1]
    if start != "{" and start != "[":
        return None
    try:
        value = json.loads(text)
    except ValueError:
        if len(text) > _OUTCOME_TEXT_CHARS:
            return None
        try:  # literals only: nothing in the text is run
            value = ast.literal_eval(text)
        except (ValueError, TypeError, SyntaxError, MemoryError, RecursionError):
            return None
    return value if isinstance(value, dict | list) else None


class SpanKind(StrEnum):
    """What a span did. Values map to OpenTelemetry GenAI operation names."""

    AGENT = "agent"
    LLM = "llm"
    TOOL = "tool"
    RETRIEVER = "retriever"
    CHAIN = "chain"
    TASK = "task"


OTEL_OPERATION_NAMES: dict[SpanKind, str] = {
    SpanKind.AGENT: "invoke_agent",
    SpanKind.LLM: "chat",
    SpanKind.TOOL: "execute_tool",
    SpanKind.RETRIEVER: "retrieval",
}
"""``gen_ai.operation.name`` of the span kinds the GenAI conventions name. Chains and tasks
have none; the root of a run that holds several agents or none (a crew, a supervisor graph,
a plain graph) is an ``invoke_workflow``."""


class _Model(BaseModel):
    model_config = ConfigDict(extra="forbid", validate_assignment=False)


class RunStatus(StrEnum):
    """How a run ended."""

    OK = "ok"
    """It finished and returned an output."""
    ERROR = "error"
    """It raised."""
    INTERRUPTED = "interrupted"
    """It paused, waiting for a human (control flow, not a failure)."""
    STOPPED = "stopped"
    """agenteval's loop guard stopped it (the trace's ``alerts`` say why)."""
    CANCELLED = "cancelled"
    """It was cancelled by its caller."""
    TIMEOUT = "timeout"
    """The framework ended it for taking too long."""
    LIMIT = "limit"
    """The framework ended it at an iteration or recursion limit."""
    UNFINISHED = "unfinished"
    """agenteval stopped recording it before it ended (the evaluator closed while it ran, or
    it had no event for so long that it was taken for lost): how it ended is unknown, so it
    is captured as it stood and not scored (the reason says which)."""


COMPLETED_STATUSES = frozenset({RunStatus.OK})
"""Statuses of runs that completed; metrics that assume a perfect score for an empty input or
output keep that assumption for these only."""

INCOMPLETE_STATUSES = frozenset(
    {RunStatus.ERROR, RunStatus.STOPPED, RunStatus.CANCELLED, RunStatus.TIMEOUT, RunStatus.LIMIT}
)
"""Statuses of runs that did not complete: such a run fails its suite attempt and is a
regression case's failure. ``ok``, ``interrupted`` (a pause for a human: control flow) and
``unfinished`` (an end agenteval did not see) are not among them."""


class ToolCall(_Model):
    """One call of a tool: what was asked for and what came back."""

    id: str | None = None
    """The call id the model gave (links the tool span to the LLM message that asked for it)."""
    name: str
    """The tool's name."""
    arguments: dict[str, Any] = Field(default_factory=dict)
    """Arguments as a JSON object."""
    result: Any = None
    """What the tool returned (``None`` when it raised)."""
    error: str | None = None
    """The error the tool raised, or the error status it returned."""

    @property
    def failed(self) -> bool:
        """True when the call raised, returned an error object (a dict whose ``error`` is
        set), a response that says it failed (:func:`_reports_failure`: MCP's ``isError``,
        ``success``/``ok`` false, an HTTP status of 400 or more, a non-zero exit code with
        stderr), or its result text reports one (see :func:`_mentions_error`: an error
        text, Python's or a shell's failure forms, a short text that says the call failed;
        an ``"error": null`` beside the data is no mention)."""
        if self.error:
            return True
        result = self.result
        if isinstance(result, dict) and not (
            _empty(result.get("error")) and _empty(result.get("Error"))
        ):
            return True
        return _reports_failure(result) or _mentions_error(result)


class ToolSpec(_Model):
    """A tool the agent could call."""

    name: str
    description: str = ""
    parameters: dict[str, Any] | None = None
    """JSON schema of the tool's arguments."""


class ExpectedToolCall(_Model):
    """A tool call a case expects; ``arguments`` are the reference arguments, when known."""

    name: str
    arguments: dict[str, Any] | None = None


class ToolCallLimit(_Model):
    """At most ``max_calls`` calls of a tool (with these arguments, when given) in one run."""

    name: str
    arguments: dict[str, Any] | None = None
    """A call counts when its arguments include these (``None``: any arguments)."""
    max_calls: int = Field(default=0, ge=0)
    """How many such calls the run may make (0: none)."""

    def matches(self, call: ToolCall) -> bool:
        """Whether ``call`` counts against this limit."""
        if call.name != self.name:
            return False
        if self.arguments is None:
            return True
        return all(
            call.arguments.get(key, _ABSENT) == value for key, value in self.arguments.items()
        )


_ABSENT = object()


class LoopAlert(_Model):
    """An agent caught repeating itself."""

    session_id: str | None
    trace_id: str
    pattern: Literal["repeated_call", "cycle", "loop_detection"]
    """``repeated_call``: the same tool with the same arguments N times in one run;
    ``cycle``: a short sequence of calls repeated (A→B→A→B); ``loop_detection``: the
    cross-trace metric fell below its threshold."""
    count: int
    """How many times the call (or the cycle) has occurred."""
    calls: list[ToolCall] = Field(default_factory=list)
    message: str
    time: float = Field(default_factory=time.time)
    """When the alert was raised."""
    call_started: float | None = None
    """When the tool call that closed the loop started (live patterns), for latency."""
    stopped: bool = False
    """True when the loop guard refused the call and stopped the run."""


class Span(_Model):
    """One timed operation in a run: an agent step, an LLM call, a tool call, a retrieval, ..."""

    id: str = Field(default_factory=new_id)
    parent_id: str | None = None
    kind: SpanKind
    name: str
    input: Any = None
    output: Any = None
    """For LLM spans: the text of the model's reply."""
    error: str | None = None
    start_time: float | None = None
    """Seconds since the epoch."""
    end_time: float | None = None
    attributes: dict[str, Any] = Field(default_factory=dict)
    """OpenTelemetry GenAI attributes, e.g. ``gen_ai.request.model``, ``gen_ai.usage.input_tokens``."""
    thought: str | None = None
    """Reasoning text the model gave with this step (LLM spans that asked for tool calls)."""
    tool_call: ToolCall | None = None
    """For tool spans: the call that was executed, the one record of it. A tool span built
    without ``input``, ``output`` or ``error`` takes the call's arguments, result and error
    (in a :class:`Trace`), and a capture line leaves out those that equal the call's."""
    requested_tool_calls: list[ToolCall] = Field(default_factory=list)
    """For LLM spans: the tool calls the model asked for (id, name and arguments: what
    happened to each is on the tool span that ran it)."""

    @property
    def duration(self) -> float | None:
        """Seconds from start to end, when both are known."""
        if self.start_time is None or self.end_time is None:
            return None
        return self.end_time - self.start_time


class AgentStep(_Model):
    """One step of an agent: its reasoning, the tools it called, and any output it produced."""

    thought: str | None = None
    tool_calls: list[ToolCall] = Field(default_factory=list)
    output: str | None = None


_OWNERS = frozenset({SpanKind.AGENT, SpanKind.TOOL})
"""The kinds of span whose children are their work: an agent's steps, a tool's own calls."""


def ran_again(spans: list[Span]) -> dict[str, ToolCall | None] | None:
    """The tool spans whose call its framework ran again (``None`` when there are none):
    the first run's span id gives the call as its last run recorded it (what the agent was
    given), and each later run's span id gives ``None``.

    A later tool span runs the same call again when it carries the same call id, tool and
    arguments, and no model call of its agent started in between: the model asked once, and
    something other than the agent ran the call again (LangChain's ``ToolRetryMiddleware``
    or a LangGraph ``RetryPolicy`` after the tool raised, CrewAI's retries of a tool that
    raised). A model that asks again for the same call, even under a reused id, asks after
    a model call: that is a call of its own, and a loop when it repeats. The model call of
    another agent running beside it in the same run (CrewAI's ``async_execution`` tasks, a
    graph's parallel branches) asks for none of its calls unless it names the call's id:
    an agent of another name (:data:`AGENT_NAME`), or one under an agent span that is
    neither above nor below the call's nearest agent span (two agents of one name sent at
    once), or one made in another task of a graph step the call's task ran in
    (:data:`GRAPH_STEP`: unnamed sub-agents a graph sends at once). A model call that names
    no agent and is under no such span ends every retry. A model call inside a tool's span
    (the tool's own summariser, a sub-agent it runs) asks only for the calls made inside
    that span. A call without an id (a node that calls a tool itself) is run again when
    its graph's node raised and the graph ran the node again (LangGraph's ``RetryPolicy``,
    a LlamaIndex workflow step's retry policy): the same tool and arguments, failed, in a
    run of that node in the same step that raised before the later run started."""
    ids = [span.tool_call.id for span in spans if span.tool_call is not None and span.tool_call.id]
    if len(set(ids)) == len(ids) and not any(_failed_task(span) for span in spans):
        return None  # each id once and no graph task raised, as in most runs: none ran again
    # a call id → the first run since the last model call of the call under it (every later
    # run of that call has the same tool and arguments, so it stands for them all)
    first: dict[str, Span] = {}
    again: dict[str, ToolCall | None] | None = None
    tools: set[str] = set()  # the tool spans so far
    inside: dict[str, str | None] = {}  # each span's nearest tool span above it
    agents: dict[str, tuple[str, ...]] = {}  # the agent spans at and above each span
    tasks: dict[str, tuple[tuple[Hashable, Hashable], ...]] = {}  # the graph steps of each
    task_of: dict[str, Span] = {}  # each span's nearest graph task at or above it
    # a task that raised, by (its parent, step and name): the failed calls without an id
    # of its run, each with the span of that call's first run
    failed_runs: dict[tuple[Any, ...], list[tuple[Span, Span, str]]] = {}
    for span in spans:  # a parent starts before its children
        parent = span.parent_id
        above = None if parent is None else parent if parent in tools else inside.get(parent)
        inside[span.id] = above
        line = agents.get(parent, ()) if parent is not None else ()
        agents[span.id] = (span.id, *line) if span.kind is SpanKind.AGENT else line
        steps = tasks.get(parent, ()) if parent is not None else ()
        step = span.attributes.get(GRAPH_STEP) if span.attributes else None
        tasks[span.id] = steps if step is None else (((parent, step), span.id), *steps)
        task = span if step is not None else task_of.get(parent) if parent is not None else None
        if task is not None:
            task_of[span.id] = task
        if span.kind is SpanKind.TOOL:
            tools.add(span.id)
        call = span.tool_call
        if call is None:
            if first and span.kind is SpanKind.LLM:
                agent = span.attributes.get(AGENT_NAME)
                asked = {asked.id for asked in span.requested_tool_calls}
                first = {
                    call_id: run
                    for call_id, run in first.items()
                    if inside.get(run.id) != above
                    or (
                        call_id not in asked
                        and (
                            (
                                agent is not None
                                and run.attributes.get(AGENT_NAME) not in (None, agent)
                            )
                            or _beside(agents[span.id], agents[run.id])
                            or tasks_apart(tasks[span.id], tasks[run.id])
                        )
                    )
                }
            continue
        if not call.id:
            if task is not None and (found := _run_before(failed_runs, task, call)) is not None:
                again = {} if again is None else again
                again[found[2]] = call  # the call in its first run's place, as it ended
                again[found[1].id] = again[span.id] = None
                first_run = found[2]
            else:
                first_run = span.id
            if task is not None and call.failed and _failed_task(task):
                key = (task.parent_id, task.attributes[GRAPH_STEP], task.name)
                failed_runs.setdefault(key, []).append((task, span, first_run))
            continue
        earlier = first.get(call.id)
        before = earlier.tool_call if earlier is not None else None
        if (
            earlier is not None
            and before is not None
            and (before.name, before.arguments) == (call.name, call.arguments)
        ):
            if again is None:
                again = {}
            again[earlier.id] = call  # the call in its first run's place, as it ended
            again[span.id] = None
            continue
        first[call.id] = span
    return again


def _refusals_replaced(spans: list[Span]) -> set[str]:
    """The ids of the model calls among ``spans`` that refused (:data:`REFUSAL`) and were
    followed by another model call under the same parent (the same graph node): the
    refusal was raised there and another model answered in its place, so it was no step
    of the run."""
    refused: dict[str | None, str] = {}  # a parent → the refusal of its last model call
    replaced: set[str] = set()
    for span in spans:
        if span.kind is SpanKind.LLM:
            earlier = refused.pop(span.parent_id, None)
            if earlier is not None:
                replaced.add(earlier)
            if isinstance(span.attributes.get(REFUSAL), str):
                refused[span.parent_id] = span.id
    return replaced


def _failed_task(span: Span) -> bool:
    """Whether a span is a graph's task (:data:`GRAPH_STEP`) that raised."""
    return span.error is not None and GRAPH_STEP in span.attributes


def _run_before(
    failed_runs: dict[tuple[Any, ...], list[tuple[Span, Span, str]]], task: Span, call: ToolCall
) -> tuple[Span, Span, str] | None:
    """The earlier run of ``call`` (made without an id in the graph task ``task``) that its
    framework ran again: the same tool and arguments, failed, in a run of the same node in
    the same step that raised before ``task`` started (LangGraph's ``RetryPolicy`` runs the
    node again); taken from ``failed_runs``, or ``None``."""
    runs = failed_runs.get((task.parent_id, task.attributes[GRAPH_STEP], task.name), [])
    for index, (failed, run, first) in enumerate(runs):
        before = run.tool_call
        if (
            failed.id != task.id
            and before is not None
            and (before.name, before.arguments) == (call.name, call.arguments)
            and failed.end_time is not None
            and task.start_time is not None
            and failed.end_time <= task.start_time
        ):
            del runs[index]
            return failed, run, first
    return None


def tasks_apart(
    one: Sequence[tuple[Hashable, Hashable]], other: Sequence[tuple[Hashable, Hashable]]
) -> bool:
    """Whether spans made in the graph steps ``one`` and ``other`` (each a list of the
    step's key and the task of it the span ran in, :data:`GRAPH_STEP`) ran in two tasks of
    one step, side by side: neither saw what the other did before the step ended."""
    tasks = dict(one)
    return any(tasks.get(step, task) != task for step, task in other)


def _beside(one: tuple[str, ...], other: tuple[str, ...]) -> bool:
    """Whether spans under the agent spans ``one`` and ``other`` (each nearest first) are
    of two agents, neither running the other: apart, as two agents a graph sends at once."""
    return bool(one and other) and one[0] not in other and other[0] not in one


class Trace(_Model):
    """One run of an agent, from the user's input to its final output.

    Build one from a framework run with an adapter, from a capture file with replay, or from
    seed-style steps with :meth:`Trace.from_steps`.
    """

    schema_version: int = SCHEMA_VERSION
    id: str = Field(default_factory=new_id)
    session_id: str | None = None
    input: Any = None
    output: Any = None
    error: str | None = None
    """The error that ended the run, if it did not finish."""
    spans: list[Span] = Field(default_factory=list)
    """Spans in the order they started."""
    tools: list[ToolSpec] = Field(default_factory=list)
    """Tools that were available to the agent."""
    metadata: dict[str, Any] = Field(default_factory=dict)
    framework: str | None = None
    start_time: float | None = None
    end_time: float | None = None
    status: RunStatus | None = None
    """How the run ended (``None``: not recorded, as in traces built by hand)."""
    status_reason: str | None = None
    """Why it ended that way, when it did not end ``ok``."""
    alerts: list[LoopAlert] = Field(default_factory=list)
    """Loop alerts raised while the run ran."""

    @property
    def completed(self) -> bool:
        """Whether the run finished normally (an unrecorded status counts as finished
        unless the trace has an error)."""
        if self.status is None:
            return self.error is None
        return self.status in COMPLETED_STATUSES

    @property
    def incomplete(self) -> bool:
        """Whether the run did not complete: it ended in error, was stopped, cancelled, timed
        out or hit a limit (a paused, ``interrupted`` run has not failed; an unrecorded status
        counts as incomplete only when the trace has an error)."""
        if self.status is None:
            return self.error is not None
        return self.status in INCOMPLETE_STATUSES

    @property
    def steps_recorded(self) -> bool:
        """Whether the trace holds the run's steps: ``False`` for a trace imported from spans
        that record only the run's input and output (metadata :data:`STEPS_UNRECORDED`),
        whose model and tool calls are unknown, not absent."""
        return self.metadata.get(STEPS_UNRECORDED) is not True

    @field_validator("schema_version")
    @classmethod
    def _known_version(cls, value: int) -> int:
        return known_version(value, SCHEMA_VERSION, "schema_version")

    @model_validator(mode="after")
    def _one_record_per_call(self) -> Trace:
        # one loop per trace, not a validator per span: replay parses millions of spans
        version_1 = self.schema_version == 1
        shares = False
        for span in self.spans:
            if span.attributes and SHARED_INPUT in span.attributes:
                shares = True
            if version_1:  # its requests repeated the results, which are the calls'
                for asked in span.requested_tool_calls:
                    asked.result = asked.error = None
            call = span.tool_call
            if call is None:
                continue
            given = span.model_fields_set
            if "input" not in given:
                span.input = call.arguments
            if "output" not in given:
                span.output = call.result
            if "error" not in given:
                span.error = call.error
        if shares:
            rebuild_conversations(self.spans)
        # what was read is held as this version (versions 1 and 2 differ only in holding
        # copies), so writing it again writes a line of this version
        self.schema_version = SCHEMA_VERSION
        return self

    def to_json(self) -> str:
        """The trace as one line of a capture: each tool call written once (a tool span's
        input, output and error are left out where they equal its call's), and each message
        of a conversation its model calls resend written once (a model call's input leaves
        out the first messages an earlier call was sent, and names that call)."""
        return self.json_bytes().decode()

    def json_bytes(self) -> bytes:
        """:meth:`to_json` as UTF-8, made without a ``str`` in between (the capture writes
        bytes; for a trace of megabytes the round trip costs about a millisecond)."""
        return self.__pydantic_serializer__.to_json(self._written(), exclude=self._call_copies())

    def to_jsonable(self) -> dict[str, Any]:
        """The trace as JSON-ready data, each tool call and conversation message once, as
        :meth:`to_json` writes it; ``Trace.model_validate`` of it gives the trace back."""
        return self._written().model_dump(mode="json", exclude=self._call_copies())

    def _written(self) -> Trace:
        """The trace itself, or a shallow copy whose model calls hold only the messages no
        earlier call of the run was sent (see :func:`written_conversations`)."""
        spans = written_conversations(self.spans)
        return self if spans is None else self.model_copy(update={"spans": spans})

    def _call_copies(self) -> dict[str, Any] | None:
        """The ``exclude`` that leaves out each tool span's copies of its call's values."""
        copies: dict[int, set[str]] = {}
        for index, span in enumerate(self.spans):
            call = span.tool_call
            if call is None:
                continue
            same = {
                name
                for name, value, recorded in (
                    ("input", span.input, call.arguments),
                    ("output", span.output, call.result),
                    ("error", span.error, call.error),
                )
                if value is recorded or value == recorded
            }
            if same:
                copies[index] = same
        return {"spans": copies} if copies else None

    # --- derived views -------------------------------------------------------------------

    def tool_calls(self, *, every_run: bool = False) -> list[ToolCall]:
        """Every executed tool call, in the order the calls started, each once: a call its
        framework ran again (a retry middleware or policy after the tool raised: a later
        tool span with the same call id, tool and arguments, and no model call started in
        between) is the record of its last run, what the agent was given, in the place of
        its first. ``every_run=True``: each run of each call, the failed runs a retry hid
        included."""
        calls = [span.tool_call for span in self.spans if span.tool_call is not None]
        if every_run or len(calls) < 2:
            return calls
        if len({call.id for call in calls}) == len(calls):  # ids all different: none ran again
            return calls
        again = ran_again(self.spans)
        if again is None:
            return calls
        once = (again.get(span.id, span.tool_call) for span in self.spans if span.tool_call)
        return [call for call in once if call is not None]

    def steps(self) -> list[AgentStep]:
        """The run as agent steps: each LLM span opens a step; a tool call joins the step
        whose model call asked for it (by call id: agents running at once, sub-agents a
        graph fans out to, interleave their steps), else the open step.

        A model call that failed opens none (a retry or a fallback model made the step, or
        the run ended there, as its error says), nor does a refusal another model call of the
        same node answered in its place (LangChain's ``ModelRefusalMiddleware`` raised it
        and ``ModelFallbackMiddleware`` asked the next model); nothing inside a span marked
        :data:`INTERNAL_CALL` is a step, nor is a model or tool call a tool made inside its
        own span (an agent run inside a tool is the run's: its steps are)."""
        steps: list[AgentStep] = []
        current: AgentStep | None = None
        asked: dict[str, AgentStep] = {}  # a requested call's id → the step that asked
        again = ran_again(self.spans) or {}  # a call run again is one call: its last run
        own = list(self._agents_own_spans())
        replaced = _refusals_replaced(own)
        for span in own:
            if span.id in again and again[span.id] is None:
                continue
            if span.kind is SpanKind.LLM:
                if (span.error is not None and span.output is None) or span.id in replaced:
                    continue
                output = span.output if isinstance(span.output, str) else None
                current = AgentStep(thought=span.thought, output=output or None)
                steps.append(current)
                asked.update((call.id, current) for call in span.requested_tool_calls if call.id)
            elif span.tool_call is not None:
                step = asked.get(span.tool_call.id or "", current)
                if step is None:
                    step = current = AgentStep()
                    steps.append(step)
                step.tool_calls.append(again.get(span.id) or span.tool_call)
        return steps

    def final_model_call(self) -> Span | None:
        """The run's last model call that did not fail, outside the spans marked
        :data:`INTERNAL_CALL` (the one its answer came from), or ``None``."""
        for span in reversed(list(self._agents_own_spans())):
            if span.kind is SpanKind.LLM and span.error is None:
                return span
        return None

    def refusal(self) -> str | None:
        """The provider's refusal the run's last model call answered with (its text, ``""``
        when the provider gave none; see :data:`REFUSAL`), or ``None``."""
        final = self.final_model_call()
        refused = final.attributes.get(REFUSAL) if final is not None else None
        return refused if isinstance(refused, str) else None

    def raised_refusal(self) -> str | None:
        """The provider's refusal (:meth:`refusal`) a run that ended in error ended at, or
        ``None``: its last own model call refused, no model or tool call started after it,
        and the run failed there. LangChain's ``ModelRefusalMiddleware`` raises a refusal as
        ``ModelRefusalError``, and a structured output's parser fails on one: such a run
        ended in its model's refusal, raised rather than returned as its answer."""
        failed = self.error is not None if self.status is None else self.status is RunStatus.ERROR
        refused = self.refusal() if failed else None
        if refused is None:
            return None
        calls = [s for s in self._agents_own_spans() if s.kind in (SpanKind.LLM, SpanKind.TOOL)]
        return refused if calls[-1] is self.final_model_call() else None

    def _first_call_messages(self) -> list[dict[str, Any]]:
        """The messages the run's first own model call was sent (the conversation so far,
        the request last), or ``[]``."""
        first = next((s for s in self._agents_own_spans() if s.kind is SpanKind.LLM), None)
        sent = first.input if first is not None else None
        if isinstance(sent, list) and sent and all(isinstance(m, list) for m in sent):
            sent = sent[0]  # LangChain's batch: the first list is the one sent
        return [m for m in sent if isinstance(m, dict)] if isinstance(sent, list) else []

    def previous_answer(self) -> str:
        """The agent's answer in the turn before this run, as its first own model call was
        sent it: the text of the last assistant message before the last user message, or
        ``""`` (a first turn, or a framework that sends the model no history)."""
        sent = self._first_call_messages()
        users = [i for i, m in enumerate(sent) if m.get("role") in _USER_ROLES]
        for message in reversed(sent[: users[-1]] if users else []):
            if message.get("role") in _ASSISTANT_ROLES:
                text = _message_text(message.get("content")).strip()
                if text:
                    return text
        return ""

    def request_media(self) -> list[str]:
        """The media (``image``, ``audio``, ``video``, ``file``, ``document``) the run's
        request sent the model beside its text, one entry per item: content blocks of the
        last user message its first own model call was sent. ``trace.input`` is the
        request's text alone, so a metric that reads only it cannot see them."""
        users = [m for m in self._first_call_messages() if m.get("role") in _USER_ROLES]
        content = users[-1].get("content") if users else None
        return [
            media_kind(block["type"])
            for block in (content if isinstance(content, list) else [])
            if isinstance(block, dict) and block.get("type") in MEDIA_BLOCK_TYPES
        ]

    def cut_at_token_limit(self) -> str | None:
        """The finish reason that says the run's last model call was cut at the model's
        output token limit (see :data:`TOKEN_LIMIT_REASONS`), or ``None``."""
        final = self.final_model_call()
        reasons = final.attributes.get(FINISH_REASONS) if final is not None else None
        if isinstance(reasons, list | tuple):
            for reason in reasons:
                if str(reason).lower() in TOKEN_LIMIT_REASONS:
                    return str(reason)
        return None

    def ended_status(self) -> tuple[RunStatus, str | None]:
        """The status of a run that ended by itself, read from its error and its spans,
        with its reason: ``error`` (the error) when it raised, ``limit`` when its answer
        was cut at the model's output token limit (:meth:`cut_at_token_limit`), else
        ``ok``. What a run gets when nothing else said how it ended (a guard stop, a
        framework's limit, an interrupt)."""
        if self.error is not None:
            return RunStatus.ERROR, self.error
        cut = self.cut_at_token_limit()
        if cut is not None:  # an answer cut short is no completed answer
            return (
                RunStatus.LIMIT,
                f"the answer was cut at the model's output token limit (finish reason {cut})",
            )
        return RunStatus.OK, None

    def _agents_own_spans(self) -> Iterator[Span]:
        """The spans outside every span marked :data:`INTERNAL_CALL` and outside the work
        of every tool (a model call a tool made: a summariser, a query engine's answer), in
        order; an agent run inside a tool (a sub-agent, a coworker a manager delegated to)
        is the run's again."""
        internal: set[str] = set()
        owner: dict[str, SpanKind | None] = {}  # the nearest agent or tool at or above a span
        for span in self.spans:  # a parent starts before its children
            above = owner.get(span.parent_id) if span.parent_id is not None else None
            owner[span.id] = span.kind if span.kind in _OWNERS else above
            if span.parent_id in internal or span.attributes.get(INTERNAL_CALL) is True:
                internal.add(span.id)
            elif above is not SpanKind.TOOL:
                yield span

    def spans_of(self, kind: SpanKind) -> list[Span]:
        """The spans of one kind, in start order."""
        return [span for span in self.spans if span.kind is kind]

    def token_usage(self) -> dict[str, int]:
        """Input and output tokens summed over LLM spans (keys ``input_tokens``, ``output_tokens``)."""
        totals = {"input_tokens": 0, "output_tokens": 0}
        names = {"input_tokens": INPUT_TOKENS, "output_tokens": OUTPUT_TOKENS}
        for span in self.spans:
            for key in totals:
                value = span.attributes.get(names[key])
                if isinstance(value, int | float) and math.isfinite(value):
                    totals[key] += int(value)
        return totals

    # --- construction --------------------------------------------------------------------

    @classmethod
    def from_steps(
        cls,
        input: Any,
        steps: list[AgentStep],
        *,
        output: Any = None,
        tools: list[ToolSpec] | None = None,
        session_id: str | None = None,
        **fields: Any,
    ) -> Trace:
        """Build a trace from seed-style agent steps.

        Each step becomes an LLM span (its thought and output) followed by one tool span per
        call, all children of one agent span. ``output`` defaults to the last step output.
        ``Trace.from_steps(x, s).steps() == s`` for every list of steps.
        """
        trace_id = fields.pop("id", None) or new_id()
        root = Span(id=f"{trace_id}-agent", kind=SpanKind.AGENT, name="agent", input=input)
        spans = [root]
        for index, step in enumerate(steps):
            llm = Span(
                id=f"{root.id}-step-{index}",
                parent_id=root.id,
                kind=SpanKind.LLM,
                name="agent_step",
                output=step.output,
                thought=step.thought,
                requested_tool_calls=[
                    ToolCall(id=call.id, name=call.name, arguments=call.arguments)
                    for call in step.tool_calls
                ],
            )
            spans.append(llm)
            for call_index, call in enumerate(step.tool_calls):
                spans.append(
                    Span(
                        id=f"{llm.id}-tool-{call_index}",
                        parent_id=root.id,
                        kind=SpanKind.TOOL,
                        name=call.name,
                        tool_call=call,
                    )
                )
        if output is None:
            output = next((s.output for s in reversed(steps) if s.output is not None), None)
        root.output = output
        return cls(
            id=trace_id,
            input=input,
            output=output,
            spans=spans,
            tools=tools or [],
            session_id=session_id,
            **fields,
        )


class EvalCase(_Model):
    """What a metric scores: a trace plus whatever expectations the case provides.

    The seed constructor works as written::

        EvalCase(
            input="Search for recent AI papers and write a summary",
            agent_trace=[AgentStep(thought="...", tool_calls=[ToolCall(name="search")])],
            expected_tool_calls=["search", "summarize"],
        )
    """

    id: str = Field(default_factory=new_id)
    input: Any = None
    trace: Trace | None = None
    agent_trace: list[AgentStep] | None = Field(default=None, exclude=True)
    """Seed-style steps; converted into ``trace`` on construction."""
    actual_output: Any = None
    """The agent's final answer; defaults to the trace's output."""
    expected_output: Any = None
    expected_tool_calls: list[ExpectedToolCall] | None = None
    """``None`` means no expectation (tool-matching metrics skip); ``[]`` expects no calls."""
    reference_arguments: dict[str, dict[str, Any]] | None = None
    """Reference arguments per tool name, for tools whose expected call gives none."""
    tool_schemas: dict[str, dict[str, Any]] | None = None
    """JSON schemas per tool name; defaults to the schemas of the trace's available tools."""
    expected_state: dict[str, Any] | None = None
    actual_state: dict[str, Any] | None = None
    minimum_steps: int | None = None
    """Fewest steps the task needs (for ``step_ratio``)."""
    context: str | None = None
    """Memory context: prior sessions' summary or log (for ``agent_memory``)."""
    conversation: list[dict[str, Any]] | None = None
    """The earlier turns of the conversation this input came in, oldest first (each
    ``{"input": ..., "output": ...}``); an agent that takes a ``conversation`` argument gets
    them in a suite, and metrics that read a session's earlier traces (``loop_detection``,
    ``coherence``) read them when the case's trace has no session of its own."""
    tool_call_limits: list[ToolCallLimit] | None = None
    """Calls the run may make at most so many times (for ``tool_constraints``): a call the
    loop guard refused, or one that must never happen (``max_calls=0``)."""
    tools_must_succeed: list[str] | None = None
    """Tools the run must call, none of whose calls may fail (for ``tool_constraints``)."""
    resume: list[Any] | None = None
    """The answers a human gave the run, in order: each time it paused for one (a LangGraph
    interrupt's resume value, a CrewAI flow's feedback) and while it ran (a flow's
    ``ask()``): an agent that takes a ``resume`` argument gets them in a suite, to give
    each as its run asks. A case made from a captured run a human answered keeps them
    (interrupts answered at once by id, by question: :func:`answers_by_question`;
    ``agenteval_langchain.resume_command`` gives a LangGraph run each)."""
    metrics: list[str] | None = None
    """Registry names of metrics this case asks for, scored in a suite beside the suite's own
    (a regression case names the checks its failure calls for)."""
    allow_refusal: bool = False
    """Whether a run that ends in the model provider's refusal (:meth:`Trace.refusal`) may
    pass this case in a suite (an input the agent should refuse); otherwise such a run fails
    as ``refused``."""
    metadata: dict[str, Any] = Field(default_factory=dict)

    @field_validator("expected_tool_calls", mode="before")
    @classmethod
    def _names_to_calls(cls, value: Any) -> Any:
        if value is None:
            return None
        if isinstance(value, str | dict | ExpectedToolCall):
            value = [value]
        return [ExpectedToolCall(name=item) if isinstance(item, str) else item for item in value]

    @model_validator(mode="after")
    def _build_trace(self) -> EvalCase:
        if self.trace is None and self.agent_trace is not None:
            self.trace = Trace.from_steps(self.input, self.agent_trace, output=self.actual_output)
        # assign only what changes: each assignment goes through pydantic's __setattr__
        if self.trace is not None:
            if self.input is None and self.trace.input is not None:
                self.input = self.trace.input
            if self.actual_output is None and self.trace.output is not None:
                self.actual_output = self.trace.output
        if self.agent_trace is not None:
            self.agent_trace = None
        return self

    @classmethod
    def of(cls, item: EvalCase | Trace) -> EvalCase:
        """``item`` as a case: a trace becomes a case with no expectations."""
        if isinstance(item, Trace):
            return cls.from_trace(item)
        if isinstance(item, EvalCase):
            return item
        raise MetricInputError(f"expected an EvalCase or a Trace, got {type(item).__name__}")

    @classmethod
    def from_trace(cls, trace: Trace, **expectations: Any) -> EvalCase:
        """A case for one captured trace, with optional expectations."""
        if not expectations and cls is EvalCase:
            # a replay makes a case of every trace: the values validation would keep as they
            # are (a trace's fields were validated when it was made), without validating
            return unvalidated_with_defaults(
                cls,
                {
                    "id": trace.id,
                    "input": trace.input,
                    "trace": trace,
                    "actual_output": trace.output,
                },
            )
        given = {"input": trace.input, "actual_output": trace.output, **expectations}
        return cls(id=trace.id, trace=trace, **given)

    @property
    def tool_calls(self) -> list[ToolCall]:
        """The executed tool calls of the case's trace (empty without a trace)."""
        return self.trace.tool_calls() if self.trace is not None else []

    @property
    def steps(self) -> list[AgentStep]:
        """The case's trace as agent steps (empty without a trace)."""
        return self.trace.steps() if self.trace is not None else []

    def schema_for(self, tool_name: str) -> dict[str, Any] | None:
        """The JSON schema of a tool: from ``tool_schemas``, else from the trace's tools."""
        if self.tool_schemas and tool_name in self.tool_schemas:
            return self.tool_schemas[tool_name]
        if self.trace is not None:
            for spec in self.trace.tools:
                if spec.name == tool_name:
                    return spec.parameters
        return None

    def reference_for(self, expected: ExpectedToolCall) -> dict[str, Any] | None:
        """Reference arguments of an expected call: its own, else ``reference_arguments``."""
        if expected.arguments is not None:
            return expected.arguments
        if self.reference_arguments:
            return self.reference_arguments.get(expected.name)
        return None
