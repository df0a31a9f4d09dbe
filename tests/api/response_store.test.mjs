// The Responses store is bounded by the serve flags: --response-store-count keeps the
// newest N, --response-store-bytes drops the oldest until the total fits; what was
// dropped answers 404 (GET) and 400 naming previous_response_id (a continuation).
import test, { after, before } from 'node:test';
import assert from 'node:assert/strict';
import { OpenAI, http } from './helpers.mjs';
import { startModelServer } from './responses_lib.mjs';

let server, client;

before(async () => {
  server = await startModelServer('store', {
    args: ['--response-store-count', '3', '--response-store-bytes', '16K', '--response-store-ttl', '600'],
  });
  client = new OpenAI({ baseURL: `${server.url}/v1`, apiKey: 'none', maxRetries: 0, timeout: 60_000 });
});

after(() => server?.stop());

const get = (id) => http('GET', `/v1/responses/${id}`, { url: server.url, key: null });

async function store(input) {
  return (await client.responses.create({ model: server.model, input, max_output_tokens: 2, store: true })).id;
}

test('the store keeps the newest --response-store-count responses', async () => {
  const ids = [];
  for (let i = 0; i < 6; i++) ids.push(await store(`small ${i}`));
  for (const id of ids.slice(0, 3)) assert.equal((await get(id)).status, 404, id);
  for (const id of ids.slice(3)) assert.equal((await get(id)).status, 200, id);
  const cont = await http('POST', '/v1/responses', { url: server.url, key: null,
    body: { model: server.model, input: 'go on', previous_response_id: ids[0], max_output_tokens: 2 } });
  assert.equal(cont.status, 400, cont.text);
  assert.match(cont.json.error.param ?? cont.text, /previous_response_id/);
});

test('the store drops the oldest responses past --response-store-bytes', async () => {
  // Each holds ~7 KB (6 KB of input and the response): two fit in 16K, a third does not.
  const big = (i) => `big ${i} ` + 'the cat sat on the mat. '.repeat(250);
  const ids = [];
  for (let i = 0; i < 3; i++) ids.push(await store(big(i)));
  assert.equal((await get(ids[0])).status, 404);
  assert.equal((await get(ids[1])).status, 200);
  assert.equal((await get(ids[2])).status, 200);
});
