"""The tree reads as the data path: no module imports from a layer above its own."""

import ast
from pathlib import Path

PACKAGE = Path(__file__).resolve().parent.parent / "profiler"

# Bottom to top: each layer may import only from its own and lower layers.
LAYERS = [
    {"errors", "safety"},
    {"native"},
    {"kernel"},
    {"model"},
    {"labels"},
    {"jit"},
    {"symbolize"},
    {"output"},
    {"push"},
    {"tui"},
    {"run"},
    {"cli", "__main__"},
]


def layer_of(module: str) -> int:
    if module == "profiler":
        return 0  # the package itself holds only its version
    top = module.split(".")[1] if module.count(".") else ""
    for index, names in enumerate(LAYERS):
        if top in names:
            return index
    raise AssertionError(f"{module} is in no layer: add its package to LAYERS")


def imported_modules(path: Path) -> list[str]:
    tree = ast.parse(path.read_text())
    found = []
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom) and node.module and node.module.startswith("profiler"):
            package = PACKAGE.parent.joinpath(*node.module.split("."))
            submodules = [alias.name for alias in node.names if (package / f"{alias.name}.py").exists()]
            found += [f"{node.module}.{name}" for name in submodules] or [node.module]
        elif isinstance(node, ast.Import):
            found += [alias.name for alias in node.names if alias.name.startswith("profiler.")]
    return found


def module_name(path: Path) -> str:
    parts = path.relative_to(PACKAGE.parent).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def test_every_module_is_in_a_layer_and_imports_only_downward():
    upward = []
    for path in sorted(PACKAGE.rglob("*.py")):
        name = module_name(path)
        if name == "profiler":
            continue
        own = layer_of(name)
        for imported in imported_modules(path):
            if layer_of(imported) > own:
                upward.append(f"{name} imports {imported}")
    assert upward == []


def test_no_module_sits_loose_at_the_top():
    loose = sorted(path.name for path in PACKAGE.glob("*.py"))
    assert loose == ["__init__.py", "__main__.py", "cli.py", "errors.py"]


def test_no_two_modules_import_each_other():
    graph: dict[str, set[str]] = {}
    for path in PACKAGE.rglob("*.py"):
        name = module_name(path)
        graph[name] = {imported for imported in imported_modules(path) if imported != name}
    cycles = []

    def visit(name: str, trail: list[str]) -> None:
        for imported in graph.get(name, ()):
            if imported in trail:
                cycles.append(" -> ".join(trail[trail.index(imported) :] + [imported]))
            elif len(trail) < 12:
                visit(imported, trail + [imported])

    for name in graph:
        visit(name, [name])
    assert cycles == []


# What the generic layers may use of the runtimes' layer: the table of what
# each runtime provides, and the run's JIT sources and files, never a
# runtime's own package (jit/v8, jit/jvm) or its recognition and flags.
RUNTIME_FACADE = {"profiler.jit.registry", "profiler.jit.sources", "profiler.jit.files", "profiler.jit.symbol_source"}


def test_no_generic_layer_imports_a_runtimes_package():
    reaching = []
    for path in sorted(PACKAGE.rglob("*.py")):
        name = module_name(path)
        if name == "profiler" or name.startswith("profiler.jit"):
            continue
        for imported in imported_modules(path):
            if imported.startswith("profiler.jit") and imported not in RUNTIME_FACADE:
                reaching.append(f"{name} imports {imported}")
    assert reaching == [], "\n".join(reaching)
