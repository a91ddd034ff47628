"""CreateTopics and DeleteTopics: the replicated topic registry (`GroupStore.topics`).

groupcoord stores no records, but Kafka clients subscribe to topics and ask Metadata for them, so the cluster keeps
their names, partition counts and ids. A topic lives in the coordinator partition its name hashes to, as a group
id does, in a namespace of its own; each partition's core answers for its own topics only.
"""

from __future__ import annotations

from collections import Counter

from groupcoord.coordinator.offsets import TOPIC_NAME
from groupcoord.coordinator.result import CoordinatorResult, Token
from groupcoord.coordinator.runtime import Runtime
from groupcoord.protocol import records as r
from groupcoord.protocol.errors import Errors
from groupcoord.protocol.v1 import groupcoord_pb2 as pb

# CreateTopicsRequest.Topic.num_partitions asking for the node's `default_num_partitions` (Kafka's -1).
DEFAULT_PARTITIONS = -1
DUPLICATE = "Duplicate topic name."


def topic_name_error(name: str) -> str:
    """Kafka's reason a topic name is illegal (its `Topic.validate`), or "" for a legal one."""
    if not name:
        return "Topic name is illegal, it can't be empty"
    if name in (".", ".."):
        return 'Topic name cannot be "." or ".."'
    if len(name) > 249:
        return f"Topic name is illegal, it can't be longer than 249 characters, topic name: {name[:249]}..."
    if TOPIC_NAME.fullmatch(name) is None:
        legal = "ASCII alphanumerics, '.', '_' and '-'"
        return f"Topic name {name!r} is illegal, it contains a character other than {legal}"
    return ""


class Topics:
    """The topic registry's writes: topic records touch no group, so no soft state and no timer."""

    def __init__(self, rt: Runtime) -> None:
        self.rt = rt

    def create_topics(self, out: CoordinatorResult, req: pb.CreateTopicsRequest, token: Token) -> None:
        """One result per topic, in request order; a failed topic never fails the others (Kafka). A name listed
        twice is INVALID_REQUEST for each listing, as Kafka's controller answers. The id comes from the injected
        id source, the partitions asked for as -1 from the settings: the record carries both, so replay is exact."""
        resp = pb.CreateTopicsResponse()
        counts = Counter(t.name for t in req.topics)
        default, most = self.rt.config.default_num_partitions, self.rt.config.max_topic_partitions
        for topic in req.topics:
            name = topic.name
            wanted = default if topic.num_partitions == DEFAULT_PARTITIONS else topic.num_partitions
            result = resp.results.add(name=name, num_partitions=wanted)
            message = DUPLICATE if counts[name] > 1 else topic_name_error(name)
            if message:
                result.error_code = Errors.INVALID_REQUEST if counts[name] > 1 else Errors.INVALID_TOPIC_EXCEPTION
            elif name in self.rt.store.topics:
                result.error_code, message = Errors.TOPIC_ALREADY_EXISTS, f"Topic '{name}' already exists."
            elif wanted < 1:
                result.error_code = Errors.INVALID_PARTITIONS
                message = "Number of partitions was set to an invalid non-positive value."
            elif wanted > most:
                result.error_code = Errors.INVALID_PARTITIONS
                message = f"Number of partitions {wanted} is above max_topic_partitions = {most}."
            elif not req.validate_only:
                result.topic_id = self.rt.new_uuid()
                self.rt.emit(out, r.TopicCreated(name, wanted, result.topic_id, self.rt.wall()))
            if message:
                result.error_message, result.num_partitions = message, -1
        out.reply(token, resp)

    def delete_topics(self, out: CoordinatorResult, req: pb.DeleteTopicsRequest, token: Token) -> None:
        """One result per name, in request order; a name listed twice is INVALID_REQUEST for each listing."""
        resp = pb.DeleteTopicsResponse()
        counts = Counter(req.names)
        for name in req.names:
            result = resp.results.add(name=name)
            if counts[name] > 1:
                result.error_code, result.error_message = Errors.INVALID_REQUEST, DUPLICATE
            elif name not in self.rt.store.topics:
                result.error_code = Errors.UNKNOWN_TOPIC_OR_PARTITION
                result.error_message = "This server does not host this topic-partition."
            else:
                self.rt.emit(out, r.TopicDeleted(name, self.rt.wall()))
        out.reply(token, resp)
