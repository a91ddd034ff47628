"""Limits of the wire contract that the node enforces and the SDK keeps to."""

# Requests in one message of a batch stream (HeartbeatStream, OffsetCommitStream), at most: the node ends a stream
# whose message carries more with INVALID_ARGUMENT, and the SDK splits its batches at this size.
MAX_BATCH_REQUESTS = 10_000

# Topics named in one CreateTopics or DeleteTopics, at most: more is INVALID_REQUEST for the whole request, before any
# change (each topic is a record of one Raft entry, and the reply must fit max_response_bytes). The SDK sends one
# topic per request.
MAX_TOPICS_PER_REQUEST = 10_000
