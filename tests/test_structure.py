"""The house rules that code review would otherwise have to remember."""

import ast
import subprocess
import sys
from pathlib import Path

from tests.conftest import ROOT

EAS = ROOT / "eas"
CLI = EAS / "cli"

# The rooms of eas/ and which rooms each may import from (itself included). Modules at the top
# of eas/ (errors, units, objectives, provenance, interrupt) are the shared vocabulary: "base".
# The pipeline reads upward: arch <- data, measure <- training <- nas (the search); the stored study sits
# on arch alone, reports read studies, deploy ships what training made; api (the library's front door)
# above them, cli and ui on top.
ALLOWED = {
    "base": {"base"},
    "arch": {"base", "arch"},
    "data": {"base", "arch", "data"},
    "measure": {"base", "arch", "measure"},
    "training": {"base", "arch", "data", "measure", "training"},
    "study": {"base", "arch", "study"},
    "reports": {"base", "arch", "study", "reports"},
    "deploy": {"base", "arch", "data", "measure", "training", "deploy"},
    "nas": {"base", "arch", "data", "measure", "training", "study", "reports", "nas"},
    "api": {"base", "arch", "data", "measure", "training", "study", "reports", "deploy", "nas", "api"},
    "ui": {"base", "arch", "data", "measure", "training", "study", "reports", "deploy", "nas", "api", "ui"},
    "cli": {"base", "arch", "data", "measure", "training", "study", "reports", "deploy", "nas", "api", "ui",
            "cli"},
}
ROOMS = set(ALLOWED) - {"base"}


def module_name(path: Path) -> str:
    parts = path.relative_to(ROOT).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def room_of(module: str) -> str:
    parts = module.split(".")
    if len(parts) > 1 and parts[1] in ROOMS:
        return parts[1]  # eas.api, the library's front door, is a room of its own above search and deploy
    return "cli" if module == "eas.__main__" else "base"


def is_module(name: str) -> bool:
    path = ROOT.joinpath(*name.split("."))
    return path.with_suffix(".py").is_file() or (path / "__init__.py").is_file()


def eas_imports(path: Path) -> set[str]:
    """Every eas module `path` imports, at its top or inside a function: `from eas.x import y`
    names eas.x.y when y is a module, else eas.x; lazy_import("eas.x") counts as an import."""
    return set().union(*(eas_imports_of(node) for node in ast.walk(ast.parse(path.read_text()))))


def eas_imports_of(node: ast.AST) -> set[str]:
    found = set()
    if isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
        names = [f"{node.module}.{alias.name}" for alias in node.names]
        found.update(name if is_module(name) else node.module for name in names)
    elif isinstance(node, ast.Import):
        found.update(alias.name for alias in node.names)
    elif (isinstance(node, ast.Call) and getattr(node.func, "id", None) == "lazy_import" and node.args
          and isinstance(node.args[0], ast.Constant)):
        found.add(node.args[0].value)
    return {name for name in found if name == "eas" or name.startswith("eas.")}


def import_graph() -> dict[str, set[str]]:
    return {module_name(path): eas_imports(path) for path in EAS.rglob("*.py")}


def test_every_import_follows_the_layering_even_inside_functions():
    against = [f"{module} ({room_of(module)}) imports {target} ({room_of(target)})"
               for module, targets in import_graph().items() for target in sorted(targets)
               if room_of(target) not in ALLOWED[room_of(module)]]
    assert not against, "\n".join(against)


def test_the_layering_check_catches_an_import_inside_a_function(tmp_path):
    """The checker itself: a function-level import of the search from arch is found."""
    path = tmp_path / "probe.py"
    path.write_text("def f():\n    from eas.nas.loop import Budget\n    return Budget\n")
    assert eas_imports(path) == {"eas.nas.loop"}
    assert "nas" not in ALLOWED[room_of("eas.arch.genome")]


def test_no_import_circle_anywhere():
    graph = import_graph()
    state: dict[str, int] = {}  # 1: on the current path, 2: done
    circles = []

    def visit(module: str, path: list[str]) -> None:
        state[module] = 1
        for target in sorted(graph.get(module, ())):
            if state.get(target) == 1:
                circles.append(" -> ".join([*path[path.index(target):], target]))
            elif target in graph and target not in state:
                visit(target, [*path, target])
        state[module] = 2

    for module in sorted(graph):
        if module not in state:
            visit(module, [module])
    assert not circles, "\n".join(circles)


