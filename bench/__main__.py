"""Run every benchmark: ``python -m bench [--quick]``.

Each ``bench/bench_*.py`` module exposes ``main(quick: bool) -> None`` and prints ratios
measured in the same run (ours against a baseline), never absolute pass/fail timings.
"""

from __future__ import annotations

import argparse
import importlib
import pkgutil
import sys
from pathlib import Path


def main() -> None:
    parser = argparse.ArgumentParser(prog="python -m bench", description=__doc__)
    parser.add_argument("--quick", action="store_true", help="smaller sizes (about a minute)")
    parser.add_argument("names", nargs="*", help="only these benchmarks, e.g. replay")
    args = parser.parse_args()
    found = sorted(
        info.name
        for info in pkgutil.iter_modules([str(Path(__file__).parent)])
        if info.name.startswith("bench_")
    )
    wanted = [name for name in found if not args.names or name.removeprefix("bench_") in args.names]
    if not wanted:
        sys.exit(
            f"no benchmark matches {args.names}; have {[n.removeprefix('bench_') for n in found]}"
        )
    for name in wanted:
        print(f"== {name.removeprefix('bench_')} ==", flush=True)
        importlib.import_module(f"bench.{name}").main(quick=args.quick)


if __name__ == "__main__":
    main()
