"""Replay at scale: worker processes from 1 to the machine's cores (speedup and efficiency,
and where each replay's time went), the machine's own ceiling for that many processes at
once, beyond the cores each task run alone, the results file's overhead (sessions of 10,
and the same traces as one long session), what the default trace metrics alone cost (the
bound they set on one process's ratio to parse-only), and Ray Data's local mode against one
process, on one capture file and on the same traces as a capture directory of shards, and
what a Ray replay of a few traces takes (its fixed cost).

    python -m bench replay_scale [--quick]
"""

from __future__ import annotations

import asyncio
import heapq
import itertools
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from agenteval_core import (
    CaptureWriter,
    Engine,
    EvalCase,
    ProcessTimes,
    ReplayReport,
    Trace,
    read_capture,
    replay,
)
from agenteval_core.offline._line_index import (
    OwnLines,
    TaskTable,
    byte_ranges,
    index_range,
    lines_by_shard,
)
from agenteval_core.offline._processes import task_count
from agenteval_core.offline._replay import LOCAL_BATCH_SIZE, fewer_collections, replay_lines

from ._synthetic import write_capture
from .bench_replay import ROUNDS


def _seconds(run: object) -> float:
    started = time.perf_counter()
    run()  # type: ignore[operator]
    return time.perf_counter() - started


def _where_the_time_went(times: list[ProcessTimes], seconds: float, one: float) -> str:
    """A replay with workers, phase by phase: its processes' start, index and join, their
    scoring, and the CPU time each trace took (``one``: µs a trace in one process)."""
    finished = [t.finished for t in times]
    cpu = 1e6 * sum(t.cpu_seconds for t in times) / max(1, sum(t.traces for t in times))
    return (
        f"    last start {1e3 * max(t.started for t in times):.0f} ms, slowest index "
        f"{1e3 * max(t.indexed - t.started for t in times):.0f} ms, scoring from "
        f"{1e3 * max(t.scoring for t in times):.0f} ms; processes done {min(finished):.2f} "
        f"to {max(finished):.2f} s (the call {seconds:.2f} s); CPU {cpu:.0f} µs a trace "
        f"(one process: {one:.0f} µs of wall time)"
    )


_ALONE = """
import sys, time
from agenteval_core import replay
replay(sys.argv[2])  # imports and the embedder's model, before the clock starts
print("ready", flush=True)
sys.stdin.readline()
started = time.perf_counter()
replay(sys.argv[1])
print(time.perf_counter() - started, flush=True)
"""


def _independent(part: Path, small: Path, count: int) -> list[float]:
    """How long each of ``count`` separate one-process replays of ``part`` takes, started
    at once (each a new Python, warmed up first)."""
    children = [
        subprocess.Popen(
            [sys.executable, "-c", _ALONE, os.fspath(part), os.fspath(small)],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            text=True,
        )
        for _ in range(count)
    ]
    for child in children:
        assert child.stdin is not None and child.stdout is not None
        if child.stdout.readline().strip() != "ready":
            raise RuntimeError("a replay of the machine's ceiling did not start")
    for child in children:  # the word to start goes to all of them before any reply is read
        assert child.stdin is not None
        child.stdin.write("go\n")
        child.stdin.flush()
    took = []
    for child in children:
        assert child.stdout is not None
        took.append(float(child.stdout.readline()))
        child.wait()
    return took


