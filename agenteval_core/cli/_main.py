"""``agenteval``: list metrics, replay captures.

User errors print one line, ``agenteval: error: ...``, and exit with 2 for bad input (missing
file, unknown metric, bad option) or 1 when a run found problems (bad lines in a capture).
Never a traceback.
"""

from __future__ import annotations

import errno
import functools
import inspect
import json
import os
import re
import sys
import textwrap
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any, NoReturn

import click
from rich.console import Console
from rich.progress import BarColumn, DownloadColumn, Progress, TextColumn, TimeRemainingColumn

from .._errors import (
    AgentEvalError,
    CaptureError,
    CaptureFormatError,
    ErrorKind,
    ResultsWriteError,
    describe_os_error,
)
from .._tables import TextTable, line_width, show, unscored_note
from .._text import says_nothing_alone
from ..engine._engine import MAX_OPEN_SESSIONS
from ..engine._summary import ResultSummary
from ..metrics._protocol import MetricKind
from ..metrics._registry import list_metrics, metric_class
from ..offline._processes import replay
from ..offline._replay import ReplayReport
from ..schema._capture import capture_parts
from ..schema._results import flagged_traces, lowest_score
from ..schema._trace import text_of

if TYPE_CHECKING:
    from ..judges import OpenAIJudge

__all__ = ["RunProblem", "UserError", "cli", "main"]

MAX_BAD_LINES_SHOWN = 10
MAX_ROWS_SHOWN = 20
"""Rows of a table of sessions or cases a command prints (a terminal cannot show thousands):
every one is in the file it writes."""
MAX_FLAGGED_SHOWN = 3
"""Flagged traces named per session under the replay's session table."""


class UserError(click.ClickException):
    """Bad input the user can fix; shown as one line, exit code 2."""

    exit_code = 2

    def show(self, file: Any = None) -> None:
        click.echo(f"agenteval: error: {self.format_message()}", err=True)


class RunProblem(UserError):
    """A run that completed but found problems (e.g. bad lines); exit code 1."""

    exit_code = 1


class Interrupted(UserError):
    """The user stopped the command (Ctrl-C); exit code 130, as a shell gives."""

    exit_code = 130


INTERRUPT_NOTE = "agenteval.interrupt_note"
"""The key in ``click.Context.meta`` under which a command says what a Ctrl-C leaves
behind (the results written so far, how to go on)."""


class _Group(click.Group):
    def invoke(self, ctx: click.Context) -> Any:
        try:
            return super().invoke(ctx)
        except KeyboardInterrupt:
            note = ctx.meta.get(INTERRUPT_NOTE)
            raise Interrupted("interrupted" + (f"; {note}" if note else "")) from None
        except ResultsWriteError as exc:  # the run went through; its file did not
            raise RunProblem(str(exc)) from exc
        except AgentEvalError as exc:
            raise UserError(str(exc)) from exc
        except BrokenPipeError:  # the reader went away (`| head`): nothing left to say
            sys.stderr.close()
            raise SystemExit(0) from None
        except OSError as exc:
            raise RunProblem(describe_os_error(exc)) from exc


@click.group(cls=_Group, context_settings={"help_option_names": ["-h", "--help"]})
@click.version_option(package_name="agenteval", prog_name="agenteval")
def cli() -> None:
    """Evaluate AI agents. Score captured runs (replay), turn captured failures into
    regression cases (cases) and run them k times as a suite (suite), write an HTML report
    (report), compare agents with a judge (compare), check metrics against human labels
    (calibrate), import OpenTelemetry spans (import), split a capture into shards for
    parallel replay (shard), list the metrics (metrics), run the demo (demo)."""


def _plain(text: str) -> str:
    """Docstring text as a terminal shows it: no reStructuredText markup."""
    text = re.sub(r":\w+:`~?([^`]+)`", r"\1", text)
    return text.replace("``", "")


def _hanging(line: str, indent: int, width: int | None) -> str:
    """``line`` wrapped at spaces to ``width`` (unwrapped when ``None``), continuation lines
    indented by ``indent``: a description never cut off nor broken mid-word."""
    if width is None or len(line) <= width:
        return line
    return textwrap.fill(
        line,
        width=max(width, indent + 20),
        subsequent_indent=" " * indent,
        break_long_words=False,
        break_on_hyphens=False,
    )


_COMPARISONS = {
    "best_of": (
        "Which of several agents answers the same requests best: every pair judged twice, "
        "answers swapped, by an LLM judge; win rate = (wins + ties / 2) / comparisons.",
        "Compares agents rather than scoring one trace. From the command line, each capture "
        "holds one agent's runs on the same requests:\n\n"
        "    agenteval compare agent_a.jsonl agent_b.jsonl --judge-model gpt-4o-mini\n\n"
        "In Python: agenteval_core.best_of(inputs, {agent: answers}, judge). A pair counts as "
        "a win only when both orders prefer the same agent; otherwise it is a tie (the "
        "tournament of Gaussia's BestOf, with the position swap added).",
    )
}
"""Comparisons across agents, listed beside the metrics (they score no single trace)."""


