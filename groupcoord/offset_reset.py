"""What `offsets reset` would commit, computed without the network: kafka-consumer-groups' `--reset-offsets`
scenarios over the offsets a group has committed and the partitions the topic registry knows.

groupcoord keeps no logs, so only the scenarios that need none exist: --to-offset, --to-earliest (offset 0),
--to-current, --shift-by and --from-file; --to-latest, --to-datetime and --by-duration have nothing to read.
"""

from __future__ import annotations

import csv
import io
import re
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass

from groupcoord.base.errors import UserError

TopicPartition = tuple[str, int]
PARTITIONS = re.compile(r"\d+(,\d+)*")


@dataclass(frozen=True, slots=True)
class TopicScope:
    """`--topic T` (every partition: `partitions` is None) or `--topic T:0,2`."""

    topic: str
    partitions: tuple[int, ...] | None


@dataclass(frozen=True, slots=True)
class Scenario:
    """How the new offset of a partition is found: `kind` is one of the flags' names, `value` its argument."""

    kind: str
    value: int = 0


@dataclass(frozen=True, slots=True)
class Planned:
    """One partition's line of the plan; `problem` says why it cannot be reset (then `new` is None)."""

    group: str
    topic: str
    partition: int
    current: int | None
    new: int | None
    problem: str = ""


@dataclass(frozen=True, slots=True)
class FileRow:
    group: str | None  # None: a three-column file, for every group the command names
    topic: str
    partition: int
    offset: int


def parse_topic_scope(text: str) -> TopicScope:
    """`TOPIC` or `TOPIC:P[,P...]`, kafka-consumer-groups' --topic; a topic may itself contain ':'."""
    topic, colon, tail = text.rpartition(":")
    if not colon:
        if not text:
            raise UserError("--topic needs a topic name")
        return TopicScope(text, None)
    if not topic or not PARTITIONS.fullmatch(tail):
        raise UserError(f"--topic {text!r} is not TOPIC or TOPIC:PARTITION[,PARTITION...] (e.g. orders:0,2)")
    return TopicScope(topic, tuple(dict.fromkeys(int(p) for p in tail.split(","))))


def offset_value(text: str, where: str) -> int:
    """An offset to commit, as `offsets set` and a reset file give it; `where` names it in the error."""
    try:
        value = int(text)
    except ValueError:
        raise UserError(f"{where}: offset {text!r} is not an integer") from None
    if value < 0:
        raise UserError(f"{where}: offset must be >= 0")
    return value


def parse_reset_file(text: str, source: str) -> list[FileRow]:
    """kafka-consumer-groups' CSV: `TOPIC,PARTITION,OFFSET` lines, or `GROUP,TOPIC,PARTITION,OFFSET` (what
    --export writes for several groups). Blank lines are skipped; a bad line is named by its number."""
    rows: list[FileRow] = []
    for number, fields in enumerate(csv.reader(io.StringIO(text)), start=1):
        if not fields or all(not f.strip() for f in fields):
            continue
        cells = [f.strip() for f in fields]
        where = f"{source}:{number}"
        if len(cells) not in (3, 4):
            raise UserError(f"{where}: expected TOPIC,PARTITION,OFFSET or GROUP,TOPIC,PARTITION,OFFSET")
        group = cells[0] if len(cells) == 4 else None
        topic, partition, offset = cells[-3:]
        if not topic or not partition.isdigit():
            raise UserError(f"{where}: {partition!r} is not a partition number")
        rows.append(FileRow(group, topic, int(partition), offset_value(offset, where)))
    if not rows:
        raise UserError(f"{source}: no offsets in the file")
    return rows


def export_csv(plan: Iterable[Planned], several_groups: bool) -> str:
    """The plan as --from-file reads it back: with the group column only when the command named several groups,
    as kafka-consumer-groups writes it."""
    out = io.StringIO()
    writer = csv.writer(out, lineterminator="\n")
    for line in plan:
        if line.new is not None:
            head = [line.group] if several_groups else []
            writer.writerow([*head, line.topic, line.partition, line.new])
    return out.getvalue()


def partitions_in_scope(
    committed: Mapping[TopicPartition, int],
    registry: Mapping[str, int],
    all_topics: bool,
    topics: Sequence[TopicScope],
) -> tuple[list[TopicPartition], list[str]]:
    """The partitions a reset covers, and a problem for each --topic that names none.

    --all-topics: those the group has offsets for. --topic T: the registry's partitions of T and those of T the
    group has offsets for (a topic need not be registered). --topic T:P,...: exactly those.
    """
    if all_topics:
        return sorted(committed), []
    chosen: dict[TopicPartition, None] = {}
    problems: list[str] = []
    for scope in topics:
        if scope.partitions is not None:
            chosen.update(dict.fromkeys((scope.topic, p) for p in scope.partitions))
            continue
        known = {(scope.topic, p) for p in range(registry.get(scope.topic, 0))}
        known |= {tp for tp in committed if tp[0] == scope.topic}
        if not known:
            problems.append(f"topic {scope.topic!r}: not in the topic registry and no committed offsets of it")
        chosen.update(dict.fromkeys(sorted(known)))
    return list(chosen), problems


def plan_group(
    group: str,
    partitions: Sequence[TopicPartition],
    committed: Mapping[TopicPartition, int],
    registry: Mapping[str, int],
    scenario: Scenario,
    from_file: Mapping[TopicPartition, int] | None = None,
) -> list[Planned]:
    """One line per partition, in topic and partition order."""
    lines = []
    for topic, partition in sorted(partitions):
        current = committed.get((topic, partition))
        new, problem = _new_offset(current, scenario, (from_file or {}).get((topic, partition)))
        count = registry.get(topic)
        if count is not None and partition >= count:
            new, problem = None, f"topic {topic!r} has {count} partitions"
        lines.append(Planned(group, topic, partition, current, new, problem))
    return lines


def _new_offset(current: int | None, scenario: Scenario, from_file: int | None) -> tuple[int | None, str]:
    if scenario.kind == "to-offset":
        return scenario.value, ""
    if scenario.kind == "to-earliest":
        return 0, ""
    if scenario.kind == "from-file":
        return (from_file, "") if from_file is not None else (None, "not in the file")
    if current is None:
        return None, f"no committed offset to {'keep' if scenario.kind == 'to-current' else 'shift'}"
    if scenario.kind == "to-current":
        return current, ""
    if scenario.kind == "shift-by":
        return max(0, current + scenario.value), ""
    raise ValueError(f"unknown scenario {scenario.kind!r}")
