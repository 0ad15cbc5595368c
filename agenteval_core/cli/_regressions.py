"""``agenteval cases`` (captured failures → regression cases) and ``agenteval suite`` (run
them against an agent, as a CI gate)."""

from __future__ import annotations

import importlib
import importlib.util
import os
import re
import sys
import xml.etree.ElementTree as ET
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any

import click
from rich.console import Console

from .._errors import CaptureFormatError
from .._tables import TextTable, show
from .._text import first_words
from ..schema._trace import answers_by_question, text_of
from ..suite._baseline import (
    DEFAULT_MAX_REGRESSION_PROB,
    BaselineComparison,
    compare_to_baseline,
    unflaggable_baseline,
)
from ..suite._cases import (
    ALL_SELECTIONS,
    DEFAULT_MAX_TURNS,
    RegressionCase,
    cases_from_capture,
    read_cases,
    write_cases,
)
from ..suite._suite import (
    EvalSuite,
    SuiteReport,
    missed_bounds,
    unreachable_bounds,
    without_bounds,
)
from ._main import (
    MAX_ROWS_SHOWN,
    OutputFile,
    RunProblem,
    UserError,
    _judge_options,
    _preflight,
    _split_names,
    capture_files,
    cli,
)

if TYPE_CHECKING:
    from ..judges import OpenAIJudge

__all__ = ["load_agent"]


def _answer_text(answer: Any) -> str:
    """A human's answer as the cases table shows it: one given by question as each
    question and its answer."""
    pairs = answers_by_question(answer)
    if pairs is None:
        return str(answer)
    return ", ".join(f"{text_of(question)} {text_of(given)}" for question, given in pairs)


def _why(case: RegressionCase) -> str:
    origin = case.provenance
    parts = []
    if origin.status and origin.status not in ("ok", "interrupted"):
        parts.append(origin.status)
    if origin.refusal is not None:
        parts.append("refused")
    parts += [alert.split(":", 1)[0] for alert in origin.alerts]
    parts += [f"{metric.name} failed" for metric in origin.failing_metrics]
    if origin.failed_tools:
        parts.append("tool failed: " + ", ".join(origin.failed_tools))
    return "; ".join(dict.fromkeys(parts))


@cli.command("cases")
@click.argument("capture")
@click.option(
    "--results",
    type=click.Path(dir_okay=False),
    help="A results file (the --json of a replay, or an online evaluator's) that says which "
    "traces failed a metric; without it the capture is replayed here with the default metrics.",
)
@click.option(
    "--select",
    "selection",
    default=",".join(ALL_SELECTIONS),
    show_default=True,
    help="Which failures become cases (comma-separated): incomplete (error, stopped, "
    "cancelled, timeout, limit), refusals (the model provider refused to answer), alerts "
    "(loop alerts), metrics (failed metrics, flagged traces).",
)
@click.option(
    "--metrics",
    "metric_names",
    help="Metrics of the replay that finds failed metrics when no --results is given "
    "(default: all that run offline).",
)
@click.option(
    "-o",
    "--output",
    required=True,
    type=OutputFile(),
    help="Where to write the cases (JSON Lines; replaced).",
)
@click.option(
    "--max-turns",
    type=click.IntRange(min=0),
    default=DEFAULT_MAX_TURNS,
    show_default=True,
    help="Earlier turns of its session a case keeps, the most recent (the agent is given "
    "them); the provenance counts those left out.",
)
@click.option(
    "--top",
    type=click.IntRange(min=1),
    help="Write only the N cases seen most often (ties: the first seen), for a capture whose "
    "failures are too many to run as a suite; the command says how many it left out.",
)
def cases_command(
    capture: str,
    results: str | None,
    selection: str,
    metric_names: str | None,
    output: str,
    max_turns: int,
    top: int | None,
) -> None:
    """Turn the failures captured in CAPTURE into regression cases (JSON Lines) that
    `agenteval suite` runs: one case per input and way of failing, with a count, where it
    came from, and the checks its failure calls for. Edit the file to add expectations."""
    path = Path(capture)
    capture_files(path)  # a file or a capture directory, or a clear error
    chosen = [part.strip() for part in selection.split(",") if part.strip()]
    unknown = [part for part in chosen if part not in ALL_SELECTIONS]
    if unknown or not chosen:
        raise UserError(
            f"--select {selection!r}: choose from {', '.join(ALL_SELECTIONS)} (comma-separated)"
        )
    bad: list[CaptureFormatError] = []
    cases = cases_from_capture(
        path,
        results=results,
        select=chosen,  # type: ignore[arg-type]
        metrics=_split_names(metric_names),
        on_bad_line=bad.append,
        max_turns=max_turns,
    )
    found = len(cases)
    # the failures seen most often first (a stable sort: ties keep the order they were seen)
    by_count = sorted(cases, key=lambda case: -case.count)
    if top is not None and found > top:
        cases = by_count = by_count[:top]
    written = write_cases(cases, output)
    console = Console()
    if cases:
        table = TextTable(
            f"{written} regression case(s) from {capture}",
            ("case", "count", "input", "failed", "checks"),
            numeric=("count",),
        )
        shown = cases
        if len(cases) > MAX_ROWS_SHOWN:
            shown = by_count[:MAX_ROWS_SHOWN]
            table.notes.append(
                f"the {MAX_ROWS_SHOWN} seen most often of {written} are shown; {output} "
                "holds every case"
            )
        for case in shown:
            asked = first_words(str(case.input))
            if case.resume:  # the same request answered otherwise is another case
                asked += "; answered: " + first_words("; ".join(map(_answer_text, case.resume)))
            table.add_row(case.id, str(case.count), asked, _why(case), ", ".join(case.metrics))
        show(console, table)
    failures = sum(case.count for case in cases)
    click.echo(f"wrote {written} case(s) for {failures} failed run(s) to {output}")
    if found > written:
        click.echo(f"left out {found - written} case(s) seen less often (--top {top})")
    if bad:
        raise RunProblem(f"{capture}: {len(bad)} bad line(s) skipped; first: {bad[0]}")