@cli.command("metrics")
@click.argument("name", required=False)
@click.option(
    "--kind",
    type=click.Choice([kind.value for kind in MetricKind] + ["comparison"]),
    help="Only metrics of this kind.",
)
def metrics_command(name: str | None, kind: str | None) -> None:
    """List the registered metrics, one line each; NAME shows one metric in full
    (its description, options and defaults)."""
    if name is not None:
        _describe_metric(name)
        return
    # a terminal's width (or $COLUMNS); a log or a pipe gets whole lines
    width = line_width(sys.stdout.isatty())
    infos = [info for info in list_metrics() if kind is None or info.kind == kind]
    comparisons = _COMPARISONS if kind in (None, "comparison") else {}
    widest = max(len(name) for name in [info.name for info in infos] + list(comparisons))
    for group in MetricKind:
        members = [info for info in infos if info.kind is group]
        if not members:
            continue
        click.echo(f"{group.value} (name, default threshold, summary)")
        for info in members:
            line = (
                f"  {info.name:<{widest}}  {info.default_threshold:<4g}  {_plain(info.description)}"
            )
            click.echo(_hanging(line, widest + 8, width))
    if comparisons:
        click.echo("comparison of several agents (name, summary; `agenteval compare`)")
        for compared, (summary, _) in comparisons.items():
            click.echo(_hanging(f"  {compared:<{widest}}  {'':<4}  {summary}", widest + 8, width))
    count = len(infos) + len(comparisons)
    plural = "" if count == 1 else "s"
    click.echo(f"\n{count} metric{plural}. `agenteval metrics NAME` describes one in full.")


def _describe_metric(name: str) -> None:
    if name in _COMPARISONS:
        summary, details = _COMPARISONS[name]
        click.echo(f"{name} (comparison of several agents, LLM judge)\n\n{summary}\n\n{details}")
        return
    cls = metric_class(name)
    click.echo(f"{cls.name} ({cls.kind.value} metric, version {cls.version})")
    click.echo(f"default threshold: {cls.default_threshold:g}")
    doc = inspect.cleandoc(cls.__doc__ or "")
    if doc:
        click.echo("\n" + _plain(doc))
    options = [
        parameter
        for parameter in inspect.signature(cls).parameters.values()
        if parameter.kind is inspect.Parameter.KEYWORD_ONLY
    ]
    if options:
        click.echo("\noptions:")
        for option in options:
            default = "" if option.default is inspect.Parameter.empty else f" = {option.default!r}"
            click.echo(f"  {option.name}{default}")


class OutputFile(click.Path):
    """A file a command writes. Its directory is checked when the command line is read,
    before the work that fills it (a suite's whole run, a replay, judge calls): a mistyped
    directory must not cost that work."""

    def __init__(self) -> None:
        super().__init__(dir_okay=False)

    def convert(self, value: Any, param: click.Parameter | None, ctx: click.Context | None) -> Any:
        path = os.fsdecode(super().convert(value, param, ctx))
        parent = Path(path).parent
        if not parent.is_dir():
            missing = FileNotFoundError(errno.ENOENT, os.strerror(errno.ENOENT))
            blocked = any(folder.is_file() for folder in (parent, *parent.parents))
            hint = "" if blocked else f"; create {parent} first"  # else: says which is a file
            raise UserError(describe_os_error(missing, path) + hint)
        if not os.access(parent, os.W_OK):
            raise UserError(f"{path}: cannot write in {parent} (permission denied)")
        return path


def capture_files(path: Path) -> list[Path]:
    """The files of the capture at ``path``: a capture file, or a capture directory of
    shards; anything else says what to pass."""
    if not path.exists():
        raise UserError(
            f"{path}: no such file or directory; pass a capture file (.jsonl) or a capture "
            "directory of shards (CaptureWriter(path, shards=N), agenteval shard)"
        )
    try:
        return capture_parts(path)
    except CaptureError as exc:
        raise UserError(str(exc)) from None


def _split_names(value: str | None) -> list[str] | None:
    if value is None:
        return None
    names = [name.strip() for name in value.split(",") if name.strip()]
    if not names:
        raise UserError(
            "--metrics needs at least one metric name, e.g. --metrics coherence,loop_detection"
        )
    return names


def _fmt(value: float | None) -> str:
    return "-" if value is None else f"{value:.3f}"


def _summary_table(title: str, summary: ResultSummary) -> TextTable:
    table = TextTable(
        title,
        ("metric", "mean", "pass rate", "scored", "errors", "skipped"),
        numeric=("mean", "pass rate", "scored", "errors", "skipped"),
    )
    for item in summary.metrics.values():
        table.add_row(
            item.name,
            _fmt(item.mean),
            _fmt(item.pass_rate),
            str(item.scored),
            str(item.errors),
            str(item.skipped),
        )
        note = unscored_note(item.name, item.errors + item.skipped, item.reasons, "trace")
        if note:
            table.notes.append(note)
    return table


def _print_report(console: Console, report: ReplayReport) -> None:
    if report.traces == 0:
        return
    show(console, _summary_table(f"{report.traces} traces from {report.path}", report.summary))
    if not report.session_results:
        return
    kept = list(report.session_results.items())
    names = [item.name for item in report.session_summary.metrics.values()]
    table = TextTable(f"{report.sessions} sessions", ("session", *names), numeric=names)
    if len(kept) > MAX_ROWS_SHOWN:
        # a terminal cannot show a thousand rows: the sessions that need a look come first
        kept.sort(key=lambda item: lowest_score(item[1]))
        table.notes.append(
            f"the {MAX_ROWS_SHOWN} lowest-scoring of {report.sessions} are shown; "
            "--json writes every session's results, and agenteval report shows the 100 lowest"
        )
        kept = kept[:MAX_ROWS_SHOWN]
    for session_id, results in kept:
        by_name = {r.name: r for r in results}
        table.add_row(session_id, *(_fmt(by_name[n].score) if n in by_name else "-" for n in names))
    for item in report.session_summary.metrics.values():
        note = unscored_note(item.name, item.errors + item.skipped, item.reasons, "session")
        if note:
            table.notes.append(note)
    for session_id, results in kept:
        flagged = [
            f"{trace_id} “{report.flagged_inputs[trace_id]}”"
            if trace_id in report.flagged_inputs
            else trace_id
            for trace_id in flagged_traces(results)
        ]
        if flagged:
            # a long session can flag dozens of traces: the first few say where to look
            more = len(flagged) - MAX_FLAGGED_SHOWN
            listed = ", ".join(flagged[:MAX_FLAGGED_SHOWN])
            table.notes.append(
                f"{session_id} flagged: {listed}"
                + (f" and {more} more (agenteval report lists every one)" if more > 0 else "")
            )
    show(console, table)


