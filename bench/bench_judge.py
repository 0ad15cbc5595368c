"""Judge throughput against its configured rate limit, and a cached rerun's call count.

A loopback OpenAI-compatible server answers every request after 100 ms. The judge is
limited to R requests per second; a burst of N requests should achieve close to R per
second (goal: at least 0.9 × R). The same burst again, with the cache on, makes no call.

    python -m bench judge [--quick]
"""

from __future__ import annotations

import asyncio
import json
import sys
import tempfile
import time
from pathlib import Path

from pydantic import BaseModel

from agenteval_core.judges import JudgeCache, JudgeRequest, OpenAIJudge

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests"))
from judge_server import JudgeServer, Reply


class Verdict(BaseModel):
    score: float
    reason: str


def _requests(count: int) -> list[JudgeRequest[Verdict]]:
    return [
        JudgeRequest(
            metric="bench",
            prompt_version="1",
            messages=[{"role": "user", "content": f"question {i}"}],
            schema=Verdict,
        )
        for i in range(count)
    ]


def main(quick: bool = False) -> None:
    rate, count = (20, 100) if quick else (20, 400)
    server = JudgeServer()
    server.latency = 0.1
    server.responder = lambda request: Reply(json.dumps({"score": 1, "reason": "ok"}))
    try:
        with tempfile.TemporaryDirectory() as name:
            cache = JudgeCache(Path(name) / "judge.sqlite")
            judge = OpenAIJudge(
                "bench-model",
                base_url=server.base_url,
                requests_per_period=rate,
                period=1.0,
                max_concurrency=64,
                cache=cache,
            )

            async def burst() -> float:
                started = time.perf_counter()
                await asyncio.gather(*(judge.judge(r) for r in _requests(count)))
                return time.perf_counter() - started

            seconds = asyncio.run(burst())
            achieved = count / seconds
            print(f"loopback latency 100 ms, rate limit {rate} requests/s, {count} requests")
            print(f"achieved: {achieved:.2f} requests/s in {seconds:.1f} s")
            print(f"fraction of the rate limit: {achieved / rate:.3f} (goal >= 0.9)")
            calls_before = len(server.requests)
            cached_seconds = asyncio.run(burst())
            print(
                f"cached rerun: {len(server.requests) - calls_before} calls to the server, "
                f"{judge.stats.cache_hits} cache hits, {cached_seconds:.2f} s (goal: 0 calls)"
            )
    finally:
        server.close()
