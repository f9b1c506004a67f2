"""The compiled modules (``setup.py``, ``sparktimely/_compiled.py``): where an install built
them they are the ones imported, ``SPARKTIMELY_PURE_PYTHON=1`` imports none of them, and in
a source checkout a compiled module older than its source is passed over for it. That the
pure-Python modules compute the same is ``scripts/test``'s second run: the package's
doctests and the dataflow-level tests, pure (as executors that get only shipped sources run
them); ``tests/test_install.py`` checks that a fresh ``pip install .`` runs compiled
modules."""
from __future__ import annotations

import importlib.machinery
import json
import os
import pathlib
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
