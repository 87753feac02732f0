// A KafkaJS consumer-group worker (tests/broker/test_groups_wire.py), as group_worker.py:
// for each record appends "partition offset value" to OUTPUT, then commits its next offset
// (commit after processing); "assigned N" on each assignment; a clean leave on SIGTERM.
// Usage: node group_worker.js HOST:PORT TOPIC GROUP OUTPUT
const fs = require("fs");
const { Kafka, logLevel } = require("kafkajs");

async function main() {
  const [bootstrap, topic, group, output] = process.argv.slice(2);
  const out = fs.openSync(output, "a");
  const kafka = new Kafka({ clientId: "kdelay-test", brokers: [bootstrap], logLevel: logLevel.NOTHING });
  const consumer = kafka.consumer({ groupId: group, sessionTimeout: 6000, heartbeatInterval: 500 });
  consumer.on(consumer.events.GROUP_JOIN, (e) => {
    const mine = e.payload.memberAssignment[topic] || [];
    fs.writeSync(out, `assigned ${mine.length}\n`);
  });
  await consumer.connect();
  await consumer.subscribe({ topic, fromBeginning: true });
  let stopping = false;
  process.on("SIGTERM", async () => {
    if (stopping) return;
    stopping = true;
    await consumer.disconnect();
    process.exit(0);
  });
  await consumer.run({
    autoCommit: false,
    eachMessage: async ({ partition, message }) => {
      fs.writeSync(out, `${partition} ${message.offset} ${message.value.toString()}\n`);
      await consumer.commitOffsets([{ topic, partition, offset: String(Number(message.offset) + 1) }]);
    },
  });
}

main().catch((e) => { console.error(e); process.exit(1); });
