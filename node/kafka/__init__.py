"""The Kafka listener: unmodified Kafka clients use the node as their group coordinator (docs/KAFKA.md)."""
