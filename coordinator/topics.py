"""CreateTopics and DeleteTopics: the replicated topic registry (`GroupStore.topics`).

groupcoord stores no records, but Kafka clients subscribe to topics and ask Metadata for them, so the cluster keeps
their names, partition counts and ids. A topic lives in the coordinator partition its name hashes to, as a group
id does, in a namespace of its own; each partition's core answers for its own topics only.
"""

from __future__ import annotations

from collections import Counter

from groupcoord.coordinator.offsets import TOPIC_NAME, Offsets
from groupcoord.coordinator.runtime import Token, core_call
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


class Topics(Offsets):
    @core_call
    def create_topics(self, req: pb.CreateTopicsRequest, token: Token) -> None:
        """One result per topic, in request order; a failed topic never fails the others (Kafka). A name listed
        twice is INVALID_REQUEST for each listing, as Kafka's controller answers. The id comes from the injected
        id source, the partitions asked for as -1 from the settings: the record carries both, so replay is exact."""
        resp = pb.CreateTopicsResponse()
        counts = Counter(t.name for t in req.topics)
        default, most = self.config.default_num_partitions, self.config.max_topic_partitions
        for topic in req.topics:
            name = topic.name
            wanted = default if topic.num_partitions == DEFAULT_PARTITIONS else topic.num_partitions
            out = resp.results.add(name=name, num_partitions=wanted)
            message = DUPLICATE if counts[name] > 1 else topic_name_error(name)
            if message:
                out.error_code = Errors.INVALID_REQUEST if counts[name] > 1 else Errors.INVALID_TOPIC_EXCEPTION
            elif name in self.store.topics:
                out.error_code, message = Errors.TOPIC_ALREADY_EXISTS, f"Topic '{name}' already exists."
            elif wanted < 1:
                out.error_code = Errors.INVALID_PARTITIONS
                message = "Number of partitions was set to an invalid non-positive value."
            elif wanted > most:
                out.error_code = Errors.INVALID_PARTITIONS
                message = f"Number of partitions {wanted} is above max_topic_partitions = {most}."
            elif not req.validate_only:
                out.topic_id = self.new_uuid()
                self._emit(r.TopicCreated(name, wanted, out.topic_id, self._wall()))
            if message:
                out.error_message, out.num_partitions = message, -1
        self._reply(token, resp)

    @core_call
    def delete_topics(self, req: pb.DeleteTopicsRequest, token: Token) -> None:
        """One result per name, in request order; a name listed twice is INVALID_REQUEST for each listing."""
        resp = pb.DeleteTopicsResponse()
        counts = Counter(req.names)
        for name in req.names:
            out = resp.results.add(name=name)
            if counts[name] > 1:
                out.error_code, out.error_message = Errors.INVALID_REQUEST, DUPLICATE
            elif name not in self.store.topics:
                out.error_code = Errors.UNKNOWN_TOPIC_OR_PARTITION
                out.error_message = "This server does not host this topic-partition."
            else:
                self._emit(r.TopicDeleted(name, self._wall()))
        self._reply(token, resp)
