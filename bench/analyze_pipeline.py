"""Wall time and peak memory of `groupcoord analyze` on synthetic events (issue 7: 1M events in <= 45 s on 2 cores).

    .venv/bin/python bench/analyze_pipeline.py [--sizes 100000,1000000] [--runs 3] [--work DIR] [--seed 1] [--json]

Generates the event sets with bench/events_synth.py once (kept in --work per size and seed), then runs the real
command, `groupcoord analyze --events ... --out ...`, as a child process. Wall time is from its start to its exit,
the JVM's start included. Memory is the peak of the summed RSS of the whole process tree (the Python driver and the
JVM it starts), sampled from /proc every 50 ms. CPU is the tree's user + system time: with the load average printed
per run, it tells a busy machine apart from a slow job. Each run's summary.json is checked against the generator's
truth. Prints figures; nothing is asserted (docs/PERFORMANCE.md records the runs).
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import shutil
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from dataclasses import asdict, dataclass
from importlib.metadata import version
from pathlib import Path
from typing import Any

from groupcoord.bench import events_synth

PAGE = os.sysconf("SC_PAGE_SIZE")
TICK = os.sysconf("SC_CLK_TCK")
MIB = 1 << 20
# The kernel's PF_FORKNOEXEC: a process between fork and exec. The JVM starts its helpers (Hadoop's chmod, ...)
# that way; until the exec such a child maps the JVM's own pages, and counting them would double the JVM.
FORKED_NO_EXEC = 0x40


def _tree(root: int) -> list[int]:
    """The process and its live descendants (every thread may have forked some)."""
    found, todo = [], [root]
    while todo:
        pid = todo.pop()
        found.append(pid)
        try:
            for task in os.scandir(f"/proc/{pid}/task"):
                with open(f"{task.path}/children") as f:
                    todo.extend(int(child) for child in f.read().split())
        except OSError:  # it exited meanwhile
            continue
    return found


class TreeSampler(threading.Thread):
    """Samples a process tree until stopped: the peak of its summed RSS, and each process's last CPU time."""

    def __init__(self, root: int, interval: float = 0.05) -> None:
        super().__init__(daemon=True)
        self.root, self.interval = root, interval
        self.peak_rss = 0
        self.cpu_ticks: dict[int, int] = {}
        self._done = threading.Event()

    def run(self) -> None:
        while not self._done.is_set():
            rss = 0
            for pid in _tree(self.root):
                try:
                    with open(f"/proc/{pid}/stat") as f:
                        stat = f.read()
                    with open(f"/proc/{pid}/statm") as f:
                        resident = int(f.read().split()[1]) * PAGE
                except OSError:
                    continue
                fields = stat[stat.rindex(")") + 2 :].split()
                self.cpu_ticks[pid] = int(fields[11]) + int(fields[12])  # utime, stime
                if not int(fields[6]) & FORKED_NO_EXEC:
                    rss += resident
            self.peak_rss = max(self.peak_rss, rss)
            self._done.wait(self.interval)

    def stop(self) -> None:
        self._done.set()
        self.join()


@dataclass
class Run:
    wall_s: float
    peak_rss_mib: float
    cpu_s: float
    load_before: float  # 1-minute load average when the run started
    load_after: float


def run_once(command: list[str], log: Path) -> Run:
    """One run of the command: wall time to its exit, peak tree RSS and tree CPU time."""
    load_before = os.getloadavg()[0]
    with log.open("w") as out:
        start = time.perf_counter()
        child = subprocess.Popen(command, stdout=out, stderr=subprocess.STDOUT)
        sampler = TreeSampler(child.pid)
        sampler.start()
        _, status, usage = os.wait4(child.pid, 0)
        wall = time.perf_counter() - start
        child.returncode = os.waitstatus_to_exitcode(status)
        sampler.stop()
    if child.returncode != 0:
        raise RuntimeError(f"{' '.join(command)} exited {child.returncode}:\n{log.read_text()[-3000:]}")
    # The root's own CPU from the kernel (its reaped children included); the others' as last sampled.
    others = sum(ticks for pid, ticks in sampler.cpu_ticks.items() if pid != child.pid) / TICK
    cpu = usage.ru_utime + usage.ru_stime + others
    return Run(round(wall, 2), round(sampler.peak_rss / MIB, 1), round(cpu, 1), load_before, os.getloadavg()[0])


def analyze_command() -> list[str]:
    """The installed `groupcoord` next to this interpreter, else `python -m groupcoord`."""
    script = Path(sys.executable).with_name("groupcoord")
    return [str(script)] if script.exists() else [sys.executable, "-m", "groupcoord"]


