"""Entry point of the Bazel py_test targets (tests/BUILD): runs pytest on the files given as
arguments, from the runfiles tree, with the repository's pytest.ini."""

import sys

import pytest

if __name__ == "__main__":
    sys.exit(pytest.main(["-q", *sys.argv[1:]]))
