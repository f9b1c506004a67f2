"""The compiled modules (``setup.py``, ``sparktimely/_compiled.py``): where an install built
them they are the ones imported, ``SPARKTIMELY_PURE_PYTHON=1`` imports none of them, and in
a source checkout a compiled module older than its source is passed over for it. That the
pure-Python modules compute the same is ``scripts/test``'s second run: the package's
doctests and the dataflow-level tests, pure (as executors that get only shipped sources run
them); ``tests/test_install.py`` checks that a fresh ``pip install .`` runs compiled
modules."""
from __future__ import annotations

import ast
import importlib
import importlib.machinery
import json
import os
import pathlib
import re
import runpy
import shutil
import subprocess
import sys

import pytest

import sparktimely
from sparktimely import _compiled
from sparktimely._compiled import compiled_twin

PACKAGE = pathlib.Path(sparktimely.__file__).parent

IMPORT_ALL = """
import json, pkgutil, importlib, sparktimely
from sparktimely._compiled import compiled_modules
for module in pkgutil.walk_packages(sparktimely.__path__, "sparktimely."):
    if not module.name.startswith(("sparktimely.barrier", "sparktimely.testing")):
        importlib.import_module(module.name)
print(json.dumps(compiled_modules()))
"""
"""Imports every module (but those needing pyspark) and prints the compiled ones."""


def compiled_in(package_parent: pathlib.Path, **env: str) -> list[str]:
    """The compiled modules a fresh interpreter imports from the package in ``package_parent``."""
    environment = {**os.environ, "PYTHONPATH": str(package_parent), **env}
    done = subprocess.run([sys.executable, "-c", IMPORT_ALL], env=environment, cwd="/",
                          capture_output=True, text=True, timeout=60, check=True)
    return json.loads(done.stdout.splitlines()[-1])


def built_twins(package: pathlib.Path) -> list[str]:
    """The modules of ``package`` that have a compiled module beside their source, fresh."""
    return sorted("sparktimely." + ".".join(source.relative_to(package).with_suffix("").parts)
                  for source in package.rglob("*.py")
                  if compiled_twin(str(source)) is not None)


def test_the_modules_built_compiled_are_the_ones_imported():
    assert compiled_in(PACKAGE.parent) == built_twins(PACKAGE)


def test_pure_python_asked_for_imports_no_compiled_module():
    assert compiled_in(PACKAGE.parent, SPARKTIMELY_PURE_PYTHON="1") == []


_COMPILED_FRAME = re.compile(r'  File "(sparktimely/[^"]*\.py)", line (\d+), in ')


def test_a_compiled_frame_in_a_traceback_shows_its_own_source_line(tmp_path):
    """A compiled module names its source relative to the package's root, and Python's own
    traceback printer, when that does not open, shows the line of the first file of the same
    base name on ``sys.path``: a module called like one of the standard library's
    (``operator.py``) showed that module's lines in every user's traceback."""
    built = built_twins(PACKAGE)
    if not built:
        pytest.skip("this install built no compiled module (no C compiler, or pure asked for)")
    assert [name for name in built
            if name.rsplit(".", 1)[-1] in sys.stdlib_module_names] == []
    script = tmp_path / "job.py"
    script.write_text("import sparktimely as st\n"
                      "st.example(lambda s: s.to_stream([0]).map(lambda x: 1 // x).probe())\n")
    done = subprocess.run([sys.executable, str(script)], cwd=tmp_path, capture_output=True,
                          text=True, timeout=60,
                          env={**os.environ, "PYTHONPATH": str(PACKAGE.parent)})
    lines = done.stderr.splitlines()
    assert lines[-1].endswith("raised ZeroDivisionError on the record 0: integer division or "
                              "modulo by zero")
    shown = [(match, lines[i + 1].strip()) for i, line in enumerate(lines[:-1])
             if (match := _COMPILED_FRAME.match(line)) and lines[i + 1].startswith("    ")
             and not lines[i + 1].lstrip().startswith(("File ", "^", "~"))]
    for match, text in shown:
        source = (PACKAGE.parent / match[1]).read_text().splitlines()
        assert text == source[int(match[2]) - 1].strip(), match[0]
    assert any(".builder." in line for line in lines)        # the frames were compiled ones


