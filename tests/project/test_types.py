"""The type checker on the public API and the backend interface (the files listed under
``[tool.mypy]`` in pyproject.toml): an annotation that lies about what a backend method or a
public function takes or returns fails here, not in a user's program."""

import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def test_mypy_passes_on_the_public_api_and_the_backend_interface():
    proc = subprocess.run([sys.executable, "-m", "mypy"], cwd=ROOT, capture_output=True,
                          text=True, timeout=600)
    assert proc.returncode == 0, proc.stdout + proc.stderr
