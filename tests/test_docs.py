"""The repository's text files are whole: no merge left its conflict markers in a document a
user reads or a module that would not import, and every Python file compiles without a warning
(an invalid escape in a docstring warns at first import today, and is an error in later
Pythons)."""

import os
import re
import warnings

from tests.conftest import REPO

TEXT = (".md", ".py", ".txt", ".pbtxt", ".cfg", ".toml", ".json", ".proto", ".sh")
SKIP_DIRS = {"build", "dist", "node_modules", "__pycache__"}
# Git writes these at the start of a line, each with its own length of seven characters.
MARKER = re.compile(r"^(<{7} |>{7} |={7}$)", re.MULTILINE)


def _text_files(root):
    for path, dirs, files in os.walk(root):
        # (not a virtualenv made in the checkout, as the README's fresh-clone commands make
        # one: other projects' files, some with these markers in their text)
        dirs[:] = [d for d in dirs if not d.startswith(".") and d not in SKIP_DIRS
                   and not d.endswith(".egg-info")
                   and not os.path.exists(os.path.join(path, d, "pyvenv.cfg"))]
        for name in files:
            if name.endswith(TEXT):
                yield os.path.join(path, name)


def test_no_file_holds_merge_conflict_markers():
    found = []
    for path in _text_files(REPO):
        with open(path, encoding="utf-8", errors="replace") as f:
            text = f.read()
        for match in MARKER.finditer(text):
            line = text.count("\n", 0, match.start()) + 1
            found.append(f"{os.path.relpath(path, REPO)}:{line}")
    assert not found, f"merge conflict markers at {found}"


def test_the_marker_pattern_finds_what_git_writes():
    text = "a\n<<<<<<< HEAD\nb\n=======\nc\n>>>>>>> topic\n"
    assert len(MARKER.findall(text)) == 3
    assert not MARKER.findall("a ======= b\n<<<<<<<< eight\n")


def test_every_python_file_compiles_without_warnings():
    noisy = []
    for path in _text_files(REPO):
        if not path.endswith(".py"):
            continue
        with open(path, encoding="utf-8") as f:
            source = f.read()
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            compile(source, path, "exec")
        noisy += [f"{os.path.relpath(path, REPO)}: {w.message}" for w in caught]
    assert not noisy, noisy
