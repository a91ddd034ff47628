"""pysyncobj's `SyncObj`, with our patch for the places where pysyncobj 0.3.17 breaks Raft's rules.

The patch is a list of small hunks applied, at import, to the `syncobj.py` of the pinned pysyncobj (checked by its
SHA-256, so an upgrade fails loudly instead of patching code it was not written for); the module is compiled
from the result, and its relative imports resolve to the installed pysyncobj package. Everything else of
pysyncobj (transport, serializer, config) is used as installed, except the compression of its connections
(raft/wire.py); the journal is ours. docs/ARCHITECTURE.md lists every deviation; tests/raft/ (test_raft_rules,
test_storage_rules, test_quiescence, test_raft_messages, test_leader_lost, test_leader_fallback) has a test per hunk
that fails on the code without it.

Why hunks and not a subclass: each fix sits inside one of pysyncobj's long inline methods (`_onTick`,
`__onMessageReceived`), so a subclass would have to re-implement them around a dozen name-mangled attributes.

The hunks, one module per concern, applied in this order (later ones may patch what earlier ones put in):

* raft/patch_replication.py: `conflict_only_truncation`, `monotone_next_index`, `chunk_finish`;
* raft/patch_pre_vote.py: `pre_vote_*` (pre-vote, etcd's stale-term and refusal rules, `may_lead`);
* raft/patch_durability.py: `own_journal`, `durability_barrier`, `leader_self_count`;
* raft/patch_catch_up.py: `catch_up_*` (an untrusted journal takes no part in elections until it caught up);
* raft/patch_restart.py: `config_from_log`, `config_not_at_commit`, `snapshot_keeps_suffix`;
* raft/patch_quiescence.py: `quiet_*`, `pre_vote_quiet` (an idle partition sends no heartbeats);
* raft/patch_messages.py: `coalesced_append_*`, `commit_rides_along` (fewer AppendEntries per write);
* raft/patch_leader_lost.py: `leader_lost_*` (a follower whose leader's connection closes stands for election as
  soon as a pre-vote can be granted);
* raft/patch_compaction.py: `compaction_gate*` (a node's replicas write one snapshot at a time), `compaction_phase`
  (each replica's timed snapshots at a slot of its own);
* raft/patch_fallback.py: `fallback_own_stall*` (a leader's own stall does not count against its followers);
* raft/patch_driver.py: `driver_*` (one thread may drive all of a node's replicas: raft/driver.py).
"""

from __future__ import annotations

import hashlib
import importlib.util
import sys
import types
from pathlib import Path

from groupcoord.raft.patch_catch_up import CATCH_UP_HUNKS
from groupcoord.raft.patch_compaction import COMPACTION_HUNKS
from groupcoord.raft.patch_driver import DRIVER_HUNKS
from groupcoord.raft.patch_durability import DURABILITY_HUNKS
from groupcoord.raft.patch_fallback import FALLBACK_HUNKS
from groupcoord.raft.patch_hunk import Hunk
from groupcoord.raft.patch_leader_lost import LEADER_LOST_HUNKS
from groupcoord.raft.patch_messages import MESSAGES_HUNKS
from groupcoord.raft.patch_pre_vote import PRE_VOTE_HUNKS
from groupcoord.raft.patch_quiescence import QUIESCENCE_HUNKS
from groupcoord.raft.patch_replication import REPLICATION_HUNKS
from groupcoord.raft.patch_restart import RESTART_HUNKS

UPSTREAM_VERSION = "0.3.17"
UPSTREAM_SHA256 = "e8bdf06797085d734df86e24ab4802fe87893dff77268565ec036f7ad4a1cfe4"
MODULE_NAME = "groupcoord.raft._syncobj"

HUNKS: tuple[Hunk, ...] = (
    *REPLICATION_HUNKS,
    *PRE_VOTE_HUNKS,
    *DURABILITY_HUNKS,
    *CATCH_UP_HUNKS,
    *RESTART_HUNKS,
    *QUIESCENCE_HUNKS,
    *MESSAGES_HUNKS,
    *LEADER_LOST_HUNKS,
    *COMPACTION_HUNKS,
    *FALLBACK_HUNKS,
    *DRIVER_HUNKS,
)


class PatchError(RuntimeError):
    """The installed pysyncobj is not the one the patch was written for."""


def upstream_source() -> str:
    """The installed syncobj.py, refused unless it is the pinned version's: the hunks were written for that one."""
    spec = importlib.util.find_spec("pysyncobj.syncobj")
    if spec is None or spec.origin is None:
        raise PatchError("pysyncobj is not installed")
    data = Path(spec.origin).read_bytes()
    digest = hashlib.sha256(data).hexdigest()
    if digest != UPSTREAM_SHA256:
        raise PatchError(
            f"{spec.origin} is not pysyncobj {UPSTREAM_VERSION}'s syncobj.py (sha256 {digest}): raft/syncobj_patch.py "
            "must be brought up to date with it"
        )
    return data.decode()


def patched_source(source: str, hunks: tuple[Hunk, ...] = HUNKS) -> str:
    """`source` with each hunk applied in order; one that does not match exactly once is an error, not a skip."""
    for hunk in hunks:
        found = source.count(hunk.old)
        if found != 1:
            raise PatchError(f"hunk {hunk.name!r} matches {found} places, not one")
        source = source.replace(hunk.old, hunk.new)
    return source


def load(hunks: tuple[Hunk, ...] = HUNKS, name: str = MODULE_NAME) -> types.ModuleType:
    """The patched module (with `hunks`; tests load it without one to show what each fixes)."""
    module = types.ModuleType(name)
    module.__package__ = "pysyncobj"  # its relative imports are the installed package's
    module.__file__ = f"<pysyncobj {UPSTREAM_VERSION} syncobj.py, patched by raft/syncobj_patch.py>"
    code = compile(patched_source(upstream_source(), hunks), module.__file__, "exec")
    sys.modules[name] = module
    exec(code, module.__dict__)
    return module


_module = sys.modules.get(MODULE_NAME) or load()
SyncObj = _module.SyncObj
replicated = _module.replicated
