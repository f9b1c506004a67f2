"""Optional dependencies (setup.cfg's extras): one line saying what to install when one is
missing, instead of an ImportError deep inside.

``require("pyspark", "spark", "sparktimely.barrier")`` raises :class:`ExtraMissing` (a
``ModuleNotFoundError``, so ``except ImportError`` catches it) when pyspark cannot be imported.
If nothing catches it, the program ends with that one line on stderr and status 1, not a
traceback: what went wrong is that something is not installed, and the line says how to
install it.
"""
from __future__ import annotations

import importlib.metadata
import importlib.util
import json
import sys
from types import TracebackType
from urllib.parse import unquote, urlparse


class ExtraMissing(ModuleNotFoundError):
    """A module that an extra of sparktimely provides is not installed."""


def require(module: str, extra: str, user: str) -> None:
    """Raise :class:`ExtraMissing` unless ``module`` can be imported: ``user`` (what needs
    it) needs ``module``, which installing the extra installs: ``pip install
    'sparktimely[extra]'``, or, when sparktimely was installed from a directory (a checkout),
    the same install of that directory (sparktimely is not on the package index).

    >>> require("json", "spark", "this example")
    >>> require("no_such_module", "spark", "this example")  # doctest: +ELLIPSIS
    Traceback (most recent call last):
    sparktimely._extras.ExtraMissing: this example needs no_such_module, which is not installed: pip install '...[spark]'
    """
    if importlib.util.find_spec(module) is not None:
        return
    _tell_in_one_line()
    raise ExtraMissing(f"{user} needs {module}, which is not installed: "
                       f"pip install '{installed_from() or 'sparktimely'}[{extra}]'", name=module)


def installed_from() -> str | None:
    """The directory sparktimely was installed from (pip's record of a local install), or
    None (installed from an archive or index, or not installed)."""
    try:
        record = importlib.metadata.distribution("sparktimely").read_text("direct_url.json")
    except importlib.metadata.PackageNotFoundError:
        return None
    if not record:
        return None
    url = urlparse(json.loads(record).get("url", ""))
    return unquote(url.path) if url.scheme == "file" and "dir_info" in record else None


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
