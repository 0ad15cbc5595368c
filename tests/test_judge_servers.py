"""Judges against loopback servers that behave like the local model servers users run:
llama-cpp-python (refuses json_schema with HTTP 500), Ollama (refuses it with 400), vLLM
(takes it); output modes, max_tokens, and calibrate's failures."""

from __future__ import annotations

import json
import os
import re
import shlex
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner
from judge_server import JudgeServer, Reply

from agenteval_core import CaptureWriter, Trace, create_metric
from agenteval_core.cli import cli
from agenteval_core.judges import OpenAIJudge, default_max_tokens, judge_from_options

# what llama-cpp-python 0.3's server answers to response_format {"type": "json_schema"}: its
# request validation error, as HTTP 500
LLAMA_CPP_REFUSAL = json.dumps(
    {
        "error": {
            "message": "[{'type': 'literal_error', 'loc': ('body', 'response_format', 'type'), "
            "'msg': \"Input should be 'text' or 'json_object'\", 'input': 'json_schema'}]",
            "type": "internal_server_error",
        }
    }
)


def llama_cpp(server: JudgeServer) -> None:
    server.unsupported_formats = {"json_schema"}
    server.format_refusal = lambda kind: Reply(status=500, body=LLAMA_CPP_REFUSAL)


def ollama(server: JudgeServer) -> None:
    server.unsupported_formats = {"json_schema"}  # the default refusal: HTTP 400 naming it


# what Gemini's OpenAI-compatible endpoint answers to a schema with a key it does not take:
# a list holding the error, naming Gemini's own field, response_schema
GEMINI_REFUSAL = json.dumps(
    [
        {
            "error": {
                "code": 400,
                "message": 'Invalid JSON payload received. Unknown name "$defs" at '
                "'generation_config.response_schema': Cannot find field.",
                "status": "INVALID_ARGUMENT",
            }
        }
    ]
)


def gemini(server: JudgeServer) -> None:
    server.unsupported_formats = {"json_schema"}
    server.format_refusal = lambda kind: Reply(status=400, body=GEMINI_REFUSAL)


def answer(request: dict[str, Any]) -> Reply:
    return Reply(json.dumps({"score": 0.8, "reason": "fine"}))


def capture_of(path: Path, count: int = 3) -> Path:
    with CaptureWriter(path) as writer:
        for i in range(count):
            writer.write(Trace(id=f"t{i}", input=f"question {i}", output=f"answer {i}"))
    return path


def replay_with(server: JudgeServer, capture: Path, *options: str) -> Any:
    return CliRunner().invoke(
        cli,
        [
            "replay", str(capture), "--metrics", "confidence", "--no-cache",
            "--judge-model", "judge-model", "--judge-base-url", server.base_url, *options,
        ],
        env={"COLUMNS": "200", "AGENTEVAL_JUDGE_OUTPUT_MODE": ""},
    )  # fmt: skip


@pytest.mark.parametrize(
    ("server_kind", "probed", "used"),
    [
        # llama-cpp-python: json_schema refused (500), json_object taken
        (llama_cpp, ["json_schema", "json_object"], "json_object"),
        # Ollama-like: json_schema refused (400), json_object taken
        (ollama, ["json_schema", "json_object"], "json_object"),
        # Gemini-like: the schema refused (400) by its own field's name, json_object taken
        (gemini, ["json_schema", "json_object"], "json_object"),
        # vLLM: json_schema taken at once
        (lambda server: None, ["json_schema"], "json_schema"),
    ],
)
def test_auto_finds_the_output_mode_the_server_takes_before_scoring(
    judge_server: JudgeServer, tmp_path: Path, server_kind: Any, probed: list[str], used: str
) -> None:
    server_kind(judge_server)
    judge_server.responder = answer
    done = replay_with(
        judge_server, capture_of(tmp_path / "c.jsonl"), "--json", str(tmp_path / "r.jsonl")
    )
    assert done.exit_code == 0, done.output
    assert [p["response_format"]["type"] for p in judge_server.probes] == probed
    # every scoring request in the mode found, none refused, none retried: 3 traces, 3 calls
    assert [r["response_format"]["type"] for r in judge_server.requests] == [used] * 3
    scores = [json.loads(line)["results"][0]["score"] for line in (tmp_path / "r.jsonl").open()]
    assert scores == [0.8, 0.8, 0.8]


