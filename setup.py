"""Builds the modules on sparktimely's per-update path with Cython, unchanged, beside their
pure-Python sources (everything else is in setup.cfg).

A single-row update runs thousands of small Python calls through the progress tracker, the
operators' scheduling and differential's traces; compiled, the same code answers a
reachability update about a fifth sooner (``benchmarks/FINDINGS.md``). The build is
optional: without a C compiler, or with ``SPARKTIMELY_PURE_PYTHON=1`` set while installing,
the package installs pure Python, and it runs the same (``sparktimely/_compiled.py``).
"""
import os
from pathlib import Path

from setuptools import Extension, setup

COMPILED = [
    "sparktimely/progress/*.py",
    "sparktimely/dataflow/*.py",
    "sparktimely/differential/lattice.py",
    "sparktimely/differential/trace/*.py",
    "sparktimely/differential/operators/*.py",
    "sparktimely/differential/arrow/*.py",
]
"""Where the compiled modules are (a package's ``__init__.py`` stays pure)."""


def extensions() -> list:
    if os.environ.get("SPARKTIMELY_PURE_PYTHON") == "1":
        return []
    try:
        from Cython.Build import cythonize
    except ImportError:                  # installed without build isolation and no Cython
        return []
    modules = [Extension(".".join(path.with_suffix("").parts), [str(path)])
               for pattern in COMPILED for path in sorted(Path().glob(pattern))
               if path.name != "__init__.py"]     # paths as setuptools wants: from the root
    compiled = cythonize(modules, nthreads=os.cpu_count() or 1, quiet=True,
                         compiler_directives={"language_level": 3, "binding": True,
                                              "annotation_typing": False})
    for extension in compiled:        # a module that does not compile stays pure
        extension.optional = True     # (set here: cythonize's extensions drop the flag)
    return compiled


setup(ext_modules=extensions(), options={"build_ext": {"parallel": os.cpu_count() or 1}})
