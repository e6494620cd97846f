"""The product's structure, read from its source with ``ast`` (nothing is imported):
no import cycle in ``pysandbox`` and ``bwrap_compat`` (module-level and function-level
imports alike), module sizes within the targets, and backends that work from the
plan alone, never from the policy it was compiled from (docs/ARCHITECTURE.md)."""

from __future__ import annotations

import ast
import dataclasses
import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
PACKAGES = ("pysandbox", "bwrap_compat")
MAX_PY_LINES = 450
MAX_C_LINES = 750


def _modules() -> dict[str, Path]:
    """Dotted module name -> source file, for every .py file of PACKAGES."""
    out = {}
    for pkg in PACKAGES:
        for path in sorted((ROOT / pkg).rglob("*.py")):
            parts = list(path.relative_to(ROOT).with_suffix("").parts)
            if parts[-1] == "__init__":
                parts = parts[:-1]
            out[".".join(parts)] = path
    return out


def _ignored(name: str) -> bool:
    return name == "pysandbox._native" or name.startswith("pysandbox._native")


def _resolve(module: str, is_package: bool, node: ast.ImportFrom) -> str:
    if node.level == 0:
        return node.module or ""
    base = module.split(".") if is_package else module.split(".")[:-1]
    base = base[:len(base) - (node.level - 1)] if node.level > 1 else base
    return ".".join(base + ([node.module] if node.module else []))


def import_graph() -> dict[str, set[str]]:
    """Module -> the product modules it imports (at any depth of the file: inside
    functions, classes and ``if`` blocks too). ``from X import y`` counts as importing
    ``X.y`` when that is a module, else ``X``; ``import a.b.c`` counts as ``a.b.c``.
    The parent packages whose ``__init__`` Python runs on the way are not edges: a
    package's ``__init__`` importing its own submodules is that package's layout, and
    counting it would make every such package a cycle and hide the real ones."""
    modules = _modules()
    graph = {}
    for name, path in modules.items():
        is_package = path.name == "__init__.py"
        targets = set()
        for node in ast.walk(ast.parse(path.read_text(), str(path))):
            if isinstance(node, ast.Import):
                wanted = [alias.name for alias in node.names]
            elif isinstance(node, ast.ImportFrom):
                base = _resolve(name, is_package, node)
                full = [f"{base}.{a.name}" for a in node.names]
                # the compiled module (``from .. import _native``) is not source: no edge
                wanted = [f if f in modules else base for f in full if not _ignored(f)]
            else:
                continue
            for target in wanted:
                parts = target.split(".")
                deepest = next((".".join(parts[:i]) for i in range(len(parts), 0, -1)
                                if ".".join(parts[:i]) in modules), None)
                if deepest and not _ignored(deepest) and deepest != name and not _ignored(target):
                    targets.add(deepest)
        graph[name] = targets
    return graph


def find_cycle(graph: dict[str, set[str]]) -> list[str] | None:
    """One cycle as ``[a, b, ..., a]``, or None."""
    WHITE, GREY, BLACK = 0, 1, 2
    colour = dict.fromkeys(graph, WHITE)
    stack: list[str] = []

    def visit(node):
        colour[node] = GREY
        stack.append(node)
        for nxt in sorted(graph.get(node, ())):
            if colour.get(nxt, BLACK) == GREY:
                return stack[stack.index(nxt):] + [nxt]
            if colour.get(nxt) == WHITE:
                found = visit(nxt)
                if found:
                    return found
        stack.pop()
        colour[node] = BLACK
        return None

    for node in sorted(graph):
        if colour[node] == WHITE:
            found = visit(node)
            if found:
                return found
    return None