def _judge_options(model_help: str) -> Callable[[Callable[..., Any]], Callable[..., Any]]:
    """The judge's options, the same for every command that asks a judge; the command gets
    the judge they describe as ``judge`` (``None`` without ``--judge-model``)."""
    options = [
        click.option("--judge-model", help=model_help),
        click.option(
            "--judge-base-url", help="OpenAI-compatible API root, e.g. http://localhost:8000/v1."
        ),
        click.option("--judge-api-key", help="API key (default: $OPENAI_API_KEY)."),
        click.option(
            "--judge-concurrency",
            type=click.IntRange(min=1),
            default=8,
            show_default=True,
            envvar="AGENTEVAL_JUDGE_CONCURRENCY",
            help="Judge requests in flight at once (also $AGENTEVAL_JUDGE_CONCURRENCY).",
        ),
        click.option(
            "--judge-rps",
            type=click.FloatRange(min=0, min_open=True),
            default=10.0,
            show_default=True,
            envvar="AGENTEVAL_JUDGE_RPS",
            help="Judge requests started per second at most (also $AGENTEVAL_JUDGE_RPS).",
        ),
        click.option(
            "--judge-budget-usd",
            type=click.FloatRange(min=0, min_open=True),
            envvar="AGENTEVAL_JUDGE_BUDGET_USD",
            help="Make no judge call once the estimated spend reaches this many US dollars; "
            "what is left says 'budget exhausted' (also $AGENTEVAL_JUDGE_BUDGET_USD).",
        ),
        click.option(
            "--judge-output-mode",
            type=click.Choice(["auto", "json_schema", "json_object", "text"]),
            envvar="AGENTEVAL_JUDGE_OUTPUT_MODE",
            help="How the judge is asked for JSON: auto (default: the first mode the server "
            "accepts, found before scoring), json_schema, json_object (JSON mode) or text "
            "(also $AGENTEVAL_JUDGE_OUTPUT_MODE).",
        ),
        click.option(
            "--judge-timeout",
            type=click.FloatRange(min=0, min_open=True),
            default=None,
            envvar="AGENTEVAL_JUDGE_TIMEOUT",
            help="Seconds one judge call may take in all, to the last byte of its answer "
            "(also $AGENTEVAL_JUDGE_TIMEOUT). Default 20, or 180 for a reasoning model "
            "(o-series, gpt-5), which reasons before it answers; a local model on a CPU "
            "may need more.",
        ),
        click.option(
            "--judge-max-tokens",
            type=click.IntRange(min=1),
            envvar="AGENTEVAL_JUDGE_MAX_TOKENS",
            help="The most tokens a judge reply may take (default: 512, or 2,048 for replies "
            "that hold a list).",
        ),
        click.option(
            "--judge-max-input-tokens",
            type=click.IntRange(min=1),
            envvar="AGENTEVAL_JUDGE_MAX_INPUT_TOKENS",
            help="Cut each piece of a run sent to the judge to an equal share of this many "
            "tokens, for a model whose context the prompts overflow.",
        ),
        click.option(
            "--judge-deadline",
            type=click.FloatRange(min=0, min_open=True),
            envvar="AGENTEVAL_JUDGE_DEADLINE",
            help="Seconds one result may take in all (stages, re-asks, retries).",
        ),
        click.option("--no-cache", is_flag=True, help="Do not read or write the judge cache."),
        click.option("--clear-cache", is_flag=True, help="Empty the judge cache first."),
    ]

    def apply(command: Callable[..., Any]) -> Callable[..., Any]:
        @functools.wraps(command)
        def with_judge(**kwargs: Any) -> Any:
            judge = _make_judge(
                kwargs.pop("judge_model"),
                kwargs.pop("judge_base_url"),
                kwargs.pop("judge_api_key"),
                kwargs.pop("judge_concurrency"),
                kwargs.pop("judge_rps"),
                budget_usd=kwargs.pop("judge_budget_usd"),
                output_mode=kwargs.pop("judge_output_mode"),
                timeout=kwargs.pop("judge_timeout"),
                max_tokens=kwargs.pop("judge_max_tokens"),
                max_input_tokens=kwargs.pop("judge_max_input_tokens"),
                result_deadline=kwargs.pop("judge_deadline"),
                no_cache=kwargs.pop("no_cache"),
                clear_cache=kwargs.pop("clear_cache"),
            )
            return command(judge=judge, **kwargs)

        for option in reversed(options):
            with_judge = option(with_judge)
        return with_judge

    return apply


