"""Which of sparktimely's modules run compiled.

An install with a C compiler builds the modules on the per-update path (the progress tracker,
the dataflow's scheduling, the transports between workers, hashing, differential's inputs,
traces and operators: ``COMPILED`` in ``setup.py``)
with Cython, unchanged, each beside its source. Python's import system prefers a compiled
module to its source; :func:`install` adds the two exceptions a user needs, before any
compiled module is imported:

- ``SPARKTIMELY_PURE_PYTHON=1`` imports every module from its source (to profile or debug the
  Python, or to run what an executor that gets only shipped sources runs);
- in a source checkout (``setup.py`` beside the package), a compiled module older than its
  source is not used, so an edit takes effect at once (``pip install -e .`` builds it
  again). An installed package's files carry the times pip unpacked them at, which say
  nothing of edits: there the compiled modules are always used.

Executors that get only the package's sources (``sparktimely.barrier`` ships its ``.py``
files) run the same code pure.

>>> import sparktimely
>>> all(name.startswith("sparktimely.") for name in compiled_modules())
True
"""
from __future__ import annotations

import importlib.machinery
import importlib.util
import os
import sys
from importlib.abc import MetaPathFinder
from importlib.machinery import ModuleSpec
from typing import Sequence

PURE_PYTHON = "SPARKTIMELY_PURE_PYTHON"
"""The environment variable that, set to ``1``, makes sparktimely import no compiled module."""


CHECKOUT = os.path.exists(os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(
    __file__))), "setup.py"))
"""True where the package is a source checkout's (``setup.py`` beside it), not installed."""


def pure_python() -> bool:
    """True if ``SPARKTIMELY_PURE_PYTHON=1`` asks for the pure-Python modules only.

    >>> pure_python() == (os.environ.get("SPARKTIMELY_PURE_PYTHON") == "1")
    True
    """
    return os.environ.get(PURE_PYTHON) == "1"


def compiled_twin(source: str) -> str | None:
    """The compiled module that Python would import for the module in ``source`` (a ``.py``
    path), or None where the source itself runs (no compiled module beside it, pure Python
    asked for, or, in a source checkout, one older than the source).

    >>> import sparktimely.progress.frontier as frontier
    >>> source = os.path.join(os.path.dirname(frontier.__file__), "frontier.py")
    >>> (compiled_twin(source) or source) == frontier.__file__
    True
    """
    built = _built_beside(source)
    return built if built is not None and _used(source, built) else None


def _built_beside(source: str) -> str | None:
    """The compiled module beside ``source``, used or not (None: there is none)."""
    stem = source[:-len(".py")]
    return next((stem + suffix for suffix in importlib.machinery.EXTENSION_SUFFIXES
                 if os.path.exists(stem + suffix)), None)


def _used(source: str, built: str) -> bool:
    """Whether Python should import ``built`` rather than its ``source`` (see the module
    doc)."""
    if pure_python():
        return False
    return not CHECKOUT or os.stat(built).st_mtime >= os.stat(source).st_mtime


class _SourceFinder(MetaPathFinder):
    """Finds a sparktimely module's source where a compiled module beside it must not be
    used (:func:`compiled_twin`); otherwise leaves the module to Python's own finders."""

    def find_spec(self, fullname: str, path: Sequence[str] | None,
                  target: object = None) -> ModuleSpec | None:
        if not fullname.startswith("sparktimely.") or not path:
            return None
        leaf = fullname.rpartition(".")[2]
        for directory in path:
            source = os.path.join(directory, leaf + ".py")
            if not os.path.exists(source):
                continue
            built = _built_beside(source)
            if built is not None and not _used(source, built):
                return importlib.util.spec_from_file_location(fullname, source)
            return None                       # Python's finders take what is there
        return None


def install() -> None:
    """Put the finder ahead of Python's own (once per process)."""
    if not any(isinstance(finder, _SourceFinder) for finder in sys.meta_path):
        sys.meta_path.insert(0, _SourceFinder())


def compiled_modules() -> list[str]:
    """The names of the sparktimely modules imported so far that run compiled.

    >>> import sparktimely.progress.frontier
    >>> ("sparktimely.progress.frontier" in compiled_modules()) == (
    ...     not sparktimely.progress.frontier.__file__.endswith(".py"))
    True
    """
    suffixes = tuple(importlib.machinery.EXTENSION_SUFFIXES)
    return sorted(name for name, module in list(sys.modules.items())
                  if name.startswith("sparktimely.")
                  and (getattr(module, "__file__", None) or "").endswith(suffixes))
