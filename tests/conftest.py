"""Test-session set-up shared by every test module."""

from __future__ import annotations

import atexit
import os
import shutil
import tempfile

from hypothesis import settings

# CrewAI writes credentials and settings under HOME when it is imported, and sends telemetry;
# keep both inside a throwaway directory for the whole run, before any module imports it.
_HOME = os.environ["HOME"] = tempfile.mkdtemp(prefix="agenteval-test-home-")
_CREATOR = os.getpid()


@atexit.register
def _remove_home() -> None:
    # a forked child that exits through sys.exit runs its parent's exit hooks too: only the
    # process that made the directory removes it, once the tests are done with it
    if os.getpid() == _CREATOR:
        shutil.rmtree(_HOME, ignore_errors=True)


# a property's examples are checked for what they compute, never for how long one took: an
# example that takes under a millisecond once took 340 ms on a loaded 2-core machine, and
# hypothesis's default deadline (200 ms) failed the run for it
settings.register_profile("agenteval", deadline=None)
settings.load_profile("agenteval")

os.environ["CREWAI_DISABLE_TELEMETRY"] = "true"
os.environ["OTEL_SDK_DISABLED"] = "true"

# the scripted OpenAI-API server fixture, and pytest's own fixture for running inner sessions
pytest_plugins = [
    "judge_server",
    "capture_helpers",
    "otel_round_trip",
    "otlp_receiver",
    "replay_helpers",
    "pytester",
]