def load_agent(spec: str) -> Callable[..., Any]:
    """The agent function ``MODULE:FUNCTION`` (a module importable from the current
    directory, or a ``path/to/file.py``) names."""
    module_name, _, name = spec.rpartition(":")
    if not module_name or not name:
        raise UserError(f"--agent {spec!r}: give MODULE:FUNCTION, e.g. my_agent:run_agent")
    if os.getcwd() not in sys.path:  # as `python -m` and pytest do: the project's modules
        sys.path.insert(0, os.getcwd())
    try:
        if module_name.endswith(".py"):
            location = Path(module_name)
            if not location.is_file():
                raise UserError(f"--agent {spec!r}: no such file {module_name}")
            found = importlib.util.spec_from_file_location(location.stem, location)
            assert found is not None and found.loader is not None
            module = importlib.util.module_from_spec(found)
            sys.modules[location.stem] = module
            found.loader.exec_module(module)
        else:
            module = importlib.import_module(module_name)
    except UserError:
        raise
    except ImportError as exc:
        raise UserError(f"--agent {spec!r}: cannot import {module_name}: {exc}") from exc
    except Exception as exc:
        raise UserError(
            f"--agent {spec!r}: importing {module_name} raised {type(exc).__name__}: {exc}"
        ) from exc
    agent = getattr(module, name, None)
    if not callable(agent):
        raise UserError(f"--agent {spec!r}: {module_name} has no function {name!r}")
    return agent


RECURRED = frozenset({"failed", "incomplete", "refused"})
"""Attempt outcomes that saw the agent fail a case's checks again. The other failures ran no
check of the case (the agent raised or hung, was not asked, or nothing scored its run): the
regression was not seen again, nor seen gone."""


def _recurring(console: Console, report: SuiteReport) -> None:
    failed_cases = report.failed_cases()
    if not failed_cases:
        console.print("no regression recurs: every attempt of every case passed")
        return
    for title, recurred in (
        ("recurring:", True),
        ("not checked (attempts that ran none of the case's checks):", False),
    ):
        shown = [
            (case, failed)
            for case in failed_cases
            if (
                failed := [
                    r for r in case.runs if not r.passed and (r.outcome in RECURRED) == recurred
                ]
            )
        ]
        if shown:
            console.print(title)
        for case, failed in shown:
            origin = case.metadata.get("provenance", {})
            was = f" (captured: {origin['status']})" if origin.get("status") else ""
            console.print(
                f"  {case.label}{was}: {len(failed)}/{len(case.runs)} attempts — "
                f"{failed[0].reason}",
                markup=False,
                highlight=False,
                soft_wrap=True,
            )


def _same_file(one: str, other: str) -> bool:
    """Whether two paths name one file (a file that does not exist yet names none)."""
    try:
        return os.path.samefile(one, other)
    except OSError:
        return False


