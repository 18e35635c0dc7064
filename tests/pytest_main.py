"""Entry point of the Bazel py_test targets (tests/BUILD): runs pytest on the files given as
arguments, from the runfiles tree, with the repository's pytest.ini less its worker processes
(``-n 2``): a target runs one file, and Bazel's Python need not have pytest-xdist."""

import sys

import pytest

if __name__ == "__main__":
    sys.exit(pytest.main(["-q", "-p", "no:xdist", "-o", 'addopts=-m "not slow" -p no:cacheprovider',
                          *sys.argv[1:]]))