def test_the_graph_sees_function_level_and_relative_imports():
    """Live control for the cycle test: the graph holds edges of each kind."""
    graph = import_graph()
    assert "pysandbox.policy" in graph and "bwrap_compat.parser" in graph, sorted(graph)
    assert not any(_ignored(t) for targets in graph.values() for t in targets)
    assert find_cycle({"a": {"b"}, "b": {"c"}, "c": {"a"}}) == ["a", "b", "c", "a"]
    assert find_cycle({"a": {"b"}, "b": set()}) is None
    tree = ast.parse("def f():\n    from .x import y\n")
    node = next(n for n in ast.walk(tree) if isinstance(n, ast.ImportFrom))
    assert _resolve("pysandbox.backends.bwrap", False, node) == "pysandbox.backends.x"
    assert _resolve("pysandbox.backends", True, node) == "pysandbox.backends.x"


def _cycles(graph):
    """One cycle per group of mutually importing modules: drop each cycle's first edge
    and look again, until none is left."""
    graph = {k: set(v) for k, v in graph.items()}
    found = []
    while (cycle := find_cycle(graph)) is not None:
        found.append(cycle)
        graph[cycle[0]].discard(cycle[1])
    return found


def test_no_import_cycle():
    graph = import_graph()
    cycles = _cycles(graph)
    assert cycles == [], "import cycles:\n" + "\n".join(" -> ".join(c) for c in cycles)


def layer(module: str, modules: dict[str, Path]) -> str:
    """The layer a module belongs to: its subpackage (``pysandbox.probe``,
    ``pysandbox.backends``, ``pysandbox.backends.native``, ...), or the module itself
    where it sits directly in a top-level package (``pysandbox.plan``)."""
    parts = module.split(".")
    package = parts if modules[module].name == "__init__.py" else parts[:-1]
    return ".".join(package) if len(package) > 1 else module


def upward_imports(graph: dict[str, set[str]], modules: dict[str, Path]) -> list[list[str]]:
    """The cycles between layers (each as ``[layer, ..., layer]`` with the imports that
    make it): an import that runs back up. A package's ``__init__`` importing its own
    submodules is its layout, not an edge (the backend registry's lazy imports)."""
    layers: dict[str, set[str]] = {}
    why: dict[tuple, list[str]] = {}
    for source, targets in graph.items():
        for target in targets:
            if modules[source].name == "__init__.py" and target.startswith(source + "."):
                continue
            a, b = layer(source, modules), layer(target, modules)
            if a != b:
                layers.setdefault(a, set()).add(b)
                why.setdefault((a, b), []).append(f"{source} -> {target}")
    return [cycle + [f"  {edge}" for x, y in zip(cycle, cycle[1:]) for edge in why[(x, y)]]
            for cycle in _cycles(layers)]


def test_no_import_runs_back_up_the_layers():
    """Between layers the imports run one way (issue 26 item 4: backends <-> probe ran
    both ways through 11 imports): each backend package holds its own probe, and the
    host facts in pysandbox/probe import nothing from the backends. Live control: one
    planted upward import (the host facts reading the bwrap backend's probe) is found."""
    modules = _modules()
    graph = import_graph()
    assert not any(t.startswith("pysandbox.backends") for t in graph["pysandbox.probe"] | graph["pysandbox.probe.host"])
    assert upward_imports(graph, modules) == [], upward_imports(graph, modules)
    planted = {k: set(v) for k, v in graph.items()}
    planted["pysandbox.probe.host"].add("pysandbox.backends.bwrap.probe")
    found = upward_imports(planted, modules)
    cycle = [step for step in found[0] if not step.startswith("  ")] if len(found) == 1 else []
    assert cycle[:2] == ["pysandbox.probe", "pysandbox.backends.bwrap"] and cycle[-1] == "pysandbox.probe", found
    assert "  pysandbox.probe.host -> pysandbox.backends.bwrap.probe" in found[0], found
    # the backend registry importing its own backends is its layout, not an upward edge
    assert {"pysandbox.backends.native", "pysandbox.backends.bwrap"} <= graph["pysandbox.backends"]


def _line_count(path: Path) -> int:
    return len(path.read_text().splitlines())


