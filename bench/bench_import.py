"""What ``import agenteval_core`` costs, against ``import pydantic`` measured in the same run.

Each import runs in a fresh interpreter, alternating between the two, and the medians are
compared (goal: agenteval_core at most 2× pydantic, which it imports itself).

    python -m bench import [--quick]
"""

from __future__ import annotations

import statistics
import subprocess
import sys

PROBE = "import time; t = time.perf_counter(); import {module}; print(time.perf_counter() - t)"


def _seconds(module: str) -> float:
    done = subprocess.run(
        [sys.executable, "-c", PROBE.format(module=module)],
        capture_output=True,
        text=True,
        check=True,
    )
    return float(done.stdout)


def main(quick: bool = False) -> None:
    rounds = 5 if quick else 15
    times: dict[str, list[float]] = {"pydantic": [], "agenteval_core": []}
    for _ in range(rounds):
        for module in times:  # interleaved, so a busy moment hits both alike
            times[module].append(_seconds(module))
    ours, baseline = (statistics.median(times[m]) for m in ("agenteval_core", "pydantic"))
    print(f"import pydantic: {baseline * 1000:.0f} ms (median of {rounds} fresh interpreters)")
    print(f"import agenteval_core: {ours * 1000:.0f} ms")
    print(f"ratio agenteval_core / pydantic: {ours / baseline:.2f} (goal <= 2)")
