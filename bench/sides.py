"""Where each side of a comparison runs: our CLI with this project importable, the reference SDK in its own venv.

Shared by the parity and inference benchmarks, which both run the two sides as subprocesses.
"""

from __future__ import annotations

import os
import shutil
import subprocess
from pathlib import Path

__all__ = [
    "DEFAULT_REFERENCE_PYTHON",
    "INSTALL_HINT",
    "PROJECT_ROOT",
    "REFERENCE_RUNNER",
    "RunError",
    "our_env",
    "probe_reference",
    "reference_env",
    "reference_python",
]

PROJECT_ROOT = Path(__file__).resolve().parent.parent
DEFAULT_REFERENCE_PYTHON = "/work/refvenv/bin/python"
REFERENCE_RUNNER = PROJECT_ROOT / "bench" / "reference_runner.py"
INSTALL_HINT = (
    "create a Python 3.11 venv and run `pip install nemo-platform-plugin==0.1.0 pyarrow jinja2 jsonschema "
    "jsonpath-ng sacrebleu rouge-score pandas` in it, then pass its python with --reference-python "
    f"or REFERENCE_PYTHON (default {DEFAULT_REFERENCE_PYTHON})"
)


class RunError(RuntimeError):
    """A benchmark run (either side) failed."""


def our_env() -> dict[str, str]:
    """Our environment with the project root first on PYTHONPATH, so the subprocess runs this checkout."""
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(PROJECT_ROOT), env.get("PYTHONPATH")]))
    return env


def reference_env() -> dict[str, str]:
    """Our environment without what would make the reference's Python see this project or our venv."""
    return {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "VIRTUAL_ENV")}


def reference_python(arg: str | None) -> str:
    """The reference's Python: the flag, else ``$REFERENCE_PYTHON``, else the default venv."""
    return arg or os.environ.get("REFERENCE_PYTHON") or DEFAULT_REFERENCE_PYTHON


def probe_reference(python: str) -> str | None:
    """The SDK's version string, or None when that Python cannot import it."""
    if not (Path(python).exists() or shutil.which(python)):
        return None
    try:
        done = subprocess.run(
            [python, str(REFERENCE_RUNNER), "--probe"],
            env=reference_env(),
            capture_output=True,
            text=True,
            timeout=120,
        )
    except (OSError, subprocess.TimeoutExpired):
        return None
    return (done.stdout.strip() or "unknown") if done.returncode == 0 else None
