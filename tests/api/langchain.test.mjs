// LangChain's ChatOpenAI (`@langchain/openai`) with `useResponsesApi: true` against a
// real `keel serve`: invoke and stream, tool calls and results in the history, and
// reasoning from a server whose template opens a <think> block. A recording fetch
// checks that it spoke the Responses API. The model is random: protocol checks only.
import test, { after, before } from 'node:test';
import assert from 'node:assert/strict';
import { createRequire } from 'node:module';
import path from 'node:path';
import { KEY, MODEL, URL_MAIN } from './helpers.mjs';
import { startThinkingServer } from './responses_lib.mjs';

const require = createRequire(path.join(process.env.NODE_PATH, 'noop.js'));
const { ChatOpenAI } = require('@langchain/openai');
const { HumanMessage, AIMessage, ToolMessage, SystemMessage } = require('@langchain/core/messages');
const { tool } = require('@langchain/core/tools');
const { z } = require('zod');

const sent = [];  // {url, body}
function chat(fields = {}, url = URL_MAIN, key = KEY) {
  return new ChatOpenAI({
    model: MODEL, apiKey: key ?? 'none', useResponsesApi: true, maxRetries: 0, temperature: 0, maxTokens: 8,
    configuration: {
      baseURL: `${url}/v1`,
      fetch: async (u, init) => {
        sent.push({ url: String(u), body: init?.body ? JSON.parse(init.body) : undefined });
        return fetch(u, init);
      },
    },
    ...fields,
  });
}

let thinking;
before(async () => {
  thinking = await startThinkingServer();
});
after(() => thinking?.stop());

test('invoke over /v1/responses: text, usage and the response id', async () => {
  const n = sent.length;
  const msg = await chat().invoke([new SystemMessage('Be brief.'), new HumanMessage('Say hello.')]);
  assert.ok(sent[n].url.endsWith('/v1/responses'), sent[n].url);
  assert.equal(sent[n].body.max_output_tokens, 8);
  assert.ok(msg.text.length > 0, JSON.stringify(msg.content));
  assert.match(msg.response_metadata.id ?? msg.id, /^(resp|msg)_/);
  assert.ok(msg.usage_metadata.input_tokens > 0);
  assert.equal(msg.usage_metadata.output_tokens, 8);
  assert.equal(msg.usage_metadata.total_tokens, msg.usage_metadata.input_tokens + 8);
});

test('stream gives the same text as invoke', async () => {
  const model = chat({ maxTokens: 10 });
  const whole = await model.invoke('Count.');
  let text = '';
  let last;
  for await (const chunk of await model.stream('Count.')) {
    text += chunk.text;
    last = last ? last.concat(chunk) : chunk;
  }
  assert.equal(sent.at(-1).body.stream, true);
  assert.equal(text, whole.text);
  assert.equal(last.usage_metadata.output_tokens, 10);
});

test('tools: bound tools, tool calls and tool results in the history', async () => {
  const weather = tool(async ({ city }) => `sunny in ${city}`, {
    name: 'get_weather', description: 'Weather of a city', schema: z.object({ city: z.string() }),
  });
  const model = chat().bindTools([weather]);
  const n = sent.length;
  const msg = await model.invoke([
    new HumanMessage('Weather in Paris?'),
    new AIMessage({ content: '', tool_calls: [{ id: 'call_1', name: 'get_weather', args: { city: 'Paris' } }] }),
    new ToolMessage({ tool_call_id: 'call_1', content: 'sunny, 21 C' }),
  ]);
  const body = sent[n].body;
  assert.deepEqual(body.tools.map((t) => [t.type, t.name]), [['function', 'get_weather']]);
  assert.ok(body.input.some((i) => i.type === 'function_call' && i.call_id === 'call_1'), JSON.stringify(body.input));
  assert.ok(body.input.some((i) => i.type === 'function_call_output' && i.call_id === 'call_1'));
  assert.deepEqual(msg.tool_calls, []);  // the random model writes no call markup
  assert.ok(msg.text.length > 0);
});

test('reasoning from a thinking model comes back as reasoning (invoke and stream)', async () => {
  // ChatOpenAI sends `reasoning` only for OpenAI's reasoning model names; keel answers a
  // thinking model with a reasoning item either way (its text as the summary).
  const model = chat({ model: 'thinker', maxTokens: 10 }, thinking.url, null);
  const msg = await model.invoke('Hi');
  const reasoningOf = (m) => {
    const r = m.additional_kwargs.reasoning;
    return [...(r?.summary ?? []), ...(r?.content ?? [])].map((s) => s.text).join('');
  };
  const text = reasoningOf(msg);
  assert.ok(text.length > 0, JSON.stringify({ content: msg.content, kw: msg.additional_kwargs }));
  assert.equal(msg.text, '');
  assert.equal(msg.contentBlocks.find((b) => b.type === 'reasoning').reasoning, text);
  assert.ok(msg.usage_metadata.output_token_details?.reasoning > 0, JSON.stringify(msg.usage_metadata));
  let last;
  for await (const chunk of await model.stream('Hi')) last = last ? last.concat(chunk) : chunk;
  assert.equal(reasoningOf(last), text);
});
