// The Vercel AI SDK (`ai` + `@ai-sdk/openai`) against a real `keel serve`. Its default
// `openai(model)` speaks the Responses API: generateText and streamText, a tool round
// trip (a tool call and its result in the history, then the SDK's own response messages
// sent back, which it turns into item_reference items while store is on), and reasoning
// from a server whose template opens a <think> block. A recording fetch checks what
// the SDK sent. The model is random: these check the protocol, not the text.
import test, { after, before } from 'node:test';
import assert from 'node:assert/strict';
import { createRequire } from 'node:module';
import path from 'node:path';
import { KEY, MODEL, URL_MAIN } from './helpers.mjs';
import { startThinkingServer } from './responses_lib.mjs';

const require = createRequire(path.join(process.env.NODE_PATH, 'noop.js'));
const { generateText, streamText, tool } = require('ai');
const { createOpenAI } = require('@ai-sdk/openai');
const { z } = require('zod');

const sent = [];  // {url, body}
function provider(url = URL_MAIN, key = KEY) {
  return createOpenAI({
    baseURL: `${url}/v1`,
    apiKey: key ?? 'none',
    fetch: async (u, init) => {
      sent.push({ url: String(u), body: init?.body ? JSON.parse(init.body) : undefined });
      return fetch(u, init);
    },
  });
}

// A city of at most 8 characters: the random model finishes the call within the budget.
const weatherBounded = tool({ description: 'Weather of a city', inputSchema: z.object({ city: z.string().max(8) }) });
const weather = tool({
  description: 'Weather of a city',
  inputSchema: z.object({ city: z.string() }),
  execute: async ({ city }) => `sunny in ${city}`,
});

let thinking;
before(async () => {
  thinking = await startThinkingServer();
});
after(() => thinking?.stop());

test('generateText uses /v1/responses and reads text, usage, finish reason and ids', async () => {
  const openai = provider();
  const n = sent.length;
  const r = await generateText({ model: openai(MODEL), prompt: 'Say hello.', maxOutputTokens: 8, temperature: 0, maxRetries: 0 });
  assert.ok(sent[n].url.endsWith('/v1/responses'), sent[n].url);
  assert.equal(sent[n].body.max_output_tokens, 8);
  assert.equal(typeof r.text, 'string');
  assert.ok(r.text.length > 0);
  assert.equal(r.finishReason, 'length');
  assert.ok(r.usage.inputTokens > 0);
  assert.equal(r.usage.outputTokens, 8);
  assert.match(r.response.id, /^resp_/);
  assert.equal(r.response.modelId, MODEL);
});

test('streamText streams the same text generateText returns', async () => {
  const openai = provider();
  const args = { model: openai(MODEL), prompt: 'Count.', maxOutputTokens: 10, temperature: 0, maxRetries: 0 };
  const whole = await generateText(args);
  const s = streamText(args);
  let text = '';
  for await (const t of s.textStream) text += t;
  assert.equal(text, whole.text);
  assert.equal(await s.text, whole.text);
  assert.equal(await s.finishReason, 'length');
  const usage = await s.usage;
  assert.equal(usage.outputTokens, 10);
  assert.ok(usage.inputTokens > 0);
  assert.equal(sent.at(-1).body.stream, true);
});

test('a tool round trip: tool call and result in the history, then the response sent back', async () => {
  const openai = provider();
  const messages = [
    { role: 'user', content: 'Weather in Paris?' },
    { role: 'assistant', content: [{ type: 'tool-call', toolCallId: 'call_1', toolName: 'get_weather', input: { city: 'Paris' } }] },
    { role: 'tool', content: [{ type: 'tool-result', toolCallId: 'call_1', toolName: 'get_weather', output: { type: 'text', value: 'sunny, 21 C' } }] },
  ];
  const n = sent.length;
  const r1 = await generateText({ model: openai(MODEL), tools: { get_weather: weather }, messages, maxOutputTokens: 6, maxRetries: 0 });
  const body1 = sent[n].body;
  assert.deepEqual(body1.tools.map((t) => [t.type, t.name]), [['function', 'get_weather']]);
  assert.ok(body1.input.some((i) => i.type === 'function_call' && i.call_id === 'call_1'), JSON.stringify(body1.input));
  assert.ok(body1.input.some((i) => i.type === 'function_call_output' && i.call_id === 'call_1'));
  assert.ok(r1.text.length > 0);
  assert.equal(r1.toolCalls.length, 0);  // the random model writes no call markup
  // The next turn: the SDK's own response messages, plus a new question.
  const m = sent.length;
  const r2 = await generateText({
    model: openai(MODEL), tools: { get_weather: weather }, maxOutputTokens: 6, maxRetries: 0,
    messages: [...messages, ...r1.response.messages, { role: 'user', content: 'And tomorrow?' }],
  });
  const refs = sent[m].body.input.filter((i) => i.type === 'item_reference');
  assert.equal(refs.length, 1, JSON.stringify(sent[m].body.input));
  assert.match(refs[0].id, /^msg_/);
  assert.ok(r2.usage.inputTokens > r1.usage.inputTokens + r1.usage.outputTokens, 'the referenced reply is in the prompt');
  // Without store, the SDK sends the items themselves.
  const k = sent.length;
  await generateText({
    model: openai(MODEL), maxOutputTokens: 2, maxRetries: 0, providerOptions: { openai: { store: false } },
    messages: [...messages, ...r1.response.messages, { role: 'user', content: 'And tomorrow?' }],
  });
  assert.equal(sent[k].body.store, false);
  assert.ok(sent[k].body.input.some((i) => i.role === 'assistant'));
});

test("toolChoice 'required' gives a call of the tool (no longer an error)", async () => {
  const openai = provider();
  const r = await generateText({ model: openai(MODEL), tools: { get_weather: weatherBounded }, toolChoice: 'required', prompt: 'x', maxOutputTokens: 300, maxRetries: 0 });
  assert.equal(r.finishReason, 'tool-calls', r.text);
  assert.equal(r.toolCalls.length, 1);
  assert.equal(r.toolCalls[0].toolName, 'get_weather');
  assert.equal(typeof r.toolCalls[0].input.city, 'string');
});

test('reasoning: a thinking model\'s output arrives as reasoning (generate and stream)', async () => {
  const openai = provider(thinking.url, null);
  const opts = { openai: { forceReasoning: true, reasoningSummary: 'auto' } };
  const r = await generateText({ model: openai('thinker'), prompt: 'Hi', maxOutputTokens: 10, maxRetries: 0, providerOptions: opts });
  assert.deepEqual(sent.at(-1).body.reasoning, { summary: 'auto' });
  assert.ok(r.reasoningText.length > 0, JSON.stringify(r.reasoning));
  assert.equal(r.text, '');
  assert.ok(r.usage.outputTokenDetails?.reasoningTokens > 0 || r.usage.reasoningTokens > 0, JSON.stringify(r.usage));
  const s = streamText({ model: openai('thinker'), prompt: 'Hi', maxOutputTokens: 10, maxRetries: 0, providerOptions: opts });
  let reasoning = '';
  for await (const part of s.fullStream) if (part.type === 'reasoning-delta') reasoning += part.text;
  assert.equal(reasoning, await s.reasoningText);
  assert.ok(reasoning.length > 0);
});
