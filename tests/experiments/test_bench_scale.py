"""``experiments/bench_scale.py`` on a tiny NMT: one round through the real
``tf-autoplace place-model`` in a fresh process, read back into the table (stage seconds, peak
memory, the same step as the command's own report)."""

import subprocess
import sys

import pytest

pytestmark = pytest.mark.slow  # a developer tool that starts TensorFlow processes


def test_one_round_of_a_small_nmt_makes_a_row(repo_root):
    done = subprocess.run(
        [sys.executable, "experiments/bench_scale.py", "--lengths=2", "--layers=1",
         "--rounds=1", "--cluster=k80x2"], capture_output=True, text=True, cwd=repo_root,
        timeout=600)
    assert done.returncode == 0, done.stderr[-2000:]
    rows = [line for line in done.stdout.splitlines() if line.startswith("| nmt1 length 2")]
    assert len(rows) == 1, done.stdout
    cells = [c.strip() for c in rows[0].strip("|").split("|")]
    assert len(cells) == 3 + 6 + 4
    stages = [float(c.split()[0]) for c in cells[3:9]]
    after = float(cells[9].split()[0])
    assert after == pytest.approx(sum(stages), abs=0.1 * len(stages))
    assert 0.3 < float(cells[10].split()[0]) < 8  # GB: TensorFlow and the model at least
    assert float(cells[12].replace(",", "")) > 0  # the predicted step, ms
    assert "- length 2: auto:" in done.stdout
