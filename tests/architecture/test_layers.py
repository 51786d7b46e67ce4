"""The package's shape: stages in one direction, no circles, the emulator sealed.

Read from the source with :mod:`ast`, so every import counts: module level, inside functions
(the lazy ones) and under ``TYPE_CHECKING``. ``docs/architecture.md`` explains the stages.
"""

from __future__ import annotations

import ast
from collections.abc import Iterator, Mapping
from pathlib import Path

import pytest

import pytest_sglang

PACKAGE = Path(pytest_sglang.__file__).parent
NAME = "pytest_sglang"

#: The plugin's rooms (a top-level module or subpackage) by stage, bottom first. A room may
#: import from rooms of lower stages only: never sideways, never up.
STAGES: tuple[frozenset[str], ...] = (
    frozenset({"_version", "errors", "config"}),
    frozenset({"gpu", "loadgen", "report"}),
    frozenset({"server"}),
    frozenset({"measure"}),
    frozenset({"verdicts", "markers", "timeouts"}),
    frozenset({"fixtures"}),
    frozenset({"plugin", "testing", "__init__", "cli"}),
)
#: The emulator's own rooms, bottom first: it is a separate program inside the package.
EMULATOR_STAGES: tuple[frozenset[str], ...] = (
    frozenset({"engine"}),
    frozenset({"config"}),
    frozenset({"runtime"}),
    frozenset({"http"}),
    frozenset({"lifecycle"}),
    frozenset({"__main__", "__init__"}),
)
MAX_FLOORS = 6


