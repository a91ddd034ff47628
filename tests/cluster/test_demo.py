"""README's run command (`make run` = examples/demo.py) end to end, as a new user would see it."""

from __future__ import annotations

import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def test_the_demo_runs_end_to_end_without_a_rebalance():
    start = time.monotonic()
    done = subprocess.run(
        [sys.executable, str(ROOT / "examples" / "demo.py")], capture_output=True, text=True, timeout=120, cwd=ROOT
    )
    elapsed = time.monotonic() - start
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    out = done.stdout
    assert "every partition has exactly one owner, all in generation 1" in out
    assert "$ kill -9 " in out
    assert "-> no rebalance: every worker still owns its partitions in generation 1" in out
    assert "demo   Stable" in out
    assert "removed" in out.splitlines()[-1]
    print(f"demo took {elapsed:.1f} s")