def test_imports_stand_at_the_top_outside_the_faces():
    """Only the faces (cli, ui) import inside functions, so that `eas --help` and the explorer's
    first page stay light; everywhere else each file declares what it imports at its top (heavy
    or optional modules through eas.lazy), so the import graph shows and no circle can hide."""
    inside = []
    for path in EAS.rglob("*.py"):
        if room_of(module_name(path)) in ("cli", "ui"):
            continue
        for function in ast.walk(ast.parse(path.read_text())):
            if isinstance(function, (ast.FunctionDef, ast.AsyncFunctionDef)):
                inside += [f"{path.relative_to(ROOT)}:{node.lineno}" for node in ast.walk(function)
                           if isinstance(node, (ast.Import, ast.ImportFrom))]
    assert not inside, inside


def heavy_modules_after(code: str) -> str:
    """Which heavy modules a fresh interpreter holds after running `code` (printed as a list)."""
    code += "\nimport sys\nprint(sorted(m for m in ('torch', 'optuna', 'sqlalchemy', 'streamlit') if m in sys.modules))"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=ROOT)
    return (out.stdout.strip().splitlines() or [out.stderr])[-1]


def test_reading_a_study_loads_no_torch():
    """`eas show`, `eas studies` and the explorer's pages read studies without torch or Optuna."""
    assert heavy_modules_after("import eas.cli, eas.study.reader, eas.reports.front, eas.reports.summary\n"
                               "import eas.reports.explorer, eas.reports.figures, eas.reports.lineage\n"
                               "import eas.deploy.arch_files") == "[]"


def test_each_room_says_what_lives_there():
    for room in ROOMS:
        path = EAS / room / "__init__.py" if (EAS / room).is_dir() else EAS / f"{room}.py"
        doc = ast.get_docstring(ast.parse(path.read_text()))
        assert doc and len(doc.split()) >= 8, room


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
    assert heavy_modules_after("import sys, runpy; sys.argv = ['eas', '--help']\n"
                               "try:\n    runpy.run_module('eas', run_name='__main__')\nexcept SystemExit:\n    pass"
                               ) == "[]"


def test_one_training_step_serves_proxy_and_full_training():
    for module in ("proxy.py", "full.py"):
        source = (EAS / "training" / module).read_text()
        assert "TrainStep(" in source and "warmup_cosine(" in source, module
        assert "LambdaLR" not in source and ".backward()" not in source, module


def test_only_the_study_package_names_stored_attributes():
    """Attribute names of the stored study are spelled in eas/study/schema.py only."""
    for path in EAS.rglob("*.py"):
        if path.parent.name == "study" and path.name == "schema.py":
            continue
        source = path.read_text()
        for key in ('"eas.settings"', '"eas.reference_point"', '"eas.schema"', '"cached_from"'):
            assert key not in source, (path, key)


def test_the_device_agent_package_stands_alone():
    """eas_agent ships to deployment targets without EAS or torch: it imports neither (nor
    anything beyond ONNX Runtime, numpy and the standard library)."""
    allowed = {"onnxruntime", "numpy", "eas_agent"} | set(sys.stdlib_module_names)
    found = set()
    for path in (ROOT / "eas_agent").glob("*.py"):
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
                found.add((path.name, node.module.split(".")[0]))
            elif isinstance(node, ast.Import):
                found.update((path.name, alias.name.split(".")[0]) for alias in node.names)
    assert found and not {(name, module) for name, module in found if module not in allowed}


def test_the_command_line_reference_is_what_the_command_line_says():
    sys.path.insert(0, str(ROOT / "docs"))
    from hooks import cli_reference

    assert (ROOT / "docs" / "reference" / "cli.md").read_text() == cli_reference(), \
        "docs/reference/cli.md is stale: run `mkdocs build` (its hook remakes it) and commit it"


def test_the_docs_site_carries_no_placeholder_link_and_no_script():
    import yaml

    text = (ROOT / "mkdocs.yml").read_text()
    assert "example.invalid" not in text and "example.com" not in text
    excluded = yaml.safe_load(text)["exclude_docs"].split()
    for script in (ROOT / "docs").glob("*.py"):
        assert script.name in excluded, f"docs/{script.name} would be copied into the site"


def test_a_folder_named_eas_beside_a_script_does_not_shadow_the_package(tmp_path):
    """A clone itself named eas/, with a script beside it (the setup installs in compat mode)."""
    import subprocess
    import sys

    (tmp_path / "eas" / "eas").mkdir(parents=True)
    (tmp_path / "script.py").write_text("import eas\nprint(callable(getattr(eas, 'search', None)))\n")
    done = subprocess.run([sys.executable, "script.py"], cwd=tmp_path, capture_output=True, text=True)
    assert done.stdout.strip() == "True", done.stderr
