// Tool-call arguments stream as the model writes them, in each API's own events, read
// through the real clients: OpenAI chat (openai@7 create / stream helper and the raw
// SSE), the Responses API (openai@7 responses.stream), Anthropic (messages.stream's
// inputJson) and the AI SDK (streamText's tool-input-delta parts). The tiny random
// model is forced to call a tool whose argument is a long string (tool_choice with the
// grammar), so the arguments take many tokens: more than one fragment must arrive, the
// fragments must concatenate to the final arguments, and the events must come in the
// order the real services send them. A call cut by max_tokens keeps what was streamed.
import test from 'node:test';
import assert from 'node:assert/strict';
import { createRequire } from 'node:module';
import path from 'node:path';
import { anthropic, KEY, MODEL, URL_MAIN } from './helpers.mjs';

const require = createRequire(path.join(process.env.NODE_PATH, 'noop.js'));
const OpenAI7 = require('openai7').OpenAI;
const { streamText, tool, jsonSchema } = require('ai');
const { createOpenAI } = require('@ai-sdk/openai');
const { createAnthropic } = require('@ai-sdk/anthropic');

// A string of 40 to 60 characters: many tokens of arguments, bounded so that the
// random model finishes the call well within max_tokens.
const noteSchema = {
  type: 'object',
  properties: { text: { type: 'string', minLength: 40, maxLength: 60 }, n: { type: 'integer', minimum: 0, maximum: 99 } },
  required: ['text', 'n'],
  additionalProperties: false,
};
const chatTools = [{ type: 'function', function: { name: 'note', description: 'Write a note', parameters: noteSchema } }];
const messages = [{ role: 'user', content: 'Write a note.' }];
const client = () => new OpenAI7({ baseURL: `${URL_MAIN}/v1`, apiKey: KEY ?? 'none', maxRetries: 0 });

const validNote = (args) => {
  assert.equal(typeof args.text, 'string', JSON.stringify(args));
  assert.ok(args.text.length >= 40 && args.text.length <= 60, JSON.stringify(args));
  assert.ok(Number.isInteger(args.n), JSON.stringify(args));
};

// The data lines of a raw SSE response, parsed.
async function sse(pathname, body) {
  const res = await fetch(`${URL_MAIN}${pathname}`, {
    method: 'POST',
    headers: { 'content-type': 'application/json', ...(KEY ? { authorization: `Bearer ${KEY}` } : {}) },
    body: JSON.stringify(body),
  });
  assert.equal(res.status, 200);
  const out = [];
  for (const line of (await res.text()).split('\n'))
    if (line.startsWith('data: ') && line !== 'data: [DONE]') out.push(JSON.parse(line.slice(6)));
  return out;
}

test('chat completions: a call streams as a head delta, then argument fragments, then finish tool_calls', async () => {
  const body = { model: MODEL, messages, tools: chatTools, tool_choice: { type: 'function', function: { name: 'note' } }, max_tokens: 300, temperature: 0, stream: true };
  const chunks = await sse('/v1/chat/completions', body);
  const entries = [];
  let finish = null;
  for (const c of chunks) {
    const ch = c.choices[0];
    if (!ch) continue;
    assert.equal(finish, null, 'nothing after the finish reason');
    for (const tc of ch.delta.tool_calls ?? []) entries.push(tc);
    finish = ch.finish_reason;
  }
  assert.equal(finish, 'tool_calls');
  // The head: index, id, type and name with empty arguments, as OpenAI sends it.
  assert.deepEqual(Object.keys(entries[0]).sort(), ['function', 'id', 'index', 'type']);
  assert.equal(entries[0].index, 0);
  assert.equal(entries[0].type, 'function');
  assert.equal(entries[0].function.name, 'note');
  assert.equal(entries[0].function.arguments, '');
  // Then fragments only: index and function.arguments.
  const rest = entries.slice(1);
  assert.ok(rest.length > 1, `${rest.length} argument fragments`);
  for (const e of rest) {
    assert.deepEqual(Object.keys(e).sort(), ['function', 'index'], JSON.stringify(e));
    assert.equal(e.index, 0);
    assert.ok(e.function.arguments.length > 0);
  }
  const args = rest.map((e) => e.function.arguments).join('');
  validNote(JSON.parse(args));
  // The unstreamed answer to the same request has the same arguments.
  const whole = await client().chat.completions.create({ ...body, stream: false });
  assert.equal(whole.choices[0].message.tool_calls[0].function.arguments, args);
});

