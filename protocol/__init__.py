"""The wire contract: the groupcoord.v1 proto and its stubs, Kafka's error codes, and the record codec."""
