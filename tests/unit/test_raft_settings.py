"""The node's Raft timing settings: what they turn into, and the combinations refused before a node starts."""

from __future__ import annotations

import argparse

import pytest

from groupcoord.node import config as node_config
from groupcoord.node.server import raft_settings
from groupcoord.raft.settings import RaftSettings


def settings(*flags: str, environ: dict[str, str] | None = None) -> node_config.NodeSettings:
    parser = argparse.ArgumentParser()
    node_config.add_arguments(parser)
    return node_config.load(parser.parse_args(list(flags)), environ or {})


def test_defaults_are_the_tuned_raft_settings():
    assert raft_settings(settings()) == RaftSettings()


def test_election_timeout_and_tick_period_set_the_range_and_the_tick():
    raft = raft_settings(settings("--raft-election-timeout-ms=400", "--raft-tick-period-ms=100"))
    assert (raft.election_min_s, raft.election_max_s, raft.tick_period_s) == (0.4, 1.2, 0.1)
    assert not raft.append_entries_use_batch
    from_env = raft_settings(settings(environ={"GROUPCOORD_RAFT_ELECTION_TIMEOUT_MS": "300"}))
    assert (from_env.election_min_s, from_env.election_max_s) == (0.3, 0.9)


@pytest.mark.parametrize(
    ("flags", "period"),
    [
        (["--raft-tick-period-ms=150", "--raft-election-timeout-ms=200"], "150 ms"),
        (["--raft-election-timeout-ms=50", "--raft-tick-period-ms=30"], "30 ms"),
        (["--raft-batch-period-ms=120", "--raft-tick-period-ms=10", "--raft-election-timeout-ms=200"], "120 ms"),
    ],
)
def test_an_election_timeout_under_two_heartbeat_periods_is_refused(flags: list[str], period: str):
    with pytest.raises(node_config.ConfigError, match=f"at least twice the leader's heartbeat period \\({period}"):
        settings(*flags)


def test_batching_uses_its_period_for_the_heartbeat_check():
    raft = raft_settings(settings("--raft-batch-period-ms=100", "--raft-election-timeout-ms=200"))
    assert raft.append_entries_use_batch and raft.append_entries_period_s == 0.1


def test_the_pre_vote_window_is_its_own_setting():
    raft = raft_settings(settings("--raft-election-timeout-ms=1000", "--raft-pre-vote-window-ms=150"))
    assert (raft.election_min_s, raft.pre_vote_window_s) == (1.0, 0.15)
    from_env = raft_settings(settings(environ={"GROUPCOORD_RAFT_PRE_VOTE_WINDOW_MS": "60"}))
    assert from_env.pre_vote_window_s == 0.06


@pytest.mark.parametrize(
    "flags",
    [
        ["--raft-pre-vote-window-ms=40"],  # under the 50 ms tick period: followers would grant between heartbeats
        ["--raft-pre-vote-window-ms=101", "--raft-election-timeout-ms=200"],  # over half the election timeout
        ["--raft-election-timeout-ms=150"],  # the 100 ms default window is over half of it
        ["--raft-batch-period-ms=120", "--raft-election-timeout-ms=300", "--raft-pre-vote-window-ms=100"],
    ],
)
def test_a_pre_vote_window_outside_a_heartbeat_and_half_the_election_timeout_is_refused(flags: list[str]):
    with pytest.raises(node_config.ConfigError, match=r"raft_pre_vote_window_ms \(\d+\) must be at least"):
        settings(*flags)