test('openai@7: create({stream}) accumulates the fragments and the stream helper reports argument deltas', async () => {
  const c = client();
  const base = { model: MODEL, messages, tools: chatTools, tool_choice: 'required', max_tokens: 300, temperature: 1, seed: 5 };
  const stream = await c.chat.completions.create({ ...base, stream: true });
  let args = '', fragments = 0, name = '', finish;
  for await (const chunk of stream) {
    const ch = chunk.choices[0];
    if (!ch) continue;
    for (const tc of ch.delta?.tool_calls ?? []) {
      name += tc.function?.name ?? '';
      if (tc.function?.arguments) {
        args += tc.function.arguments;
        fragments++;
      }
    }
    finish = ch.finish_reason ?? finish;
  }
  assert.equal(name, 'note');
  assert.equal(finish, 'tool_calls');
  assert.ok(fragments > 1, `${fragments} fragments`);
  validNote(JSON.parse(args));

  const helper = c.chat.completions.stream({ ...base, seed: 6 });
  const deltas = [];
  let done;
  helper.on('tool_calls.function.arguments.delta', (e) => deltas.push(e));
  helper.on('tool_calls.function.arguments.done', (e) => { done = e; });
  const final = await helper.finalChatCompletion();
  const call = final.choices[0].message.tool_calls[0];
  assert.equal(call.function.name, 'note');
  assert.ok(deltas.length > 1, `${deltas.length} argument deltas`);
  assert.equal(deltas.map((d) => d.arguments_delta).join(''), call.function.arguments);
  // Each delta's snapshot is the arguments so far.
  for (let i = 1; i < deltas.length; i++) assert.ok(deltas[i].arguments.startsWith(deltas[i - 1].arguments));
  assert.equal(done.arguments, call.function.arguments);
  validNote(JSON.parse(call.function.arguments));
});

test('Responses API: output_item.added, function_call_arguments.delta fragments, .done, output_item.done', async () => {
  const stream = client().responses.stream({
    model: MODEL, input: 'Write a note.', max_output_tokens: 300, temperature: 0,
    tools: [{ type: 'function', name: 'note', parameters: noteSchema, strict: false }],
    tool_choice: { type: 'function', name: 'note' },
  });
  const events = [];
  for await (const e of stream) events.push(e);
  const final = await stream.finalResponse();
  const types = events.map((e) => e.type);
  const added = types.findIndex((t, i) => t === 'response.output_item.added' && events[i].item.type === 'function_call');
  assert.ok(added >= 0, types.join(' '));
  const item = events[added].item;
  assert.equal(item.name, 'note');
  assert.equal(item.arguments, '');
  const deltas = events.filter((e) => e.type === 'response.function_call_arguments.delta');
  assert.ok(deltas.length > 1, `${deltas.length} deltas`);
  const done = types.indexOf('response.function_call_arguments.done');
  const itemDone = types.findIndex((t, i) => t === 'response.output_item.done' && events[i].item.type === 'function_call');
  // added < every delta < arguments.done < output_item.done < completed
  for (const d of deltas) {
    const i = events.indexOf(d);
    assert.ok(added < i && i < done, types.join(' '));
    assert.equal(d.item_id, item.id);
    assert.equal(d.output_index, events[added].output_index);
  }
  assert.ok(done < itemDone && itemDone < types.indexOf('response.completed'), types.join(' '));
  const args = deltas.map((d) => d.delta).join('');
  assert.equal(events[done].arguments, args);
  assert.equal(events[itemDone].item.arguments, args);
  assert.equal(events[itemDone].item.status, 'completed');
  const call = final.output.find((o) => o.type === 'function_call');
  assert.equal(call.arguments, args);
  validNote(JSON.parse(args));
});

test('Anthropic SDK: a tool_use block streams input_json_delta fragments (inputJson events)', async () => {
  const stream = anthropic().messages.stream({
    model: MODEL, max_tokens: 300, temperature: 0, messages,
    tools: [{ name: 'note', description: 'Write a note', input_schema: noteSchema }],
    tool_choice: { type: 'tool', name: 'note' },
  });
  const partials = [];
  const events = [];
  stream.on('inputJson', (partial) => partials.push(partial));
  stream.on('streamEvent', (e) => events.push(e));
  const final = await stream.finalMessage();
  assert.equal(final.stop_reason, 'tool_use');
  const use = final.content.find((b) => b.type === 'tool_use');
  assert.equal(use.name, 'note');
  assert.ok(partials.length > 1, `${partials.length} fragments`);
  assert.deepEqual(JSON.parse(partials.join('')), use.input);
  validNote(use.input);
  // content_block_start (tool_use, input {}) < input_json_delta... < content_block_stop
  const start = events.findIndex((e) => e.type === 'content_block_start' && e.content_block.type === 'tool_use');
  assert.ok(start >= 0);
  assert.deepEqual(events[start].content_block.input, {});
  const index = events[start].index;
  const stop = events.findIndex((e) => e.type === 'content_block_stop' && e.index === index);
  const deltas = events.filter((e) => e.type === 'content_block_delta' && e.index === index);
  for (const d of deltas) {
    assert.equal(d.delta.type, 'input_json_delta');
    const i = events.indexOf(d);
    assert.ok(start < i && i < stop);
  }
  assert.ok(stop < events.findIndex((e) => e.type === 'message_delta'));
});

