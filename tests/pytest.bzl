"""pytest_test: a py_test that runs pytest (tests/pytest_main.py) on one test file.

The file runs inside the runfiles tree with the repository's pytest.ini and tests/conftest.py,
against //tf_autoplace; Python packages come from the system python3 (README "Building with
Bazel")."""

def pytest_test(name, test_file, srcs = [], data = [], size = "small", **kwargs):
    """Args: test_file: the test module (relative to tests/); srcs: other Python files it
    imports (e.g. a package's __init__.py); data: files it reads."""
    native.py_test(
        name = name,
        size = size,
        srcs = ["pytest_main.py", test_file] + srcs,
        main = "pytest_main.py",
        args = ["$(location %s)" % test_file],
        data = ["conftest.py", "//:pytest.ini"] + data,
        deps = ["//tf_autoplace"],
        **kwargs
    )