def event_set(size: int, seed: int, work: Path) -> tuple[Path, dict[str, Any]]:
    """The events of this size and seed and their truth, generated unless a complete set is there."""
    folder = work / f"events-{size}-seed{seed}"
    truth_file = folder / "truth.json"
    if not truth_file.exists():
        start = time.perf_counter()
        events_synth.generate(size, folder, seed=seed)
        print(f"generated {size} events in {time.perf_counter() - start:.1f} s -> {folder}", file=sys.stderr)
    return folder, json.loads(truth_file.read_text())


def check(out: Path, truth: dict[str, Any]) -> None:
    """The job analysed every event and found the generator's rebalances."""
    summary = json.loads((out / "summary.json").read_text())
    found = (summary["input"]["analysed"], summary["corrupt_lines"], summary["tables"]["rebalances"])
    expected = (truth["events"], 0, truth["rebalances"])
    if found != expected:
        raise RuntimeError(f"{out}: (analysed, corrupt, rebalances) {found}, expected {expected}")


def machine() -> dict[str, Any]:
    cpuinfo = Path("/proc/cpuinfo").read_text().splitlines()
    model = next((line.split(":", 1)[1].strip() for line in cpuinfo if line.startswith("model name")), "?")
    meminfo = Path("/proc/meminfo").read_text().split()
    java = subprocess.run(["java", "-version"], capture_output=True, text=True).stderr.splitlines()
    return {
        "cores": os.cpu_count(),
        "cpu": model,
        "ram_gib": round(int(meminfo[meminfo.index("MemTotal:") + 1]) / (1 << 20), 1),
        "os": platform.platform(),
        "python": platform.python_version(),
        "java": java[0] if java else "?",
        "pyspark": version("pyspark"),
    }


def summarise(size: int, runs: list[Run]) -> dict[str, Any]:
    walls, rss = [r.wall_s for r in runs], [r.peak_rss_mib for r in runs]
    loads = [load for r in runs for load in (r.load_before, r.load_after)]
    median = statistics.median(walls)
    return {
        "events": size,
        "runs": len(runs),
        "wall_s": {"median": median, "min": min(walls), "max": max(walls)},
        "peak_rss_mib": {"median": statistics.median(rss), "max": max(rss)},
        "cpu_s_median": statistics.median(r.cpu_s for r in runs),
        "events_per_s": round(size / median),
        "load_1min": {"min": min(loads), "max": max(loads)},
        "each": [asdict(r) for r in runs],
    }


def table(results: list[dict[str, Any]]) -> str:
    head = "| events | runs | wall s median | min | max | peak RSS MiB | CPU s | events/s | load 1 min |"
    lines = [head, "|" + "---|" * (head.count("|") - 1)]
    for r in results:
        wall, load = r["wall_s"], r["load_1min"]
        lines.append(
            f"| {r['events']:,} | {r['runs']} | {wall['median']:.1f} | {wall['min']:.1f} | {wall['max']:.1f} | "
            f"{r['peak_rss_mib']['median']:.0f} | {r['cpu_s_median']:.0f} | {r['events_per_s']:,} | "
            f"{load['min']:.1f}-{load['max']:.1f} |"
        )
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sizes", default="100000,1000000", help="event counts, comma-separated")
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--work", type=Path, default=Path(tempfile.gettempdir()) / "groupcoord-bench-analyze",
                        help="where the event sets are kept between invocations, and the runs' output")  # fmt: skip
    parser.add_argument("--pause", type=float, default=2.0, help="seconds between runs (the last JVM exits)")
    parser.add_argument("--json", action="store_true", help="print the figures as JSON instead of a table")
    args = parser.parse_args(argv)
    command = analyze_command()
    results = []
    for size in (int(s) for s in args.sizes.split(",")):
        events, truth = event_set(size, args.seed, args.work)
        runs = []
        for i in range(args.runs):
            out = args.work / f"out-{size}"
            shutil.rmtree(out, ignore_errors=True)
            time.sleep(args.pause)
            run = run_once([*command, "analyze", "--events", str(events), "--out", str(out)], args.work / "run.log")
            check(out, truth)
            print(f"{size} events, run {i + 1}: {run}", file=sys.stderr)
            runs.append(run)
        results.append(summarise(size, runs))
    found = {"machine": machine(), "command": " ".join([*command, "analyze", "--events DIR --out DIR"]),
             "results": results}  # fmt: skip
    print(json.dumps(found, indent=2) if args.json else f"{json.dumps(found['machine'])}\n{table(results)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
