"""``experiments/benchmarks.py --assemble``: a command's table goes between its markers in
BENCHMARKS.md with its headings nested under the hand-written heading above it, the same text
however often it is assembled. The script defines absl flags of its own, so it runs in a
subprocess."""

import subprocess
import sys

TOOL = "experiments/benchmarks.py"

DOC = """# Benchmarks

## Search time

prose
<!-- benchmarks:auto_search -->
old table
<!-- /benchmarks:auto_search -->

## Simulator components against this machine

<!-- benchmarks:fidelity_components -->
<!-- /benchmarks:fidelity_components -->
"""

TABLE = """Commit abc; load 0.5
## Placer baselines

| a |
### details
"""

COMPONENTS = """## Simulator components against this machine

### Op compute time
"""

CHILD = f"""
import importlib.util, sys
spec = importlib.util.spec_from_file_location("benchmarks", {TOOL!r})
tool = sys.modules["benchmarks"] = importlib.util.module_from_spec(spec)
spec.loader.exec_module(tool)
doc, out = sys.argv[1], sys.argv[2]
print(",".join(tool.assemble(out, doc)))
"""


def _assemble(tmp_path):
    result = subprocess.run([sys.executable, "-c", CHILD, str(tmp_path / "B.md"), str(tmp_path)],
                            capture_output=True, text=True, check=True)
    return result.stdout.strip(), (tmp_path / "B.md").read_text()


def test_tables_nest_under_their_heading_and_assembling_again_changes_nothing(tmp_path):
    (tmp_path / "B.md").write_text(DOC)
    (tmp_path / "auto_search.md").write_text(TABLE)
    (tmp_path / "fidelity_components.md").write_text(COMPONENTS)
    done, text = _assemble(tmp_path)
    assert done == "auto_search,fidelity_components"
    assert "old table" not in text
    headings = [line for line in text.splitlines() if line.startswith("#")]
    assert headings == ["# Benchmarks", "## Search time", "### Placer baselines", "#### details",
                        "## Simulator components against this machine", "### Op compute time"]
    (tmp_path / "auto_search.md").unlink()
    (tmp_path / "fidelity_components.md").unlink()
    done, again = _assemble(tmp_path)
    assert done == "" and again == text