def _preflight(judge: OpenAIJudge | None) -> None:
    """The judge's preflight check, before anything is scored: a misconfigured or dead judge
    ends the command with one line (exit 2), and ``auto`` finds the output mode."""
    if judge is not None:
        import asyncio

        asyncio.run(judge.preflight())


def _make_judge(
    model: str | None,
    base_url: str | None,
    api_key: str | None,
    concurrency: int,
    requests_per_second: float,
    *,
    budget_usd: float | None,
    output_mode: str | None,
    timeout: float,
    max_tokens: int | None,
    max_input_tokens: int | None,
    result_deadline: float | None,
    no_cache: bool,
    clear_cache: bool,
) -> OpenAIJudge | None:
    if not model:
        if base_url or api_key or budget_usd or max_tokens:
            raise UserError(
                "--judge-base-url, --judge-api-key, --judge-budget-usd and --judge-max-tokens "
                "need --judge-model"
            )
        return None
    from ..judges import judge_from_options

    judge = judge_from_options(
        model=model,
        base_url=base_url,
        api_key=api_key,
        use_cache=not no_cache,
        concurrency=concurrency,
        requests_per_second=requests_per_second,
        budget_usd=budget_usd,
        output_mode=output_mode,  # type: ignore[arg-type]
        timeout=timeout,
        max_tokens=max_tokens,
        max_input_tokens=max_input_tokens,
        result_deadline=result_deadline,
    )
    if clear_cache and judge.cache is not None:
        judge.cache.clear()
    return judge


@cli.command("replay")
@click.argument("captures", nargs=-1, required=True, metavar="CAPTURE...")
@click.option(
    "--metrics",
    "metric_names",
    help="Comma-separated metric names (default: all that run offline).",
)
@click.option(
    "--json",
    "json_out",
    type=click.Path(),
    help="Write per-trace results as JSON lines here: a file, or a directory (an existing "
    "one, or a path ending in /) of results shards, one per worker or Ray input file.",
)
@click.option("--quiet", "-q", is_flag=True, help="No progress bar.")
@click.option(
    "--otel-endpoint",
    envvar="AGENTEVAL_OTEL_ENDPOINT",
    help="Also export traces and scores to this OTLP/HTTP traces endpoint, e.g. "
    "http://127.0.0.1:4318/v1/traces (env AGENTEVAL_OTEL_ENDPOINT).",
)
@click.option(
    "--phoenix",
    "phoenix_url",
    envvar="AGENTEVAL_PHOENIX_URL",
    help="Also export to an Arize Phoenix server, scores as annotations, e.g. "
    "http://127.0.0.1:6006 (env AGENTEVAL_PHOENIX_URL).",
)
@click.option(
    "--project",
    envvar="AGENTEVAL_PHOENIX_PROJECT",
    help="The Phoenix project exported traces go to (default: Phoenix's default project).",
)
@click.option(
    "--workers",
    type=click.IntRange(min=1),
    default=1,
    show_default=True,
    envvar="AGENTEVAL_REPLAY_WORKERS",
    help="Processes that score at once, each taking whole sessions as it goes; up to one "
    "per CPU core speeds up a large capture. A judge's rate limit and budget hold for all "
    "of them together (its concurrency per process); no export (also "
    "$AGENTEVAL_REPLAY_WORKERS).",
)
@click.option(
    "--engine",
    type=click.Choice(["local", "ray"]),
    default="local",
    show_default=True,
    help="ray: score on Ray Data, on a cluster or in a local Ray (pip install "
    "'agenteval[ray]'); CAPTURE... may then be files, globs, directories and s3:// or "
    "gs:// URLs.",
)
@click.option(
    "--ray-address",
    envvar="RAY_ADDRESS",
    help="The Ray cluster to score on, e.g. ray://head:10001 (default: $RAY_ADDRESS, or a "
    "local Ray started for this replay).",
)
@click.option(
    "--max-open-sessions",
    type=click.IntRange(min=1),
    default=MAX_OPEN_SESSIONS,
    show_default=True,
    help="Sessions kept open at once per process; past that the least recently active "
    "close, and one that meets another trace is cut in two (the replay says how often). "
    "Raise it above the sessions active at once in the capture.",
)
@_judge_options(model_help="Judge model name; enables the LLM-judge metrics.")
def replay_command(
    captures: tuple[str, ...],
    metric_names: str | None,
    json_out: str | None,
    quiet: bool,
    otel_endpoint: str | None,
    phoenix_url: str | None,
    project: str | None,
    workers: int,
    engine: str,
    ray_address: str | None,
    max_open_sessions: int,
    judge: OpenAIJudge | None,
) -> None:
    """Score every trace of a capture (a JSONL file, or a capture directory of shards) and
    print a summary.

    Judge metrics run when --judge-model is given (naming one without it is refused).
    Traces are scored --judge-concurrency at a time (a session's too, folded in order). With
    --workers N, N processes score the capture, each taking whole sessions as it goes. With
    --engine ray, Ray Data scores one or more captures on a cluster (or a local Ray).
    """
    capture = ", ".join(captures)
    click.get_current_context().meta[INTERRUPT_NOTE] = _what_an_interrupt_keeps(json_out, judge)
    if engine == "ray":
        _replay_on_ray(
            captures, metric_names, json_out, quiet, workers, ray_address, max_open_sessions, judge
        )
        return
    if len(captures) > 1:
        raise UserError(
            f"{len(captures)} captures given; one process replays one capture file: pass "
            "one, or --engine ray for several files, globs, directories or URLs"
        )
    path = Path(capture)
    files = capture_files(path)
    names = _split_names(metric_names)
    err = Console(stderr=True)
    show_progress = not quiet and err.is_terminal

    def bad_line(error: CaptureFormatError) -> None:
        if len(report_errors) < MAX_BAD_LINES_SHOWN:
            err.print(f"agenteval: error: {error}", markup=False, highlight=False, soft_wrap=True)
        report_errors.append(error)

    report_errors: list[CaptureFormatError] = []
    if workers > 1 and (otel_endpoint or phoenix_url):
        raise UserError(
            f"--workers {workers} cannot export to OpenTelemetry: the export runs in one "
            "process; drop --workers to export"
        )
    export = _otel_sink(otel_endpoint, phoenix_url, project)
    progress = _bytes_progress("replaying", err, show=show_progress)
    with progress:
        task = progress.add_task("replay", total=sum(os.path.getsize(f) for f in files))
        report = replay(
            path,
            names,
            judge=judge,
            output=json_out,
            on_bad_line=bad_line,
            on_progress=lambda size: progress.advance(task, size),
            sinks=[export] if export is not None else (),
            workers=workers,
            max_open_sessions=max_open_sessions,
        )
    _print_report(Console(), report)
    if export is not None:  # replay closed the sink: everything was delivered or failed
        where = export.exporter.endpoint
        if export.problem:
            raise RunProblem(f"export to {where} incomplete: {export.problem}")
        click.echo(f"exported {export.exporter.traces} trace(s) to {where}")
    _conclude_replay(
        report,
        capture,
        json_out,
        judge,
        len(report_errors),
        per_worker=workers > 1,
        cache_hits=judge.stats.cache_hits if judge is not None else None,
    )


