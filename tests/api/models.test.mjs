import test from 'node:test';
import assert from 'node:assert/strict';
import { openai, anthropic, http, MODEL, URL_MAIN } from './helpers.mjs';

test('OpenAI SDK lists the models', async () => {
  const page = await openai().models.list();
  const ids = page.data.map((m) => m.id).sort();
  assert.deepEqual(ids, [MODEL, 'spare'].sort());
  for (const m of page.data) assert.equal(m.object, 'model');
});

test('Anthropic SDK lists the models', async () => {
  const page = await anthropic().models.list();
  const ids = page.data.map((m) => m.id).sort();
  assert.deepEqual(ids, [MODEL, 'spare'].sort());
  assert.equal(page.data[0].type, 'model');
});

test('the API key guards everything but /health', async () => {
  const open = await http('GET', '/health', { key: null });
  assert.equal(open.status, 200);
  const denied = await http('GET', '/v1/models', { key: null });
  assert.equal(denied.status, 401);
  assert.equal(denied.json.error.type, 'authentication_error');
  const wrong = await http('GET', '/v1/models', { key: 'not-the-key' });
  assert.equal(wrong.status, 401);
  const viaHeader = await fetch(`${URL_MAIN}/v1/models`, { headers: { 'x-api-key': process.env.KEEL_API_KEY_FOR_TESTS } });
  assert.equal(viaHeader.status, 200);
  await assert.rejects(openai(URL_MAIN, 'bad').models.list(), (e) => e.status === 401);
  await assert.rejects(
    anthropic(URL_MAIN, 'bad').messages.create({ model: MODEL, max_tokens: 1, messages: [{ role: 'user', content: 'x' }] }),
    (e) => e.status === 401 && e.error?.error?.type === 'authentication_error',
  );
});

test('max_model_len is known before a model is loaded (from its config and the planned pool)', async () => {
  const r = await http('GET', '/v1/models');
  assert.equal(r.status, 200);
  const spare = r.json.data.find((m) => m.id === 'spare');
  // The main server runs --kv-blocks 256 (4,096 tokens): the tiny model's own 4,096.
  assert.equal(typeof spare.max_model_len, 'number');
  assert.equal(spare.max_model_len, 4096);
  for (const m of r.json.data) assert.ok(m.max_model_len > 0, `${m.id}: ${m.max_model_len}`);
});