def test_a_server_on_the_port_of_an_earlier_one_is_asked_afresh(tmp_path: Path) -> None:
    """Judges remember the output mode each URL took, once per process. A test's server that
    gets the port of an earlier test's JSON-mode-only server is probed as a new server,
    not asked in JSON mode: a responder that reads the schema's name failed on every
    request, and a replay's results all read "judge unavailable"."""
    earlier = JudgeServer()
    ollama(earlier)
    earlier.responder = answer
    try:
        assert replay_with(earlier, capture_of(tmp_path / "a.jsonl", 1)).exit_code == 0
        assert [r["response_format"]["type"] for r in earlier.requests] == ["json_object"]
    finally:
        earlier.close()
    later = JudgeServer(port=earlier.port)
    later.responder = answer
    try:
        assert later.base_url == earlier.base_url
        assert replay_with(later, capture_of(tmp_path / "b.jsonl", 1)).exit_code == 0
        assert [p["response_format"]["type"] for p in later.probes] == ["json_schema"]
        assert [r["response_format"]["type"] for r in later.requests] == ["json_schema"]
    finally:
        later.close()


def test_a_refusal_found_while_scoring_is_not_retried_as_an_outage(
    judge_server: JudgeServer,
) -> None:
    llama_cpp(judge_server)
    judge_server.responder = answer
    judge = OpenAIJudge(
        "judge-model", base_url=judge_server.base_url, cache=None, output_mode="auto"
    )
    result = create_metric("confidence", judge=judge).measure(Trace(input="q", output="a"))
    assert result.score == 0.8
    # one refusal (500, naming response_format), then JSON mode: no retry of the 500
    assert [r["response_format"]["type"] for r in judge_server.requests] == [
        "json_schema",
        "json_object",
    ]
    assert judge.mode == "json_object" and judge.traffic.stats.retries == 0


def test_a_chosen_mode_the_server_refuses_is_one_line_before_scoring(
    judge_server: JudgeServer, tmp_path: Path
) -> None:
    llama_cpp(judge_server)
    judge_server.responder = answer
    done = replay_with(
        judge_server, capture_of(tmp_path / "c.jsonl"), "--judge-output-mode", "json_schema"
    )
    assert done.exit_code == 2
    [line] = done.output.strip().splitlines()
    assert line.startswith(
        f"agenteval: error: the judge at {judge_server.base_url} refuses the output mode json_schema (json_schema: HTTP 500"
    )
    assert line.endswith("pass --judge-output-mode auto (or json_object, or text)")
    assert judge_server.requests == []  # nothing was scored
    text = replay_with(
        judge_server, capture_of(tmp_path / "d.jsonl"), "--judge-output-mode", "text"
    )
    assert text.exit_code == 0, text.output
    assert all("response_format" not in r for r in judge_server.requests)


def test_the_output_mode_from_the_environment_and_bad_values(judge_server: JudgeServer) -> None:
    monkey = pytest.MonkeyPatch()
    monkey.setenv("AGENTEVAL_JUDGE_OUTPUT_MODE", "json_object")
    try:
        assert OpenAIJudge("m", base_url=judge_server.base_url, cache=None).mode == "json_object"
        monkey.setenv("AGENTEVAL_JUDGE_OUTPUT_MODE", "yaml")
        with pytest.raises(Exception, match="output mode 'yaml' is not one of auto, json_schema"):
            OpenAIJudge("m", base_url=judge_server.base_url, cache=None)
    finally:
        monkey.undo()


def test_max_tokens_bounds_every_reply(judge_server: JudgeServer, tmp_path: Path) -> None:
    from agenteval_core.metrics._judge_metrics import ScoreReason, Verdicts

    assert (default_max_tokens(ScoreReason), default_max_tokens(Verdicts)) == (512, 2048)
    judge_server.responder = answer
    done = replay_with(judge_server, capture_of(tmp_path / "c.jsonl", 1))
    assert done.exit_code == 0 and judge_server.requests[0]["max_tokens"] == 512
    again = replay_with(
        judge_server, capture_of(tmp_path / "d.jsonl", 1), "--judge-max-tokens", "64"
    )
    assert again.exit_code == 0 and judge_server.requests[-1]["max_tokens"] == 64
    judge = judge_from_options(model="m", base_url=judge_server.base_url, timeout=90, max_tokens=7)
    assert (judge.timeout, judge.max_tokens) == (90, 7)


