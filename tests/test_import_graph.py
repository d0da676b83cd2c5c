"""The Python side's imports run one way (issue 27).

op_extension/toolkit.py is the floor: the op modules (op_extension/op_defs/<op>.py)
import it and nothing else of the package (but another op's module they build
on); the collectors (ops, _fake, _reference, _transforms, the simulators)
import op_defs, which imports the op modules. Read from the sources with `ast`,
so that an import inside a function counts as much as one at the top: no module
imports one that imports it back, and importlib stands in for an import only
where this file says why.
"""

from __future__ import annotations

import ast
import re
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
PACKAGE = "op_extension"
TOOLKIT = f"{PACKAGE}.toolkit"
OP_DEFS = f"{PACKAGE}.op_defs"

# Where importlib is used, and why that is no import that could run back up.
IMPORTLIB = {
    OP_DEFS: "imports the module of each built op by the name its prototype gives (a list of them here would "
             "be a shared file to edit per op); modelled below as an import of each op module",
    f"{PACKAGE}._cpp_gen": "loads _protos.py by path for setup.py and the CI scripts, which run before the "
                           "package is importable",
    f"{PACKAGE}.transformers": "imports Hugging Face's modeling modules, named by the model families it patches",
    f"{PACKAGE}.tune": "importlib.metadata reads the installed package's version (a key of the tuning cache); it "
                       "imports no module",
}

# The floor below the toolkit: what it may reach. _built loads the compiled library.
FLOOR = {TOOLKIT, f"{PACKAGE}._built", f"{PACKAGE}._protos", f"{PACKAGE}._C"}
# The records an op module's BENCH is made of (the benchmark's rows): torch only.
BENCH_SPEC = f"{PACKAGE}.bench_spec"

COLLECTORS = ["ops", "_fake", "_reference", "_transforms", "_sim_args", "ascend_sim", "distributed"]


def module_files(root: Path, package: str = PACKAGE) -> dict[str, Path]:
    """Every Python module of the package and of its subpackages (op_defs, bench, tune), by dotted name."""
    files = {}
    for path in (sorted((root / package).glob("*.py")) + sorted((root / package).glob("*/*.py"))):
        parts = list(path.relative_to(root).with_suffix("").parts)
        if parts[-1] == "__init__":
            parts.pop()
        files[".".join(parts)] = path
    return files


def extension_modules(root: Path) -> set[str]:
    """The compiled modules setup.py builds (_C, the simulators): they import no Python of the package."""
    setup = root / "setup.py"
    return set(re.findall(rf'"({PACKAGE}\.\w+)"', setup.read_text())) if setup.exists() else set()


def _imports(tree: ast.AST, name: str, is_package: bool, known: set[str]) -> set[str]:
    """The package-internal modules `tree` (module `name`) imports, anywhere in it.

    `from X import y` imports X.y where that is a module, else X (y is an
    attribute of X's __init__). The package that holds a module is left out:
    Python runs it first whatever the module imports, and a package's
    __init__ importing its own modules is what a package is."""
    package = name if is_package else name.rpartition(".")[0]
    found = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            found |= {alias.name for alias in node.names}
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = package
                for _ in range(node.level - 1):
                    base = base.rpartition(".")[0]
                base = f"{base}.{node.module}" if node.module else base
            else:
                base = node.module
            for alias in node.names:
                candidate = f"{base}.{alias.name}"
                found.add(candidate if candidate in known else base)
    return {m for m in found if m == PACKAGE or m.startswith(PACKAGE + ".")}


def import_graph(root: Path = ROOT) -> dict[str, set[str]]:
    """module -> the package-internal modules it imports."""
    files = module_files(root)
    known = set(files) | extension_modules(root)
    graph = {name: set() for name in known}
    for name, path in files.items():
        tree = ast.parse(path.read_text(), filename=str(path))
        graph[name] = _imports(tree, name, path.name == "__init__.py", known) - {name}
    # op_defs imports its op modules by name (IMPORTLIB): one edge to each.
    graph[OP_DEFS] |= {m for m in files if m.startswith(OP_DEFS + ".")}
    return graph


