// Thinking budgets: after N tokens inside the think block keel writes the end of the block
// and the model goes on with its answer. The server serves the random test model with a
// template that opens <think>, so without a budget everything it writes is thinking (the
// controls below); with one, the thinking is bounded and an answer follows.
// Budgets: Anthropic thinking.budget_tokens, or output_config.effort with adaptive
// thinking; OpenAI reasoning_effort / Responses reasoning.effort (minimal 256, low 1024).
import test, { after, before } from 'node:test';
import assert from 'node:assert/strict';
import { Anthropic, OpenAI, http } from './helpers.mjs';
import { startThinkingServer } from './responses_lib.mjs';

let server, oa, an;

before(async () => {
  server = await startThinkingServer();
  oa = new OpenAI({ baseURL: `${server.url}/v1`, apiKey: 'none', maxRetries: 0, timeout: 120_000 });
  an = new Anthropic({ baseURL: server.url, apiKey: 'none', maxRetries: 0, timeout: 120_000 });
});

after(() => server?.stop());

const messages = [{ role: 'user', content: 'Think, then answer.' }];

// Tokens of `text` in the model's vocabulary (a re-encoding: close to, not exactly, the
// tokens the model wrote, so the bounds below leave room).
async function tokens(text) {
  const r = await http('POST', '/tokenize',
    { url: server.url, key: null, body: { model: server.model, prompt: text, add_special_tokens: false } });
  assert.equal(r.status, 200, r.text);
  return r.json.count;
}

function anthropicParts(msg) {
  const thinking = msg.content.filter((b) => b.type === 'thinking').map((b) => b.thinking).join('');
  const text = msg.content.filter((b) => b.type === 'text').map((b) => b.text).join('');
  return { thinking, text };
}

test('Anthropic budget_tokens bounds the thinking block and a text answer follows', async () => {
  const msg = await an.messages.create({ model: server.model, max_tokens: 48, temperature: 0,
    thinking: { type: 'enabled', budget_tokens: 8 }, messages });
  const { thinking, text } = anthropicParts(msg);
  assert.ok(thinking.length > 0, JSON.stringify(msg.content));
  assert.ok(await tokens(thinking) <= 16, thinking);
  assert.ok(text.trim().length > 0, JSON.stringify(msg.content));
  assert.equal(msg.content.at(-1).type, 'text');
  // The control: a budget beyond max_tokens leaves all of it thinking.
  const ctl = await an.messages.create({ model: server.model, max_tokens: 48, temperature: 0,
    thinking: { type: 'enabled', budget_tokens: 4096 }, messages });
  const c = anthropicParts(ctl);
  assert.equal(c.text.trim(), '', JSON.stringify(ctl.content));
  assert.ok(await tokens(c.thinking) > 24, c.thinking);
});

test('Anthropic adaptive thinking takes its budget from output_config.effort (streamed)', async () => {
  const stream = an.messages.stream({ model: server.model, max_tokens: 1100, temperature: 0,
    thinking: { type: 'adaptive' }, output_config: { effort: 'low' }, messages });
  const kinds = [];
  stream.on('streamEvent', (e) => { if (e.type === 'content_block_start') kinds.push(e.content_block.type); });
  const msg = await stream.finalMessage();
  const { thinking, text } = anthropicParts(msg);
  assert.deepEqual(kinds.slice(0, 2), ['thinking', 'text']);
  const n = await tokens(thinking);
  assert.ok(n > 512 && n <= 1024 + 64, `${n} thinking tokens for effort low (1024)`);
  assert.ok(text.length > 0);
});

test('OpenAI reasoning_effort bounds reasoning_content and content follows', async () => {
  const r = await oa.chat.completions.create({ model: server.model, max_tokens: 300, temperature: 0,
    reasoning_effort: 'minimal', messages });
  const m = r.choices[0].message;
  assert.ok(m.reasoning_content.length > 0);
  const n = await tokens(m.reasoning_content);
  assert.ok(n > 128 && n <= 256 + 32, `${n} reasoning tokens for effort minimal (256)`);
  assert.ok(m.content.length > 0, JSON.stringify(m));
  // The control: no effort, no budget: all reasoning.
  const ctl = await oa.chat.completions.create({ model: server.model, max_tokens: 300, temperature: 0, messages });
  assert.ok(!ctl.choices[0].message.content, JSON.stringify(ctl.choices[0].message));
});

test('Responses reasoning.effort bounds the reasoning item and a message follows', async () => {
  const r = await oa.responses.create({ model: server.model, max_output_tokens: 300, temperature: 0,
    reasoning: { effort: 'minimal' }, input: 'Think, then answer.' });
  assert.deepEqual(r.output.map((o) => o.type), ['reasoning', 'message']);
  assert.ok(r.output_text.length > 0);
  const reasoning = r.output[0].summary.map((s) => s.text).join('') ||
    (r.output[0].content ?? []).map((c) => c.text).join('');
  const n = await tokens(reasoning);
  assert.ok(n > 128 && n <= 256 + 32, `${n} reasoning tokens for effort minimal (256)`);
});