def _baseline_table(comparison: BaselineComparison) -> TextTable:
    table = TextTable(
        f"against the baseline (regressed when P(drop) > {comparison.max_regression_prob:g})",
        ("case", "baseline", "now", "P(drop)", ""),
        numeric=("P(drop)",),
    )
    for case in comparison.cases:
        table.add_row(
            case.label,
            f"{case.baseline_passes}/{case.baseline_attempts}",
            f"{case.passes}/{case.attempts}",
            "-" if case.checks_changed else f"{case.drop_probability:.3f}",
            "REGRESSED" if case.regressed else "checks changed" if case.checks_changed else "",
        )
        if case.checks_changed:
            table.notes.append(
                f"{case.label}: not compared, checked otherwise than in the baseline "
                f"({'; '.join(case.checks_changed)}); judged as a new case"
            )
    return table


_TERMINAL_CODES = re.compile(r"\x1b\[[0-9;?]*[ -/]*[@-~]")
"""Colour and cursor sequences (ECMA-48 CSI), as tools print them in their errors."""
_NOT_XML = re.compile("[\x00-\x08\x0b\x0c\x0e-\x1f\ud800-\udfff\ufffe\uffff]")
"""Characters XML 1.0 cannot hold, escaped or not."""


def _xml_text(text: str) -> str:
    """``text`` as an XML document can hold it: terminal colour codes left out, any other
    character XML 1.0 forbids (NUL, a lone escape) written as ``\\xNN``. ElementTree
    writes them as they are, and CI's JUnit readers then refuse the whole file."""
    return _NOT_XML.sub(lambda m: f"\\x{ord(m[0]):02x}", _TERMINAL_CODES.sub("", text))


def _junit(report: SuiteReport, problems: list[str], path: str) -> None:
    """JUnit XML: one test per case (failed when an attempt failed), and the gate."""
    failed_cases = sum(1 for case in report.cases if case.passes < len(case.runs))
    name = _xml_text(report.name)
    suite = ET.Element(
        "testsuite",
        name=name,
        tests=str(len(report.cases) + 1),
        failures=str(failed_cases + bool(problems)),
        errors="0",
    )
    for case in report.cases:
        test = ET.SubElement(suite, "testcase", classname=name, name=_xml_text(case.label))
        failed = [run for run in case.runs if not run.passed]
        if failed:
            message = f"{len(failed)}/{len(case.runs)} attempts failed: {failed[0].reason}"
            failure = ET.SubElement(test, "failure", message=_xml_text(message)[:500])
            failure.text = _xml_text(
                "\n".join(f"attempt {run.attempt}: {run.outcome}: {run.reason}" for run in failed)
            )
    gate = ET.SubElement(suite, "testcase", classname=name, name="agenteval suite gate")
    if problems:
        text = _xml_text("\n".join(problems))
        ET.SubElement(gate, "failure", message=_xml_text("; ".join(problems))[:500]).text = text
    root = ET.Element("testsuites")
    root.append(suite)
    ET.ElementTree(root).write(path, encoding="utf-8", xml_declaration=True)


