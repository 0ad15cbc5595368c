"""The peak memory of a piece of work, run in a fresh Python of its own."""

from __future__ import annotations

import subprocess
import sys

_PEAK = """
import resource, sys
try:  # this process's own peak: Linux's ru_maxrss keeps the parent's peak across exec
    with open("/proc/self/status") as status:
        kib = next(int(line.split()[1]) for line in status if line.startswith("VmHWM:"))
except OSError:
    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    kib = peak // 1024 if sys.platform == "darwin" else peak  # macOS reports bytes
print(kib)
"""


def peak_rss_mib(code: str, *args: str) -> tuple[str, float]:
    """Run ``code`` (with ``args`` in ``sys.argv[1:]``) in a new Python; what it printed
    (stripped) and the process's own peak resident memory in MiB."""
    done = subprocess.run(
        [sys.executable, "-c", code + _PEAK, *args], check=True, capture_output=True, text=True
    )
    *printed, kib = done.stdout.strip().split("\n")
    return "\n".join(printed).strip(), int(kib) / 1024
