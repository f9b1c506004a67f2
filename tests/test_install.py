"""``pip install sparktimely`` as a new user meets it: in a fresh virtualenv (not sharing this
environment's packages), ``pip install .`` without extras brings no pyspark, the README's
first example runs, ``sparktimely.__version__`` is the package's, the modules ``setup.py``
lists run compiled where a C compiler is at hand, and the Spark parts say in one line which
extra to install; without a C compiler the install is pure Python and runs the same.

The virtualenv is kept in ``.venv-core/`` (one per set of requirements), so a rerun only
reinstalls the package, which compiles its modules again: about a minute and a half on two
cores, against two and a half the first time.
"""
from __future__ import annotations

import configparser
import hashlib
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from doc_blocks import ROOT, python_blocks

SETUP = configparser.ConfigParser()
SETUP.read(ROOT / "setup.cfg")
REQUIREMENTS = SETUP["options"]["install_requires"]
VERSION = SETUP["metadata"]["version"]
EXTRA_LINE = ("sparktimely.barrier needs pyspark, which is not installed: "
              "pip install '{source}[spark]'")


def _clone(source: Path) -> Path:
    """What a clone has in ``source``, and nothing else (no build of an earlier install)."""
    source.mkdir(exist_ok=True)
    for name in ("setup.cfg", "setup.py", "pyproject.toml", "README.md"):
        shutil.copy(ROOT / name, source / name)
    shutil.copytree(ROOT / "sparktimely", source / "sparktimely",
                    ignore=shutil.ignore_patterns("__pycache__", "*.so", "*.c"))
    return source


def _environment(tmp_path_factory) -> tuple[Path, Path]:
    """A virtualenv with this checkout installed without extras (``pip install .``), and the
    directory installed."""
    key = hashlib.sha256(f"{sys.version}\n{REQUIREMENTS}".encode()).hexdigest()[:12]
    venv = ROOT / ".venv-core" / key
    if not (venv / "bin" / "python").exists():
        shutil.rmtree(venv, ignore_errors=True)
        subprocess.run([sys.executable, "-m", "venv", str(venv)], check=True)
    source = _clone(tmp_path_factory.mktemp("source"))
    subprocess.run([venv / "bin" / "python", "-m", "pip", "install", "--quiet",
                    "--disable-pip-version-check", str(source)],
                   check=True, capture_output=True, text=True)
    return venv, source


@pytest.fixture(scope="module")
def core(tmp_path_factory) -> tuple[Path, Path]:
    return _environment(tmp_path_factory)


def _run(venv: Path, *args: str, cwd: Path) -> subprocess.CompletedProcess:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("PYTHON", "VIRTUAL_ENV"))}
    env["PATH"] = f"{venv / 'bin'}{os.pathsep}{env.get('PATH', '')}"
    return subprocess.run(list(args), cwd=cwd, env=env, capture_output=True, text=True,
                          timeout=120)


@pytest.mark.timeout(600)
def test_the_core_installs_without_pyspark_and_runs_the_first_example(core, tmp_path):
    venv, _ = core
    listed = _run(venv, "python", "-m", "pip", "list", "--format=freeze", cwd=tmp_path)
    installed = {line.split("==")[0].lower() for line in listed.stdout.splitlines()}
    assert "sparktimely" in installed and "pyspark" not in installed, listed.stdout
    _, first = python_blocks(ROOT / "README.md")[0]
    (tmp_path / "first.py").write_text(first)
    ran = _run(venv, "python", "first.py", cwd=tmp_path)
    assert ran.returncode == 0, ran.stderr
    assert sorted(map(int, ran.stdout.split())) == list(range(10))   # inspect(print) per round
    version = _run(venv, "python", "-c", "import sparktimely; print(sparktimely.__version__)",
                   cwd=tmp_path)
    assert version.stdout.strip() == VERSION, version.stderr


@pytest.mark.timeout(600)
@pytest.mark.skipif(shutil.which("cc") is None, reason="no C compiler to build modules with")
def test_an_install_with_a_c_compiler_runs_the_compiled_modules(core, tmp_path):
    venv, _ = core
    shown = _run(venv, "python", "-c", "import sparktimely.progress.reachability as r, "
                 "sparktimely.differential.arrow.reduce as d; print(r.__file__, d.__file__)",
                 cwd=tmp_path)
    assert shown.returncode == 0, shown.stderr
    assert all(not path.endswith(".py") and "site-packages" in path
               for path in shown.stdout.split()), shown.stdout


@pytest.mark.timeout(600)
def test_the_spark_parts_name_the_extra_in_one_line(core, tmp_path):
    """The line names the directory installed (sparktimely is not on the package index)."""
    venv, source = core
    line = EXTRA_LINE.format(source=source) + "\n"
    imported = _run(venv, "python", "-c", "import sparktimely.barrier", cwd=tmp_path)
    assert (imported.returncode, imported.stderr) == (1, line)
    submitted = _run(venv, "sparktimely-submit", "-w", "2", "examples.pagerank:job",
                     cwd=tmp_path)
    assert (submitted.returncode, submitted.stderr) == (1, line)
    caught = _run(venv, "python", "-c", "try:\n import sparktimely.barrier\n"
                  "except ImportError as e:\n print(type(e).__mro__[1].__name__, e.name)",
                  cwd=tmp_path)
    assert caught.stdout == "ModuleNotFoundError pyspark\n", caught.stderr


def test_a_source_checkout_that_was_never_installed_still_imports(tmp_path):
    hide = ("import importlib.metadata as m\n"
            "def version(name): raise m.PackageNotFoundError(name)\n"
            "m.version = version\n"
            "import sparktimely\n"
            "print(sparktimely.__version__)\n")
    shown = subprocess.run([sys.executable, "-c", hide], cwd=ROOT, capture_output=True,
                           text=True, timeout=60)
    assert shown.stdout == "0+unknown\n", shown.stderr


@pytest.mark.timeout(600)
def test_without_a_c_compiler_the_install_is_pure_python_and_runs(core, tmp_path):
    """Last in this module: it reinstalls the shared virtualenv's package, pure."""
    venv, _ = core
    source = _clone(tmp_path / "source")
    env = {k: v for k, v in os.environ.items() if not k.startswith(("PYTHON", "VIRTUAL_ENV"))}
    installed = subprocess.run(
        [venv / "bin" / "python", "-m", "pip", "install", "--quiet", "--no-deps",
         "--force-reinstall", "--disable-pip-version-check", str(source)],
        env={**env, "CC": "false"}, capture_output=True, text=True, timeout=500)
    assert installed.returncode == 0, installed.stderr[-3000:]
    ran = _run(venv, "python", "-c", "import sparktimely as st, sparktimely.progress.frontier "
               "as f; print(f.__file__.endswith('.py'), st.example(lambda s: s.to_stream("
               "range(3)).map(lambda x: x + 1).capture()).extract())", cwd=tmp_path)
    assert ran.stdout == "True [(0, [1, 2, 3])]\n", ran.stderr