def test_judge_rps_is_kept_exact_and_spread_over_the_second() -> None:
    # --judge-rps 1.5 (90 requests a minute) was 2 a second: a third over the limit given;
    # and 10 a second started 10 at once each second, 20 within one second at the server
    rates = [(10, 1, 0.1), (1.5, 1, 2 / 3), (2.4, 1, 1 / 2.4), (0.5, 1, 2.0), (25, 3, 0.12)]
    for rate, per_period, period in [*rates, (10_000, 1000, 0.1)]:
        traffic = judge_from_options(
            model="m", base_url="http://127.0.0.1:9/v1", use_cache=False, requests_per_second=rate
        ).traffic
        assert (traffic.requests_per_period, traffic.period) == (per_period, pytest.approx(period))
        assert traffic.requests_per_period / traffic.period == pytest.approx(rate)


def _labels(path: Path) -> Path:
    lines = [
        json.dumps(
            {"trace": Trace(id=f"t{i}", input=f"q{i}", output="a").model_dump(mode="json"),
             "metric": "confidence", "label": "pass"}
        )
        for i in range(3)
    ]  # fmt: skip
    path.write_text("\n".join(lines) + "\n")
    return path


def test_calibrate_with_a_dead_judge_exits_2(tmp_path: Path) -> None:
    done = CliRunner().invoke(
        cli,
        ["calibrate", str(_labels(tmp_path / "l.jsonl")), "--judge-model", "m",
         "--judge-base-url", "http://127.0.0.1:9/v1", "--no-cache"],
    )  # fmt: skip
    assert done.exit_code == 2
    assert done.output.startswith(
        "agenteval: error: cannot reach the judge at http://127.0.0.1:9/v1"
    )


def test_calibrate_with_a_judge_failing_every_call_exits_1_with_the_reasons(
    judge_server: JudgeServer, tmp_path: Path
) -> None:
    judge_server.responder = lambda request: Reply(status=503, content="overloaded")
    done = CliRunner().invoke(
        cli,
        ["calibrate", str(_labels(tmp_path / "l.jsonl")), "--judge-model", "judge-model",
         "--judge-base-url", judge_server.base_url, "--no-cache"],
        env={"COLUMNS": "200"},
    )  # fmt: skip
    assert done.exit_code == 1
    left_out = [line for line in done.output.splitlines() if "not scored (left out)" in line]
    assert [line.split(": ")[1] for line in left_out] == ["t0", "t1", "t2"]
    assert all(
        "judge unavailable: gave up after 5 attempts; last: HTTP 503" in line for line in left_out
    )
    assert "agenteval: error: the judge did not answer for 3 labelled trace(s)" in done.output


def test_a_context_overflow_says_replaying_will_not_help(
    judge_server: JudgeServer, tmp_path: Path
) -> None:
    # llama-cpp-python's words when a prompt is longer than n_ctx
    overflow = Reply(
        status=400,
        content="This model's maximum context length is 2048 tokens. However, you requested "
        "2770 tokens (2258 in the messages, 512 in the completion). Please reduce the length "
        "of the messages or completion.",
    )
    judge_server.responder = lambda request: overflow
    results = tmp_path / "r.jsonl"
    done = replay_with(judge_server, capture_of(tmp_path / "c.jsonl", 2), "--json", str(results))
    assert done.exit_code == 1
    assert done.output.strip().splitlines()[-1] == (
        f"agenteval: error: context overflow: 2 result(s) not scored (see the table); the rest "
        f"is in {results}; the prompts were longer than the judge model's context; replaying "
        "gives the same: judge with a longer-context model, or cut what is sent with "
        "--judge-max-input-tokens N"
    )
    assert len(judge_server.requests) == 2  # a 400 is not retried
    result = json.loads(results.read_text().splitlines()[0])["results"][0]
    assert result["metadata"]["error_kind"] == "context_overflow"
    assert result["error"].startswith(
        "context overflow: the prompt is longer than judge-model's context (HTTP 400"
    )


def test_every_call_counts_whatever_happens_after_it(judge_server: JudgeServer) -> None:
    # an unparsable reply (paid for), then the server goes away on the re-ask
    judge_server.reply(Reply("I think it is fine", usage=(300, 50)))
    for _ in range(3):
        judge_server.reply(Reply(status=503, content="overloaded"))
    judge = OpenAIJudge(
        "judge-model", base_url=judge_server.base_url, cache=None, max_retries=2, backoff_base=0.01,
        prices={"judge-model": (1.0, 2.0)},
    )  # fmt: skip
    result = create_metric("confidence", judge=judge).measure(Trace(input="q", output="a"))
    assert result.metadata["error_kind"] == "unavailable"
    # the first reply's tokens stay on the result: 300 × $1/M + 50 × $2/M
    assert (result.input_tokens, result.output_tokens) == (300, 50)
    assert result.cost_usd == pytest.approx(0.0004)
    # every request the server saw: the first, and the re-ask sent three times
    assert result.metadata["judge_calls"] == len(judge_server.requests) == 4


