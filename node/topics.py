"""The topic registry as a node serves it: CreateTopics, DeleteTopics and ListTopics, and what the Kafka listener
reads for Metadata (and calls to auto-create topics).

A topic lives in the coordinator partition its name hashes to (`partition_for`, as a group id), so a change to it
is made by that partition's core on its leader, like a group's. Every node holds the committed state of every
partition, so any node lists the whole registry. A node changes only the topics of the partitions it leads: the
others are answered COORDINATOR_NOT_AVAILABLE per topic, and a client sends each topic to the coordinator that
FindCoordinator names for it (client/admin.py). A name no partition would accept is refused by whichever node gets
it, so a client needs no coordinator for it.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Iterable, Sequence, Sized
from typing import TYPE_CHECKING, Any

from groupcoord.coordinator.state import Topic
from groupcoord.coordinator.topics import topic_name_error
from groupcoord.node.topology import partition_for
from groupcoord.protocol.errors import Errors
from groupcoord.protocol.limits import MAX_TOPICS_PER_REQUEST
from groupcoord.protocol.v1 import groupcoord_pb2 as pb

if TYPE_CHECKING:
    from groupcoord.coordinator import CoordinatorResult, GroupCoordinator
    from groupcoord.node.cluster import NodeCluster
    from groupcoord.node.service import Context

NO_SUCH_TOPIC = "This server does not host this topic-partition."


class TopicRegistry:
    """The registry over this node's partitions. Holds nothing of its own: every answer comes from the partition
    hosts, so any number of instances over one cluster agree."""

    def __init__(self, cluster: NodeCluster) -> None:
        self._cluster = cluster

    @property
    def auto_create(self) -> bool:
        """Kafka's `auto.create.topics.enable` (setting `auto_create_topics`): whether a Metadata request naming an
        unknown topic creates it."""
        return self._cluster.group_config.auto_create_topics

    @property
    def default_num_partitions(self) -> int:
        """Kafka's `num.partitions`: what a topic created with -1 partitions gets."""
        return self._cluster.group_config.default_num_partitions

    def topics(self, names: Iterable[str] | None = None) -> list[Topic]:
        """The committed registry, sorted by name: every topic, or those of `names` that exist. Read from this
        node's replicas, so any node answers (a follower may lag its leader by the entries in flight)."""
        count = self._cluster.partitions
        shares: Iterable[tuple[int, list[str] | None]] = ((k, None) for k in range(count))
        if names is not None:
            by_partition: dict[int, list[str]] = {}
            for name in dict.fromkeys(names):
                by_partition.setdefault(partition_for(name, count), []).append(name)
            shares = by_partition.items()
        found: list[Topic] = []
        for k, share in shares:
            replica = self._cluster.hosts[k].replica
            with replica.lock:  # the tick thread applies under this lock
                held = replica.store.topics
                found.extend(held.values() if share is None else (held[n] for n in share if n in held))
        return sorted(found, key=lambda t: t.name)

    async def create_topics(self, request: pb.CreateTopicsRequest, context: Context) -> pb.CreateTopicsResponse:
        """Each partition's topics go to its core in one call, the partitions' calls together; one result per topic,
        in request order."""
        if len(request.topics) > MAX_TOPICS_PER_REQUEST:
            return pb.CreateTopicsResponse(error_code=Errors.INVALID_REQUEST, error_message=_too_many(request.topics))

        def local(name: str) -> pb.CreateTopicsResponse.Result | None:
            message = topic_name_error(name)
            if not message:
                return None
            return pb.CreateTopicsResponse.Result(
                name=name, error_code=Errors.INVALID_TOPIC_EXCEPTION, error_message=message, num_partitions=-1
            )

        def invoke(
            indexes: list[int],
        ) -> tuple[pb.CreateTopicsRequest, Callable[[GroupCoordinator, int], CoordinatorResult]]:
            sub = pb.CreateTopicsRequest(
                topics=[request.topics[i] for i in indexes], validate_only=request.validate_only
            )
            return sub, lambda core, token: core.create_topics(sub, token)

        names = [t.name for t in request.topics]
        return pb.CreateTopicsResponse(results=await self._per_partition(names, local, invoke))

    async def delete_topics(self, request: pb.DeleteTopicsRequest, context: Context) -> pb.DeleteTopicsResponse:
        """As `create_topics`: one result per name, in request order."""
        if len(request.names) > MAX_TOPICS_PER_REQUEST:
            return pb.DeleteTopicsResponse(error_code=Errors.INVALID_REQUEST, error_message=_too_many(request.names))

        def local(name: str) -> pb.DeleteTopicsResponse.Result | None:
            if not topic_name_error(name):
                return None
            return pb.DeleteTopicsResponse.Result(
                name=name, error_code=Errors.UNKNOWN_TOPIC_OR_PARTITION, error_message=NO_SUCH_TOPIC
            )

        def invoke(
            indexes: list[int],
        ) -> tuple[pb.DeleteTopicsRequest, Callable[[GroupCoordinator, int], CoordinatorResult]]:
            sub = pb.DeleteTopicsRequest(names=[request.names[i] for i in indexes])
            return sub, lambda core, token: core.delete_topics(sub, token)

        return pb.DeleteTopicsResponse(results=await self._per_partition(list(request.names), local, invoke))

    async def list_topics(self, request: pb.ListTopicsRequest, context: Context) -> pb.ListTopicsResponse:
        listed = self.topics(request.names or None)
        topics = [pb.ListTopicsResponse.Topic(name=t.name, num_partitions=t.num_partitions, topic_id=t.topic_id)
                  for t in listed]  # fmt: skip
        return pb.ListTopicsResponse(error_code=Errors.NONE, topics=topics)

    async def _per_partition(
        self,
        names: Sequence[str],
        local: Callable[[str], Any],
        invoke: Callable[[list[int]], tuple[Any, Callable[[GroupCoordinator, int], CoordinatorResult]]],
    ) -> list[Any]:
        """The result for each of `names`, in order: `local`'s where it has one (an illegal name), else from the
        core of the name's partition, asked once per partition with `invoke`'s request for its share."""
        results: list[Any] = [local(name) for name in names]
        shares: dict[int, list[int]] = {}
        for i, name in enumerate(names):
            if results[i] is None:
                shares.setdefault(partition_for(name, self._cluster.partitions), []).append(i)

        async def one(k: int, indexes: list[int]) -> None:
            sub, call = invoke(indexes)
            response: Any = await self._cluster.hosts[k].call(sub, call)
            for i, result in zip(indexes, response.results, strict=True):
                results[i] = result

        await asyncio.gather(*(one(k, indexes) for k, indexes in shares.items()))
        return results


def _too_many(topics: Sized) -> str:
    return f"{len(topics)} topics in one request, at most {MAX_TOPICS_PER_REQUEST}: send them in several"
