"""Replay on a real Ray cluster: two nodes on 127.0.0.1 (a head and a worker, one CPU each,
with token authentication, which Ray turns on for the clusters it starts), and the CLI as
the driver, a process of its own that connects with ``--ray-address`` as it would to a
KubeRay cluster. The results equal one process's trace by trace and metric by metric, from
a capture file (sessions brought together by Ray's groupby) and from a capture directory
(whole shards per task), and a bad line is reported as one process reports it. A single
node of one CPU, the smallest machine Ray runs on, replays a capture file too. An address
where no cluster listens stops a replay at once, saying so."""

from __future__ import annotations

import contextlib
import os
import re
import secrets
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
import warnings
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
from ray_helpers import a_trace, timeless, write_capture

from agenteval_core import ClusterUnreachableError, replay, shard_capture

pytest.importorskip(
    "ray", reason="Ray Data is not installed (pip install 'agenteval[ray]'): Ray tests skipped"
)

RAY = Path(sys.executable).parent / "ray"
STARTUP = 120.0
"""Seconds a node may take to join (two cores shared with the rest of the suite)."""
pytestmark = pytest.mark.timeout(4 * STARTUP + 120)  # a cluster started twice, then the test


class ClusterDidNotStart(Exception):
    """A node exited or did not join in time: Ray's start-up, not the replay under test."""


@dataclass
class Cluster:
    address: str
    env: dict[str, str]


def _free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


# Ports Ray otherwise fixes, shared by every node on a machine (the dashboard agent's 52365,
# workers from 10002-19999): 0 lets each node's processes take free ones
DYNAMIC_PORTS = [
    *("--dashboard-agent-listen-port", "0"),
    *("--min-worker-port", "0"),
    *("--max-worker-port", "0"),
]


@dataclass
class Node:
    process: subprocess.Popen[bytes]
    log: Path

    def check_running(self) -> None:
        if self.process.poll() is not None:  # its log says why: the failure shows it
            tail = self.log.read_text(errors="replace").splitlines()[-40:]
            raise ClusterDidNotStart(
                f"a Ray node exited with {self.process.returncode}:\n" + "\n".join(tail)
            )

    def stop(self) -> None:
        # the whole session: `ray start` may have exited and left its raylet or GCS running
        with contextlib.suppress(ProcessLookupError):
            os.killpg(self.process.pid, signal.SIGKILL)
        self.process.wait(30)


def _start_node(arguments: list[str], env: dict[str, str], log: Path) -> Node:
    # a session of its own: the node's processes are stopped together, and only they (`ray
    # stop` would stop every Ray on the machine)
    each = ["--num-cpus", "1", "--node-ip-address", "127.0.0.1", "--disable-usage-stats"]
    with log.open("wb") as output:
        process = subprocess.Popen(
            [str(RAY), "start", "--block", *arguments, *each, *DYNAMIC_PORTS],
            env=env,
            stdout=output,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )
    return Node(process, log)


def _wait_for_nodes(cluster: Cluster, count: int, nodes: list[Node]) -> None:
    deadline = time.monotonic() + STARTUP
    while time.monotonic() < deadline:
        for node in nodes:
            node.check_running()
        try:
            status = subprocess.run(
                [str(RAY), "status", "--address", cluster.address],
                env=cluster.env,
                capture_output=True,
                text=True,
                timeout=30,  # a GCS still starting may not answer: ask again
            )
        except subprocess.TimeoutExpired:
            continue
        if len(re.findall(r"^\s*1 node_", status.stdout, re.MULTILINE)) == count:
            return
    raise ClusterDidNotStart(f"the Ray cluster did not have {count} node(s) after {STARTUP} s")


def _start_cluster(nodes: int, temporary: Path, started: list[Node]) -> Cluster:
    """Start ``nodes`` nodes (each appended to ``started`` at once, to be stopped whatever
    happens) and wait until all have joined."""
    env = {**os.environ, "RAY_AUTH_MODE": "token", "RAY_AUTH_TOKEN": secrets.token_hex(32)}
    env.pop("RAY_ADDRESS", None)
    port = _free_port()  # probed and released: were it taken meanwhile, the start is retried
    cluster = Cluster(f"127.0.0.1:{port}", env)
    head = ["--head", "--port", str(port), "--include-dashboard", "false"]
    head += ["--ray-client-server-port", str(_free_port())]  # not 10001: it is shared too
    started.append(
        _start_node([*head, "--temp-dir", str(temporary / "head")], env, temporary / "head.log")
    )
    _wait_for_nodes(cluster, 1, started)
    for number in range(1, nodes):
        worker = ["--address", cluster.address, "--temp-dir", str(temporary / f"w{number}")]
        started.append(_start_node(worker, env, temporary / f"w{number}.log"))
        _wait_for_nodes(cluster, number + 1, started)
    return cluster