def test_a_slow_one_at_a_time_server_gets_no_pile_up(tmp_path: Path) -> None:
    """A server that handles one request at a time and goes on generating after the client
    leaves (a local model): timed-out calls are not sent again, and after 3 in a row the
    judge stops calling, so abandoned requests cannot queue up at the server."""
    server = JudgeServer()
    lock = threading.Lock()

    def one_at_a_time(request: dict[str, Any]) -> Reply:
        with lock:  # one generation at a time, 0.4 s of work done whether or not anyone waits
            time.sleep(0.4)
        return Reply(json.dumps({"score": 0.5, "reason": "late"}))

    server.responder = one_at_a_time
    try:
        done = replay_with(
            server, capture_of(tmp_path / "c.jsonl", 12), "--judge-timeout", "0.2",
            "--judge-concurrency", "1", "--json", str(tmp_path / "r.jsonl"),
        )  # fmt: skip
        lines = [json.loads(line) for line in (tmp_path / "r.jsonl").read_text().splitlines()]
        results = [line["results"][0] for line in lines]
        # three calls abandoned, each once; then no more calls for the other nine traces
        assert len(server.requests) == 3
        assert [r["metadata"].get("abandoned_calls", 0) for r in results] == [1, 1, 1] + [0] * 9
        assert all(
            r["error"].startswith("judge unavailable: timed out; not sent again")
            for r in results[:3]
        )
        assert all(
            "not called: 3 calls in a row timed out after 0.2 s" in r["error"] for r in results[3:]
        )
        assert done.exit_code == 1 and "raise --judge-timeout" in done.output
        # each abandoned call's prompt is estimated (characters / 4) and counted
        assert all(r["metadata"]["estimated_input_tokens_abandoned"] > 0 for r in results[:3])
    finally:
        server.close()


def test_the_local_server_recipe_runs_as_written(judge_server: JudgeServer, tmp_path: Path) -> None:
    page = (Path(__file__).resolve().parents[1] / "docs" / "judges.md").read_text(encoding="utf-8")
    section = page.split("## A local model server", 1)[1].split("\n## ", 1)[0]
    [line] = re.findall(r"```console\n(agenteval replay .*?)\n```", section)
    words = shlex.split(line.replace("http://127.0.0.1:8000/v1", judge_server.base_url))
    llama_cpp(judge_server)
    judge_server.responder = answer
    capture_of(tmp_path / "capture.jsonl")
    with pytest.MonkeyPatch.context() as patch:
        patch.chdir(tmp_path)
        done = CliRunner().invoke(cli, words[1:], env={"COLUMNS": "200"})
    assert done.exit_code == 0, done.output
    assert [r["response_format"]["type"] for r in judge_server.requests] == ["json_object"] * 3


def test_tokens_and_calls_per_result_add_up_to_what_the_server_saw(
    judge_server: JudgeServer, tmp_path: Path
) -> None:
    """Three judge metrics (task extraction shared), first replies unparsable (a re-ask each),
    one trace's score stage answered by an outage after its re-ask."""
    totals = {"input": 0, "output": 0}
    seen: dict[str, int] = {}
    lock = threading.Lock()

    def responder(request: dict[str, Any]) -> Reply:
        name = request["response_format"]["json_schema"]["name"]
        text = request["messages"][1]["content"]
        key = f"{name}:{text}"
        with lock:
            seen[key] = seen.get(key, 0) + 1
            usage = (100 + seen[key] * 10, 7 * seen[key])
            if "question 2" in text and name == "ScoreReason" and seen[key] > 1:
                return Reply(status=400, content="bad request")  # after its paid re-ask
            totals["input"] += usage[0]
            totals["output"] += usage[1]
        if seen[key] == 1:
            return Reply("let me think...", usage=usage)  # unparsable: paid, then re-asked
        answers = {
            "TaskAndOutcome": {"task": "t", "outcome": "o"},
            "VerdictScore": {"verdict": 0.7, "reason": "r"},
            "ScoreReason": {"score": 0.6, "reason": "r"},
        }
        return Reply(json.dumps(answers[name]), usage=usage)

    judge_server.responder = responder
    results_path = tmp_path / "r.jsonl"
    done = CliRunner().invoke(
        cli,
        ["replay", str(capture_of(tmp_path / "c.jsonl")), "--metrics",
         "task_completion,step_efficiency,confidence", "--no-cache", "--json", str(results_path),
         "--judge-model", "judge-model", "--judge-base-url", judge_server.base_url],
        env={"COLUMNS": "200"},
    )  # fmt: skip
    results = [r for line in results_path.open() for r in json.loads(line)["results"]]
    assert done.exit_code == 1  # one result: an unsupported request
    failed = [r for r in results if r["score"] is None]
    # trace 2: the score stages of step_efficiency and confidence (both ScoreReason)
    assert [r["metadata"]["error_kind"] for r in failed] == ["unsupported_request"] * 2
    assert sum(r["input_tokens"] for r in results) == totals["input"]
    assert sum(r["output_tokens"] for r in results) == totals["output"]
    assert sum(r["metadata"]["judge_calls"] for r in results) == len(judge_server.requests)


