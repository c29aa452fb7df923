"""The package's shape (issue 52): no import circle, no module over the size one concept
takes, and every kernel family's code in a folder of its own."""

from __future__ import annotations

import ast
from pathlib import Path

from tests.conftest import ROOT

PACKAGE = ROOT / "spartan_py"
MAX_LINES = 450
#: Imports inside functions left in spartan_py/, each with its reason in a comment: an optional
#: dependency (CuPy, PyTorch, Dask, scikit-learn, pyarrow), an import circle a move cannot remove,
#: or a measured start-up cost of ``spartan --help``. The count may fall, never grow.
FUNCTION_LEVEL_IMPORTS = 73


def _module_name(path: Path) -> str:
    parts = path.relative_to(ROOT).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def _module_imports(path: Path) -> set[str]:
    """Modules of spartan_py that ``path`` imports at module level, ``if TYPE_CHECKING:``
    blocks included (imports inside functions are left out: each says why it is deferred,
    :func:`test_function_level_imports_say_why`)."""
    found = set()

    def visit(statements):
        for node in statements:
            if isinstance(node, ast.ImportFrom) and node.module and node.module.startswith("spartan_py"):
                for alias in node.names:  # a submodule by name, else a name of the module itself
                    submodule = f"{node.module}.{alias.name}"
                    found.add(
                        submodule if (ROOT / submodule.replace(".", "/")).with_suffix(".py").is_file() else node.module
                    )
            elif isinstance(node, ast.Import):
                found.update(a.name for a in node.names if a.name.startswith("spartan_py"))
            elif isinstance(node, (ast.If, ast.Try)):
                visit(node.body)
                visit(getattr(node, "orelse", []))
                visit(getattr(node, "finalbody", []))
                for handler in getattr(node, "handlers", []):
                    visit(handler.body)

    visit(ast.parse(path.read_text()).body)
    return found


def test_no_import_circle():
    modules = {_module_name(p): p for p in PACKAGE.rglob("*.py")}
    graph = {name: {m for m in _module_imports(path) if m in modules and m != name} for name, path in modules.items()}
    state: dict[str, int] = {}
    stack: list[str] = []

    def walk(name: str) -> None:
        state[name] = 1
        stack.append(name)
        for target in sorted(graph[name]):
            if state.get(target) == 1:
                circle = stack[stack.index(target) :] + [target]
                raise AssertionError("import circle: " + " -> ".join(circle))
            if target not in state:
                walk(target)
        stack.pop()
        state[name] = 2

    for name in sorted(graph):
        if name not in state:
            walk(name)


def _function_level_imports(tree: ast.AST) -> list[ast.Import | ast.ImportFrom]:
    """Import statements inside a function (or a lambda), at any depth."""
    functions = (ast.FunctionDef, ast.AsyncFunctionDef, ast.Lambda)
    return [
        node
        for function in ast.walk(tree)
        if isinstance(function, functions)
        for node in ast.walk(function)
        if isinstance(node, (ast.Import, ast.ImportFrom))
    ]


def _imports_without_a_reason(source: str) -> tuple[int, list[int]]:
    """How many function-level imports ``source`` holds (nested functions' counted once), and
    the lines of those with no comment: on their first line, on a comment line directly above,
    or above the run of imports directly before them (one comment for a block)."""
    lines = source.splitlines()
    nodes = {node.lineno: node for node in _function_level_imports(ast.parse(source))}
    ends = {node.end_lineno: node.lineno for node in nodes.values()}
    reasoned: set[int] = set()
    for line in sorted(nodes):
        above = lines[line - 2].lstrip()
        if "#" in lines[line - 1] or above.startswith("#") or ends.get(line - 1) in reasoned:
            reasoned.add(line)
    return len(nodes), sorted(set(nodes) - reasoned)


def test_the_reason_detector_finds_a_bare_import():
    source = (
        "def f():\n    import cupy\n\n    # optional dependency (extra gpu)\n    import cupyx\n"
        "    from cupyx import (\n        scipy,\n    )\n    import x  # why\n\n    import y\n"
    )
    assert _imports_without_a_reason(source) == (5, [2, 11])


def test_function_level_imports_say_why():
    """Imports sit at module top unless a comment says why not; the count of those left may
    only fall (:data:`FUNCTION_LEVEL_IMPORTS`)."""
    count, bare = 0, []
    for path in sorted(PACKAGE.rglob("*.py")):
        found, lines = _imports_without_a_reason(path.read_text())
        count += found
        bare += [f"{path.relative_to(ROOT)}:{line}" for line in lines]
    assert not bare, f"function-level imports without a reason (hoist them, or say why in a comment): {bare}"
    assert count <= FUNCTION_LEVEL_IMPORTS, (
        f"{count} function-level imports, more than {FUNCTION_LEVEL_IMPORTS}: hoist the new ones to module top"
    )


