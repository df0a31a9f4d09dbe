import test from 'node:test';
import assert from 'node:assert/strict';
import { execFileSync } from 'node:child_process';
import { openai, http, MODEL, KEEL_BIN, MODEL_PATH } from './helpers.mjs';

const client = openai();
const messages = [
  { role: 'system', content: 'You are terse.' },
  { role: 'user', content: 'Tell me about the sea.' },
];

test('chat completion, plain', async () => {
  const r = await client.chat.completions.create({ model: MODEL, messages, max_tokens: 12, temperature: 0 });
  assert.equal(r.object, 'chat.completion');
  assert.equal(r.model, MODEL);
  assert.equal(r.choices.length, 1);
  assert.equal(r.choices[0].message.role, 'assistant');
  assert.equal(typeof r.choices[0].message.content, 'string');
  assert.ok(['stop', 'length'].includes(r.choices[0].finish_reason));
  assert.ok(r.usage.prompt_tokens > 0);
  assert.ok(r.usage.completion_tokens > 0 && r.usage.completion_tokens <= 12);
  assert.equal(r.usage.total_tokens, r.usage.prompt_tokens + r.usage.completion_tokens);
  assert.equal(typeof r.usage.prompt_tokens_details.cached_tokens, 'number');
});

test('chat completion, streamed, equals the plain greedy result', async () => {
  const plain = await client.chat.completions.create({ model: MODEL, messages, max_tokens: 16, temperature: 0 });
  const stream = await client.chat.completions.create({
    model: MODEL, messages, max_tokens: 16, temperature: 0, stream: true, stream_options: { include_usage: true },
  });
  let text = '';
  let finish = null;
  let usage = null;
  let chunks = 0;
  for await (const chunk of stream) {
    chunks++;
    assert.equal(chunk.object, 'chat.completion.chunk');
    if (chunk.usage) usage = chunk.usage;
    for (const c of chunk.choices) {
      text += c.delta.content ?? '';
      if (c.finish_reason) finish = c.finish_reason;
    }
  }
  assert.ok(chunks > 2);
  assert.equal(text, plain.choices[0].message.content);
  assert.equal(finish, plain.choices[0].finish_reason);
  assert.deepEqual(usage.completion_tokens, plain.usage.completion_tokens);
  assert.deepEqual(usage.prompt_tokens, plain.usage.prompt_tokens);
});

test('chat: n choices, seeds reproduce, logprobs', async () => {
  const a = await client.chat.completions.create({ model: MODEL, messages, max_tokens: 8, temperature: 1, seed: 42, n: 2 });
  const b = await client.chat.completions.create({ model: MODEL, messages, max_tokens: 8, temperature: 1, seed: 42, n: 2 });
  assert.equal(a.choices.length, 2);
  assert.deepEqual(a.choices.map((c) => c.message.content), b.choices.map((c) => c.message.content));
  const lp = await client.chat.completions.create({ model: MODEL, messages, max_tokens: 4, temperature: 0, logprobs: true, top_logprobs: 3 });
  const content = lp.choices[0].logprobs.content;
  assert.equal(content.length, lp.usage.completion_tokens);
  for (const t of content) {
    assert.ok(t.logprob <= 0);
    assert.equal(t.top_logprobs.length, 3);
    // Greedy: the sampled token is the most likely one.
    assert.ok(Math.abs(t.top_logprobs[0].logprob - t.logprob) < 1e-4);
  }
});

test('completions, plain and streamed, with stop strings', async () => {
  const prompt = 'Once upon a time';
  const plain = await client.completions.create({ model: MODEL, prompt, max_tokens: 24, temperature: 0 });
  assert.equal(plain.object, 'text_completion');
  const text = plain.choices[0].text;
  assert.ok(text.length > 0);
  let streamed = '';
  const stream = await client.completions.create({ model: MODEL, prompt, max_tokens: 24, temperature: 0, stream: true, stream_options: { include_usage: true } });
  let usage;
  for await (const c of stream) {
    if (c.usage) usage = c.usage;
    for (const ch of c.choices) streamed += ch.text;
  }
  assert.equal(streamed, text);
  assert.equal(usage.completion_tokens, plain.usage.completion_tokens);

  // A stop string taken from the middle of the greedy output cuts it there.
  const cut = Math.floor(text.length / 2);
  const stop = text.slice(cut, cut + 3);
  if (stop.trim().length > 0) {
    const stopped = await client.completions.create({ model: MODEL, prompt, max_tokens: 24, temperature: 0, stop: [stop] });
    assert.equal(stopped.choices[0].finish_reason, 'stop');
    assert.equal(stopped.choices[0].text, text.slice(0, text.indexOf(stop)));
    let s2 = '';
    for await (const c of await client.completions.create({ model: MODEL, prompt, max_tokens: 24, temperature: 0, stop, stream: true }))
      for (const ch of c.choices) s2 += ch.text;
    assert.equal(s2, stopped.choices[0].text);
  }
});

