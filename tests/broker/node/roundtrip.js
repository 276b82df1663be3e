// The official RocketMQ Node.js client against `strata serve`: a Producer sends normal
// messages with keys, tags and properties, a SimpleConsumer receives and acks them.
// Usage: node roundtrip.js ENDPOINT TOPIC GROUP COUNT
// Prints one line `RESULT {json}`: what the producer was answered and what the consumer got.
'use strict';
const { Producer, SimpleConsumer } = require('rocketmq-client-nodejs');

async function main() {
  const [endpoints, topic, group, countText] = process.argv.slice(2);
  const count = Number(countText);
  const producer = new Producer({ endpoints, namespace: '', requestTimeout: 5000 });
  await producer.startup();
  const sent = [];
  for (let i = 0; i < count; i++) {
    const receipt = await producer.send({
      topic,
      tag: i % 2 === 0 ? 'even' : 'odd',
      keys: [`node-key-${i}`, `order-${i}`],
      properties: new Map([['lang', 'node'], ['seq', String(i)]]),
      body: Buffer.from(`node-body-${i}`),
    });
    sent.push({ id: receipt.messageId, offset: Number(receipt.offset) });
  }
  await producer.shutdown();

  const consumer = new SimpleConsumer({
    endpoints, namespace: '', consumerGroup: group, requestTimeout: 5000,
    subscriptions: new Map([[topic, '*']]), awaitDuration: 2000,
  });
  await consumer.startup();
  const received = [];
  for (let round = 0; round < 20 && received.length < count; round++) {
    const messages = await consumer.receive(16, 15000);
    for (const m of messages) {
      received.push({
        id: m.messageId, topic: m.topic, body: m.body.toString(), tag: m.tag,
        keys: [...m.keys].sort(), properties: Object.fromEntries(m.properties),
        attempt: m.deliveryAttempt,
      });
      await consumer.ack(m);
    }
  }
  // everything was acked: a further receive finds nothing
  const again = await consumer.receive(16, 15000);
  await consumer.shutdown();
  console.log('RESULT ' + JSON.stringify({ sent, received, again: again.length }));
}

main().then(() => process.exit(0), (err) => {
  console.error(err && err.stack ? err.stack : err);
  process.exit(1);
});