@pytest.mark.parametrize("checkout", [True, False], ids=["checkout", "installed"])
def test_a_compiled_module_older_than_its_source_gives_way_to_it_in_a_checkout(tmp_path,
                                                                               checkout):
    """In a source checkout an edit takes effect at once; an installed package's file times
    are pip's, and its compiled modules run whatever they say."""
    built = built_twins(PACKAGE)
    if not built:
        pytest.skip("this install built no compiled module (no C compiler, or pure asked for)")
    copy = tmp_path / "sparktimely"
    shutil.copytree(PACKAGE, copy, ignore=shutil.ignore_patterns("__pycache__"),
                    copy_function=shutil.copy2)                   # keeps the build's times
    if checkout:
        (tmp_path / "setup.py").write_text("")
    name = built[0]
    edited = copy.joinpath(*name.split(".")[1:]).with_suffix(".py")
    twin = compiled_twin(str(edited))
    assert twin is not None
    later = os.stat(twin).st_mtime + 10
    os.utime(edited, (later, later))
    assert compiled_in(tmp_path) == (built[1:] if checkout else built)


def test_compiled_twin_names_the_extension_beside_a_source(tmp_path, monkeypatch):
    monkeypatch.delenv("SPARKTIMELY_PURE_PYTHON", raising=False)
    monkeypatch.setattr(_compiled, "CHECKOUT", True)
    source = tmp_path / "module.py"
    source.write_text("")
    assert compiled_twin(str(source)) is None                  # nothing built
    built = tmp_path / ("module" + importlib.machinery.EXTENSION_SUFFIXES[0])
    built.write_bytes(b"")
    assert compiled_twin(str(source)) == str(built)
    monkeypatch.setenv("SPARKTIMELY_PURE_PYTHON", "1")
    assert compiled_twin(str(source)) is None                  # pure asked for
    monkeypatch.delenv("SPARKTIMELY_PURE_PYTHON")
    os.utime(source, (built.stat().st_mtime + 10,) * 2)
    assert compiled_twin(str(source)) is None                  # older than its source
    monkeypatch.setattr(_compiled, "CHECKOUT", False)
    assert compiled_twin(str(source)) == str(built)            # installed: times are pip's


def test_a_module_cython_cannot_translate_stays_pure_and_the_rest_compile(tmp_path,
                                                                          monkeypatch, capsys):
    """``setup.py``'s build goes on without a module a (newer) Cython refuses (Cython is in
    the test extras)."""
    from setuptools import Extension
    setup = runpy.run_path(str(PACKAGE.parent / "setup.py"), run_name="not_main")
    (tmp_path / "good.py").write_text("def f(x):\n    return x + 1\n")
    (tmp_path / "bad.py").write_text("def f(x):\n    return [*x, *x] if x else (yield)\n"
                                     "cdef int y = 1\n")
    monkeypatch.chdir(tmp_path)
    kept = setup["cythonized"]([Extension("bad", ["bad.py"]), Extension("good", ["good.py"])])
    assert [extension.name for extension in kept] == ["good"]
    assert "bad.py stays pure Python" in capsys.readouterr().out


# -- the .pxd declarations ------------------------------------------------------------------


def _declarations() -> list[tuple[pathlib.Path, str, str | None, set[str]]]:
    """(source, class, declared base or None, attributes) for every ``cdef class`` of every
    .pxd in the package."""
    found = []
    for pxd in sorted(PACKAGE.rglob("*.pxd")):
        current = None
        for line in pxd.read_text().splitlines():
            if line.startswith("cdef class "):
                name, _, base = line[len("cdef class "):].rstrip(":").partition("(")
                current = (pxd.with_suffix(".py"), name, base.rstrip(")") or None, set())
                found.append(current)
            elif current is not None and line.strip().startswith("cdef public object "):
                current[3].update(a.strip() for a in line.split("object", 1)[1].split(","))
    return found