def _what_an_interrupt_keeps(json_out: str | None, judge: OpenAIJudge | None) -> str:
    """What a replay stopped half-way leaves, and what running it again costs."""
    kept = (
        f"the results of the traces scored so far are in {json_out}"
        if json_out
        else "no results were written (--json FILE writes each trace's as it is scored)"
    )
    if judge is not None and judge.cache is not None:
        kept += "; the judge's answers so far are cached: replaying again does not pay for them"
    return kept


def _conclude_replay(
    report: ReplayReport,
    capture: str,
    json_out: str | None,
    judge: OpenAIJudge | None,
    bad_lines: int,
    *,
    per_worker: bool,
    cache_hits: int | None,
) -> None:
    """How a replay ends, however it ran: the judge's spend, where the results went, and
    the exit status a CI job reads (bad lines, no traces, results the judge left unscored).
    ``per_worker``: several processes scored, each with its own copy of the judge (its
    cache counts hold per worker; its budget, for all of them); ``cache_hits``: this
    process's judge's, where it scored."""
    if judge is not None:
        tokens = sum(m.input_tokens + m.output_tokens for m in report.summary.metrics.values())
        cost = sum(m.cost_usd for m in report.summary.metrics.values())
        budget = ""
        if judge.budget_usd is not None:
            budget = f" of a ${judge.budget_usd:.4f} budget"
        hits = ""
        if cache_hits is not None:
            hits = f"; {cache_hits} cache hits" + (" in this process" if per_worker else "")
        click.echo(f"judge {judge.model}: {tokens} tokens, ${cost:.4f}{budget}{hits}")
        over = sum(s.error_kinds[ErrorKind.BUDGET] for s in report.summary.metrics.values())
        if over:
            click.echo(
                f"budget exhausted: {over} result(s) not scored; replay with a larger "
                "--judge-budget-usd to score them (answers already paid for are cached)"
            )
    if json_out:
        click.echo(f"per-trace results written to {json_out}")
    if bad_lines:
        hidden = bad_lines - MAX_BAD_LINES_SHOWN
        more = f" ({hidden} not shown)" if hidden > 0 else ""
        scored = (
            f"the other {report.traces} were scored"
            if report.traces
            else "no line could be read as a trace (is this a capture file?)"
        )
        raise RunProblem(f"{capture}: {bad_lines} bad line(s) skipped{more}; {scored}")
    if report.traces == 0:
        raise RunProblem(f"{capture}: no traces to score")

    saved = f"; the rest is in {json_out}" if json_out else ""
    # what will help depends on how the judge failed: say it per kind, worst first
    for kind, label, advice in (
        (ErrorKind.UNSUPPORTED_REQUEST, "unsupported request", "the server refused the "
         "requests themselves; replaying gives the same: change --judge-output-mode or "
         "--judge-model"),
        (ErrorKind.CONTEXT_OVERFLOW, "context overflow", "the prompts were longer than the "
         "judge model's context; replaying gives the same: judge with a longer-context model, "
         "or cut what is sent with --judge-max-input-tokens N"),
        (ErrorKind.UNAVAILABLE, "judge unavailable", "replay again to score them (raise "
         "--judge-timeout for a slow server)"),
    ):  # fmt: skip
        count = sum(s.error_kinds[kind] for s in report.summary.metrics.values())
        if count:
            raise RunProblem(
                f"{label}: {count} result(s) not scored (see the table){saved}; {advice}"
            )


