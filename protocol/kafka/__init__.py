"""Kafka's wire protocol on top of kio's message classes (Kafka's own JSON specs): framing and the version table."""
