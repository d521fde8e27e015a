// The Node client, installed from its npm tarball, against the packaged extension (the
// packaging suite): the version check, a new key and its replay. pg comes from the client's
// locked dev dependencies (IDEM_PG_MODULE), as the empty project has none.
import { checkExtension, CLIENT_VERSION, EXTENSION_VERSIONS, runOnce } from '@idempotency/client';

const { default: pg } = await import(process.env.IDEM_PG_MODULE);
const client = new pg.Client();
await client.connect();
try {
  const version = await checkExtension(client);
  if (version !== EXTENSION_VERSIONS[1]) throw new Error(`extension ${version}`);
  await client.query('CREATE TABLE IF NOT EXISTS smoke_node (id serial PRIMARY KEY)');
  const work = async (c) => {
    const { rows } = await c.query('INSERT INTO smoke_node DEFAULT VALUES RETURNING id');
    return { statusCode: 201, response: { id: rows[0].id } };
  };
  const request = { scope: 'smoke', key: 'node-1', request: { n: 1 } };
  const first = await runOnce(client, request, work);
  const again = await runOnce(client, request, work);
  if (first.replayed || !again.replayed || again.statusCode !== 201)
    throw new Error(`first ${JSON.stringify(first)}, again ${JSON.stringify(again)}`);
  const { rows } = await client.query('SELECT count(*)::int AS n FROM smoke_node');
  if (rows[0].n !== 1) throw new Error(`${rows[0].n} rows`);
  console.log(`node client ${CLIENT_VERSION} against extension ${version}: ok`);
} finally {
  await client.end();
}