def _replay_on_ray(
    captures: tuple[str, ...],
    metric_names: str | None,
    json_out: str | None,
    quiet: bool,
    workers: int,
    address: str | None,
    max_open_sessions: int,
    judge: OpenAIJudge | None,
) -> None:
    """``agenteval replay --engine ray``: the same report, scored by Ray's workers."""
    if workers > 1:
        raise UserError(
            "--engine ray takes no --workers: Ray's workers score the traces on their machines"
        )
    err = Console(stderr=True)
    bad: list[CaptureFormatError] = []
    progress = Progress(
        TextColumn("replaying on Ray: {task.completed} traces scored"),
        console=err,
        disable=quiet or not err.is_terminal,
    )
    with progress:
        task = progress.add_task("replay", total=None)
        try:
            report = replay(
                list(captures),
                _split_names(metric_names),
                judge=judge,
                output=json_out,
                on_bad_line=bad.append,
                on_progress=lambda scored: progress.update(task, completed=scored),
                engine="ray",
                ray_address=address,
                max_open_sessions=max_open_sessions,
            )
        except ImportError as exc:
            raise UserError(str(exc)) from None
    for error in bad[:MAX_BAD_LINES_SHOWN]:
        err.print(f"agenteval: error: {error}", markup=False, highlight=False, soft_wrap=True)
    _print_report(Console(), report)
    # each scorer has its own copy of the judge: its cache hits are counted on Ray's workers
    _conclude_replay(
        report,
        ", ".join(captures),
        json_out,
        judge,
        len(bad),
        per_worker=True,
        cache_hits=None,
    )


def _otel_sink(endpoint: str | None, phoenix: str | None, project: str | None) -> Any:
    """The OpenTelemetry sink the export options ask for, or None; checked now, before
    anything is scored: an endpoint that cannot take the export ends the command in one
    line (exit 2). Failures during the run are reported once, at the end."""
    if endpoint is None and phoenix is None:
        return None
    try:
        from agenteval_otel import ExportError, OTelSink
    except ImportError as exc:
        raise UserError(f"{exc}") from None
    try:
        sink = OTelSink(endpoint=endpoint, phoenix=phoenix, project=project, log_failures=False)
    except ValueError as exc:
        raise UserError(str(exc)) from None
    try:
        note = sink.preflight()
    except ExportError as exc:
        option = "--otel-endpoint" if endpoint is not None else "--phoenix"
        raise UserError(f"{exc}; check {option}") from None
    if note:
        click.echo(f"agenteval: {note}", err=True)
    return sink


def _bytes_progress(doing: str, console: Console, *, show: bool) -> Progress:
    """A progress bar over bytes read, with the time left, on ``console`` when ``show``."""
    return Progress(
        TextColumn(doing),
        BarColumn(),
        DownloadColumn(),
        TimeRemainingColumn(),
        console=console,
        disable=not show,
    )


@cli.command("import")
@click.argument("spans")
@click.option(
    "-o",
    "--output",
    "output",
    required=True,
    type=OutputFile(),
    help="The capture file (.jsonl) to write; traces are appended if it exists.",
)
def import_command(spans: str, output: str) -> None:
    """Convert OpenTelemetry spans (OTLP JSON, JSON Lines, Phoenix's span export) written by
    agenteval, OpenInference or GenAI-convention instrumentors into a capture that replay,
    report and compare read. The span file is checked whole before anything is written,
    then its traces are written as they are read: a file of any size fits in memory."""
    try:
        from agenteval_otel import iter_otlp
    except ImportError as exc:
        raise UserError(f"{exc}") from None
    from ..schema._capture import CaptureWriter

    err = Console(stderr=True)
    size = os.path.getsize(spans) if os.path.isfile(spans) else 0
    progress = _bytes_progress("importing", err, show=err.is_terminal and size > 0)
    traces = span_count = stepless = stepless_without_input = 0
    left_out: list[str] = []
    with progress:
        task = progress.add_task("import", total=2 * size)  # checked, then converted
        try:  # a bad file fails here, before the capture is opened
            found = iter_otlp(
                spans,
                on_progress=lambda read: progress.advance(task, read),
                on_left_out=left_out.append,
            )
            with CaptureWriter(output) as writer:
                for trace in found:  # raises only if the file changed after its check
                    writer.write(trace)
                    traces += 1
                    span_count += len(trace.spans)
                    if not trace.steps_recorded:
                        stepless += 1
                        stepless_without_input += trace.input is None
        except AgentEvalError as exc:
            raise UserError(str(exc)) from None
    click.echo(f"imported {traces} trace(s), {span_count} span(s), from {spans} into {output}")
    if left_out:
        click.echo(
            f"left out {len(left_out)} trace(s) that record no run (an agent being made, an "
            "index being built: no model, tool or retrieval call, no agent, no request or "
            "answer in text)",
            err=True,
        )
    if stepless:  # e.g. OpenInference's CrewAI instrumentor writes no LLM or tool spans
        click.echo(
            f"agenteval: warning: {spans}: {stepless} of {traces} trace(s) hold no "
            "LLM or tool span, so only their input and output can be scored (the metrics of "
            "tool calls and trajectories skip them)"
            + (
                f"; {stepless_without_input} of them have no input either"
                if stepless_without_input
                else ""
            ),
            err=True,
        )
    click.echo(f"score them with: agenteval replay {output}")


