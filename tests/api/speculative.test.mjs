// Speculative decoding served (issue 30): `keel serve --speculative ngram` streams the
// same greedy text as a server without it (openai@7 streaming, chat and completions,
// with stop strings), `"speculative": false` opts a request out, and /api/status and
// /metrics show drafts verified and accepted.
import test, { after, before } from 'node:test';
import assert from 'node:assert/strict';
import { startServer } from './wedge_lib.mjs';

let plain, spec;
// Copy-heavy: the answer repeats what the prompt holds (and the tiny random model loops).
const CODE = 'function add(a, b) {\n  return a + b;\n}\nfunction sub(a, b) {\n  return a - b;\n}\n';
const PROMPT = `Rewrite this code with const arrow functions:\n${CODE}${CODE}`;

before(async () => {
  plain = await startServer({ name: 'spec-off' });
  spec = await startServer({ name: 'spec-on', args: ['--speculative', 'ngram', '--num-speculative-tokens', '4'] });
});
after(async () => {
  await plain?.stop();
  await spec?.stop();
});

async function streamChat(server, body) {
  const stream = await server.client.chat.completions.create({
    model: 'tiny', messages: [{ role: 'user', content: PROMPT }], temperature: 0, max_tokens: 96,
    ignore_eos: true, stream: true, ...body,
  });
  let text = '', chunks = 0, finish = null;
  for await (const c of stream) {
    const ch = c.choices[0];
    if (!ch) continue;
    text += ch.delta?.content ?? '';
    chunks++;
    if (ch.finish_reason) finish = ch.finish_reason;
  }
  return { text, chunks, finish };
}

async function streamCompletion(server, body) {
  const stream = await server.client.completions.create({
    model: 'tiny', prompt: PROMPT, temperature: 0, max_tokens: 96, ignore_eos: true, stream: true, ...body,
  });
  let text = '', finish = null;
  for await (const c of stream) {
    text += c.choices[0]?.text ?? '';
    if (c.choices[0]?.finish_reason) finish = c.choices[0].finish_reason;
  }
  return { text, finish };
}

// The counters come with the engine's heartbeat (sent when something changes, every
// 100 ms): read them from a beat sent after `sinceMs` with nothing running, so a count is
// never one beat behind the request that just ended (seen on a loaded CI machine).
const specStatus = (server, sinceMs = Date.now()) => server.speculative('tiny', sinceMs);

test('streamed greedy output is the same with and without speculation', async () => {
  const ref = await streamChat(plain, {});
  const got = await streamChat(spec, { max_tokens: 8 });  // loads the engine
  const before = await specStatus(spec);
  assert.equal(before.method, 'ngram');
  assert.ok(ref.text.startsWith(got.text));
  Object.assign(got, await streamChat(spec, {}));
  assert.ok(ref.text.length > 0);
  assert.equal(got.text, ref.text);
  assert.equal(got.finish, 'length');
  const refC = await streamCompletion(plain, {});
  const gotC = await streamCompletion(spec, {});
  assert.equal(gotC.text, refC.text);
  const after = await specStatus(spec);
  assert.ok(after.verify_steps > before.verify_steps, JSON.stringify(after));
  assert.ok(after.accepted_tokens > before.accepted_tokens, JSON.stringify(after));
  assert.ok(after.acceptance_length > 1, JSON.stringify(after));
  assert.equal((await plain.model()).speculative, null);
});

test('stop strings cut the same text when several tokens arrive in one step', async () => {
  const ref = await streamCompletion(plain, {});
  // A stop string from the middle of the reference output.
  const stop = ref.text.slice(Math.floor(ref.text.length / 2), Math.floor(ref.text.length / 2) + 3);
  assert.ok(stop.trim().length > 0 || stop.length === 3);
  const a = await streamCompletion(plain, { stop: [stop] });
  const b = await streamCompletion(spec, { stop: [stop] });
  assert.equal(b.text, a.text);
  assert.equal(b.finish, 'stop');
  assert.ok(!b.text.includes(stop));
});

test('"speculative": false opts a request out; /metrics counts drafts', async () => {
  const before = await specStatus(spec);
  const ref = await streamChat(plain, { max_tokens: 48 });
  const got = await streamChat(spec, { max_tokens: 48, speculative: false });
  assert.equal(got.text, ref.text);
  const after = await specStatus(spec);
  assert.equal(after.drafted_tokens, before.drafted_tokens);
  const bad = await spec.post('/v1/completions', { model: 'tiny', prompt: 'x', speculative: 'no' });
  assert.equal(bad.status, 400);
  assert.match(bad.text, /speculative/);
  const metrics = (await spec.get('/metrics')).text;
  const value = (name) => Number(metrics.match(new RegExp(`^${name}\\{model="tiny"\\} (\\S+)`, 'm'))?.[1]);
  assert.ok(value('keel_spec_accepted_tokens_total') > 0, metrics);
  assert.ok(value('keel_spec_drafted_tokens_total') >= value('keel_spec_accepted_tokens_total'));
  assert.ok(value('keel_spec_acceptance_length') > 1);
});
