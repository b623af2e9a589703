"""The house rules that code review would otherwise have to remember."""

import ast
import subprocess
import sys
from pathlib import Path

from tests.conftest import ROOT

CLI = ROOT / "eas" / "cli"


def imported_modules(path: Path) -> set[str]:
    names = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.ImportFrom) and node.module:
            names.add(node.module)
        elif isinstance(node, ast.Import):
            names.update(alias.name for alias in node.names)
    return names


def test_cli_command_modules_import_only_the_shared_options():
    """Commands register top-down in eas/cli/__init__.py; no command module imports another."""
    for path in CLI.glob("*.py"):
        if path.name == "__init__.py":
            continue
        cli_imports = {m for m in imported_modules(path) if m == "eas.cli" or m.startswith("eas.cli.")}
        assert cli_imports <= {"eas.cli.options"}, (path.name, cli_imports)


def test_help_does_not_import_torch_or_optuna():
    code = ("import sys, runpy; sys.argv = ['eas', '--help']\n"
            "try:\n    runpy.run_module('eas', run_name='__main__')\nexcept SystemExit:\n    pass\n"
            "print(sorted(m for m in ('torch', 'optuna', 'sqlalchemy', 'streamlit') if m in sys.modules))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=ROOT)
    assert out.stdout.strip().splitlines()[-1] == "[]", out.stdout + out.stderr


def test_one_training_step_serves_proxy_and_full_training():
    for module in ("train.py", "full_training.py"):
        source = (ROOT / "eas" / module).read_text()
        assert "TrainStep(" in source and "warmup_cosine(" in source, module
        assert "LambdaLR" not in source and ".backward()" not in source, module


def test_only_the_study_package_names_stored_attributes():
    """Attribute names of the stored study are spelled in eas/study/schema.py only."""
    for path in (ROOT / "eas").rglob("*.py"):
        if path.parent.name == "study" and path.name == "schema.py":
            continue
        source = path.read_text()
        for key in ('"eas.settings"', '"eas.reference_point"', '"eas.schema"', '"cached_from"'):
            assert key not in source, (path, key)