test('AI SDK streamText: tool-input-start, several tool-input-delta parts, tool-input-end, then the call', async () => {
  const providers = {
    responses: (p) => p(MODEL),
    chat: (p) => p.chat(MODEL),
  };
  const openai = createOpenAI({ baseURL: `${URL_MAIN}/v1`, apiKey: KEY ?? 'none' });
  const claude = createAnthropic({ baseURL: `${URL_MAIN}/v1`, apiKey: KEY ?? 'none' });
  const models = [['openai responses', providers.responses(openai)], ['openai chat', providers.chat(openai)], ['anthropic', claude(MODEL)]];
  for (const [label, model] of models) {
    const s = streamText({
      model, prompt: 'Write a note.', maxOutputTokens: 300, temperature: 0, maxRetries: 0,
      tools: { note: tool({ description: 'Write a note', inputSchema: jsonSchema(noteSchema) }) },
      toolChoice: { type: 'tool', toolName: 'note' },
    });
    const parts = [];
    for await (const part of s.fullStream) parts.push(part);
    const types = parts.map((p) => p.type);
    const start = types.indexOf('tool-input-start');
    const end = types.indexOf('tool-input-end');
    const call = parts.find((p) => p.type === 'tool-call');
    assert.ok(start >= 0 && end > start && call, `${label}: ${types.join(' ')}`);
    const deltas = parts.filter((p) => p.type === 'tool-input-delta');
    assert.ok(deltas.length > 1, `${label}: ${deltas.length} deltas`);
    for (const d of deltas) {
      const i = parts.indexOf(d);
      assert.ok(start < i && i < end, `${label}: ${types.join(' ')}`);
    }
    assert.equal(call.toolName, 'note');
    assert.deepEqual(JSON.parse(deltas.map((d) => d.delta).join('')), call.input, label);
    validNote(call.input);
  }
});

test('a call cut by max_tokens: the stream keeps the fragments it sent, finish length; unstreamed it is text', async () => {
  const c = client();
  const base = { model: MODEL, messages, tools: chatTools, tool_choice: 'required', temperature: 0 };
  const full = await c.chat.completions.create({ ...base, max_tokens: 300 });
  const fullArgs = full.choices[0].message.tool_calls[0].function.arguments;
  // Inside the 40+ character string: well before the call's end.
  const cut = full.usage.completion_tokens - 12;
  const chunks = await sse('/v1/chat/completions', { ...base, max_tokens: cut, stream: true });
  let args = '', name = '', finish = null;
  for (const ch of chunks.map((x) => x.choices[0]).filter(Boolean)) {
    for (const tc of ch.delta.tool_calls ?? []) {
      name += tc.function?.name ?? '';
      args += tc.function?.arguments ?? '';
    }
    finish = ch.finish_reason ?? finish;
  }
  assert.equal(finish, 'length');
  assert.equal(name, 'note');
  assert.ok(args.length > 0 && args.length < fullArgs.length && fullArgs.startsWith(args), `${args} / ${fullArgs}`);
  const whole = await c.chat.completions.create({ ...base, max_tokens: cut });
  assert.equal(whole.choices[0].finish_reason, 'length');
  assert.equal(whole.choices[0].message.tool_calls, undefined);
  assert.ok(whole.choices[0].message.content.length > 0);
  // Anthropic: the tool_use block closes with the input streamed so far; max_tokens.
  const events = [];
  const stream = anthropic().messages.stream({
    model: MODEL, max_tokens: cut, temperature: 0, messages,
    tools: [{ name: 'note', description: 'Write a note', input_schema: noteSchema }], tool_choice: { type: 'any' } });
  stream.on('streamEvent', (e) => events.push(e));
  const final = await stream.finalMessage();
  assert.equal(final.stop_reason, 'max_tokens');
  const partial = events.filter((e) => e.type === 'content_block_delta' && e.delta.type === 'input_json_delta')
    .map((e) => e.delta.partial_json).join('');
  assert.ok(partial.length > 0 && fullArgs.startsWith(partial), `${partial} / ${fullArgs}`);
  assert.ok(events.some((e) => e.type === 'content_block_stop'));
});
