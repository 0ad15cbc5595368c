"""Scores as Arize Phoenix annotations, through Phoenix's REST API.

Phoenix shows OpenTelemetry span events but does not turn ``gen_ai.evaluation.result``
events into evaluations; its annotations API does. Annotations name spans that must already
be stored, so they are sent from a worker thread and retried (with backoff) while Phoenix
answers 404 because the spans are still on their way; the caller never waits.
"""

from __future__ import annotations

import logging
import queue
import threading
import time
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

import httpx

from agenteval_core import MetricResult, Trace

from ._conventions import per_call_results

if TYPE_CHECKING:
    from ._export import ExportedTrace

__all__ = ["PhoenixAnnotations"]

logger = logging.getLogger("agenteval.otel")

_ANNOTATOR = "CODE"
_LLM_ANNOTATOR = "LLM"


def _result(result: MetricResult) -> dict[str, Any]:
    if result.score is None:
        label: str = result.status  # skipped or error, as everywhere else
    else:
        label = "pass" if result.success else "fail"
    return {
        "label": label,
        "score": result.score,
        "explanation": result.error or result.reason or None,
    }


def _annotation(result: MetricResult, **target: str) -> dict[str, Any]:
    return {
        **target,
        "name": result.name,
        "annotator_kind": _LLM_ANNOTATOR if result.judge_model else _ANNOTATOR,
        "result": _result(result),
        "metadata": {
            "metric_version": result.version,
            "threshold": result.threshold,
            "judge_model": result.judge_model,
            "source": "agenteval",
        },
        # one annotation per metric and target: a re-export updates it
        "identifier": f"agenteval.{result.name}",
    }


class PhoenixAnnotations:
    """Sends metric results to an Arize Phoenix server as annotations: trace metrics on the
    root span, per-call scores on each tool span, session metrics on the session.

    Args:
        url: Phoenix's base URL, e.g. ``http://127.0.0.1:6006``.
        headers: extra HTTP headers (``{"Authorization": "Bearer ..."}`` when auth is on).
        retry_for: how long to keep retrying an annotation whose span Phoenix has not
            stored yet.
    """

    def __init__(
        self,
        url: str,
        *,
        headers: dict[str, str] | None = None,
        retry_for: float = 30.0,
    ) -> None:
        self.url = url.rstrip("/")
        self.retry_for = retry_for
        self._client = httpx.Client(base_url=self.url, headers=headers, timeout=10.0)
        self._queue: queue.Queue[tuple[str, list[dict[str, Any]]] | None] = queue.Queue()
        self._idle = threading.Condition()
        self._pending = 0
        self.sent = 0
        self.problems: list[str] = []
        self.log_failures = True
        """Log the first failure when it happens (off: it is only in :meth:`flush`'s answer)."""
        self._worker = threading.Thread(
            target=self._run, name="agenteval-phoenix-annotations", daemon=True
        )
        self._worker.start()

    def add_trace(
        self,
        trace: Trace,
        exported: ExportedTrace,
        results: Sequence[MetricResult],
    ) -> None:
        """Queue a trace's results (the spans must be on their way to Phoenix)."""
        root = exported.span_ids.get(trace.spans[0].id) if trace.spans else None
        if root is None:
            return
        tool_spans = [exported.span_ids[s.id] for s in trace.spans if s.tool_call is not None]
        annotations = [_annotation(result, span_id=root) for result in results]
        for result in results:
            for index, call in per_call_results(result):
                if index < len(tool_spans):
                    annotations.append(_annotation(call, span_id=tool_spans[index]))
        self._put("/v1/span_annotations", annotations)

    def add_session(self, session_id: str, results: Sequence[MetricResult]) -> None:
        """Queue a closed session's results as session annotations."""
        self._put(
            "/v1/session_annotations",
            [_annotation(result, session_id=session_id) for result in results],
        )

    def _put(self, path: str, annotations: list[dict[str, Any]]) -> None:
        if not annotations:
            return
        with self._idle:
            self._pending += 1
        self._queue.put((path, annotations))

    def _run(self) -> None:
        while (item := self._queue.get()) is not None:
            path, annotations = item
            try:
                self._send(path, annotations)
            except Exception as exc:  # the worker must outlive any one failure
                self._problem(f"{path}: {exc!r}")
            finally:
                with self._idle:
                    self._pending -= 1
                    self._idle.notify_all()

    def _send(self, path: str, annotations: list[dict[str, Any]]) -> None:
        """POST one batch; retried with backoff while Phoenix answers 404 (its spans are
        still on their way, up to ``retry_for``) and, three times at most, when it cannot
        be reached; any other answer is final."""
        deadline = time.monotonic() + self.retry_for
        delay, unreachable = 0.05, 0
        while True:
            try:
                response = self._client.post(
                    path, params={"sync": "true"}, json={"data": annotations}
                )
            except httpx.HTTPError as exc:
                failure = f"{self.url}{path}: {exc!r}"
                unreachable += 1
                if unreachable >= 3:
                    self._problem(failure)
                    return
            else:
                if response.is_success:
                    self.sent += len(annotations)
                    return
                failure = f"{self.url}{path}: HTTP {response.status_code} {response.text[:200]}"
                if response.status_code != 404:
                    self._problem(failure)
                    return
            if time.monotonic() + delay > deadline:
                self._problem(failure)
                return
            time.sleep(delay)  # backoff on the worker thread, never on the caller's
            delay = min(delay * 2, 2.0)

    def _problem(self, text: str) -> None:
        if not self.problems and self.log_failures:
            logger.error("agenteval: Phoenix annotations failed: %s", text)
        self.problems.append(text)

    def flush(self, timeout: float = 30.0) -> list[str]:
        """Wait until every queued annotation was sent or given up on; returns what failed
        (also when the wait timed out), one line each: how many batches failed and the
        first reason, not one line per trace."""
        deadline = time.monotonic() + timeout
        with self._idle:
            while self._pending and (left := deadline - time.monotonic()) > 0:
                self._idle.wait(left)
            waiting = self._pending
        problems = []
        if self.problems:
            first, more = self.problems[0], len(self.problems) - 1
            also = f" (and {more} more batch(es) failed)" if more else ""
            problems.append(f"Phoenix annotations: {first}{also}")
        if waiting:
            problems.append(f"{waiting} annotation batch(es) still queued after {timeout:g} s")
        return problems

    def close(self, timeout: float = 5.0) -> None:
        """Stop the worker, waiting at most ``timeout`` for the batch it is sending."""
        self._queue.put(None)
        self._worker.join(timeout=timeout)
        if not self._worker.is_alive():
            self._client.close()