def _ceiling(name: str, count: int, cores: int) -> None:
    """What this machine gives ``cores`` processes at once for this work, whatever splits
    it: ``cores`` independent replays of ``count / cores`` traces each (no shared file, no
    tasks, no join), against one of them alone. Workers cannot do better than that."""
    part = write_capture(Path(name) / "part.jsonl", count // cores)
    small = write_capture(Path(name) / "warm.jsonl", 20)
    (alone,) = _independent(part, small, 1)
    together = _independent(part, small, cores)
    print(
        f"this machine's ceiling: {cores} independent one-process replays of "
        f"{count // cores:,} traces each, started at once, took {min(together):.2f} to "
        f"{max(together):.2f} s, one alone {alone:.2f} s: efficiency {alone / max(together):.2f} "
        f"for the slowest, {alone * cores / sum(together):.2f} on the mean"
    )


def _metrics_alone(path: Path, count: int) -> float:
    """µs a trace that the default trace metrics take called directly on the first
    ``count`` parsed traces, a batch at a time, each trace with its session's earlier
    traces, results built (no engine, sessions or sinks), under the replay's thresholds for
    the garbage collector: a one-process replay with these metrics cannot cost less than
    parsing plus this. The fastest of ``ROUNDS``."""
    traces = list(itertools.islice(read_capture(path), count))
    cases = [EvalCase.of(trace) for trace in traces]
    sessions: dict[str | None, list[Trace]] = {}
    histories: list[tuple[Trace, ...]] = []
    for trace in traces:
        earlier = sessions.setdefault(trace.session_id, [])
        histories.append(tuple(earlier))
        earlier.append(trace)
    metrics = Engine().metrics

    async def score() -> None:
        for start in range(0, len(cases), LOCAL_BATCH_SIZE):
            batch = slice(start, start + LOCAL_BATCH_SIZE)
            for metric in metrics:
                await metric.ameasure_batch(cases[batch], histories[batch])

    with fewer_collections():
        best = min(_seconds(lambda: asyncio.run(score())) for _ in range(ROUNDS))
    return 1e6 * best / len(cases)


CURVE = (8, 16, 32, 64)
"""Worker counts whose time on a capture file the benchmark works out beyond the cores."""


def _task(path: Path, lines: OwnLines) -> None:
    with fewer_collections():
        asyncio.run(replay_lines(path, tasks=[lines]))


def _workers_one_at_a_time(path: Path, count: int, one: float) -> None:
    """What N workers on N idle cores take on a capture file, worked out from each task run
    here one after another: the slowest byte range's index (every worker waits for all of
    them), joining them into the table of tasks, and the tasks dealt as the workers take
    them (each, largest first, to the worker that is free first). What running at once adds
    (shared caches and memory bandwidth, the processes' start) is left out: the curve above
    measures that."""
    print("capture file, each task run alone (worked out, not measured at once):")
    with tempfile.TemporaryDirectory() as name:
        for workers in CURVE:
            shards, found, indexing = task_count(workers), [], 0.0
            for span in byte_ranges(path, workers):
                started = time.perf_counter()
                found.append(index_range(path, span, shards))
                indexing = max(indexing, time.perf_counter() - started)
            started = time.perf_counter()
            table = TaskTable.write(lines_by_shard(found, shards), os.path.join(name, "t.npy"))
            joining = time.perf_counter() - started
            free = [0.0] * workers  # when each worker is free, as a heap
            for lines in table.tasks(iter(range(len(table)))):
                took = _seconds(lambda task=lines: _task(path, task))
                heapq.heappush(free, heapq.heappop(free) + took)
            scoring = max(free)
            speedup = one / (indexing + joining + scoring)
            print(
                f"  {workers:>2} workers, {len(table)} tasks: slowest index "
                f"{1e3 * indexing:.0f} ms, join {1e3 * joining:.0f} ms, last worker done "
                f"{scoring:.2f} s after ({sum(free) / workers:.2f} s on average): speedup "
                f"{speedup:.2f}, efficiency {speedup / workers:.2f}"
            )


def main(quick: bool = False) -> None:
    count = 20_000 if quick else 200_000
    cores = os.cpu_count() or 1
    with tempfile.TemporaryDirectory() as name:
        path = write_capture(Path(name) / "scale.jsonl", count)
        # the same number of traces as one session: the results file records the session's
        # scores after every one of them
        long = write_capture(Path(name) / "long.jsonl", count, session_length=count)
        runs = {
            "parse": lambda: sum(1 for _ in read_capture(path)),
            "one": lambda: replay(path),
            "written": lambda: replay(path, output=Path(name) / "results.jsonl"),
            "long": lambda: replay(long),
            "long written": lambda: replay(long, output=Path(name) / "results.jsonl"),
        }
        best = dict.fromkeys(runs, float("inf"))
        for _ in range(ROUNDS):  # alternating; the fastest of each counts
            for key, run in runs.items():
                best[key] = min(best[key], _seconds(run))
        parse, one, written = best["parse"], best["one"], best["written"]
        print(f"{count:,} traces, default metrics, {cores} cores")
        print(f"fastest of {ROUNDS} rounds for the next three lines")
        print(f"one process: {count / one:,.0f} traces/s; ratio to parse-only {parse / one:.3f}")
        print(f"writing the results file adds {100 * (written / one - 1):.0f}% (goal <= 25%)")
        alone, parsed = _metrics_alone(path, 20_000), 1e6 * parse / count
        print(
            f"the default trace metrics alone (no engine, sessions or sinks): {alone:.0f} µs a "
            f"trace, parse-only {parsed:.0f} µs: no replay with them can pass "
            f"{parsed / (parsed + alone):.3f} of parse-only"
        )
        print(
            f"the same number of traces as one session: {count / best['long']:,.0f} traces/s; "
            f"the results file adds {100 * (best['long written'] / best['long'] - 1):.0f}%"
        )
        # the same traces as a capture directory: each worker, each Ray task, reads whole
        # shards of its own
        directory = Path(name) / "sharded"
        with CaptureWriter(directory, shards=4 * cores) as writer:
            for trace in read_capture(path):
                writer.write(trace)
        counts = sorted({1, 2, 4, 8, 12, 16, cores} & set(range(1, cores + 1)))
        if cores > 1:  # a process's first replay with workers also starts their fork server
            small = write_capture(Path(name) / "small.jsonl", 10 * cores, session_length=1)
            first, then = (_seconds(lambda: replay(small, workers=cores)) for _ in "ab")
            print(
                f"{cores} workers replay {10 * cores} traces in {first:.2f} s the first time, "
                f"{then:.2f} s the next (one process: {_seconds(lambda: replay(small)):.2f} s)"
            )
        for label, source in (("capture file", path), (f"{4 * cores} shards", directory)):
            for workers in counts:
                report: ReplayReport | None = None
                if workers == 1 and source == path:
                    seconds = one
                else:
                    started = time.perf_counter()
                    report = replay(source, workers=workers)
                    seconds = time.perf_counter() - started
                speedup = one / seconds
                print(
                    f"{label}, {workers:>2} workers: {count / seconds:,.0f} traces/s, speedup "
                    f"{speedup:.2f}, efficiency {speedup / workers:.2f} (goal >= 0.8)"
                )
                if report is not None and report.processes:  # none in one process
                    print(_where_the_time_went(report.processes, seconds, 1e6 * one / count))
        if cores > 1:
            _ceiling(name, count, cores)
        _workers_one_at_a_time(path, count, one)
        try:
            import ray
        except ImportError:
            print("Ray local mode: skipped (pip install 'agenteval[ray]')")
            return
        ray.init(num_cpus=cores, include_dashboard=False, logging_level="ERROR")
        few = write_capture(Path(name) / "few.jsonl", 10 * cores, session_length=1)
        try:
            on_ray = _seconds(lambda: replay(path, engine="ray"))
            on_shards = _seconds(lambda: replay([directory], engine="ray"))
            fixed = _seconds(lambda: replay(few, engine="ray"))
        finally:
            ray.shutdown()
        print(
            f"Ray local mode ({cores} CPUs), {10 * cores} traces: {fixed:.2f} s, what a replay "
            "pays to plan the work and start its scorers"
        )
        for label, seconds in (("capture file", on_ray), (f"{4 * cores} shards", on_shards)):
            print(
                f"Ray local mode ({cores} CPUs, start-up excluded), {label}: "
                f"{count / seconds:,.0f} traces/s, {one / seconds:.2f}x one process"
            )
