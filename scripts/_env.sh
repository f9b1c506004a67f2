# Shared set-up for scripts/demo, scripts/test and scripts/bench: one virtual environment in
# .venv, created with Python 3.11 when missing, and the project installed into it (editable)
# with the extras the calling script names in EXTRAS (e.g. "test,spark"), whenever the build's
# files or the package's sources are newer than the last install of those extras.
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
VENV="${SPARKTIMELY_VENV:-$ROOT/.venv}"
EXTRAS="${EXTRAS:?the script sourcing _env.sh sets EXTRAS}"
PY="${PYTHON:-}"
if [ -z "$PY" ]; then
  for cand in python3.11 python3; do
    if command -v "$cand" >/dev/null 2>&1; then PY="$cand"; break; fi
  done
fi
if [ ! -x "$VENV/bin/python" ]; then
  echo "sparktimely: creating $VENV with $("$PY" --version 2>&1)" >&2
  "$PY" -m venv "$VENV"
fi
STAMP="$VENV/.sparktimely-installed-${EXTRAS//,/-}"
# The install also compiles the modules setup.py lists, beside their sources; a compiled
# module older than its source is not used (sparktimely/_compiled.py), so a source (or the
# .pxd that declares its classes for Cython) edited since the last install is a reason to
# install (and compile) again.
if [ ! -f "$STAMP" ] || [ "$ROOT/setup.cfg" -nt "$STAMP" ] || [ "$ROOT/setup.py" -nt "$STAMP" ] \
    || [ "$ROOT/pyproject.toml" -nt "$STAMP" ] \
    || [ -n "$(find "$ROOT/sparktimely" \( -name '*.py' -o -name '*.pxd' \) -newer "$STAMP" \
          -print -quit)" ]; then
  echo "sparktimely: installing the project with its extras [$EXTRAS] into $VENV" >&2
  "$VENV/bin/python" -m pip install --quiet --upgrade pip
  "$VENV/bin/python" -m pip install --quiet -e "$ROOT[$EXTRAS]"
  touch "$STAMP"
fi
export PATH="$VENV/bin:$PATH"
export PYSPARK_PYTHON="$VENV/bin/python"
cd "$ROOT"
