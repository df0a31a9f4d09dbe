// min_tokens (vLLM's field, issue 31 item 11), through openai@7 as an extra body field.
// The agent server's scripted model answers "Hello from keel." and then EOS, so EOS
// would end every reply after a few tokens: with min_tokens it cannot, nor can a stop
// string, before that many tokens.
import test from 'node:test';
import assert from 'node:assert/strict';
import { http, openai, KEY } from './helpers.mjs';

const URL_AGENT = process.env.KEEL_AGENT_URL;
const MODEL = process.env.KEEL_AGENT_MODEL ?? 'agent';
const messages = [{ role: 'user', content: 'hi' }];

test('chat: EOS cannot end the reply before min_tokens (openai@7)', async (t) => {
  if (!URL_AGENT) return t.skip('no agent server');
  const client = openai(URL_AGENT, KEY);
  const plain = await client.chat.completions.create({ model: MODEL, messages, max_tokens: 64, temperature: 0 });
  assert.equal(plain.choices[0].finish_reason, 'stop');
  assert.equal(plain.choices[0].message.content, 'Hello from keel.');
  const early = plain.usage.completion_tokens;
  const min = early + 12;
  const r = await client.chat.completions.create({ model: MODEL, messages, max_tokens: 64, temperature: 0, min_tokens: min });
  assert.ok(r.usage.completion_tokens >= min, `${r.usage.completion_tokens} tokens, min_tokens ${min}`);
  assert.ok(r.choices[0].message.content.startsWith('Hello from keel.'), r.choices[0].message.content);
  assert.ok(r.choices[0].message.content.length > 'Hello from keel.'.length);
  // Streamed the same way.
  const stream = await client.chat.completions.create({
    model: MODEL, messages, max_tokens: 64, temperature: 0, min_tokens: min, stream: true,
    stream_options: { include_usage: true },
  });
  let text = '';
  let usage;
  for await (const chunk of stream) {
    text += chunk.choices[0]?.delta?.content ?? '';
    if (chunk.usage) usage = chunk.usage;
  }
  assert.equal(text, r.choices[0].message.content);
  assert.ok(usage.completion_tokens >= min);
});

test('completions: min_tokens holds for every choice, and max_tokens still ends it (openai@7)', async (t) => {
  if (!URL_AGENT) return t.skip('no agent server');
  const client = openai(URL_AGENT, KEY);
  const r = await client.completions.create({ model: MODEL, prompt: ['x', 'y'], n: 2, max_tokens: 40, min_tokens: 25, temperature: 0 });
  assert.equal(r.choices.length, 4);
  assert.ok(r.usage.completion_tokens >= 4 * 25, JSON.stringify(r.usage));
  const capped = await client.completions.create({ model: MODEL, prompt: 'x', max_tokens: 10, min_tokens: 10, temperature: 0 });
  assert.equal(capped.choices[0].finish_reason, 'length');
  assert.equal(capped.usage.completion_tokens, 10);
});

test('a stop string cannot end the reply before min_tokens (openai@7)', async (t) => {
  if (!URL_AGENT) return t.skip('no agent server');
  const client = openai(URL_AGENT, KEY);
  const plain = await client.chat.completions.create({ model: MODEL, messages, max_tokens: 64, temperature: 0, stop: ['keel'] });
  assert.equal(plain.choices[0].message.content, 'Hello from ');
  const r = await client.chat.completions.create({
    model: MODEL, messages, max_tokens: 64, temperature: 0, stop: ['keel'], min_tokens: 12,
  });
  const content = r.choices[0].message.content;
  assert.ok(content.startsWith('Hello from keel.'), content);  // the first "keel" came too early
  assert.equal(r.choices[0].finish_reason, 'stop');  // a later one ended it
  assert.ok(!content.endsWith('keel'));
});

test('min_tokens is validated: an integer from 0 to max_tokens, 400 naming it', async (t) => {
  if (!URL_AGENT) return t.skip('no agent server');
  const cases = [
    ['/v1/chat/completions', { model: MODEL, messages, min_tokens: -1 }],
    ['/v1/chat/completions', { model: MODEL, messages, min_tokens: 'ten' }],
    ['/v1/chat/completions', { model: MODEL, messages, min_tokens: 1.5 }],
    ['/v1/chat/completions', { model: MODEL, messages, max_tokens: 4, min_tokens: 5 }],
    ['/v1/chat/completions', { model: MODEL, messages, max_completion_tokens: 4, min_tokens: 5 }],
    ['/v1/completions', { model: MODEL, prompt: 'x', min_tokens: 17 }],  // max_tokens defaults to 16
    ['/v1/completions', { model: MODEL, prompt: 'x', max_tokens: 3, min_tokens: 4 }],
  ];
  for (const [path, body] of cases) {
    const r = await http('POST', path, { url: URL_AGENT, body });
    assert.equal(r.status, 400, `${path} ${JSON.stringify(body)}: ${r.text}`);
    assert.equal(r.json.error.param, 'min_tokens', r.text);
  }
  const ok = await http('POST', '/v1/completions', { url: URL_AGENT, body: { model: MODEL, prompt: 'x', max_tokens: 3, min_tokens: 3 } });
  assert.equal(ok.status, 200, ok.text);
  assert.equal(ok.json.usage.completion_tokens, 3);
});
