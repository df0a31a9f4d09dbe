import test from 'node:test';
import assert from 'node:assert/strict';
import { anthropic, MODEL } from './helpers.mjs';

// The whole prompt: Anthropic splits it into uncached, cache-read and cache-written tokens.
const promptTokens = (u) => u.input_tokens + u.cache_read_input_tokens + u.cache_creation_input_tokens;

const client = anthropic();
const conversation = {
  model: MODEL,
  max_tokens: 16,
  temperature: 0,
  system: 'You answer briefly.',
  messages: [
    { role: 'user', content: 'Hello there.' },
    { role: 'assistant', content: 'Hi.' },
    { role: 'user', content: [{ type: 'text', text: 'What is a river?' }] },
  ],
};

test('Anthropic messages, plain', async () => {
  const m = await client.messages.create(conversation);
  assert.equal(m.type, 'message');
  assert.equal(m.role, 'assistant');
  assert.equal(m.model, MODEL);
  assert.equal(m.content[0].type, 'text');
  assert.ok(['end_turn', 'max_tokens'].includes(m.stop_reason));
  assert.ok(promptTokens(m.usage) > 0);
  assert.ok(m.usage.input_tokens >= 0);
  assert.ok(m.usage.output_tokens > 0 && m.usage.output_tokens <= 16);
  assert.equal(typeof m.usage.cache_read_input_tokens, 'number');
  assert.equal(typeof m.usage.cache_creation_input_tokens, 'number');
  const counted = await client.messages.countTokens({ model: MODEL, system: conversation.system, messages: conversation.messages });
  assert.equal(counted.input_tokens, promptTokens(m.usage));
});

test('Anthropic messages, streamed, events in order and equal to plain', async () => {
  const plain = await client.messages.create(conversation);
  const stream = await client.messages.create({ ...conversation, stream: true });
  const types = [];
  let text = '';
  let stop = null;
  for await (const ev of stream) {
    types.push(ev.type);
    if (ev.type === 'content_block_delta') text += ev.delta.text;
    if (ev.type === 'message_delta') stop = ev.delta.stop_reason;
  }
  assert.equal(types[0], 'message_start');
  assert.equal(types[1], 'content_block_start');
  assert.equal(types.at(-1), 'message_stop');
  assert.equal(types.at(-2), 'message_delta');
  assert.equal(types.at(-3), 'content_block_stop');
  assert.equal(text, plain.content[0].text);
  assert.equal(stop, plain.stop_reason);

  // The SDK's helper accumulates the same message.
  const final = await client.messages.stream(conversation).finalMessage();
  assert.equal(final.content[0].text, plain.content[0].text);
});

test('Anthropic stop_sequences', async () => {
  const plain = await client.messages.create(conversation);
  const text = plain.content[0].text;
  const cut = Math.floor(text.length / 2);
  const seq = text.slice(cut, cut + 2);
  if (seq.trim().length === 0) return;
  const m = await client.messages.create({ ...conversation, stop_sequences: [seq] });
  assert.equal(m.stop_reason, 'stop_sequence');
  assert.equal(m.stop_sequence, seq);
  assert.equal(m.content[0].text, text.slice(0, text.indexOf(seq)));
});

test('Anthropic top_k, top_p and temperature shape sampling', async () => {
  const greedy = await client.messages.create({ ...conversation, max_tokens: 12 });
  // top_k 1 and a tiny top_p leave only the most likely token: the greedy text at any temperature.
  const k1 = await client.messages.create({ ...conversation, max_tokens: 12, temperature: 1, top_k: 1 });
  assert.deepEqual(k1.content, greedy.content);
  const p0 = await client.messages.create({ ...conversation, max_tokens: 12, temperature: 1, top_p: 1e-6 });
  assert.deepEqual(p0.content, greedy.content);
});

test('Anthropic system as blocks equals system as a string; metadata is accepted', async () => {
  const s = await client.messages.create({ ...conversation, max_tokens: 8 });
  const b = await client.messages.create({
    ...conversation,
    max_tokens: 8,
    system: [{ type: 'text', text: 'You answer ' }, { type: 'text', text: 'briefly.', cache_control: { type: 'ephemeral' } }],
    metadata: { user_id: 'user-1' },
  });
  assert.deepEqual(b.content, s.content);
  assert.equal(promptTokens(b.usage), promptTokens(s.usage));
  const none = await client.messages.create({ ...conversation, max_tokens: 8, system: undefined });
  assert.ok(promptTokens(none.usage) < promptTokens(s.usage));
});