test('completions with token-id prompts, echo and logprobs', async () => {
  const tok = await http('POST', '/tokenize', { body: { model: MODEL, prompt: 'The river ran' } });
  assert.equal(tok.status, 200);
  const ids = tok.json.tokens;
  assert.ok(ids.length >= 2);
  const byText = await client.completions.create({ model: MODEL, prompt: 'The river ran', max_tokens: 6, temperature: 0 });
  const byIds = await client.completions.create({ model: MODEL, prompt: ids, max_tokens: 6, temperature: 0 });
  assert.equal(byIds.choices[0].text, byText.choices[0].text);
  assert.equal(byIds.usage.prompt_tokens, ids.length);

  const echo = await client.completions.create({ model: MODEL, prompt: ids, max_tokens: 3, temperature: 0, echo: true, logprobs: 2 });
  const lp = echo.choices[0].logprobs;
  assert.equal(lp.tokens.length, ids.length + 3);
  assert.equal(lp.token_logprobs[0], null);
  for (const v of lp.token_logprobs.slice(1)) assert.ok(v <= 0);
  const detok = await http('POST', '/detokenize', { body: { model: MODEL, tokens: ids } });
  assert.ok(echo.choices[0].text.startsWith(detok.json.text));

  // Two prompts of ids in one request: one choice each.
  const batch = await client.completions.create({ model: MODEL, prompt: [ids, ids.slice(0, 2)], max_tokens: 2, temperature: 0 });
  assert.equal(batch.choices.length, 2);
});

test('completion logprobs match keel run --json', async (t) => {
  let lines;
  try {
    const out = execFileSync(KEEL_BIN, ['run', '--model', MODEL_PATH, '--prompt-ids', '5,6,7,8', '-n', '4', '--temperature', '0', '--logprobs', '2', '--json'], { encoding: 'utf8', stdio: ['ignore', 'pipe', 'pipe'] });
    lines = out.trim().split('\n').map((l) => JSON.parse(l));
  } catch (e) {
    t.skip(`keel run is not available: ${String(e.stderr ?? e.message).trim().split('\n')[0]}`);
    return;
  }
  const r = await client.completions.create({ model: MODEL, prompt: [5, 6, 7, 8], max_tokens: 4, temperature: 0, logprobs: 2 });
  const lp = r.choices[0].logprobs;
  assert.equal(lp.token_logprobs.length, lines.length);
  for (let i = 0; i < lines.length; i++) {
    assert.ok(Math.abs(lp.token_logprobs[i] - lines[i].logprob) < 1e-3, `token ${i}: ${lp.token_logprobs[i]} vs ${lines[i].logprob}`);
  }
});

test('a repeated prompt reports cached prompt tokens (OpenAI and Anthropic usage)', async () => {
  const long = 'The lighthouse keeper wrote in his log every night about the ships and the weather. '.repeat(4);
  const ask = () => client.completions.create({ model: MODEL, prompt: long, max_tokens: 2, temperature: 0 });
  const first = await ask();
  const second = await ask();
  assert.ok(first.usage.prompt_tokens >= 32);
  assert.ok(second.usage.prompt_tokens_details.cached_tokens >= 16, JSON.stringify(second.usage));
  assert.ok(second.usage.prompt_tokens_details.cached_tokens < second.usage.prompt_tokens);
  const { anthropic } = await import('./helpers.mjs');
  const a = anthropic();
  const req = { model: MODEL, max_tokens: 2, messages: [{ role: 'user', content: long }] };
  await a.messages.create(req);
  const m = await a.messages.create(req);
  assert.ok(m.usage.cache_read_input_tokens >= 16, JSON.stringify(m.usage));
});

