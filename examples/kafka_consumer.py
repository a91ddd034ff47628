"""An unmodified Kafka consumer (confluent-kafka, librdkafka) in a groupcoord group, through the Kafka listener.

    python examples/kafka_consumer.py --bootstrap 127.0.0.1:9092 --group orders-app --topic orders [--instance c1]
        [--ca-file ca.pem --cert-file admin.pem --key-file admin-key.pem]   (a TLS cluster: `cluster up --tls`)

The topic must exist in groupcoord's registry (`groupcoord topics create orders --partitions 8`); groupcoord keeps
no records, so the consumer never receives a message. Like examples/worker.py it prints every assignment change as
one JSON line and commits the next offset of each partition it owns every second. SIGTERM or Ctrl-C closes it.
"""

from __future__ import annotations

import argparse
import json
import signal
import sys
import time
from typing import Any

from confluent_kafka import Consumer, KafkaException, TopicPartition


def _say(event: str, partitions: list[TopicPartition]) -> None:
    names = sorted(f"{tp.topic}-{tp.partition}" for tp in partitions)
    print(json.dumps({"event": event, "t": time.time(), "partitions": names}), flush=True)


def config(args: argparse.Namespace) -> dict[str, Any]:
    settings: dict[str, Any] = {
        "bootstrap.servers": args.bootstrap,
        "group.id": args.group,
        "enable.auto.commit": False,
        "session.timeout.ms": args.session_timeout_ms,
        "heartbeat.interval.ms": args.heartbeat_interval_ms,
    }
    if args.instance:
        settings["group.instance.id"] = args.instance
    if args.ca_file:
        settings |= {"security.protocol": "SSL", "ssl.ca.location": args.ca_file}
    if args.cert_file:
        settings |= {"ssl.certificate.location": args.cert_file, "ssl.key.location": args.key_file}
    return settings


def main(args: argparse.Namespace) -> int:
    consumer = Consumer(config(args))
    stopping = False

    def stop(*_: object) -> None:
        nonlocal stopping
        stopping = True

    signal.signal(signal.SIGTERM, stop)
    owned: dict[int, int] = {}

    def assigned(_: Consumer, partitions: list[TopicPartition]) -> None:
        owned.clear()
        owned.update((tp.partition, 0) for tp in partitions)
        _say("assigned", partitions)

    def revoked(_: Consumer, partitions: list[TopicPartition]) -> None:
        owned.clear()
        _say("revoked", partitions)

    consumer.subscribe([args.topic], on_assign=assigned, on_revoke=revoked)
    try:
        next_commit = time.monotonic() + 1
        while not stopping:
            consumer.poll(0.2)  # drives the group protocol; there are no messages
            if owned and time.monotonic() >= next_commit:
                next_commit = time.monotonic() + 1
                for partition in owned:
                    owned[partition] += 1
                offsets = [TopicPartition(args.topic, p, offset) for p, offset in owned.items()]
                try:
                    consumer.commit(offsets=offsets, asynchronous=False)
                except KafkaException as exc:  # a rebalance or a coordinator move: the next round commits again
                    print(json.dumps({"event": "commit_failed", "error": str(exc.args[0])}), flush=True)
    except KeyboardInterrupt:
        pass
    finally:
        consumer.close()
    return 0


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--bootstrap", default="127.0.0.1:9092", help="Kafka listener addresses, comma-separated")
    parser.add_argument("--group", required=True)
    parser.add_argument("--topic", required=True)
    parser.add_argument("--instance", default="", help="group.instance.id: a static member")
    parser.add_argument("--session-timeout-ms", type=int, default=10_000)
    parser.add_argument("--heartbeat-interval-ms", type=int, default=1_000)
    parser.add_argument("--ca-file", default="", help="TLS: the CA of the nodes' certificates")
    parser.add_argument("--cert-file", default="", help="mutual TLS: the client certificate")
    parser.add_argument("--key-file", default="", help="mutual TLS: its key")
    sys.exit(main(parser.parse_args()))
