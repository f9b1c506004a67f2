"""Where a module of the package runs compiled (``sparktimely/_compiled.py``), its doctests are
left to a pure-Python run (``SPARKTIMELY_PURE_PYTHON=1 pytest sparktimely``, as
``scripts/test`` does): pytest reads a module's doctests from the module it imports, and the
compiled one is not the source file it collects."""
from __future__ import annotations

import pathlib

from sparktimely._compiled import compiled_twin

PACKAGE = pathlib.Path(__file__).resolve().parent / "sparktimely"


def pytest_ignore_collect(collection_path: pathlib.Path, config) -> bool | None:
    if (collection_path.suffix == ".py" and collection_path.is_relative_to(PACKAGE)
            and compiled_twin(str(collection_path)) is not None):
        return True
    return None