def test_a_context_overflow_names_the_long_fields_and_max_input_tokens_cuts_them(
    judge_server: JudgeServer,
) -> None:
    def small_context(request: dict[str, Any]) -> Reply:
        if len(request["messages"][1]["content"]) > 3000:
            return Reply(status=400, content="maximum context length is 1024 tokens")
        return Reply(json.dumps({"score": 0.7, "reason": "ok"}))

    judge_server.responder = small_context
    trace = Trace(input="q", output="x" * 9000)
    wide = OpenAIJudge("judge-model", base_url=judge_server.base_url, cache=None)
    result = create_metric("confidence", judge=wide).measure(trace)
    assert result.metadata["error_kind"] == "context_overflow"
    assert "the longest inputs: run 9," in (result.error or "")
    assert "--judge-max-input-tokens N cuts each" in (result.error or "")
    # 500 tokens for one block: 2,000 characters of the 9,000-character answer, marked
    narrow = OpenAIJudge(
        "judge-model", base_url=judge_server.base_url, cache=None, max_input_tokens=500
    )
    assert create_metric("confidence", judge=narrow).measure(trace).score == 0.7
    assert "…[truncated 7" in judge_server.requests[-1]["messages"][1]["content"]


def test_a_result_deadline_ends_the_work(judge_server: JudgeServer) -> None:
    judge_server.responder = lambda request: Reply(
        json.dumps({"score": 0.7, "reason": "r"}), delay=2.0
    )
    judge = OpenAIJudge(
        "judge-model", base_url=judge_server.base_url, cache=None, result_deadline=0.3
    )
    result = create_metric("confidence", judge=judge).measure(Trace(input="q", output="a"))
    assert result.error == (
        "judge unavailable: no answer within the result's deadline of 0.3 s (--judge-deadline)"
    )
    assert result.metadata["abandoned_calls"] == 1 and result.latency_ms < 1500


def test_ctrl_c_says_what_the_replay_kept_and_exits_130(
    judge_server: JudgeServer, tmp_path: Path
) -> None:
    # a long replay against a paid judge, stopped half-way: it used to print click's bare
    # "Aborted!" and exit 1, as if the run had found problems, saying nothing of its file
    asked: list[dict[str, Any]] = []
    third = threading.Event()

    def answer_counting(request: dict[str, Any]) -> Reply:
        asked.append(request)
        if len(asked) == 3:  # two traces scored, the third being judged
            third.set()
        return answer(request)

    judge_server.responder = answer_counting
    judge_server.latency = 0.2
    capture, results = capture_of(tmp_path / "c.jsonl", count=60), tmp_path / "r.jsonl"
    command = [
        sys.executable, "-m", "agenteval_core.cli", "replay", str(capture),
        "--metrics", "confidence", "--judge-model", "judge-model",
        "--judge-base-url", judge_server.base_url, "--judge-concurrency", "1",
        "--json", str(results),
    ]  # fmt: skip
    env = os.environ | {"AGENTEVAL_CACHE_DIR": str(tmp_path / "cache")}
    replaying = subprocess.Popen(command, env=env, stderr=subprocess.PIPE, text=True)
    assert third.wait(60), replaying.poll()
    replaying.send_signal(signal.SIGINT)
    _, err = replaying.communicate(timeout=60)
    assert replaying.returncode == 130
    assert err.strip().splitlines()[-1] == (
        f"agenteval: error: interrupted; the results of the traces scored so far are in "
        f"{results}; the judge's answers so far are cached: replaying again does not pay "
        "for them"
    )
    lines = results.read_text().splitlines()
    scored = [json.loads(line) for line in lines]  # every line written is whole
    assert 2 <= len(scored) < 60  # written as they were scored, the buffer flushed at the end
    assert [line["trace_id"] for line in scored] == [f"t{i}" for i in range(len(scored))]
    assert {r["score"] for line in scored for r in line["results"]} == {0.8}
