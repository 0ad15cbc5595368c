"""The public API: every exported name loads, from the module the type checkers are told."""

from __future__ import annotations

import ast
import subprocess
import sys
from pathlib import Path

import agenteval_core


def test_every_exported_name_loads_from_the_module_it_is_declared_in() -> None:
    source = Path(agenteval_core.__file__).read_text(encoding="utf-8")
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
    assert declared == agenteval_core._EXPORTS
    for name, module in declared.items():
        value = getattr(agenteval_core, name)
        owner = sys.modules[f"agenteval_core{module}"]
        assert getattr(owner, name) is value, name
    assert sorted(agenteval_core.__all__) == sorted([*declared, "__version__"])


def test_importing_the_package_loads_no_heavy_dependency() -> None:
    probe = (
        "import sys, agenteval_core; from agenteval_core import Trace, EvalCase; "
        "print(sorted(m for m in ('numpy', 'httpx', 'scipy', 'jsonschema', 'rich') "
        "if m in sys.modules))"
    )
    done = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, check=True)
    assert done.stdout.strip() == "[]"


def test_no_folder_of_the_core_shadows_a_public_name() -> None:
    # importing a subpackage sets an attribute of the package with the folder's name
    folders = {
        path.name for path in Path(agenteval_core.__file__).parent.iterdir() if path.is_dir()
    }
    assert not folders & set(agenteval_core.__all__)