@cli.command("shard")
@click.argument("capture", type=click.Path(dir_okay=False))
@click.argument("directory", type=click.Path(file_okay=False))
@click.option(
    "--shards",
    type=click.IntRange(min=1),
    default=lambda: 4 * (os.cpu_count() or 1),
    show_default="4 per CPU core",
    help="How many files to split the capture into.",
)
def shard_command(capture: str, directory: str, shards: int) -> None:
    """Split CAPTURE into a capture directory of shards, each session in one file, for
    replay workers and Ray to read in parallel (lines are copied as they are)."""
    from ..schema._capture import shard_capture

    try:
        counts = shard_capture(capture, directory, shards)
    except AgentEvalError as exc:
        raise UserError(str(exc)) from None
    click.echo(
        f"{sum(counts)} line(s) of {capture} in {shards} shard(s) in {directory} "
        f"(fewest {min(counts)}, most {max(counts)}); replay them with: "
        f"agenteval replay {directory} --workers N"
    )


def _compared_request(value: Any, turns: Sequence[Mapping[str, Any]]) -> str:
    """A request as compare matches it across agents and shows it to the judge: its text,
    and for one that says nothing alone ("Yes, please.") the request before it in its
    session, which every agent's run of a scripted conversation shares (the answer before
    it is each agent's own). Matched by its words alone, a "Yes, please." to a flight was
    judged against another agent's "Yes, please." to a hotel."""
    text = text_of(value).strip()
    if not (turns and says_nothing_alone(text)):
        return text
    earlier = text_of(turns[-1]["input"]).strip()
    return f"Earlier in the conversation the user asked: {earlier}\nThen: {text}"


@cli.command("compare")
@click.argument("captures", nargs=-1, required=True)
@_judge_options(model_help="Judge model name (required): it decides each pair.")
def compare_command(
    captures: tuple[str, ...],
    judge: OpenAIJudge | None,
) -> None:
    """Compare agents that answered the same requests: each CAPTURE is one agent's runs.

    Runs are matched by their request text (a follow-up that says nothing alone, such as
    "Yes, please.", with the request before it in its session); on every request answered
    in all captures, each pair of agents is judged twice with the answers' order swapped (a
    judge that favours a position decides nothing), and each agent's win rate is printed. A request asked again
    counts once, with its first answer (the others are counted and said); a run with no
    answer yet (paused for a human, or still going when captured) is left out, its resumed
    run answering, and a run resumed from its checkpoint after a failure answers in the
    failed run's place. An agent is named after its capture file.
    """
    import asyncio

    from ..metrics._best_of import abest_of
    from ..schema._capture import runs_with_turns, skipping_bad_lines
    from ..schema._trace import RESUMES_TRACE_ID, RunStatus

    if len(captures) < 2:
        raise UserError("compare needs the captures of at least two agents")
    if judge is None:
        raise UserError("compare needs a judge: pass --judge-model (and --judge-base-url)")
    answers: dict[str, dict[str, str]] = {}
    repeated: dict[str, int] = {}  # runs of a request already answered: not judged
    unanswered: dict[str, int] = {}  # paused or cut-short runs: no answer to judge yet
    for capture in captures:
        path = Path(capture)
        capture_files(path)  # a file or a capture directory, or a clear error
        name = path.stem if path.stem not in answers else f"{path.stem}#{len(answers) + 1}"
        runs: dict[str, tuple[str, str]] = {}  # request → the run that answered, its answer
        read = waiting = 0
        with skipping_bad_lines() as skipped:  # each request's first answer counts
            for trace, turns, _ in runs_with_turns(path, keep=1, on_error=skipped.append):
                if trace.status in (RunStatus.INTERRUPTED, RunStatus.UNFINISHED):
                    waiting += 1  # its answer, if any, is a later run's (the resumed one)
                    continue
                request = _compared_request(trace.input, turns)
                first = runs.get(request)
                if first is not None and first[0] != trace.metadata.get(RESUMES_TRACE_ID):
                    read += 1  # asked again: the first answer stands
                    continue
                # a run resumed from its checkpoint after a failure answers in its place
                runs[request] = (trace.id, text_of(trace.output))
                read += first is None
        answers[name] = {request: answer for request, (_, answer) in runs.items()}
        repeated[name], unanswered[name] = read - len(runs), waiting
    agents = list(answers)
    shared = [
        request for request in answers[agents[0]] if all(request in answers[a] for a in agents)
    ]
    if not shared:
        raise UserError(
            "the captures share no request; compare runs of several agents on the same inputs"
        )

    async def tournament() -> Any:
        await judge.preflight()
        try:
            return await abest_of(
                shared, {agent: [answers[agent][r] for r in shared] for agent in agents}, judge
            )
        finally:
            await judge.aclose()

    result = asyncio.run(tournament())
    table = TextTable(
        f"{len(shared)} shared requests, judged by {judge.model}",
        ("agent", "win rate", "wins", "ties"),
        numeric=("win rate", "wins", "ties"),
    )
    for agent in sorted(agents, key=lambda a: -result.win_rates[a]):
        table.add_row(
            agent,
            f"{result.win_rates[agent]:.3f}",
            str(result.wins[agent]),
            str(result.ties[agent]),
        )
    show(Console(), table)
    unmatched = {agent: len(answers[agent]) - len(shared) for agent in agents}
    if any(unmatched.values()):
        click.echo(
            "requests not answered by every agent were left out: "
            + ", ".join(f"{agent} {count}" for agent, count in unmatched.items() if count)
        )
    if any(unanswered.values()):
        click.echo(
            "runs with no answer yet were left out (paused for a human, whose resumed run "
            "answers, or still going when captured): "
            + ", ".join(f"{a} {count}" for a, count in unanswered.items() if count)
        )
    if any(repeated.values()):
        click.echo(
            "runs that asked a request again were left out (each request's first answer is "
            "judged): " + ", ".join(f"{a} {count}" for a, count in repeated.items() if count)
        )
    click.echo(
        f"winner: {result.winner}" if result.winner else f"tied for first: {', '.join(result.tied)}"
    )