def _attributes_of(source: pathlib.Path, name: str) -> set[str]:
    """The attributes class ``name`` of ``source`` gives its instances: those its methods
    assign on ``self`` and those its body annotates without a value."""
    tree = ast.parse(source.read_text())
    cls = next(node for node in tree.body if isinstance(node, ast.ClassDef) and node.name == name)
    annotated = {item.target.id for item in cls.body if isinstance(item, ast.AnnAssign)
                 and item.value is None and isinstance(item.target, ast.Name)}
    return annotated | {node.attr for node in ast.walk(cls) if isinstance(node, ast.Attribute)
                        and isinstance(node.value, ast.Name) and node.value.id == "self"
                        and isinstance(node.ctx, ast.Store)}


@pytest.mark.parametrize("declaration", _declarations(), ids=lambda d: d[1])
def test_a_pxd_declares_exactly_the_attributes_its_class_has(declaration):
    """A class a .pxd declares keeps every attribute it has in a struct field (one left out
    would fall back to the slower ``__dict__``) and declares no other; a base declared in
    the same .pxd holds the attributes the base's body names."""
    source, name, base, attributes = declaration
    has = _attributes_of(source, name)
    if base is not None:        # declared in the same .pxd: a compiled module that cimports
        # another's class fails to import while that one runs pure (edited, in a checkout)
        inherited = next(d[3] for d in _declarations() if d[0] == source and d[1] == base)
        attributes, has = attributes | inherited, has | _attributes_of(source, base)
    assert attributes == has


def test_the_classes_a_pxd_declares_are_extension_types_when_compiled():
    """Where an install compiled a module with a .pxd, its declared classes are extension
    types (static types, whose attributes are struct fields), not plain classes."""
    declared = {name for _, name, _, _ in _declarations()}
    assert {"WorkerCore", "Dataflow", "ProgressExchange", "Tracker", "MutableAntichain",
            "Operator"} <= declared                     # the step's and the progress path's
    checked = 0
    for source, name, _, _ in _declarations():
        module_name = "sparktimely." + ".".join(source.relative_to(PACKAGE).with_suffix("").parts)
        module = importlib.import_module(module_name)
        if not str(module.__file__).endswith(tuple(importlib.machinery.EXTENSION_SUFFIXES)):
            continue
        heap_type = 1 << 9                              # Py_TPFLAGS_HEAPTYPE
        assert not getattr(module, name).__flags__ & heap_type, f"{module_name}.{name}"
        checked += 1
    if not checked:
        pytest.skip("no module with a .pxd is compiled in this install")


MAKE_VALUES = """
import pickle, sys, sparktimely as st
counts = st.MutableAntichain()
counts.update_iter([(3, 2), (5, 1)])
changes = st.ChangeBatch()
changes.extend([("x", 2), ("y", 0)])
values = [st.Antichain([st.Product(1, 2), st.Product(2, 1)]), counts, changes]
sys.stdout.buffer.write(pickle.dumps(values))
"""
SHOW_VALUES = """
import pickle, sys
frontier, counts, changes = pickle.loads(sys.stdin.buffer.read())
print(repr(frontier), repr(counts), counts.count_for(3), counts.count_for(5), repr(changes))
"""


def _in_build(code: str, pure: bool, given: bytes = b"") -> bytes:
    environment = {**os.environ, "PYTHONPATH": str(PACKAGE.parent)}
    environment.pop("SPARKTIMELY_PURE_PYTHON", None)
    if pure:
        environment["SPARKTIMELY_PURE_PYTHON"] = "1"
    return subprocess.run([sys.executable, "-c", code], input=given, env=environment, cwd="/",
                          capture_output=True, timeout=60, check=True).stdout


def test_public_progress_values_pickled_by_one_build_load_in_the_other():
    """A job's processes may run different builds (Spark executors that get only shipped
    sources run pure): Antichain, MutableAntichain and ChangeBatch, extension types when
    compiled, pickle alike in both builds, so records holding them cross between them."""
    if not built_twins(PACKAGE):
        pytest.skip("this install built no compiled module")
    expected = (b"Antichain([Product(1, 2), Product(2, 1)]) MutableAntichain(frontier=[3]) 2 1 "
                b"ChangeBatch([('x', 2)])\n")
    for maker_pure in (False, True):
        made = _in_build(MAKE_VALUES, maker_pure)
        assert _in_build(SHOW_VALUES, not maker_pure, made) == expected
