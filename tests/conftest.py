"""Test-session set-up shared by every test module."""

from __future__ import annotations

import os
import tempfile

# CrewAI writes credentials and settings under HOME when it is imported, and sends telemetry;
# keep both inside a throwaway directory for the whole run, before any module imports it.
os.environ["HOME"] = tempfile.mkdtemp(prefix="agenteval-test-home-")
os.environ["CREWAI_DISABLE_TELEMETRY"] = "true"
os.environ["OTEL_SDK_DISABLED"] = "true"

# the scripted OpenAI-API server fixture, and pytest's own fixture for running inner sessions
pytest_plugins = ["judge_server", "capture_helpers", "otel_round_trip", "otlp_receiver", "pytester"]
