// What both Node consumers share: settings from the environment and the message's effect.
export const AMQP_URL = process.env.AMQP_URL ?? 'amqp://guest:guest@127.0.0.1:5672';
export const GROUP = process.env.CONSUMER_GROUP ?? 'ledger'; // the scope of the keys

// The message's effect, in the caller's transaction.
export async function apply(client, messageId, content) {
  const m = JSON.parse(content.toString());
  await client.query(
    'INSERT INTO ledger (consumer, message_id, account, amount) VALUES ($1, $2, $3, $4)',
    [GROUP, messageId, m.account, m.amount]);
}

// onPhase(phase, id) is called at each step: for logging and for crash tests.
export const noPhase = async () => {};

// Exits (for a supervisor to restart us) when the broker connection goes away.
export function exitOnClose(connection) {
  connection.on('error', (err) => console.error('amqp:', err.message));
  connection.on('close', () => process.exit(3));
}
