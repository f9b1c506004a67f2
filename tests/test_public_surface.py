"""The public surface documents itself and hides its internals.

- Every name in ``sparktimely.__all__`` and in the ``__all__`` of every public submodule has
  a docstring with a runnable example (``>>>``), defined in a module whose doctests
  ``scripts/test`` runs (``--doctest-modules`` over ``sparktimely/``).
- Every such name is defined in a public module (no ``_`` in its dotted path), so nothing
  leaks from a private module (``WorkerError`` is defined in ``sparktimely.errors``).
- Names in ``__all__`` do not start with ``_``; public callables are annotated.
"""
from __future__ import annotations

import importlib
import inspect
import pkgutil

import pytest

import sparktimely


def _private(dotted: str) -> bool:
    return any(part.startswith("_") for part in dotted.split("."))


def _public_modules() -> list:
    modules = [sparktimely]
    for info in pkgutil.walk_packages(sparktimely.__path__, "sparktimely."):
        if not _private(info.name):
            modules.append(importlib.import_module(info.name))
    return [m for m in modules if hasattr(m, "__all__")]


def _public_names() -> list[tuple[str, str]]:
    return [(module.__name__, name) for module in _public_modules() for name in module.__all__]


def test_the_public_modules_export_the_documented_surface():
    names = dict.fromkeys(sparktimely.__all__)
    for required in ("Stream", "Scope", "Antichain", "Sequencer", "EventWriter", "EventReader",
                     "replay_into", "FrontierInterest", "WorkerError", "OperatorError",
                     "CapabilityError", "CycleError"):
        assert required in names
    assert len(_public_names()) > len(sparktimely.__all__)


@pytest.mark.parametrize("module, name", _public_names())
def test_every_public_name_has_a_runnable_example_in_a_public_module(module, name):
    assert not name.startswith("_")
    obj = getattr(importlib.import_module(module), name)
    doc = inspect.getdoc(obj) or ""
    assert ">>>" in doc, f"{module}.{name} has no runnable example in its docstring"
    origin = getattr(obj, "__module__", None) or module
    assert origin.startswith("sparktimely"), f"{module}.{name} is defined outside the package"
    assert not _private(origin), f"{module}.{name} leaks from private module {origin}"


def test_the_io_and_logging_submodules_come_with_the_package_but_not_with_a_star_import():
    """As trio's submodules do: ``st.io`` and ``st.logging`` are public (docs/API.md) and
    imported with the package, but not in ``__all__``, so ``from sparktimely import *`` does
    not replace the standard library's ``io`` and ``logging`` in the importing module."""
    import io
    import logging
    for name, module in (("io", io), ("logging", logging)):
        assert getattr(sparktimely, name).__name__ == f"sparktimely.{name}"
        assert name not in sparktimely.__all__
    namespace: dict = {"io": io, "logging": logging}
    exec("from sparktimely import *", namespace)
    assert (namespace["io"], namespace["logging"]) == (io, logging)


def _annotated(function) -> bool:
    try:
        signature = inspect.signature(function)
    except (TypeError, ValueError):
        return True
    parameters = [p for p in signature.parameters.values()
                  if p.name not in ("self", "cls") and p.kind not in (p.VAR_POSITIONAL,
                                                                         p.VAR_KEYWORD)]
    return (all(p.annotation is not p.empty for p in parameters)
            and (signature.return_annotation is not signature.empty
                 or function.__name__ == "__init__"))


def test_public_callables_of_the_top_level_are_annotated():
    missing = []
    for name in sparktimely.__all__:
        obj = getattr(sparktimely, name)
        if inspect.isfunction(obj):
            members = [(name, obj)]
        elif inspect.isclass(obj):
            members = [(f"{name}.{attr}", member) for attr, member in vars(obj).items()
                       if inspect.isfunction(member) and not attr.startswith("_")]
            for base in obj.__mro__[1:]:
                if base.__module__.startswith("sparktimely"):
                    members += [(f"{name}.{attr}", member) for attr, member in vars(base).items()
                                if inspect.isfunction(member) and not attr.startswith("_")]
        else:
            continue
        missing += [label for label, member in members if not _annotated(member)]
    assert not sorted(set(missing))


def test_private_modules_are_named_so():
    """Modules that the package's own ``__init__`` files import only to re-export from are
    private (``_name``): every public module is importable on its own and documented."""
    for module in _public_modules():
        assert module.__doc__, f"{module.__name__} has no module docstring"


