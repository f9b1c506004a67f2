"""The package's layers depend downwards only and meet through public names.

Each folder of ``sparktimely/`` (and each top-level module) is a layer with a rank; a module
may import only from its own layer or from layers of lower rank, and may not reach into
another layer's private names: neither its ``_modules`` nor a ``_name`` defined there, read
on an object of that layer (``worker._built``, ``builder._operator``). Layers meet through
the extension points the lower layer declares (``WorkerObserver``, ``InputPort.gate``,
``LocalPusher.observe``, ``OperatorBuilder.set_notify``, ``worker.dataflows()``, ...).
"""
from __future__ import annotations

import ast
import functools
import pathlib
from collections import defaultdict

import pytest

PACKAGE = pathlib.Path(__file__).resolve().parent.parent / "sparktimely"

RANKS = {
    "progress": 0, "shm": 0,
    "_extras": 0, "_xxh3": 0, "ordering": 0, "_compiled": 0,
    "hashing": 1, "comm": 1, "_group": 1, "errors": 1,
    "dataflow": 2,
    "ops": 3,
    "differential": 4, "io": 4, "logging": 4,
    "windows": 5, "worker": 5, "profile": 5, "_warm": 5,
    "session": 6, "_supervisor": 7, "execute": 8,
    "testing": 9, "barrier": 9,
    "__init__": 10,
}
"""Layers, lowest first (see docs/architecture.md). Layers of one rank do not import each
other."""


def layer_of(path: pathlib.Path) -> str:
    parts = path.relative_to(PACKAGE).parts
    return parts[0] if len(parts) > 1 else path.stem


@functools.cache
def modules() -> dict[pathlib.Path, ast.Module]:
    return {path: ast.parse(path.read_text()) for path in sorted(PACKAGE.rglob("*.py"))}


def imported_layers(path: pathlib.Path, tree: ast.Module) -> list[tuple[int, str, str]]:
    """``(line, layer, dotted name)`` of every name imported from the package's own modules:
    ``from ..shm import _mesh`` gives ``shm._mesh``; a name imported from the package itself
    is its module's (``from .. import execute``) or else the top level's (``from .. import
    Worker``: ``__init__``)."""
    package = list(path.relative_to(PACKAGE).parts[:-1])
    found = []
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom):
            if node.level:
                dotted = package[:len(package) - node.level + 1] + (
                    node.module.split(".") if node.module else [])
            elif node.module and node.module.split(".")[0] == "sparktimely":
                dotted = node.module.split(".")[1:]
            else:
                continue
            for alias in node.names:
                if dotted:
                    found.append((node.lineno, dotted[0], ".".join(dotted + [alias.name])))
                elif alias.name in RANKS:
                    found.append((node.lineno, alias.name, alias.name))
                else:
                    found.append((node.lineno, "__init__", f"__init__.{alias.name}"))
        elif isinstance(node, ast.Import):
            for alias in node.names:
                parts = alias.name.split(".")
                if parts[0] == "sparktimely" and len(parts) > 1:
                    found.append((node.lineno, parts[1], ".".join(parts[1:])))
    return found


def test_every_layer_has_a_rank():
    assert {layer_of(path) for path in modules()} <= RANKS.keys()


def test_imports_point_down():
    wrong = []
    for path, tree in modules().items():
        own = layer_of(path)
        for line, layer, dotted in imported_layers(path, tree):
            if layer == own or layer not in RANKS:
                continue
            if RANKS[layer] >= RANKS[own]:
                wrong.append(f"{path.relative_to(PACKAGE)}:{line}: {own} imports {dotted}")
            elif any(part.startswith("_") and not part.startswith("__")
                     for part in dotted.split(".")[1:]):
                wrong.append(f"{path.relative_to(PACKAGE)}:{line}: private module {dotted}")
    assert not wrong, "\n".join(wrong)


def private_definitions(trees: dict[pathlib.Path, ast.Module]) -> dict[str, set[str]]:
    """For every private name (``_x``), the layers that define it: as a function or class,
    in ``__slots__``, or assigned on ``self``/``cls``."""
    defined: dict[str, set[str]] = defaultdict(set)
    for path, tree in trees.items():
        layer = layer_of(path)
        for node in ast.walk(tree):
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
                names = [node.name]
            elif (isinstance(node, ast.Attribute) and isinstance(node.ctx, ast.Store)
                  and isinstance(node.value, ast.Name) and node.value.id in ("self", "cls")):
                names = [node.attr]
            elif (isinstance(node, ast.Assign) and any(
                    isinstance(t, ast.Name) and t.id == "__slots__" for t in node.targets)
                  and isinstance(node.value, (ast.Tuple, ast.List))):
                names = [e.value for e in node.value.elts if isinstance(e, ast.Constant)]
            else:
                continue
            for name in names:
                if name.startswith("_") and not name.startswith("__"):
                    defined[name].add(layer)
    return defined


def test_no_layer_reads_another_layers_private_names():
    trees = modules()
    defined = private_definitions(trees)
    wrong = []
    for path, tree in trees.items():
        own = layer_of(path)
        for node in ast.walk(tree):
            if not (isinstance(node, ast.Attribute) and node.attr.startswith("_")
                    and not node.attr.startswith("__")):
                continue
            if isinstance(node.value, ast.Name) and node.value.id in ("self", "cls"):
                continue
            owners = defined.get(node.attr, set())
            if owners and own not in owners:
                wrong.append(f"{path.relative_to(PACKAGE)}:{node.lineno}: .{node.attr} "
                             f"(private to {', '.join(sorted(owners))})")
    assert not wrong, "\n".join(wrong)


@pytest.mark.parametrize("name, layer", [("_built", "dataflow"), ("_operator", "dataflow")])
def test_the_check_finds_what_it_looks_for(name, layer):
    """The private-name check knows the names the extension points replaced."""
    assert layer in private_definitions(modules())[name]
