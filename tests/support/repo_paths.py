"""Where the tests find the repository (docs, conformance/gpu_check.sh, the source tree) and their
data folders (tests/cuda_corpus, tests/port_corpus, tests/port_real, tests/kernels_check_data),
from any folder under tests/."""
from pathlib import Path

TESTS = Path(__file__).resolve().parents[1]
ROOT = TESTS.parent
