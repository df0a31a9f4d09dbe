// Per-request budgets (issue 31, item 4): one request cannot ask for every sequence
// slot, an unbounded /tokenize or /detokenize, or a non-streamed logprobs reply of any
// size. Each is a 400 naming the field; the server answers a small request afterwards.
// The main server's model has a context of 4,096 tokens, so prompt text is bounded at
// max(64 KiB, 32 bytes x 4,096) = 128 KiB.
import test from 'node:test';
import assert from 'node:assert/strict';
import { http, openai, anthropic, MODEL } from './helpers.mjs';

async function stillServes() {
  const t0 = Date.now();
  const r = await http('POST', '/v1/completions', { body: { model: MODEL, prompt: 'x', max_tokens: 1 } });
  assert.equal(r.status, 200, r.text);
  assert.ok(Date.now() - t0 < 5000);
}

test('prompts x n over 128 sequences is a 400 naming n (openai@7)', async () => {
  const prompts = Array.from({ length: 64 }, (_, i) => `p${i}`);
  await assert.rejects(
    openai().completions.create({ model: MODEL, prompt: prompts, n: 16, max_tokens: 1 }),
    (e) => e.status === 400 && e.param === 'n' && /1024 sequences; .* at most 128/.test(e.message),
  );
  // 8 x 16 = 128 is allowed.
  const ok = await openai().completions.create({ model: MODEL, prompt: prompts.slice(0, 8), n: 16, max_tokens: 1 });
  assert.equal(ok.choices.length, 128);
  await stillServes();
});

test('/tokenize text is bounded by the context, before tokenizing', async () => {
  const big = 'word '.repeat(40_000); // 200 KB > 128 KiB
  let r = await http('POST', '/tokenize', { body: { model: MODEL, prompt: big } });
  assert.equal(r.status, 400, r.text);
  assert.equal(r.json.error.param, 'prompt');
  assert.match(r.json.error.message, /200000 bytes of text; at most 131072 fit a context of 4096 tokens/);
  r = await http('POST', '/tokenize', { body: { model: MODEL, messages: [{ role: 'user', content: big }] } });
  assert.equal(r.status, 400, r.text);
  assert.equal(r.json.error.param, 'messages');
  r = await http('POST', '/tokenize', { body: { model: MODEL, prompt: 'word '.repeat(1000) } });
  assert.equal(r.status, 200, r.text);
  assert.ok(r.json.count > 0);
  await stillServes();
});

test('/detokenize takes at most the context in token ids', async () => {
  let r = await http('POST', '/detokenize', { body: { model: MODEL, tokens: new Array(5000).fill(1) } });
  assert.equal(r.status, 400, r.text);
  assert.equal(r.json.error.param, 'tokens');
  assert.match(r.json.error.message, /5000 token ids; at most 4096/);
  r = await http('POST', '/detokenize', { body: { model: MODEL, tokens: new Array(100).fill(1) } });
  assert.equal(r.status, 200, r.text);
  await stillServes();
});

test('/v1/completions text prompts share the same bound', async () => {
  await assert.rejects(
    openai().completions.create({ model: MODEL, prompt: ['a '.repeat(40_000), 'b '.repeat(40_000)], max_tokens: 1 }),
    (e) => e.status === 400 && e.param === 'prompt' && /at most 131072/.test(e.message),
  );
});

test('a non-streamed logprobs reply over 262,144 entries is refused, naming logprobs', async () => {
  const prompts = Array.from({ length: 64 }, (_, i) => `p${i}`);
  // 64 x 2 sequences x 100 tokens x 21 = 268,800 entries.
  await assert.rejects(
    openai().completions.create({ model: MODEL, prompt: prompts, n: 2, max_tokens: 100, logprobs: 20 }),
    (e) => e.status === 400 && e.param === 'logprobs' && /at most 262144 logprob entries/.test(e.message) &&
      /or stream/.test(e.message),
  );
  // The same streamed is served (it goes to the socket as it is made).
  const stream = await openai().completions.create({
    model: MODEL, prompt: prompts.slice(0, 2), n: 2, max_tokens: 3, logprobs: 20, stream: true,
  });
  let chunks = 0;
  for await (const c of stream) chunks += c.choices.length;
  assert.ok(chunks > 0);
  await stillServes();
});

test('chat logprobs without max_tokens get what fits the budget (finish length)', async () => {
  // n 16 x 21 entries a token: 262,144 / 336 = 780 tokens fit, less than the context leaves.
  const r = await openai().chat.completions.create({
    model: MODEL, messages: [{ role: 'user', content: 'hi' }], n: 16, logprobs: true, top_logprobs: 20,
    temperature: 1, seed: 1, stop: [],
  });
  for (const c of r.choices) assert.ok(c.logprobs.content.length <= 780, `${c.logprobs.content.length}`);
  // Asked for more than fits: a 400 naming top_logprobs.
  await assert.rejects(
    openai().chat.completions.create({
      model: MODEL, messages: [{ role: 'user', content: 'hi' }], n: 16, logprobs: true, top_logprobs: 20,
      max_tokens: 2000,
    }),
    (e) => e.status === 400 && e.param === 'top_logprobs',
  );
});

test('Anthropic: an over-long prompt says "prompt is too long: N tokens > M maximum"', async () => {
  await assert.rejects(
    anthropic().messages.create({
      model: MODEL, max_tokens: 16, messages: [{ role: 'user', content: 'word '.repeat(6000) }],
    }),
    (e) => {
      assert.equal(e.status, 400);
      assert.match(e.error.error.message, /^prompt is too long: \d+ tokens > 4095 maximum$/);
      assert.equal(e.error.error.type, 'invalid_request_error');
      return true;
    },
  );
});
