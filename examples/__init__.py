"""Runnable example programs (``python -m examples.NAME``)."""
