"""Limits of the wire contract that the node enforces and the SDK keeps to."""

# Requests in one message of a batch stream (HeartbeatStream, OffsetCommitStream), at most: the node ends a stream
# whose message carries more with INVALID_ARGUMENT, and the SDK splits its batches at this size.
MAX_BATCH_REQUESTS = 10_000
