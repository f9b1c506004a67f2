# Shared set-up for scripts/demo and scripts/test: one virtual environment in .venv,
# created with Python 3.11 when missing, and the project installed into it (editable)
# whenever setup.cfg is newer than the last install.
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
VENV="${SPARKTIMELY_VENV:-$ROOT/.venv}"
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
STAMP="$VENV/.sparktimely-installed"
if [ ! -f "$STAMP" ] || [ "$ROOT/setup.cfg" -nt "$STAMP" ]; then
  echo "sparktimely: installing the project and its test dependencies into $VENV" >&2
  "$VENV/bin/python" -m pip install --quiet --upgrade pip
  "$VENV/bin/python" -m pip install --quiet -e "$ROOT[test]"
  touch "$STAMP"
fi
export PATH="$VENV/bin:$PATH"
export PYSPARK_PYTHON="$VENV/bin/python"
cd "$ROOT"
