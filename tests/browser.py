"""Headless Chromium for the tests that look at real pages (the HTML report, Phoenix)."""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

CHROMIUM = shutil.which("chromium") or shutil.which("chromium-browser")
FLAGS = [
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-quic",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
    "--enable-logging=stderr",
    "--v=0",
]


def chromium(tmp_path: Path, *arguments: str) -> subprocess.CompletedProcess[str]:
    """Headless Chromium with its own profile: a DOM dump or a screenshot."""
    assert CHROMIUM is not None
    profile = f"--user-data-dir={tmp_path / 'profile'}"
    return subprocess.run(
        [CHROMIUM, *FLAGS, profile, "--hide-scrollbars", *arguments],
        capture_output=True,
        text=True,
        timeout=120,
    )
