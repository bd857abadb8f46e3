"""The fault tests (issue 28) import the OpenCL tests' shared helpers from tests/: pytest puts
only this folder on sys.path for the files in it."""
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
