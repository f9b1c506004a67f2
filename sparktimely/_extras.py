"""Optional dependencies (setup.cfg's extras): one line saying what to install when one is
missing, instead of an ImportError deep inside.

``require("pyspark", "spark", "sparktimely.barrier")`` raises :class:`ExtraMissing` (a
``ModuleNotFoundError``, so ``except ImportError`` catches it) when pyspark cannot be imported.
If nothing catches it, the program ends with that one line on stderr and status 1, not a
traceback: what went wrong is that something is not installed, and the line says how to
install it.
"""
from __future__ import annotations

import importlib.util
import sys
from types import TracebackType


class ExtraMissing(ModuleNotFoundError):
    """A module that an extra of sparktimely provides is not installed."""


def require(module: str, extra: str, user: str) -> None:
    """Raise :class:`ExtraMissing` unless ``module`` can be imported: ``user`` (what needs
    it) needs ``module``, which ``pip install 'sparktimely[extra]'`` installs.

    >>> require("json", "spark", "this example")
    >>> require("no_such_module", "spark", "this example")
    Traceback (most recent call last):
    sparktimely._extras.ExtraMissing: this example needs no_such_module, which is not installed: pip install 'sparktimely[spark]'
    """
    if importlib.util.find_spec(module) is not None:
        return
    _tell_in_one_line()
    raise ExtraMissing(f"{user} needs {module}, which is not installed: "
                       f"pip install 'sparktimely[{extra}]'", name=module)


def _tell_in_one_line() -> None:
    """Have an uncaught :class:`ExtraMissing` end the program with its message alone."""
    previous = sys.excepthook
    if getattr(previous, "tells_extras", False):
        return

    def hook(kind: type[BaseException], error: BaseException,
             traceback: TracebackType | None) -> None:
        if isinstance(error, ExtraMissing):
            print(error, file=sys.stderr)
        else:
            previous(kind, error, traceback)
    hook.tells_extras = True        # type: ignore[attr-defined]
    sys.excepthook = hook