test('penalties change a greedy completion that repeats tokens', async (t) => {
  const body = { model: MODEL, prompt: 'The sea', max_tokens: 128, temperature: 0, logprobs: 0 };
  const base = await client.completions.create(body);
  const toks = base.choices[0].logprobs.tokens;
  if (new Set(toks).size === toks.length) return t.skip('the greedy text repeats no token');
  for (const p of [{ frequency_penalty: 2 }, { presence_penalty: 2 }]) {
    const a = await client.completions.create({ ...body, ...p });
    const b = await client.completions.create({ ...body, ...p });
    assert.equal(a.choices[0].text, b.choices[0].text, 'deterministic');
    assert.notEqual(a.choices[0].text, base.choices[0].text, JSON.stringify(p));
  }
  // Zero penalties are the plain result.
  const zero = await client.completions.create({ ...body, frequency_penalty: 0, presence_penalty: 0 });
  assert.equal(zero.choices[0].text, base.choices[0].text);
});

test('completions: n choices with a seed, streamed and whole agree', async () => {
  const body = { model: MODEL, prompt: 'Once', max_tokens: 8, temperature: 1, seed: 7, n: 2 };
  const whole = await client.completions.create(body);
  assert.equal(whole.choices.length, 2);
  const stream = await client.completions.create({ ...body, stream: true, stream_options: { include_usage: true } });
  const text = ['', ''];
  const finish = [null, null];
  let usage;
  for await (const chunk of stream) {
    for (const c of chunk.choices) {
      text[c.index] += c.text;
      finish[c.index] = c.finish_reason ?? finish[c.index];
    }
    if (chunk.usage) usage = chunk.usage;
  }
  for (const c of whole.choices) {
    assert.equal(text[c.index], c.text);
    assert.equal(finish[c.index], c.finish_reason);
  }
  assert.equal(usage.completion_tokens, whole.usage.completion_tokens);
  // The seed is offset per sample, so the two samples differ from each other but repeat.
  const again = await client.completions.create(body);
  assert.deepEqual(again.choices.map((c) => c.text), whole.choices.map((c) => c.text));
});

test('completions echo + logprobs: text_offset indexes the returned text (BOS takes no room)', async () => {
  const client = openai();
  const prompt = 'The quick brown fox';
  const check = (text, lp) => {
    assert.ok(text.startsWith(prompt), text);
    const { tokens, text_offset: off } = lp;
    assert.equal(tokens.length, off.length);
    // The BOS token is listed (with a null logprob) but prints nothing: offset 0, no width.
    assert.equal(off[0], 0);
    assert.equal(off[1], 0);
    let rebuilt = '';
    for (let i = 0; i < off.length; i++) {
      const end = i + 1 < off.length ? off[i + 1] : text.length;
      assert.ok(off[i] <= end && end <= text.length, `offset ${i}: ${off[i]}..${end} of ${text.length}`);
      const piece = text.slice(off[i], end);
      if (piece) assert.equal(piece, tokens[i], `token ${i}`);
      rebuilt += piece;
    }
    assert.equal(rebuilt, text);
  };
  const r = await client.completions.create({ model: MODEL, prompt, echo: true, logprobs: 0, max_tokens: 6, temperature: 0 });
  check(r.choices[0].text, r.choices[0].logprobs);

  // Streamed: offsets run over the whole choice's text across chunks.
  let text = '';
  const merged = { tokens: [], text_offset: [] };
  for await (const chunk of await client.completions.create({ model: MODEL, prompt, echo: true, logprobs: 0, max_tokens: 6, temperature: 0, stream: true })) {
    const c = chunk.choices[0];
    if (!c) continue;
    text += c.text;
    if (c.logprobs) {
      merged.tokens.push(...c.logprobs.tokens);
      merged.text_offset.push(...c.logprobs.text_offset);
    }
  }
  assert.equal(text, r.choices[0].text);
  assert.deepEqual(merged.text_offset, r.choices[0].logprobs.text_offset);
  check(text, merged);
});