def test_module_sizes():
    """Python product modules at most MAX_PY_LINES lines, native/*.c at most MAX_C_LINES."""
    too_big = [f"{p.relative_to(ROOT)}: {_line_count(p)} > {MAX_PY_LINES}" for p in _modules().values()
               if _line_count(p) > MAX_PY_LINES]
    c_files = sorted((ROOT / "native").glob("*.c"))
    assert c_files, "no native/*.c found"   # live control: the C sources are where the test looks
    too_big += [f"{p.relative_to(ROOT)}: {_line_count(p)} > {MAX_C_LINES}" for p in c_files
                if _line_count(p) > MAX_C_LINES]
    assert too_big == [], "\n".join(too_big)


PLAN_POLICY = re.compile(r"plan\.policy\b")


def test_backends_do_not_reach_the_policy_through_the_plan():
    """No module under pysandbox/backends/ reads ``plan.policy``, and Plan has no
    ``policy`` field to read."""
    backends = sorted((ROOT / "pysandbox" / "backends").rglob("*.py"))
    assert backends, "no backend module found"
    assert PLAN_POLICY.search("x = plan.policy.fs") and not PLAN_POLICY.search("plan.policy_x")  # control
    uses = [f"{p.relative_to(ROOT)}:{i}: {line.strip()}" for p in backends
            for i, line in enumerate(p.read_text().splitlines(), 1) if PLAN_POLICY.search(line)]
    from pysandbox.plan import Plan
    fields = {f.name for f in dataclasses.fields(Plan)} if dataclasses.is_dataclass(Plan) else set(vars(Plan))
    assert uses == [] and "policy" not in fields, (uses, sorted(fields))


POLICY_MODULES = ("pysandbox.policy", "pysandbox.fs")   # the Policy and its records


def _policy_imports(module: str, path: Path, tree) -> list[str]:
    """Imports of the Policy's modules anywhere in ``tree`` (functions too): ``from
    pysandbox.policy import ...``, ``from pysandbox import fs``, ``import pysandbox.fs``."""
    out = []
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom):
            base = _resolve(module, path.name == "__init__.py", node)
            out += [f"{path.relative_to(ROOT)}:{node.lineno}: {base}.{a.name}" for a in node.names
                    if base in POLICY_MODULES or f"{base}.{a.name}" in POLICY_MODULES]
        elif isinstance(node, ast.Import):
            out += [f"{path.relative_to(ROOT)}:{node.lineno}: {a.name}" for a in node.names
                    if a.name in POLICY_MODULES]
    return out


def test_backends_import_no_policy_module():
    """No module under pysandbox/backends/ imports pysandbox/policy.py or pysandbox/fs.py
    at all (issue 26 item 4: backends import the Plan; the constants they need are in
    pysandbox/checks.py; a Policy handed to ``status`` is read through the one table of
    pysandbox/fs_ops.py). Live control: the same check finds each form in a made-up
    backend module."""
    mods = {m: p for m, p in _modules().items() if m.startswith("pysandbox.backends")}
    assert "pysandbox.backends.native.probe" in mods and "pysandbox.backends.bwrap.probe" in mods
    found = [hit for m, p in mods.items() for hit in _policy_imports(m, p, ast.parse(p.read_text()))]
    fake = ROOT / "pysandbox" / "backends" / "native" / "made_up.py"
    control = _policy_imports("pysandbox.backends.native.made_up", fake, ast.parse(
        "def status(policy=None):\n    from ...policy import Policy\n    from ... import fs\n"
        "    import pysandbox.fs\n    from ...checks import CAPABILITIES\n"))
    assert control == ["pysandbox/backends/native/made_up.py:2: pysandbox.policy.Policy",
                       "pysandbox/backends/native/made_up.py:3: pysandbox.fs",
                       "pysandbox/backends/native/made_up.py:4: pysandbox.fs"], control
    assert found == [], found


