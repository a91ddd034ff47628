"""deploy/monitoring: the Prometheus alert rules and the Grafana dashboard, checked with promtool and against the
metrics a real node exports.

* `promtool check rules` validates alerts.yml and `promtool test rules` runs its unit tests (alerts.test.yml).
* promtool 2.42 has no command that only parses an expression, so every dashboard query becomes a recording rule of
  a generated rule file that `promtool check rules` parses.
* Every metric a dashboard query or an alert names must be one a node exports: its /metrics declares each family
  (`# TYPE`), samples or not, and a histogram's `_bucket`, `_sum` and `_count` and a counter's `_total` are counted.

A missing promtool is a failure that names what to install (Debian's `prometheus`, scripts/system-deps), never a skip.
"""

from __future__ import annotations

import json
import re
import shutil
import subprocess
import urllib.request
from functools import cache
from pathlib import Path
from typing import Any

import pytest
import yaml
from prometheus_client.parser import text_string_to_metric_families

from tests.e2e.support import start_node, stop_node
from tests.e2e.test_metrics import metrics_address

ROOT = Path(__file__).resolve().parents[2]
MONITORING = ROOT / "deploy" / "monitoring"
DASHBOARD = MONITORING / "grafana-dashboard.json"
ALERTS = MONITORING / "alerts.yml"
# What the dashboard's variables stand for when its queries are checked.
VARIABLES = {"$__rate_interval": "5m", "$instance": ".*", "$group": ".*", "$job": "groupcoord"}
# Series Prometheus makes itself, not the node.
PROMETHEUS_SERIES = {"up"}
PROMQL_KEYWORDS = {"by", "without", "on", "ignoring", "group_left", "group_right", "bool", "and", "or", "unless"}
SUFFIXES = {"counter": ("_total",), "histogram": ("_bucket", "_sum", "_count"), "summary": ("", "_sum", "_count")}


@cache
def promtool() -> str:
    found = shutil.which("promtool")
    if found is None:
        pytest.fail("promtool is not installed: apt-get install prometheus (Debian; scripts/system-deps does it)")
    return found


def run_promtool(*args: str, cwd: Path = MONITORING) -> subprocess.CompletedProcess[str]:
    return subprocess.run([promtool(), *args], cwd=cwd, capture_output=True, text=True, timeout=60)


def dashboard_queries() -> list[tuple[str, str]]:
    """(panel title, expression) of every query of every panel, the variables replaced."""
    queries = []
    for panel in json.loads(DASHBOARD.read_text())["panels"]:
        for target in panel.get("targets", ()):
            expr = target["expr"]
            for variable, value in VARIABLES.items():
                expr = expr.replace(variable, value)
            queries.append((panel["title"], expr))
    return queries


def alert_queries() -> list[tuple[str, str]]:
    rules = yaml.safe_load(ALERTS.read_text())
    return [(rule["alert"], rule["expr"]) for group in rules["groups"] for rule in group["rules"]]


def metric_names(expr: str) -> set[str]:
    """The metric names a PromQL expression selects: the identifiers left once strings, label matchers, ranges and
    grouping clauses are gone, except functions and aggregations (followed by a parenthesis) and keywords."""
    text = re.sub(r'"(?:[^"\\]|\\.)*"', '""', expr)
    text = re.sub(r"\{[^}]*\}", "{}", text)
    text = re.sub(r"\[[^\]]*\]", "[]", text)
    text = re.sub(r"\b(?:by|without|on|ignoring|group_left|group_right)\s*\([^)]*\)", " ", text)
    names = set()
    for match in re.finditer(r"[A-Za-z_:][A-Za-z0-9_:]*", text):
        if text[match.end() :].lstrip().startswith("(") or match.group(0) in PROMQL_KEYWORDS:
            continue
        names.add(match.group(0))
    return names


def exported_names(exposition: str) -> set[str]:
    """Every series name the exposition declares, with the suffixes its type gives its samples."""
    names = set()
    for family in text_string_to_metric_families(exposition):
        names.update(family.name + suffix for suffix in SUFFIXES.get(family.type, ("",)))
    return names


def test_the_alert_rules_are_valid_and_their_unit_tests_pass():
    checked = run_promtool("check", "rules", ALERTS.name)
    assert checked.returncode == 0, checked.stdout + checked.stderr
    assert f"SUCCESS: {len(alert_queries())} rules found" in checked.stdout
    tested = run_promtool("test", "rules", "alerts.test.yml")
    assert tested.returncode == 0, tested.stdout + tested.stderr
    # Each alert has a case that expects it to fire.
    cases = yaml.safe_load((MONITORING / "alerts.test.yml").read_text())["tests"]
    fired = {t["alertname"] for case in cases for t in case["alert_rule_test"] if t["exp_alerts"]}
    assert fired == {name for name, _ in alert_queries()}


def test_every_dashboard_query_parses(tmp_path: Path):
    queries = dashboard_queries()
    assert not [expr for _, expr in queries if "$" in expr], "a dashboard variable the check does not replace"

    def check(exprs: list[str]) -> subprocess.CompletedProcess[str]:
        rules: dict[str, Any] = {
            "groups": [
                {
                    "name": "dashboard",
                    "rules": [{"record": f"dashboard:query_{i}", "expr": e} for i, e in enumerate(exprs)],
                }
            ]
        }
        path = tmp_path / "dashboard-rules.yml"
        path.write_text(yaml.safe_dump(rules))
        return run_promtool("check", "rules", str(path), cwd=tmp_path)

    checked = check([expr for _, expr in queries])
    assert checked.returncode == 0, checked.stdout + checked.stderr
    # The same check does refuse an expression that does not parse.
    broken = check(["sum by (api) (rate(groupcoord_requests_total[5m])"])
    assert broken.returncode != 0 and "parse error" in broken.stdout + broken.stderr


def test_the_name_extraction_sees_selectors_only():
    expr = (
        'histogram_quantile(0.99, sum by (api, le) (rate(groupcoord_request_latency_seconds_bucket{api="Join"}[5m])))'
        ' / on (instance) group_left sum(up{job="x"}) or vector(0) > bool 1'
    )
    assert metric_names(expr) == {"groupcoord_request_latency_seconds_bucket", "up"}


@pytest.fixture(scope="module")
def exported(tmp_path_factory: pytest.TempPathFactory) -> set[str]:
    """What a real node declares on /metrics, with its Kafka listener on (it has metrics of its own)."""
    node = start_node(tmp_path_factory.mktemp("node") / "node.log", "--metrics-port=0", "--kafka-port=0")
    try:
        with urllib.request.urlopen(f"http://{metrics_address(node)}/metrics", timeout=10) as reply:
            return exported_names(reply.read().decode())
    finally:
        stop_node(node)


@pytest.mark.parametrize("source", ["dashboard", "alerts"])
def test_queries_name_only_metrics_a_node_exports(exported: set[str], source: str):
    queries = dashboard_queries() if source == "dashboard" else alert_queries()
    named = {(where, name) for where, expr in queries for name in metric_names(expr)}
    assert named, "no metric names found"
    unknown = sorted((where, name) for where, name in named if name not in exported | PROMETHEUS_SERIES)
    assert not unknown, f"not exported by a node: {unknown}"
    if source == "dashboard":  # the new series are shown, not only exported
        shown = {name for _, name in named}
        for name in (
            "groupcoord_group_state",
            "groupcoord_group_committed_offset",
            "groupcoord_group_rebalances_failed_total",
            "groupcoord_raft_peer_round_trip_seconds_bucket",
            "groupcoord_raft_proposals_failed_total",
        ):
            assert name in shown, name