@cli.command("calibrate")
@click.argument("labels")
@click.option("--capture", help="The capture holding the traces that labels name by trace_id.")
@click.option(
    "--json",
    "json_out",
    type=OutputFile(),
    help="Also write the figures as JSON, for agenteval report --calibration.",
)
@_judge_options(model_help="Judge model name; enables the LLM-judge metrics to calibrate.")
def calibrate_command(
    labels: str,
    capture: str | None,
    json_out: str | None,
    judge: OpenAIJudge | None,
) -> None:
    """How well each metric agrees with human labels (LABELS: JSON Lines of metric, label
    and trace or trace_id): agreement, Cohen's kappa, the confusion matrix, and the threshold
    that matches the labels best."""
    from ..calibration._calibrate import calibrate, read_labels

    read = read_labels(labels, capture=capture)
    _preflight(judge)  # a dead or misconfigured judge is said now, as in replay (exit 2)
    report = calibrate(read, judge=judge)
    console = Console()
    figures = ("labels", "scored", "agreement", "kappa", "threshold", "best")
    table = TextTable(f"agreement with {labels}", ("metric", *figures), numeric=figures)
    for item in report.metrics.values():
        table.add_row(
            item.metric + (" (graded)" if item.graded else ""),
            str(item.labelled),
            str(item.scored),
            _fmt(item.agreement),
            _fmt(item.kappa),
            f"{item.threshold:g}",
            item.best_summary or "-",
        )
    show(console, table)
    for item in report.metrics.values():
        columns = list(next(iter(item.confusion.values()), {}))
        if columns:
            click.echo(f"\n{item.metric}: rows are the labels, columns the metric")
            click.echo("  " + "label".ljust(8) + "".join(c.rjust(7) for c in columns))
            for row, cells in item.confusion.items():
                click.echo("  " + row.ljust(8) + "".join(str(cells[c]).rjust(7) for c in columns))
        elif item.unscored:
            click.echo(f"\n{item.metric}: nothing scored")
        for trace_id in item.unscored:
            reason = item.unscored_reasons.get(trace_id, "")
            click.echo(f"  not scored (left out): {trace_id}: {reason[:300]}")
    if json_out:
        report.save(json_out)
        click.echo(
            f"\ncalibration written to {json_out}; show it in the HTML report with "
            f"agenteval report RESULTS --calibration {json_out}"
        )
    unanswered = sum(
        kind == ErrorKind.UNAVAILABLE
        for item in report.metrics.values()
        for kind in item.unscored_kinds.values()
    )
    if unanswered:  # figures over what the judge did answer are no calibration of it
        raise RunProblem(
            f"the judge did not answer for {unanswered} labelled trace(s) (listed above); "
            "these are left out of the figures"
        )


@cli.command("report")
@click.argument("results")
@click.option("--capture", help="The capture the results came from, for the spans of each trace.")
@click.option(
    "-o",
    "--html",
    "html_out",
    default="agenteval-report.html",
    show_default=True,
    type=OutputFile(),
    help="Where to write the report.",
)
@click.option(
    "--calibration",
    type=click.Path(dir_okay=False),
    help="A judge calibration (agenteval calibrate --json) to show in the report.",
)
def report_command(
    results: str, capture: str | None, html_out: str, calibration: str | None
) -> None:
    """Write a self-contained HTML report from RESULTS: the --json output of a replay or an
    online evaluator's results file. Given a capture instead, score it with the default
    metrics first and report on that."""
    from ..report._report import write_report

    if capture is None and _is_capture(Path(results)):
        scored = Path(html_out).with_suffix(".results.jsonl")
        replay(results, output=scored)
        click.echo(f"{results} is a capture: scored it with the default metrics into {scored}")
        results, capture = str(scored), results
    path = write_report(results, html_out, capture=capture, calibration=calibration)
    click.echo(f"report written to {path}")


def _is_capture(path: Path) -> bool:
    """Whether a file's first record is a trace (a capture) rather than a result; a
    directory is a capture when it holds capture shards."""
    if path.is_dir():
        try:
            path = capture_parts(path)[0]
        except CaptureError:
            return False  # a results directory, or nothing the report's reader can use
    try:
        with open(path, encoding="utf-8") as handle:
            first = next((line for line in handle if line.strip()), "")
        record = json.loads(first) if first else None
    except (OSError, ValueError):
        return False  # the report's own reader explains what is wrong with it
    return isinstance(record, dict) and ("spans" in record or "schema_version" in record)


@cli.command("demo")
@click.option(
    "--capture",
    default="agenteval-demo-capture.jsonl",
    show_default=True,
    type=click.Path(dir_okay=False),
    help="Where the demo's traces are captured.",
)
def demo_command(capture: str) -> None:
    """Run an offline LangGraph agent with live scoring and a loop alert (needs the langchain extra)."""
    try:
        from agenteval_langchain._demo import run_demo
    except ImportError as exc:
        raise UserError(f"{exc}; the demo runs a LangGraph agent") from exc
    path = Path(capture)
    path.unlink(missing_ok=True)
    run_demo(path).close()


def main(argv: Sequence[str] | None = None) -> NoReturn:
    """Entry point of the ``agenteval`` console script."""
    cli.main(args=list(argv) if argv is not None else None, prog_name="agenteval")
    sys.exit(0)