def _reachable(root) -> list:
    """Every object reachable from ``root`` through dataclass fields, slots, instance
    dictionaries of pysandbox objects, and containers (the object graph a backend gets)."""
    seen, out, todo = set(), [], [root]
    while todo:
        obj = todo.pop()
        if id(obj) in seen or isinstance(obj, (str, bytes, int, float, bool, type(None))):
            continue
        seen.add(id(obj))
        out.append(obj)
        if isinstance(obj, dict):
            todo.extend(obj.keys())
            todo.extend(obj.values())
        elif isinstance(obj, (tuple, list, set, frozenset)):
            todo.extend(obj)
        elif dataclasses.is_dataclass(obj) and not isinstance(obj, type):
            todo.extend(getattr(obj, f.name) for f in dataclasses.fields(obj))
        elif type(obj).__module__.startswith("pysandbox"):
            for name in getattr(type(obj), "__slots__", ()):
                if hasattr(obj, name):
                    todo.append(getattr(obj, name))
            todo.extend(getattr(obj, "__dict__", {}).values())
    return out


def test_no_policy_is_reachable_from_a_compiled_plan(tmp_path):
    """What a backend is handed holds no Policy, nor any record of pysandbox/policy.py
    (its ``Network`` included: the plan has the mode, and proxy mode's rules as its own
    ``ProxyRules``): the object graph of plans compiled from policies that use every part
    of the policy (network modes, limits, binds, hides, overlays, capabilities, rlimits)
    reaches no instance of a class defined there. Live controls: the same walk finds the
    Policy when one is put beside the plan, and a Network put in a plan."""
    from pysandbox.limits import Limits
    from pysandbox.plan import compile as compile_plan
    from pysandbox.policy import Network, Policy
    work = tmp_path / "work"
    for d in ("work", "ro", "hide", "lower", "upper", "wk"):
        (tmp_path / d).mkdir()
    policies = [
        Policy.default(workdir=str(work)),
        Policy.default(workdir=str(work), network="allow", ro=[str(tmp_path / "ro")],
                       hide=[str(tmp_path / "hide")], tmpfs=["/mnt"]),
        Policy.default(workdir=str(work), network=Network("proxy", allow_hosts=("example.test",))),
        Policy.default(workdir=str(work)).replace(limits=Limits(memory=64 << 20, pids=64)),
    ]
    def policy_records(root):
        return [type(o).__name__ for o in _reachable(root) if type(o).__module__ == "pysandbox.policy"]
    for policy in policies:
        plan = compile_plan(policy)
        assert policy_records(plan) == [], (policy, policy_records(plan))
    proxy = compile_plan(policies[2])
    assert proxy.network == "proxy" and proxy.proxy.allow_hosts == ("example.test",)
    assert "Policy" in policy_records((plan, policies[-1]))   # control
    from pysandbox.records import replace
    assert policy_records(replace(proxy, proxy=Network("proxy"))) == ["Network"]   # control


def test_no_private_name_is_imported_from_another_module():
    """A name with a leading underscore is its module's own: no module of the product
    imports one from another (a private helper another module needs is made public
    under a name that says what it is). Live control: the check finds one in a made-up
    module."""
    def private_imports(module: str, path: Path, tree) -> list[str]:
        out = []
        for node in ast.walk(tree):
            if isinstance(node, ast.ImportFrom):
                source = _resolve(module, path.name == "__init__.py", node)
                if not source.startswith(PACKAGES):
                    continue
                out += [f"{path.relative_to(ROOT)}:{node.lineno}: {alias.name} from {source}"
                        for alias in node.names
                        if alias.name.startswith("_") and not alias.name.startswith("__")
                        and f"{source}.{alias.name}" not in modules]     # a private module is imported whole
        return out

    modules = set(_modules()) | {"pysandbox._native"}
    control = ast.parse("from .aio_process import _discard, attach\n")
    assert private_imports("pysandbox.aio", ROOT / "pysandbox" / "aio.py", control) != []
    found = []
    for module, path in _modules().items():
        found += private_imports(module, path, ast.parse(path.read_text()))
    assert found == [], found
