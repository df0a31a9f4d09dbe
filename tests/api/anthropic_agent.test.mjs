// Anthropic Messages as agents speak it, through @anthropic-ai/sdk (and the OpenAI SDKs
// for reasoning_content): system entries inside messages, adaptive thinking with
// thinking blocks out (streamed with signatures) and back in, max_tokens past the
// context clamped, forced tool_choice honoured. The "thinker" model (run.sh) is
// scripted to write "Plan first</think>Hello from keel." under a template that opens
// <think> unless enable_thinking is false.
import test from 'node:test';
import assert from 'node:assert/strict';
import { createRequire } from 'node:module';
import path from 'node:path';
import { anthropic, http, KEY, MODEL, URL_MAIN } from './helpers.mjs';

const URL_AGENT = process.env.KEEL_AGENT_URL;
const THINKER = 'thinker';
const REPLY = 'Hello from keel.';
const require = createRequire(path.join(process.env.NODE_PATH, 'noop.js'));

test('system entries inside messages merge into the system prompt', async () => {
  const c = anthropic();
  const user = { role: 'user', content: 'What is a river?' };
  const top = await c.messages.countTokens({ model: MODEL, system: 'You answer briefly.\n\nBe kind.', messages: [user] });
  const inside = await c.messages.countTokens({
    model: MODEL,
    system: 'You answer briefly.',
    messages: [user, { role: 'system', content: [{ type: 'text', text: 'Be kind.' }] }],
  });
  assert.equal(inside.input_tokens, top.input_tokens);
  const m = await c.messages.create({ model: MODEL, max_tokens: 2, messages: [{ role: 'system', content: 'Be brief.' }, user] });
  assert.equal(m.type, 'message');
});

test('adaptive thinking: a thinking block with its signature, then the answer (plain and streamed)', async (t) => {
  if (!URL_AGENT) return t.skip('no agent server');
  const c = anthropic(URL_AGENT);
  const req = {
    model: THINKER,
    max_tokens: 32000, // more than the context leaves: clamped
    thinking: { type: 'adaptive' },
    output_config: { effort: 'high' },
    context_management: { edits: [{ type: 'clear_thinking_20251015', keep: 'all' }] },
    metadata: { user_id: 'u' },
    messages: [{ role: 'user', content: 'hi' }],
  };
  const m = await c.messages.create(req, { headers: { 'anthropic-beta': 'interleaved-thinking-2025-05-14,effort-2025-11-24' } });
  assert.deepEqual(m.content.map((b) => b.type), ['thinking', 'text']);
  assert.equal(m.content[0].thinking, 'Plan first');
  assert.ok(m.content[0].signature.length > 0);
  assert.equal(m.content[1].text, REPLY);
  assert.equal(m.stop_reason, 'end_turn');

  const events = [];
  const stream = c.messages.stream(req);
  stream.on('streamEvent', (e) => events.push(e));
  const final = await stream.finalMessage();
  assert.deepEqual(final.content, m.content);
  const deltas = events.filter((e) => e.type === 'content_block_delta').map((e) => e.delta.type);
  assert.ok(deltas.includes('thinking_delta'), deltas.join());
  assert.ok(deltas.indexOf('signature_delta') > deltas.lastIndexOf('thinking_delta'), deltas.join());
  assert.ok(deltas.indexOf('text_delta') > deltas.indexOf('signature_delta'), deltas.join());

  // display omitted: the block stays (with its signature) but carries no text.
  const omitted = await c.messages.create({ ...req, thinking: { type: 'adaptive', display: 'omitted' } });
  assert.equal(omitted.content[0].type, 'thinking');
  assert.equal(omitted.content[0].thinking, '');

  // The thinking block goes back in the history of the next turn.
  const next = await c.messages.create({
    ...req,
    messages: [...req.messages, { role: 'assistant', content: m.content }, { role: 'user', content: 'and?' }],
  });
  assert.equal(next.content.at(-1).text, REPLY);
});

test('thinking disabled: the template closes the think block, no thinking block out', async (t) => {
  if (!URL_AGENT) return t.skip('no agent server');
  const c = anthropic(URL_AGENT);
  const on = await c.messages.countTokens({ model: THINKER, thinking: { type: 'adaptive' }, messages: [{ role: 'user', content: 'hi' }] });
  const off = await c.messages.countTokens({ model: THINKER, thinking: { type: 'disabled' }, messages: [{ role: 'user', content: 'hi' }] });
  assert.ok(off.input_tokens > on.input_tokens, `${off.input_tokens} vs ${on.input_tokens}`);
  const m = await c.messages.create({ model: THINKER, max_tokens: 64, thinking: { type: 'disabled' }, messages: [{ role: 'user', content: 'hi' }] });
  assert.deepEqual(m.content.map((b) => b.type), ['text']);
});

