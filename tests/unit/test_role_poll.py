"""The node's role poll (`NodeCluster._poll`) ends when it is cancelled, whatever else happens at that moment: a
node whose start failed (its metrics port taken) waits for it before it exits."""

from __future__ import annotations

import asyncio
from types import SimpleNamespace

from groupcoord.node.cluster import NodeCluster


def idle_cluster() -> SimpleNamespace:
    """What `_poll` reads of a node: no partitions, so nothing to poll but the wake-up event."""
    return SimpleNamespace(
        hosts=[],
        node_id=1,
        _state_changed=asyncio.Event(),
        _refresh_directory=lambda: None,
        _balancer=SimpleNamespace(maybe_transfer=lambda: None),
        _ready=asyncio.Event(),
        _on_ready_change=None,
        _joined=False,
        _reaches_majority=lambda: True,
        _serving=False,
        _on_serving_change=None,
    )


async def test_the_poll_ends_when_cancelled_as_a_state_change_wakes_it():
    """The wake-up and the cancellation in one turn of the loop, as when a node's start fails while its partitions
    elect their leaders: Python 3.11's `wait_for` returned the event's result and dropped the cancellation."""
    cluster = idle_cluster()
    poll = asyncio.create_task(NodeCluster._poll(cluster))  # type: ignore[arg-type]
    await asyncio.sleep(0.01)  # it waits for a state change
    cluster._state_changed.set()
    poll.cancel()
    done, _ = await asyncio.wait({poll}, timeout=2)
    if not done:  # the poll went on: stop it (a cancellation it does not race with is taken) before failing
        poll.cancel()
        await asyncio.wait({poll}, timeout=2)
    assert done and poll.cancelled()
