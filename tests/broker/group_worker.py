"""A consumer-group worker process for the group tests: subscribes to a topic with a real
client (confluent; confluent-848: confluent-kafka with group.protocol=consumer; kafka-python;
aiokafka), and for each record appends "partition offset value" to its output file, then
commits that record's next offset synchronously (commit after processing: at least once).
Runs until killed or sent SIGTERM (then it closes its consumer: a clean leave).

    python group_worker.py CLIENT BOOTSTRAP TOPIC GROUP OUTPUT
"""

from __future__ import annotations

import signal
import sys


def main() -> None:
    client, bootstrap, topic, group, output = sys.argv[1:6]
    stopping = []
    signal.signal(signal.SIGTERM, lambda *_: stopping.append(True))
    out = open(output, "a", buffering=1)  # noqa: SIM115 (lives as long as the process)
    if client in ("confluent", "confluent-848"):
        import confluent_kafka
        config = {"bootstrap.servers": bootstrap, "group.id": group,
                  "auto.offset.reset": "earliest", "enable.auto.commit": False}
        if client == "confluent":
            config.update({"session.timeout.ms": 6000, "heartbeat.interval.ms": 500,
                           "partition.assignment.strategy": "range"})
        else:  # KIP-848: the broker assigns, and sets the session and heartbeat times
            config["group.protocol"] = "consumer"
        c = confluent_kafka.Consumer(config)
        c.subscribe([topic], on_assign=lambda _c, parts: print(
            "assigned", len(parts), file=out))
        while not stopping:
            m = c.poll(0.2)
            if m is None or m.error():
                continue
            out.write(f"{m.partition()} {m.offset()} {m.value().decode()}\n")
            c.commit(message=m, asynchronous=False)
        c.close()
    elif client == "aiokafka":
        import asyncio
        asyncio.run(_aiokafka(bootstrap, topic, group, out, stopping))
    else:
        import kafka
        c = kafka.KafkaConsumer(bootstrap_servers=bootstrap, group_id=group,
                                auto_offset_reset="earliest", enable_auto_commit=False,
                                session_timeout_ms=6000, heartbeat_interval_ms=500)

        class Listener(kafka.ConsumerRebalanceListener):
            def on_partitions_revoked(self, revoked):
                pass

            def on_partitions_assigned(self, assigned):
                print("assigned", len(assigned), file=out)

        c.subscribe([topic], listener=Listener())
        while not stopping:
            for tp, records in c.poll(timeout_ms=200).items():
                for m in records:
                    out.write(f"{m.partition} {m.offset} {m.value.decode()}\n")
                    c.commit({tp: kafka.OffsetAndMetadata(m.offset + 1, "", -1)})
        c.close()


async def _aiokafka(bootstrap: str, topic: str, group: str, out, stopping: list) -> None:
    import aiokafka
    from aiokafka.structs import OffsetAndMetadata

    class Listener(aiokafka.ConsumerRebalanceListener):
        async def on_partitions_revoked(self, revoked):
            pass

        async def on_partitions_assigned(self, assigned):
            print("assigned", len(assigned), file=out)

    c = aiokafka.AIOKafkaConsumer(bootstrap_servers=bootstrap, group_id=group,
                                  auto_offset_reset="earliest", enable_auto_commit=False,
                                  session_timeout_ms=6000, heartbeat_interval_ms=500)
    c.subscribe([topic], listener=Listener())
    await c.start()
    try:
        while not stopping:
            for tp, records in (await c.getmany(timeout_ms=200)).items():
                for m in records:
                    out.write(f"{m.partition} {m.offset} {m.value.decode()}\n")
                    await c.commit({tp: OffsetAndMetadata(m.offset + 1, "")})
    finally:
        await c.stop()


if __name__ == "__main__":
    main()