@cli.command("suite")
@click.argument("cases_file", metavar="CASES")
@click.option("--agent", "agent_spec", required=True, help="The agent: MODULE:FUNCTION.")
@click.option("-k", "k", type=click.IntRange(min=1), default=1, show_default=True)
@click.option(
    "--attempts",
    type=click.IntRange(min=1),
    help="Runs per case (default: k); more than k narrow the intervals.",
)
@click.option(
    "--metrics",
    "metric_names",
    help="Metrics every case is scored by, beside the checks each case names.",
)
@click.option("--min-pass-at-k", type=click.FloatRange(0, 1), help="Exit 1 below this pass@k.")
@click.option("--min-pass-pow-k", type=click.FloatRange(0, 1), help="Exit 1 below this pass^k.")
@click.option("--junit", type=OutputFile(), help="Write JUnit XML here.")
@click.option(
    "--save",
    type=OutputFile(),
    help="Keep this run's per-case results here (JSON): a later run's --baseline. A run "
    "that fails the gate is not saved over its own --baseline (FILE.failed.json instead).",
)
@click.option(
    "--baseline",
    type=click.Path(dir_okay=False),
    help="Compare each case's success rate with a --save'd run's; exit 1 on a credible drop.",
)
@click.option(
    "--max-regression-prob",
    type=click.FloatRange(0, 1, min_open=True, max_open=True),
    default=DEFAULT_MAX_REGRESSION_PROB,
    show_default=True,
    help="With --baseline: a case regressed when the probability its rate dropped exceeds this.",
)
@click.option(
    "--concurrency",
    type=click.IntRange(min=1),
    default=4,
    show_default=True,
    help="Attempts run at once.",
)
@click.option(
    "--timeout",
    type=click.FloatRange(0, min_open=True),
    help="Seconds an agent call may take; an attempt still running then fails "
    "(agent_timeout) and the suite goes on. Default: no limit.",
)
@_judge_options(
    model_help="Judge model name, for the judge metrics a case names (a regression of "
    "task_completion) or --metrics adds."
)
def suite_command(
    cases_file: str,
    agent_spec: str,
    k: int,
    attempts: int | None,
    metric_names: str | None,
    min_pass_at_k: float | None,
    min_pass_pow_k: float | None,
    junit: str | None,
    save: str | None,
    baseline: str | None,
    max_regression_prob: float,
    concurrency: int,
    timeout: float | None,
    judge: OpenAIJudge | None,
) -> None:
    """Run the agent on every case of CASES (an `agenteval cases` file) --attempts times and
    score each run with its case's checks: per case pass@k / pass^k with credible
    intervals, which regressions recur, and exit 1 when a bound is missed or a case
    credibly regressed against --baseline. With neither, every attempt of every case must
    pass."""
    unreachable = unreachable_bounds(
        k,
        attempts or k,
        min_pass_at_k,
        min_pass_pow_k,
        names=("--min-pass-at-k", "--min-pass-pow-k", "--attempts"),
    )
    if unreachable:  # refused before the agent runs: every attempt would be spent for nothing
        raise UserError("; ".join(unreachable))
    cases = read_cases(cases_file)
    previous = SuiteReport.load(baseline) if baseline else None
    vacuous = (
        unflaggable_baseline(
            previous,
            (case.id for case in cases),
            attempts or k,
            max_regression_prob=max_regression_prob,
        )
        if previous is not None
        else None
    )
    if vacuous:  # a gate that cannot fail is no gate
        raise UserError(vacuous)
    agent = load_agent(agent_spec)
    suite = EvalSuite(Path(cases_file).stem, judge=judge).add_cases(cases)
    names = _split_names(metric_names)
    if names:
        suite.add_evaluators(names)
    _preflight(judge)  # a dead or misconfigured judge is said before the agent runs
    report = suite.run(
        agent,
        k=k,
        attempts=attempts,
        concurrency=concurrency,
        progress=Console(stderr=True).is_terminal,
        timeout=timeout,
    )
    console = Console()
    report.show(console)
    _recurring(console, report)
    problems = missed_bounds(
        report, min_pass_at_k, min_pass_pow_k, names=("--min-pass-at-k", "--min-pass-pow-k")
    )
    unjudged: set[str] = set()  # cases captured or rechecked since the baseline
    if previous is not None:
        comparison = compare_to_baseline(report, previous, max_regression_prob=max_regression_prob)
        show(console, _baseline_table(comparison))
        if comparison.regressions:
            labels = ", ".join(case.label for case in comparison.regressions)
            problems.append(f"{len(comparison.regressions)} case(s) regressed: {labels}")
        unjudged = {case.case_id for case in report.cases} - {c.case_id for c in previous.cases}
        unjudged |= {case.case_id for case in comparison.rechecked}
    if min_pass_at_k is None and min_pass_pow_k is None:
        if previous is None:
            problems += without_bounds(report, "--min-pass-at-k, --min-pass-pow-k or --baseline")
        else:  # the baseline has nothing to judge these by, so they must pass
            problems += without_bounds(
                report, "--min-pass-at-k or --min-pass-pow-k", unjudged=unjudged
            )
    if save:
        if problems and baseline and _same_file(save, baseline):
            # the run would replace the baseline it failed against, and a retry of the job
            # would then compare the failing agent with itself and pass
            kept = Path(save)
            save = str(kept.with_name(f"{kept.stem}.failed{kept.suffix or '.json'}"))
            click.echo(
                f"the gate failed: {kept} is kept as the baseline (replaced by this run, "
                "it would pass the same agent on a retry)"
            )
        report.save(save)
        click.echo(f"report saved to {save}")
    if junit:
        _junit(report, problems, junit)
        click.echo(f"JUnit XML written to {junit}")
    if problems:
        raise RunProblem("; ".join(problems))