def find_cycle(graph: dict[str, set[str]]) -> list[str] | None:
    """A cycle of `graph` as [a, b, ..., a], None where there is none (depth-first, iterative)."""
    state: dict[str, int] = {}  # 1: on the current path, 2: done
    for start in sorted(graph):
        if state.get(start):
            continue
        path, stack = [start], [iter(sorted(graph.get(start, ())))]
        state[start] = 1
        while stack:
            step = next(stack[-1], None)
            if step is None:
                state[path.pop()] = 2
                stack.pop()
            elif state.get(step) == 1:
                return path[path.index(step):] + [step]
            elif not state.get(step):
                state[step] = 1
                path.append(step)
                stack.append(iter(sorted(graph.get(step, ()))))
    return None


def reachable(graph: dict[str, set[str]], start: str) -> set[str]:
    seen, todo = {start}, [start]
    while todo:
        for nxt in graph.get(todo.pop(), ()):
            if nxt not in seen:
                seen.add(nxt)
                todo.append(nxt)
    return seen


GRAPH = import_graph()
FILES = module_files(ROOT)
OP_MODULES = sorted(m for m in FILES if m.startswith(OP_DEFS + "."))


# ---- the rule, on the package ---------------------------------------------------------------------------------------


def test_no_module_imports_one_that_imports_it_back():
    assert find_cycle(GRAPH) is None, " -> ".join(find_cycle(GRAPH))


def test_the_toolkit_is_the_floor():
    """The toolkit reaches only _built, _protos and the library: never a
    collector or op_defs, which would close a loop through the op modules."""
    assert TOOLKIT in GRAPH
    assert reachable(GRAPH, TOOLKIT) <= FLOOR, reachable(GRAPH, TOOLKIT) - FLOOR


def test_bench_spec_imports_nothing_of_the_package():
    """An op module's BENCH records come from bench_spec, which must stay below
    the op modules: the benchmark package (which imports them) is above."""
    assert GRAPH[BENCH_SPEC] == set(), GRAPH[BENCH_SPEC]


@pytest.mark.parametrize("name", OP_MODULES)
def test_an_op_module_imports_the_toolkit_torch_and_the_standard_library_only(name):
    """Of the package, the toolkit, bench_spec (and another op's module it builds on);
    else torch and the standard library."""
    others = {m for m in GRAPH[name] if m not in (TOOLKIT, BENCH_SPEC) and not m.startswith(OP_DEFS + ".")}
    assert not others, f"{FILES[name].relative_to(ROOT)} imports {sorted(others)}; take it from {TOOLKIT}"
    tree = ast.parse(FILES[name].read_text())
    external = {alias.name.split(".")[0] for node in ast.walk(tree) if isinstance(node, ast.Import)
                for alias in node.names}
    external |= {node.module.split(".")[0] for node in ast.walk(tree)
                 if isinstance(node, ast.ImportFrom) and not node.level}
    # liger_kernel: BENCH's optional baseline, imported inside a function where installed.
    external -= {PACKAGE, "torch", "liger_kernel"}
    assert external <= set(sys.stdlib_module_names), external - set(sys.stdlib_module_names)


def test_the_scaffold_writes_an_op_module_that_imports_the_toolkit():
    from op_extension import _protos, scaffold

    protos = _protos.load_protos()
    text = scaffold.op_module(protos["gelu"], protos["gelu_backward"])
    assert _imports(ast.parse(text), f"{OP_DEFS}.gelu", False, set(FILES)) == {TOOLKIT}


@pytest.mark.parametrize("name", COLLECTORS)
def test_the_collectors_import_op_defs_plainly(name):
    assert OP_DEFS in GRAPH[f"{PACKAGE}.{name}"]