def test_no_module_over_the_cap():
    """The package's modules and the benchmark scripts alike."""
    long = {
        p.relative_to(ROOT).as_posix(): n
        for p in [*PACKAGE.rglob("*.py"), *(ROOT / "benchmarks").rglob("*.py")]
        if (n := len(p.read_text().splitlines())) > MAX_LINES
    }
    assert not long, f"modules over {MAX_LINES} lines: {long}"


def test_each_kernel_family_has_its_folder():
    from spartan_py.engines import BACKENDS

    folders = {"gpu": "rows", "gpu-twin": "rows", "gpu-merged": "merged", "gpu-merged-twin": "merged", "cpu": "cpu"}
    for backend, folder in folders.items():
        assert BACKENDS[backend].startswith(f"spartan_py.engines.{folder}."), backend
    assert not (PACKAGE / "engines" / "support").exists()


def test_no_private_member_used_outside_its_module():
    """``obj._name`` only in the module that defines ``_name`` (benchmarks included)."""
    import re

    found = []
    helpers = {p.stem for p in (ROOT / "benchmarks").glob("_*.py")}  # benchmarks._results: a module, not a member
    for path in [*PACKAGE.rglob("*.py"), *(ROOT / "benchmarks").glob("*.py")]:
        text = path.read_text()
        used = set(re.findall(r"(?<![\w.])[A-Za-z_]\w*\.(_[a-z]\w*)\b", text)) - helpers
        defined = set(re.findall(r"(?:def|class) (_\w+)", text)) | set(re.findall(r"self\.(_\w+)", text))
        defined |= set(re.findall(r"^\s*(_\w+)\s*[:=]", text, re.M))
        found += [f"{path.relative_to(ROOT)}: {name}" for name in sorted(used - defined)]
    assert not found, found


def _workload_kind_branches(tree: ast.AST, kinds: set[str]) -> list[int]:
    """Lines that read a workload's kind (``x.workload.kind``, ``workload.kind``,
    ``["kind"]``/``.get("kind")`` of a workload mapping) or compare with a kind's name."""
    lines = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Attribute) and node.attr == "kind" and "workload" in ast.unparse(node.value):
            lines.append(node.lineno)
        elif isinstance(node, ast.Subscript) and ast.unparse(node.slice) in ("'kind'", '"kind"'):
            if "workload" in ast.unparse(node.value):
                lines.append(node.lineno)
        elif isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and node.func.attr == "get":
            first = node.args[0] if node.args else None
            if isinstance(first, ast.Constant) and first.value == "kind" and "workload" in ast.unparse(node.func.value):
                lines.append(node.lineno)
        elif isinstance(node, ast.Constant) and node.value in kinds:
            lines.append(node.lineno)
    return lines


def test_no_branch_on_a_workloads_kind_outside_its_package():
    """The runner, the report and the CLI ask the workload's class (spartan_py.workloads)."""
    from spartan_py.workloads import WORKLOADS

    found = [
        f"{path.relative_to(ROOT)}:{line}"
        for path in PACKAGE.rglob("*.py")
        if "workloads" not in path.relative_to(PACKAGE).parts
        for line in _workload_kind_branches(ast.parse(path.read_text()), set(WORKLOADS))
    ]
    assert not found, found


def test_the_detector_finds_a_kind_branch():
    source = 'if config.workload.kind == "conv_layers": pass\nw = p["config"]["workload"].get("kind")\n'
    assert sorted(_workload_kind_branches(ast.parse(source), {"conv_layers"})) == [1, 1, 2]


def test_the_runner_names_no_backend():
    """What a backend or a workload can run is an attribute of its class, not a name in the runner."""
    from spartan_py.engines import AUTO_BACKEND, BACKENDS

    names = {AUTO_BACKEND, *BACKENDS}
    found = []
    for path in (PACKAGE / "runner").rglob("*.py"):
        tree = ast.parse(path.read_text())
        keys = {id(k) for node in ast.walk(tree) if isinstance(node, ast.Dict) for k in node.keys}  # {"cpu": model}
        found += [
            f"{path.relative_to(ROOT)}:{node.lineno}: {node.value!r}"
            for node in ast.walk(tree)
            if isinstance(node, ast.Constant) and node.value in names and id(node) not in keys
        ]
    assert not found, found
