"""Builds the modules on sparktimely's per-update path with Cython, unchanged, beside their
pure-Python sources (everything else is in setup.cfg).

A single-row update runs thousands of small Python calls through the progress tracker, the
operators' scheduling, the rings between workers and differential's traces; compiled, the
same code answers a reachability update about a fifth sooner (``benchmarks/FINDINGS.md``).
A ``.pxd`` beside a source declares the classes of the step loop and the progress path as
extension types, their attributes struct fields: compiled code reads a plain class's
attributes through dictionary lookups, slower than the interpreter's own caches, and these
classes are read on every step. What the code does is the same either way.
The build is optional: without a C compiler, or with ``SPARKTIMELY_PURE_PYTHON=1`` set while
installing, the package installs pure Python, and it runs the same
(``sparktimely/_compiled.py``).
"""
import importlib.util
import os
from pathlib import Path

from setuptools import Extension, setup

COMPILED = [
    "sparktimely/progress/*.py",
    "sparktimely/dataflow/*.py",
    "sparktimely/shm/*.py",
    "sparktimely/comm/allocator.py",
    "sparktimely/comm/cluster.py",
    "sparktimely/comm/codec.py",
    "sparktimely/comm/link.py",
    "sparktimely/hashing.py",
    "sparktimely/differential/lattice.py",
    "sparktimely/differential/input.py",
    "sparktimely/differential/updates.py",
    "sparktimely/differential/collection.py",
    "sparktimely/differential/trace/*.py",
    "sparktimely/differential/operators/*.py",
    "sparktimely/differential/arrow/*.py",
]
"""Where the compiled modules are (a package's ``__init__.py`` stays pure)."""


def extensions() -> list:
    if os.environ.get("SPARKTIMELY_PURE_PYTHON") == "1":
        return []
    if importlib.util.find_spec("Cython") is None:   # installed without build isolation
        return []
    modules = [Extension(".".join(path.with_suffix("").parts), [str(path)])
               for pattern in COMPILED for path in sorted(Path().glob(pattern))
               if path.name != "__init__.py"]     # paths as setuptools wants: from the root
    compiled = cythonized(modules)
    for extension in compiled:        # a module that does not compile stays pure
        extension.optional = True     # (set here: cythonize's extensions drop the flag)
    return compiled


def cythonized(modules: list) -> list:
    """The extensions of those ``modules`` Cython translates to C: one it cannot (a newer
    Cython refusing a construct) stays pure rather than failing the install."""
    from Cython.Build import cythonize
    from Cython.Compiler.Errors import CompileError
    options = {"quiet": True, "compiler_directives": {"language_level": 3, "binding": True,
                                                       "annotation_typing": False}}
    try:
        return cythonize(modules, nthreads=os.cpu_count() or 1, **options)
    except CompileError:
        kept = []
        for module in modules:
            try:
                kept += cythonize([module], **options)
            except CompileError:
                print(f"sparktimely: {module.sources[0]} stays pure Python (Cython cannot "
                      f"translate it)")
        return kept


if __name__ == "__main__":           # as setuptools runs it (tests import cythonized)
    setup(ext_modules=extensions(), options={"build_ext": {"parallel": os.cpu_count() or 1}})
