"""Judges against loopback servers that behave like the local model servers users run:
llama-cpp-python (refuses json_schema with HTTP 500), Ollama (refuses it with 400), vLLM
(takes it); output modes, max_tokens, and calibrate's failures."""

from __future__ import annotations

import json
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
