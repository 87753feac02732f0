// KafkaJS producing three delayed records to partition 0 of a topic; prints their offsets
// as JSON. Usage: node produce.js HOST:PORT TOPIC
const { Kafka, logLevel } = require("kafkajs");

async function main() {
  const [bootstrap, topic] = process.argv.slice(2);
  const kafka = new Kafka({ clientId: "kdelay-test", brokers: [bootstrap], logLevel: logLevel.ERROR });
  const producer = kafka.producer({ allowAutoTopicCreation: true });
  await producer.connect();
  const offsets = [];
  for (let i = 0; i < 3; i++) {
    const [meta] = await producer.send({
      topic,
      messages: [{ key: `k${i}`, value: `kafkajs-${i}`, partition: 0,
                   headers: { "kdelay.delay_ms": "1500" } }],
    });
    offsets.push(Number(meta.baseOffset));
  }
  await producer.disconnect();
  process.stdout.write(JSON.stringify(offsets));
}

main().catch((e) => { console.error(e); process.exit(1); });