def _module_name(path: Path, root: Path) -> str:
    parts = list(path.relative_to(root.parent).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


def _modules(root: Path = PACKAGE) -> dict[str, Path]:
    return {_module_name(p, root): p for p in sorted(root.rglob("*.py"))}


def _imports(name: str, path: Path, known: Mapping[str, Path]) -> Iterator[str]:
    """Yield the package modules ``name`` imports, wherever the import statement is."""
    is_package = path.name == "__init__.py"
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        targets: list[str] = []
        if isinstance(node, ast.Import):
            targets = [alias.name for alias in node.names]
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = name.split(".") if is_package else name.split(".")[:-1]
                base = base[: len(base) - node.level + 1]
                module = ".".join([*base, *([node.module] if node.module else [])])
            else:
                module = node.module or ""
            # "from package import module" imports the module; any other name, the package.
            submodules = [f"{module}.{a.name}" for a in node.names if f"{module}.{a.name}" in known]
            names_other = len(submodules) < len(node.names)
            targets = [*submodules, *([module] if names_other else [])]
        for target in targets:
            while target and target not in known:
                target = target.rpartition(".")[0]
            if target and target != name and target != NAME:
                yield target
            elif target == NAME and name != NAME:
                yield NAME


def import_graph(root: Path = PACKAGE) -> dict[str, set[str]]:
    """Return every module of the package and the package modules it imports."""
    known = _modules(root)
    return {name: set(_imports(name, path, known)) for name, path in known.items()}


def _room(module: str) -> str:
    parts = module.split(".")
    return parts[1] if len(parts) > 1 else "__init__"


def _emulator_room(module: str) -> str:
    parts = module.split(".")
    return parts[2] if len(parts) > 2 else "__init__"


def _stage_of(room: str, stages: tuple[frozenset[str], ...]) -> int:
    for index, stage in enumerate(stages):
        if room in stage:
            return index
    raise AssertionError(f"room {room!r} has no stage: add it to the stage table")


def find_cycle(graph: Mapping[str, set[str]]) -> list[str] | None:
    """Return one import circle as a list of modules, or None."""
    state: dict[str, int] = {}
    stack: list[str] = []

    def visit(node: str) -> list[str] | None:
        state[node] = 1
        stack.append(node)
        for nxt in sorted(graph.get(node, ())):
            if state.get(nxt) == 1:
                return [*stack[stack.index(nxt) :], nxt]
            if nxt not in state and (found := visit(nxt)) is not None:
                return found
        stack.pop()
        state[node] = 2
        return None

    for node in sorted(graph):
        if node not in state and (found := visit(node)) is not None:
            return found
    return None


def stage_violations(graph: Mapping[str, set[str]]) -> list[str]:
    """Return one line per import that runs sideways or up a stage, or breaks the seal."""
    problems = []
    for module, targets in sorted(graph.items()):
        in_emulator = module.startswith(f"{NAME}.emulator")
        for target in sorted(targets):
            to_emulator = target.startswith(f"{NAME}.emulator")
            if in_emulator != to_emulator:
                problems.append(f"{module} -> {target}: the emulator seal is broken")
                continue
            if in_emulator:
                room, other = _emulator_room(module), _emulator_room(target)
                stages = EMULATOR_STAGES
            else:
                room, other = _room(module), _room(target)
                stages = STAGES
            if room != other and _stage_of(other, stages) >= _stage_of(room, stages):
                problems.append(f"{module} -> {target}: {room} may not import {other}")
    return problems


def floors(graph: Mapping[str, set[str]]) -> dict[str, int]:
    """Return each plugin room's floor: 1 + the highest floor of the rooms it imports."""
    rooms: dict[str, set[str]] = {}
    for module, targets in graph.items():
        if module.startswith(f"{NAME}.emulator"):
            continue
        room = rooms.setdefault(_room(module), set())
        room.update(_room(t) for t in targets if _room(t) != _room(module))
    memo: dict[str, int] = {}

    def floor(room: str, seen: frozenset[str] = frozenset()) -> int:
        if room in seen:
            raise AssertionError(f"rooms import each other in a circle through {room!r}")
        if room not in memo:
            inner = seen | {room}
            memo[room] = 1 + max((floor(r, inner) for r in rooms.get(room, ())), default=0)
        return memo[room]

    return {room: floor(room) for room in rooms}


GRAPH = import_graph()


def test_the_package_is_at_the_repository_root() -> None:
    root = Path(__file__).resolve().parents[2]
    assert (root / NAME / "__init__.py").is_file()
    assert not (root / "src").exists()


def test_no_module_imports_itself_in_a_circle() -> None:
    assert find_cycle(GRAPH) is None, " -> ".join(find_cycle(GRAPH) or [])


def test_imports_run_down_the_stages_and_respect_the_emulator_seal() -> None:
    assert stage_violations(GRAPH) == []


def test_at_most_six_floors() -> None:
    heights = floors(GRAPH)
    assert max(heights.values()) <= MAX_FLOORS, sorted(heights.items(), key=lambda kv: kv[1])


def test_every_room_has_a_stage() -> None:
    for module in GRAPH:
        if module.startswith(f"{NAME}.emulator"):
            _stage_of(_emulator_room(module), EMULATOR_STAGES)
        else:
            _stage_of(_room(module), STAGES)


# The checks must be able to fail: each forbidden import planted in a copy of the package.


def _plant(tmp_path: Path, module: str, line: str) -> dict[str, set[str]]:
    import shutil

    copy = tmp_path / NAME
    shutil.copytree(PACKAGE, copy, ignore=shutil.ignore_patterns("__pycache__"))
    target = copy.joinpath(*module.split(".")[1:]).with_suffix(".py")
    target.write_text(target.read_text(encoding="utf-8") + f"\n{line}\n", encoding="utf-8")
    return import_graph(copy)


@pytest.mark.parametrize(
    ("module", "line", "expected"),
    [
        ("pytest_sglang.emulator.http.web", "import pytest_sglang.errors", "seal is broken"),
        (
            "pytest_sglang.server.pool",
            "from pytest_sglang.emulator.config import cli",
            "seal is broken",
        ),
        ("pytest_sglang.config.profiles", "from pytest_sglang.server import handle", "config"),
        ("pytest_sglang.loadgen.runner", "from pytest_sglang.server import handle", "loadgen"),
        ("pytest_sglang.emulator.engine.stats", "from pytest_sglang.emulator.http import web", ""),
    ],
)
def test_a_planted_forbidden_import_is_caught(
    tmp_path: Path, module: str, line: str, expected: str
) -> None:
    problems = stage_violations(_plant(tmp_path, module, line))
    assert [p for p in problems if p.startswith(f"{module} ->") and expected in p]


def test_a_planted_circle_is_caught(tmp_path: Path) -> None:
    graph = _plant(tmp_path, "pytest_sglang.server.handle", "import pytest_sglang.server.pool")
    assert find_cycle(graph) is not None
