"""Runnable example programs: ``python examples/NAME.py`` (from any folder, with the file's
path), or ``python -m examples.NAME`` from the checkout's top folder."""