def _importlib_users(tree: ast.AST) -> list[str]:
    """How `tree` imports by name at run time: importlib, or __import__ of other than a standard module."""
    uses = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Import) and any(a.name.split(".")[0] == "importlib" for a in node.names):
            uses.append(f"line {node.lineno}: import importlib")
        elif isinstance(node, ast.ImportFrom) and (node.module or "").split(".")[0] == "importlib":
            uses.append(f"line {node.lineno}: from importlib")
        elif isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and node.func.id == "__import__":
            arg = node.args[0] if node.args else None
            if not (isinstance(arg, ast.Constant) and str(arg.value).split(".")[0] in sys.stdlib_module_names):
                uses.append(f"line {node.lineno}: __import__")
    return uses


@pytest.mark.parametrize("name", sorted(FILES))
def test_importlib_stands_in_for_an_import_only_where_said(name):
    uses = _importlib_users(ast.parse(FILES[name].read_text()))
    if name in IMPORTLIB:
        assert uses, f"{name} no longer uses importlib: take it out of IMPORTLIB"
    else:
        assert not uses, f"{FILES[name].relative_to(ROOT)} imports by name ({uses}); import it plainly"


def test_op_defs_imports_its_own_modules_only():
    """What the extra edges of import_graph model: op_defs's one importlib call
    imports a module of this package, by the name op_protos/ gives."""
    tree = ast.parse(FILES[OP_DEFS].read_text())
    calls = [n for n in ast.walk(tree) if isinstance(n, ast.Call) and isinstance(n.func, ast.Attribute)
             and n.func.attr == "import_module"]
    assert len(calls) == 1
    (arg,) = calls[0].args
    assert isinstance(arg, ast.JoinedStr) and ast.unparse(arg).startswith("f'{__name__}.")


# ---- the checker itself ---------------------------------------------------------------------------------------------


def test_find_cycle_finds_a_planted_cycle():
    assert find_cycle({"a": {"b"}, "b": {"c"}, "c": set()}) is None
    assert find_cycle({"a": {"b", "c"}, "b": {"c"}, "c": set()}) is None  # a diamond is no cycle
    assert find_cycle({"a": {"b"}, "b": {"c"}, "c": {"a"}}) == ["a", "b", "c", "a"]
    assert find_cycle({"a": {"b"}, "b": {"b"}}) == ["b", "b"]
    assert find_cycle({"x": set(), "a": {"b"}, "b": {"d"}, "d": {"b"}}) == ["b", "d", "b"]


def test_the_package_with_the_old_loop_planted_fails():
    """An op module importing a collector again (as they imported ops' helpers
    before the toolkit) closes a loop through op_defs."""
    planted = {name: set(edges) for name, edges in GRAPH.items()}
    planted[f"{OP_DEFS}.gelu"].add(f"{PACKAGE}.ops")
    cycle = find_cycle(planted)
    assert cycle is not None and f"{PACKAGE}.ops" in cycle and OP_DEFS in cycle
    planted = {name: set(edges) for name, edges in GRAPH.items()}
    planted[TOOLKIT].add(f"{PACKAGE}._fake")
    assert find_cycle(planted) is not None


def test_an_import_inside_a_function_counts(tmp_path):
    package = tmp_path / PACKAGE
    (package / "op_defs").mkdir(parents=True)
    (package / "__init__.py").write_text("")
    (package / "op_defs" / "__init__.py").write_text("")
    (package / "a.py").write_text("from . import b\n")
    (package / "b.py").write_text("def late():\n    from .op_defs import c\n")
    (package / "op_defs" / "c.py").write_text("import op_extension.a as a\n")
    graph = import_graph(tmp_path)
    assert graph[f"{PACKAGE}.b"] == {f"{OP_DEFS}.c"} and graph[f"{OP_DEFS}.c"] == {f"{PACKAGE}.a"}
    assert find_cycle(graph) == [f"{PACKAGE}.a", f"{PACKAGE}.b", f"{OP_DEFS}.c", f"{PACKAGE}.a"]