def test_the_differential_layers_methods_have_runnable_examples():
    """docs/API.md's promise, for the classes users call most: every public method and
    property of a collection, an input session, an arrangement and a trace handle shows a
    runnable example (``help(dd.Collection.join)``)."""
    import sparktimely.differential as dd
    missing = [f"{cls.__name__}.{name}"
               for cls in (dd.Collection, dd.InputSession, dd.Arranged, dd.TraceHandle,
                           dd.Variable)
               for name, member in inspect.getmembers(cls)
               if not name.startswith("_") and (callable(member) or isinstance(member, property))
               and ">>>" not in (inspect.getdoc(member) or "")]
    assert missing == []


def _contract_signatures() -> list[tuple[str, object, list[str]]]:
    import sparktimely.differential as dd
    import sparktimely.windows as win
    from sparktimely.dataflow.capability import InputCapability
    return [
        ("Stream.filter", sparktimely.Stream.filter, ["pred"]),
        ("Stream.branch", sparktimely.Stream.branch, ["pred"]),
        ("Stream.reclock", sparktimely.Stream.reclock, ["clock_stream"]),
        ("Scope.to_stream", sparktimely.Scope.to_stream, ["iterable"]),
        ("InputHandle.send", sparktimely.InputHandle.send, ["x"]),
        ("InputHandle.send_batch", sparktimely.InputHandle.send_batch, ["items"]),
        ("InputHandle.advance_to", sparktimely.InputHandle.advance_to, ["t"]),
        ("ProbeHandle.less_than", sparktimely.ProbeHandle.less_than, ["t"]),
        ("ProbeHandle.less_equal", sparktimely.ProbeHandle.less_equal, ["t"]),
        ("Capability.delayed", sparktimely.Capability.delayed, ["t"]),
        ("Capability.downgrade", sparktimely.Capability.downgrade, ["t"]),
        ("InputCapability.delayed", InputCapability.delayed, ["t"]),
        ("FrontierNotificator.notify_at", sparktimely.FrontierNotificator.notify_at, ["cap"]),
        ("FrontierNotificator.for_each", sparktimely.FrontierNotificator.for_each,
         ["frontiers", "f"]),
        ("Antichain.insert", sparktimely.Antichain.insert, ["t"]),
        ("Antichain.less_equal", sparktimely.Antichain.less_equal, ["t"]),
        ("Antichain.less_than", sparktimely.Antichain.less_than, ["t"]),
        ("MutableAntichain.update_iter", sparktimely.MutableAntichain.update_iter, ["pairs"]),
        ("MutableAntichain.less_equal", sparktimely.MutableAntichain.less_equal, ["t"]),
        ("MutableAntichain.less_than", sparktimely.MutableAntichain.less_than, ["t"]),
        ("MutableAntichain.count_for", sparktimely.MutableAntichain.count_for, ["t"]),
        ("ChangeBatch.update", sparktimely.ChangeBatch.update, ["t", "delta"]),
        ("stable_hash", sparktimely.stable_hash, ["x"]),
        ("dd.InputSession.insert", dd.InputSession.insert, ["x"]),
        ("dd.InputSession.remove", dd.InputSession.remove, ["x"]),
        ("dd.InputSession.update", dd.InputSession.update, ["x", "diff"]),
        ("dd.InputSession.update_at", dd.InputSession.update_at, ["x", "time", "diff"]),
        ("dd.InputSession.advance_to", dd.InputSession.advance_to, ["t"]),
        ("dd.Collection.filter", dd.Collection.filter, ["p"]),
        ("dd.Variable.set", dd.Variable.set, ["collection"]),
        ("dd.Arranged.join_core", dd.Arranged.join_core, ["other_arranged", "f"]),
        ("win.EventTimeInput.advance_to", win.EventTimeInput.advance_to, ["t"]),
    ]


@pytest.mark.parametrize("where, function, names", _contract_signatures(),
                         ids=[entry[0] for entry in _contract_signatures()])
def test_parameters_are_named_as_the_contract_names_them(where, function, names):
    """A call with the contract's keyword (``filter(pred=...)``, ``advance_to(t=...)``)
    works: the parameters carry the names the contract (shared/API.md) gives them."""
    parameters = [name for name in inspect.signature(function).parameters if name != "self"]
    assert parameters[:len(names)] == names, where
