// Anthropic usage reports the prefix cache both ways: cache_creation_input_tokens are
// the prompt tokens a request wrote to new cache blocks, cache_read_input_tokens those
// it found there; with input_tokens they add up to the prompt. A second request with
// the same long prefix reads what the first created.
import test from 'node:test';
import assert from 'node:assert/strict';
import { MODEL, anthropic } from './helpers.mjs';

// A prefix no other request sends (so nothing of it is cached yet), ~1,000 tokens long.
const prefixOf = (tag) => `Cache usage test ${tag} ${process.pid} ${Date.now()}. ` +
  Array.from({ length: 150 }, (_, i) => `line ${i} of the shared system prompt`).join('\n');

async function ask(client, prefix, question, stream) {
  const req = { model: MODEL, max_tokens: 2, system: prefix, messages: [{ role: 'user', content: question }] };
  if (!stream) return (await client.messages.create(req)).usage;
  const s = client.messages.stream(req);
  const start = await new Promise((resolve) => s.on('streamEvent', (e) => e.type === 'message_start' && resolve(e)));
  await s.finalMessage();
  return start.message.usage;
}

for (const stream of [false, true]) {
  test(`the second request reads what the first created (${stream ? 'streamed' : 'whole'})`, async () => {
    const client = anthropic();
    const tag = stream ? 's' : 'w';
    const prefix = prefixOf(tag);
    const first = await ask(client, prefix, `first question ${tag}`, stream);
    const total1 = first.input_tokens + first.cache_creation_input_tokens + first.cache_read_input_tokens;
    assert.ok(total1 > 500, JSON.stringify(first));
    // The first one found little of its prompt cached and stored its full blocks: all
    // of the prompt but the last partial block (16 tokens a block), less what it read.
    assert.ok(first.cache_creation_input_tokens >= total1 - first.cache_read_input_tokens - 16,
      JSON.stringify(first));
    assert.equal(first.cache_creation_input_tokens % 16, 0);
    const second = await ask(client, prefix, `second question ${tag}`, stream);
    // It shares the system prompt: it reads at least the blocks of the prefix the first
    // created (the questions differ, so not the last ones), and creates only its own tail.
    assert.ok(second.cache_read_input_tokens >= first.cache_creation_input_tokens - 32, JSON.stringify({ first, second }));
    assert.ok(second.cache_read_input_tokens > 500, JSON.stringify(second));
    assert.ok(second.cache_creation_input_tokens < 64, JSON.stringify(second));
    const total2 = second.input_tokens + second.cache_creation_input_tokens + second.cache_read_input_tokens;
    assert.ok(second.input_tokens >= 0 && Math.abs(total2 - total1) < 8, JSON.stringify({ first, second }));
  });
}
