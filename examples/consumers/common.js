// What the Node consumers and the producer share: settings from the environment, the queue's
// declaration (with its dead-letter exchange), the message's effect and the log.
export const AMQP_URL = process.env.AMQP_URL ?? 'amqp://guest:guest@127.0.0.1:5672';
export const GROUP = process.env.CONSUMER_GROUP ?? 'ledger'; // the scope of the keys
// A message whose work fails this many times is dead-lettered (a poison message).
export const MAX_ATTEMPTS = Number(process.env.MAX_ATTEMPTS ?? 5);

// The queue, durable, whose rejected messages go to the fanout exchange <queue>.dlx and from
// there to the queue <queue>.dead. Producer and consumers declare it alike (RabbitMQ refuses a
// second declaration with other arguments).
export async function declareQueue(channel, queue) {
  await channel.assertExchange(`${queue}.dlx`, 'fanout', { durable: true });
  await channel.assertQueue(`${queue}.dead`, { durable: true });
  await channel.bindQueue(`${queue}.dead`, `${queue}.dlx`, '');
  await channel.assertQueue(queue, { durable: true, deadLetterExchange: `${queue}.dlx` });
}

export async function declareStream(channel, stream) {
  await channel.assertQueue(stream, { durable: true, arguments: { 'x-queue-type': 'stream' } });
}

// WORK_MS: milliseconds of simulated work inside each message's transaction (default 0), so
// a crash test can kill a consumer mid-transaction.
const WORK_MS = Number(process.env.WORK_MS ?? 0);

// The message's effect, in the caller's transaction.
export async function apply(client, messageId, content) {
  const m = JSON.parse(content.toString());
  if (WORK_MS > 0) await new Promise((resolve) => { setTimeout(resolve, WORK_MS); });
  await client.query(
    'INSERT INTO ledger (consumer, message_id, account, amount) VALUES ($1, $2, $3, $4)',
    [GROUP, messageId, m.account, m.amount]);
}

// One line per message handled, on stderr: what was applied, skipped, retried or dead-lettered.
export const log = (line) => process.stderr.write(`${line}\n`);

// onPhase(phase, id) is called at each step: for crash tests.
export const noPhase = async () => {};

// Exits (for a supervisor to restart us) when the broker connection goes away.
export function exitOnClose(connection) {
  connection.on('error', (err) => console.error('amqp:', err.message));
  connection.on('close', () => process.exit(3));
}
