"""The public API: every exported name loads, from the module the type checkers are told."""

from __future__ import annotations

import ast
import inspect
import subprocess
import sys
from pathlib import Path
from types import ModuleType

import pytest

import agenteval_core
import agenteval_core.judges


@pytest.mark.parametrize(
    "package", [agenteval_core, agenteval_core.judges], ids=lambda p: p.__name__
)
def test_every_exported_name_loads_from_the_module_it_is_declared_in(package: ModuleType) -> None:
    source = Path(package.__file__ or "").read_text(encoding="utf-8")
    tree = ast.parse(source)
    guarded = next(
        node
        for node in tree.body
        if isinstance(node, ast.If) and "TYPE_CHECKING" in ast.unparse(node.test)
    )
    declared = {
        alias.name: f".{node.module}"
        for node in guarded.body
        if isinstance(node, ast.ImportFrom)
        for alias in node.names
    }
    assert declared == package._EXPORTS
    for name, module in declared.items():
        value = getattr(package, name)
        owner = sys.modules[f"{package.__name__}{module}"]
        assert getattr(owner, name) is value, name
    defined_here = {"__version__", "judge_from_options"}
    assert sorted(set(package.__all__) - defined_here) == sorted(declared)


def test_importing_the_package_loads_no_heavy_dependency() -> None:
    probe = (
        "import sys, agenteval_core; from agenteval_core import Trace, EvalCase; "
        "print(sorted(m for m in ('numpy', 'httpx', 'scipy', 'jsonschema', 'rich') "
        "if m in sys.modules))"
    )
    done = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, check=True)
    assert done.stdout.strip() == "[]"


def test_scoring_without_a_judge_loads_no_http_client() -> None:
    # a replay's worker processes start faster without httpx (and the command-line
    # libraries httpx loads when they are installed)
    probe = (
        "import sys; from agenteval_core import Engine, replay; Engine(); "
        "print(sorted(m for m in ('httpx', 'rich', 'click') if m in sys.modules))"
    )
    done = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, check=True)
    assert done.stdout.strip() == "[]"


def test_no_folder_of_the_core_shadows_a_public_name() -> None:
    # importing a subpackage sets an attribute of the package with the folder's name
    folders = {
        path.name for path in Path(agenteval_core.__file__).parent.iterdir() if path.is_dir()
    }
    assert not folders & set(agenteval_core.__all__)


def test_adapter_plumbing_lives_in_its_own_module_not_at_the_root() -> None:
    import agenteval_core.recording as recording

    plumbing = {
        "UNSET", "AlertEvent", "EventPump", "Recorder", "RunRoots", "TraceAssembler",
        "CANCELLED_BY_CALLER", "error_text", "json_arguments", "react_actions", "step_thought",
        "media_kind", "limit_or_timeout", "stopped_by_caller", "CLASSIC_STOPS", "UNPARSED_REPLY",
        "unreadable_call", "LatestKept", "no_such_tool", "cut_within", "fit_json", "FittedJson",
        "resume_questions", "TaskSteps", "Unfinished",
    }  # fmt: skip
    names = {
        "INPUT_TOKENS", "OPERATION_NAME", "OUTPUT_TOKENS", "PROVIDER_NAME", "REQUEST_MODEL",
        "FINISH_REASONS", "MEDIA_BLOCK_TYPES", "RESUME", "RESUME_QUESTIONS", "RESUMES_TRACE_ID",
        "HUMAN_ANSWERS",
    }  # fmt: skip
    assert set(recording.__all__) == plumbing | names
    assert recording.OPERATION_NAME == "gen_ai.operation.name"
    assert recording.FINISH_REASONS == "gen_ai.response.finish_reasons"
    assert all(getattr(recording, name) is not None for name in plumbing)
    assert not plumbing & set(agenteval_core.__all__)
    assert "Session" not in agenteval_core.__all__  # exported once, used by nothing


PUBLIC_MODULES = [
    "agenteval_core",
    "agenteval_core.metrics",
    "agenteval_core.judges",
    "agenteval_core.recording",
    "agenteval_core.pytest_plugin",
    "agenteval_langchain",
    "agenteval_llamaindex",
    "agenteval_crewai",
    "agenteval_otel",
]


def _undocumented(owner: str, value: object) -> list[str]:
    """``owner`` when ``value`` (a public class or function) has no docstring, and each of a
    class's public methods that has none of its own or from a class it derives from."""
    missing = [] if (value.__doc__ or "").strip() else [owner]
    if isinstance(value, type):
        for name, member in vars(value).items():
            if name.startswith("_") or not callable(member):
                continue
            documented = (
                (getattr(base, name, None).__doc__ or "").strip()
                for base in value.__mro__
                if getattr(base, name, None) is not None
            )
            if not any(documented):
                missing.append(f"{owner}.{name}")
    return missing


@pytest.mark.parametrize("module", PUBLIC_MODULES)
def test_every_public_class_function_and_method_says_what_it_does(module: str) -> None:
    # what a user reads in their editor and in the API reference: a public method without
    # a docstring (SessionMetric.compute_session, the hook a custom session metric writes)
    # left them to read the source
    imported = __import__(module, fromlist=["__all__"])
    missing = [
        gap
        for name in imported.__all__
        if inspect.isclass(value := getattr(imported, name)) or inspect.isfunction(value)
        for gap in _undocumented(f"{module}.{name}", value)
    ]
    assert missing == []