@contextlib.contextmanager
def _started(nodes: int) -> Iterator[Cluster]:
    """A Ray cluster of ``nodes`` nodes on 127.0.0.1, one CPU each. A start that fails is
    tried once more from nothing (a loaded CI machine has failed one), saying why."""
    if not RAY.exists():
        pytest.skip(f"no `ray` command next to {sys.executable}: the cluster test skipped")
    failures: list[str] = []
    while True:
        temporary = Path(tempfile.mkdtemp(prefix="agenteval-ray-"))  # short: Ray's socket paths
        started: list[Node] = []
        try:
            try:
                cluster = _start_cluster(nodes, temporary, started)
            except ClusterDidNotStart as failure:
                failures.append(str(failure))
                if len(failures) == 2:
                    pytest.fail("the Ray cluster did not start twice:\n" + "\n".join(failures))
                warnings.warn(
                    f"the Ray cluster did not start; starting it again: {failure}", stacklevel=2
                )
                continue
            yield cluster
            return
        finally:
            for node in reversed(started):
                node.stop()
            shutil.rmtree(temporary, ignore_errors=True)


@pytest.fixture(scope="module")
def cluster() -> Iterator[Cluster]:
    with _started(2) as two_nodes:
        yield two_nodes


def _replay(cluster: Cluster, *arguments: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "agenteval_core.cli", "replay", *arguments, "-q"],
        env=cluster.env,
        capture_output=True,
        text=True,
        timeout=120,  # a replay that waits for resources never ends: fail instead
    )


def _replay_on(cluster: Cluster, source: Path, results: Path) -> subprocess.CompletedProcess[str]:
    return _replay(
        cluster,
        str(source),
        "--engine",
        "ray",
        "--ray-address",
        cluster.address,
        "--json",
        str(results),
    )


def _scored_as_one_process_scores(
    cluster: Cluster, source: Path, capture: Path, tmp_path: Path
) -> list[dict[str, Any]]:
    """Replays ``source`` on the cluster and ``capture`` (the same traces) in one process,
    both without a problem; the results lines, which must be equal but for timings."""
    on_ray = _replay_on(cluster, source, tmp_path / "ray.results")
    assert on_ray.returncode == 0, on_ray.stderr
    one = _replay(cluster, str(capture), "--json", str(tmp_path / "one.results"))
    assert one.returncode == 0, one.stderr
    lines = timeless(tmp_path / "ray.results")
    assert lines == timeless(tmp_path / "one.results")
    return lines


def test_a_capture_file_scored_on_one_node_of_one_cpu_equals_one_process(tmp_path: Path) -> None:
    # first in the file, so it runs before the two-node cluster starts: one Ray on the machine.
    # The groupby's read and shuffle tasks each need a whole CPU: scorers that reserved half
    # of the only one left them none, and the replay waited for ever
    capture = tmp_path / "capture.jsonl"
    write_capture(capture, [a_trace(f"s{turn % 4}", turn, failed=turn == 5) for turn in range(20)])
    with _started(1) as one_cpu:
        lines = _scored_as_one_process_scores(one_cpu, capture, capture, tmp_path)
    assert len(lines) == 24  # 20 traces and 4 sessions


def test_a_capture_file_scored_on_two_nodes_equals_one_process(
    cluster: Cluster, tmp_path: Path
) -> None:
    capture = tmp_path / "capture.jsonl"
    write_capture(capture, [a_trace(f"s{turn % 5}", turn, failed=turn == 7) for turn in range(40)])
    with capture.open("ab") as handle:
        handle.write(b"this is not json\n")
    on_ray = _replay_on(cluster, capture, tmp_path / "ray.results")
    one = _replay(cluster, str(capture), "--json", str(tmp_path / "one.results"))
    bad = f"agenteval: error: {capture}:41: not valid JSON"
    for done in (on_ray, one):  # exit 1: a bad line was skipped, the rest scored
        assert done.returncode == 1, done.stderr
        assert bad in done.stderr
        assert "1 bad line(s) skipped; the other 40 were scored" in done.stderr
    lines = timeless(tmp_path / "ray.results")
    assert lines == timeless(tmp_path / "one.results")
    assert len(lines) == 45  # 40 traces and 5 sessions
    assert {line["session_id"] for line in lines if "trace_id" not in line} == {
        f"s{k}" for k in range(5)
    }