test('max_tokens past the context is clamped to what is left: stop_reason max_tokens', async () => {
  const tok = await http('POST', '/tokenize', { body: { model: MODEL, prompt: 'x' } });
  const ctx = tok.json.max_model_len;
  assert.ok(ctx > 0, tok.text);
  const c = anthropic();
  const msg = (n) => [{ role: 'user', content: 'word '.repeat(n) }];
  const probe = await c.messages.countTokens({ model: MODEL, messages: msg(100) });
  const perWord = (probe.input_tokens - (await c.messages.countTokens({ model: MODEL, messages: msg(0) })).input_tokens) / 100;
  let n = Math.floor((ctx - 40) / perWord);
  let count = (await c.messages.countTokens({ model: MODEL, messages: msg(n) })).input_tokens;
  while (count >= ctx - 3) count = (await c.messages.countTokens({ model: MODEL, messages: msg(--n) })).input_tokens;
  const m = await c.messages.create({ model: MODEL, max_tokens: 1_000_000, messages: msg(n) });
  assert.equal(m.stop_reason, 'max_tokens');
  assert.equal(m.usage.input_tokens + m.usage.cache_read_input_tokens + m.usage.cache_creation_input_tokens, count);
  assert.equal(m.usage.output_tokens, ctx - count);
  // A prompt that alone fills the context is still a 400, in Anthropic's own wording
  // (Claude Code compacts its conversation on it).
  const r = await http('POST', '/v1/messages', { body: { model: MODEL, max_tokens: 1, messages: msg(n * 2) } });
  assert.equal(r.status, 400, r.text);
  assert.match(r.json.error.message, /^prompt is too long: \d+ tokens > \d+ maximum$/);
});

test('forced tool_choice comes back as a tool_use of the named tool, with valid input', async () => {
  const c = anthropic();
  const schema = { type: 'object', properties: { city: { type: 'string', maxLength: 8 } }, required: ['city'] };
  const tools = [{ name: 'get_weather', input_schema: schema }, { name: 'noop', input_schema: { type: 'object', properties: {}, additionalProperties: false } }];
  for (const tool_choice of [{ type: 'any' }, { type: 'tool', name: 'get_weather' }]) {
    const m = await c.messages.create({ model: MODEL, max_tokens: 200, tools, tool_choice, messages: [{ role: 'user', content: 'hi' }] });
    assert.equal(m.stop_reason, 'tool_use', JSON.stringify(m.content));
    const use = m.content.find((b) => b.type === 'tool_use');
    if (tool_choice.type === 'tool') assert.equal(use.name, 'get_weather');
    if (use.name === 'get_weather') {
      assert.equal(typeof use.input.city, 'string');
      // maxLength counts code points (JSON Schema), not UTF-16 units as .length does.
      assert.ok([...use.input.city].length <= 8, use.input.city);
    } else {
      assert.equal(use.name, 'noop');
    }
  }
});

test('output_config.format json_schema constrains the text to the schema', async () => {
  const c = anthropic();
  const m = await c.messages.create({
    model: MODEL, max_tokens: 200, messages: [{ role: 'user', content: 'hi' }],
    output_config: { format: { type: 'json_schema', schema: { type: 'object', properties: { ok: { type: 'boolean' } }, required: ['ok'], additionalProperties: false } } },
  });
  assert.equal(m.stop_reason, 'end_turn', JSON.stringify(m.content));
  const text = m.content.filter((b) => b.type === 'text').map((b) => b.text).join('');
  assert.equal(typeof JSON.parse(text).ok, 'boolean', text);
});

for (const pkg of ['openai', 'openai7']) {
  test(`${pkg}: reasoning_content and reasoning beside the answer (plain and streamed)`, async (t) => {
    if (!URL_AGENT) return t.skip('no agent server');
    const mod = require(pkg);
    const OpenAI = mod.OpenAI ?? mod.default ?? mod;
    const client = new OpenAI({ baseURL: `${URL_AGENT}/v1`, apiKey: KEY, maxRetries: 0, timeout: 60_000 });
    const base = { model: THINKER, messages: [{ role: 'user', content: 'hi' }] };
    const r = await client.chat.completions.create(base);
    const msg = r.choices[0].message;
    assert.equal(msg.content, REPLY);
    assert.equal(msg.reasoning_content, 'Plan first');
    assert.equal(msg.reasoning, 'Plan first');
    assert.equal(r.choices[0].finish_reason, 'stop');
    let reasoning = '';
    let content = '';
    for await (const chunk of await client.chat.completions.create({ ...base, stream: true })) {
      const d = chunk.choices[0]?.delta ?? {};
      reasoning += d.reasoning_content ?? '';
      content += d.content ?? '';
    }
    assert.equal(reasoning, 'Plan first');
    assert.equal(content, REPLY);
    // reasoning_effort "none" turns the template's thinking off: no reasoning split.
    const off = await client.chat.completions.create({ ...base, reasoning_effort: 'none' });
    assert.equal(off.choices[0].message.reasoning_content, undefined);
    const kw = await client.chat.completions.create({ ...base, chat_template_kwargs: { enable_thinking: false } });
    assert.equal(kw.usage.prompt_tokens, off.usage.prompt_tokens);
  });
}

test('one log line per request at info; a 4xx body at debug', async (t) => {
  const logFile = process.env.KEEL_AGENT_LOG;
  if (!URL_AGENT || !logFile) return t.skip('no agent server');
  const fs = require('node:fs');
  const c = anthropic(URL_AGENT);
  await c.messages.create({ model: THINKER, max_tokens: 64, messages: [{ role: 'user', content: 'log me' }] });
  const bad = await http('POST', '/v1/messages', { url: URL_AGENT, body: { model: THINKER, max_tokens: 4, thinking: { type: 'lots' }, messages: [{ role: 'user', content: 'x' }] } });
  assert.equal(bad.status, 400);
  const log = fs.readFileSync(logFile, 'utf8');
  assert.match(log, /POST \/v1\/messages model=thinker status=200 in=\d+ out=\d+ ttft=[\d.]+ms dur=[\d.]+ms/);
  assert.match(log, /POST \/v1\/messages -> 400 \{"type":"error".*thinking\.type: must be.*\(request: \{"model":"thinker"/);
  assert.match(log, /POST \/v1\/messages model=thinker status=400/);
});
