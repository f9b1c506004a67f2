"""``python -m sparktimely.profile LOGDIR [-o FILE]``: an HTML profile of a run from the
logs its workers wrote with :func:`sparktimely.logging.log_to_directory` (the dataflow
picture, time and records per operator, a timeline per worker); see
:mod:`sparktimely.logging.report`.

>>> import tempfile
>>> from sparktimely.profile import main
>>> main([tempfile.mkdtemp()])                       # no logs there: a usage error
Traceback (most recent call last):
SystemExit: 2
"""
from __future__ import annotations

import sys

from .logging.report import main

if __name__ == "__main__":
    sys.exit(main())