def test_a_capture_directory_scored_on_two_nodes_equals_one_process(
    cluster: Cluster, tmp_path: Path
) -> None:
    capture, directory = tmp_path / "capture.jsonl", tmp_path / "shards"
    write_capture(capture, [a_trace(f"s{turn % 7}", turn) for turn in range(30)])
    assert sum(shard_capture(capture, directory, shards=3)) == 30
    lines = _scored_as_one_process_scores(cluster, directory, capture, tmp_path)
    assert len(lines) == 37  # 30 traces and 7 sessions


# --- an address where no cluster answers ---------------------------------------------------


@contextlib.contextmanager
def _full_port() -> Iterator[int]:
    """A port on 127.0.0.1 that never completes a connection: its listener accepts none, and
    the connections held here fill its queue, so the system drops the next ones' requests."""
    with socket.socket() as listener, contextlib.ExitStack() as held:
        listener.bind(("127.0.0.1", 0))
        listener.listen(0)
        port = int(listener.getsockname()[1])
        for _ in range(8):
            try:
                held.enter_context(socket.create_connection(("127.0.0.1", port), timeout=0.5))
            except TimeoutError:
                break
        else:
            pytest.fail("the listener's queue did not fill")
        yield port


def test_an_address_is_probed_only_when_it_names_a_host_and_port() -> None:
    from agenteval_core.offline._ray import check_reachable

    closed = _free_port()  # released: nothing listens there
    with pytest.raises(ClusterUnreachableError) as refused:
        check_reachable(f"127.0.0.1:{closed}")
    assert str(refused.value) == (
        f"cannot reach the Ray cluster at 127.0.0.1:{closed} (connection refused): check "
        "that the cluster is up and that this is its head's address as seen from here, "
        "host:6379 (its GCS) or ray://host:10001 (Ray Client)"
    )
    assert isinstance(refused.value, ConnectionError)
    with pytest.raises(ClusterUnreachableError, match=rf"ray://127\.0\.0\.1:{closed} \(conn"):
        check_reachable(f"ray://127.0.0.1:{closed}")
    with _full_port() as port, pytest.raises(ClusterUnreachableError) as silent:
        check_reachable(f"127.0.0.1:{port}", timeout=0.2)
    assert f"127.0.0.1:{port} (no connection within 0.2 s)" in str(silent.value)
    with socket.socket() as listener:
        listener.bind(("127.0.0.1", 0))
        listener.listen()
        port = int(listener.getsockname()[1])
        for reachable in (f"127.0.0.1:{port}", f"ray://127.0.0.1:{port}", f"localhost:{port}"):
            check_reachable(reachable)
    # Ray's own to resolve: no address (a local Ray), the running one, another scheme
    for left_to_ray in (None, "", "auto", "local", f"anyscale://127.0.0.1:{closed}"):
        check_reachable(left_to_ray)


def test_a_replay_sent_where_no_cluster_listens_stops_at_once_and_says_why(
    tmp_path: Path,
) -> None:
    import ray

    capture = tmp_path / "capture.jsonl"
    write_capture(capture, [a_trace("s0", turn) for turn in range(3)])
    closed = _free_port()
    env = {k: v for k, v in os.environ.items() if k != "RAY_ADDRESS"}
    # Ray itself would try this address again for a quarter of an hour: the deadline of
    # _replay (120 s) fails the test long before
    given = {"option": f"127.0.0.1:{closed}", "environment": f"ray://127.0.0.1:{closed}"}
    by_option = _replay(
        Cluster("", env), str(capture), "--engine", "ray", "--ray-address", given["option"]
    )
    by_environment = _replay(
        Cluster("", {**env, "RAY_ADDRESS": given["environment"]}), str(capture), "--engine", "ray"
    )
    for address, done in zip(given.values(), (by_option, by_environment), strict=True):
        assert done.returncode == 2, done.stderr
        assert done.stderr == (
            f"agenteval: error: cannot reach the Ray cluster at {address} (connection refused): "
            "check that the cluster is up and that this is its head's address as seen from "
            "here, host:6379 (its GCS) or ray://host:10001 (Ray Client)\n"
        )
        assert done.stdout == ""
    # the same from Python, before Ray starts in this process
    assert not ray.is_initialized()
    with pytest.raises(ClusterUnreachableError, match=f"127.0.0.1:{closed} \\(connection"):
        replay(capture, engine="ray", ray_address=f"127.0.0.1:{closed}")
    assert not ray.is_initialized()
