// The Responses API (/v1/responses) through the official openai SDKs, 6.x and 7.x,
// against a real `keel serve`: plain and streamed turns, the output_text accessor,
// function tools and tool results over several turns, previous_response_id and the
// stored-response endpoints, reasoning (a server whose template opens a <think> block,
// so the random model's whole output is reasoning), background + cancel, and errors in
// OpenAI's format naming the field. The model is random: these check the protocol.
import test, { after, before } from 'node:test';
import assert from 'node:assert/strict';
import { createRequire } from 'node:module';
import path from 'node:path';
import { http, KEY, MODEL, OpenAI, slowEngine, URL_MAIN, waitFor } from './helpers.mjs';
import { startModelServer, startThinkingServer } from './responses_lib.mjs';

const require = createRequire(path.join(process.env.NODE_PATH, 'noop.js'));
const OpenAI7 = require('openai7').OpenAI;
const Ajv = require('ajv').default ?? require('ajv');
const sdks = {
  'openai 6': (url = URL_MAIN, key = KEY) =>
    new OpenAI({ baseURL: `${url}/v1`, apiKey: key ?? 'none', maxRetries: 0, timeout: 60_000 }),
  'openai 7': (url = URL_MAIN, key = KEY) =>
    new OpenAI7({ baseURL: `${url}/v1`, apiKey: key ?? 'none', maxRetries: 0, timeout: 60_000 }),
};

const weather = {
  type: 'function',
  name: 'get_weather',
  description: 'Weather of a city',
  parameters: { type: 'object', properties: { city: { type: 'string' } }, required: ['city'] },
  strict: false,
};

function checkUsage(u, maxOut) {
  assert.ok(u.input_tokens > 0);
  assert.ok(u.output_tokens > 0 && u.output_tokens <= maxOut, JSON.stringify(u));
  assert.equal(u.total_tokens, u.input_tokens + u.output_tokens);
  assert.equal(typeof u.input_tokens_details.cached_tokens, 'number');
  assert.equal(typeof u.output_tokens_details.reasoning_tokens, 'number');
}

async function expectError(promise, status, param) {
  await assert.rejects(promise, (e) => {
    assert.equal(e.status, status, String(e));
    assert.equal(e.error?.param ?? e.param, param, JSON.stringify(e.error));
    return true;
  });
}

for (const [name, make] of Object.entries(sdks)) {
  test(`${name}: responses.create, plain, with output_text`, async () => {
    const client = make();
    const r = await client.responses.create({
      model: MODEL, input: 'Say hello.', instructions: 'Be brief.', max_output_tokens: 8,
      temperature: 0, metadata: { suite: 'api' }, user: 'tester', prompt_cache_key: 'k1',
    });
    assert.match(r.id, /^resp_/);
    assert.equal(r.object, 'response');
    assert.equal(r.model, MODEL);
    assert.ok(['completed', 'incomplete'].includes(r.status));
    if (r.status === 'incomplete') assert.equal(r.incomplete_details.reason, 'max_output_tokens');
    assert.equal(r.instructions, 'Be brief.');
    assert.deepEqual(r.metadata, { suite: 'api' });
    assert.equal(r.output.length, 1);
    const msg = r.output[0];
    assert.equal(msg.type, 'message');
    assert.equal(msg.role, 'assistant');
    assert.match(msg.id, /^msg_/);
    assert.equal(msg.content[0].type, 'output_text');
    assert.equal(r.output_text, msg.content[0].text);
    checkUsage(r.usage, 8);
    // Greedy: the same request gives the same text, and the prompt is now cached.
    const again = await client.responses.create({ model: MODEL, input: 'Say hello.', instructions: 'Be brief.', max_output_tokens: 8, temperature: 0 });
    assert.equal(again.output_text, r.output_text);
    assert.ok(again.usage.input_tokens_details.cached_tokens > 0, JSON.stringify(again.usage));
  });

  test(`${name}: responses.create streamed: every event, numbered, same as the final response`, async () => {
    const client = make();
    const stream = await client.responses.create({
      model: MODEL, input: [{ role: 'user', content: [{ type: 'input_text', text: 'Count to three.' }] }],
      max_output_tokens: 10, temperature: 0, stream: true,
    });
    const events = [];
    for await (const e of stream) events.push(e);
    const types = events.map((e) => e.type);
    assert.deepEqual(types.slice(0, 4), ['response.created', 'response.in_progress', 'response.output_item.added', 'response.content_part.added']);
    assert.deepEqual(types.slice(-4, -1), ['response.output_text.done', 'response.content_part.done', 'response.output_item.done']);
    assert.ok(['response.completed', 'response.incomplete'].includes(types.at(-1)));
    assert.deepEqual(events.map((e) => e.sequence_number), events.map((_, i) => i));
    const deltas = events.filter((e) => e.type === 'response.output_text.delta').map((e) => e.delta).join('');
    const final = events.at(-1).response;
    assert.equal(final.output[0].content[0].text, deltas);
    assert.equal(events.find((e) => e.type === 'response.output_text.done').text, deltas);
    checkUsage(final.usage, 10);
    // The helper stream: its final response and output_text.
    const helper = client.responses.stream({ model: MODEL, input: 'Count to three.', max_output_tokens: 10, temperature: 0 });
    let text = '';
    helper.on('response.output_text.delta', (e) => (text += e.delta));
    const done = await helper.finalResponse();
    assert.equal(done.output[0].content[0].text, text);
    assert.equal(text, deltas);  // greedy: the same text
    // openai 6 sets output_text only on response.completed; this one was cut off.
    if (done.output_text !== undefined) assert.equal(done.output_text, text);
  });

  test(`${name}: function tools and tool results over several turns, with previous_response_id`, async () => {
    const client = make();
    const base = { model: MODEL, tools: [weather], tool_choice: 'auto', parallel_tool_calls: true, max_output_tokens: 6, temperature: 0 };
    const r1 = await client.responses.create({
      ...base,
      input: [
        { role: 'user', content: 'Weather in Paris?' },
        { type: 'function_call', call_id: 'call_p', name: 'get_weather', arguments: '{"city":"Paris"}' },
        { type: 'function_call_output', call_id: 'call_p', output: 'sunny, 21 C' },
      ],
    });
    assert.deepEqual(r1.tools.map((t) => t.name), ['get_weather']);
    assert.equal(r1.tool_choice, 'auto');
    assert.equal(r1.parallel_tool_calls, true);
    // Turn 2 continues turn 1: another call and its result.
    const r2 = await client.responses.create({
      ...base,
      previous_response_id: r1.id,
      input: [
        { role: 'user', content: 'And Rome?' },
        { type: 'function_call', call_id: 'call_r', name: 'get_weather', arguments: '{"city":"Rome"}' },
        { type: 'function_call_output', call_id: 'call_r', output: 'rain' },
      ],
    });
    assert.equal(r2.previous_response_id, r1.id);
    assert.ok(r2.usage.input_tokens > r1.usage.input_tokens + r1.usage.output_tokens, 'turn 1 is in the prompt');
    assert.ok(r2.usage.input_tokens_details.cached_tokens > 0, 'turn 1 is a cached prefix');
    // Its input items: turn 1's input and output, then its own input, all with ids.
    const asc = [];
    for await (const item of client.responses.inputItems.list(r2.id, { order: 'asc', limit: 2 })) asc.push(item);
    assert.deepEqual(asc.map((i) => i.type), ['message', 'function_call', 'function_call_output', 'message', 'message', 'function_call', 'function_call_output']);
    assert.equal(asc[3].id, r1.output[0].id);
    assert.equal(asc[5].call_id, 'call_r');
    assert.equal(new Set(asc.map((i) => i.id)).size, asc.length);
    const page = await client.responses.inputItems.list(r2.id);
    assert.deepEqual(page.data.map((i) => i.id), asc.map((i) => i.id).reverse());  // desc by default
    assert.equal(page.has_more, false);
    // A result for a call of turn 1, sent with turn 2 as previous: the call is known.
    const r3 = await client.responses.create({
      ...base, previous_response_id: r2.id,
      input: [{ type: 'function_call_output', call_id: 'call_p', output: 'still sunny' }],
    });
    assert.ok(r3.usage.input_tokens > r2.usage.input_tokens);
    // A result for a call that never happened.
    await expectError(client.responses.create({
      ...base, input: [{ role: 'user', content: 'x' }, { type: 'function_call_output', call_id: 'call_nope', output: '1' }],
    }), 400, 'input[1].call_id');
    await expectError(client.responses.create({ ...base, input: 'x', tool_choice: { type: 'function', name: 'nope' } }), 400, 'tool_choice.name');
    await expectError(client.responses.create({ ...base, input: 'x', tools: [{ type: 'file_search', vector_store_ids: ['v'] }] }), 400, 'tools[0].type');
  });

  test(`${name}: store, retrieve, delete; previous_response_id of an unknown or unstored response`, async () => {
    const client = make();
    const r = await client.responses.create({ model: MODEL, input: 'Remember me.', max_output_tokens: 4 });
    assert.equal(r.store, true);
    const got = await client.responses.retrieve(r.id);
    assert.equal(got.id, r.id);
    assert.deepEqual(got.output, r.output);
    assert.deepEqual(got.usage, r.usage);
    await client.responses.delete(r.id);
    await expectError(client.responses.retrieve(r.id), 404, 'response_id');
    await expectError(client.responses.create({ model: MODEL, input: 'x', previous_response_id: r.id }), 400, 'previous_response_id');
    const unstored = await client.responses.create({ model: MODEL, input: 'Forget me.', max_output_tokens: 4, store: false });
    assert.equal(unstored.store, false);
    await expectError(client.responses.retrieve(unstored.id), 404, 'response_id');
    await expectError(client.responses.create({ model: MODEL, input: 'x', previous_response_id: unstored.id }), 400, 'previous_response_id');
    await expectError(client.responses.create({ model: MODEL, input: 'x', previous_response_id: 'resp_unknown' }), 400, 'previous_response_id');
  });

  test(`${name}: a forced tool_choice comes back as a function_call whose arguments validate`, async () => {
    const client = make();
    const schema = { type: 'object', properties: { city: { type: 'string', maxLength: 8 }, unit: { enum: ['c', 'f'] } }, required: ['city', 'unit'], additionalProperties: false };
    const validate = new Ajv({ strict: false }).compile(schema);
    const tools = [{ type: 'function', name: 'get_weather', parameters: schema, strict: true }, { type: 'function', name: 'noop', parameters: { type: 'object', properties: {}, additionalProperties: false } }];
    for (const tool_choice of ['required', { type: 'function', name: 'get_weather' }]) {
      const r = await client.responses.create({ model: MODEL, input: 'Weather?', tools, tool_choice, max_output_tokens: 300 });
      assert.equal(r.status, 'completed', JSON.stringify(r.output));
      const calls = r.output.filter((o) => o.type === 'function_call');
      assert.equal(calls.length, 1, JSON.stringify(r.output));
      if (typeof tool_choice === 'object' || calls[0].name === 'get_weather') {
        assert.equal(calls[0].name, 'get_weather');
        assert.ok(validate(JSON.parse(calls[0].arguments)), calls[0].arguments + JSON.stringify(validate.errors));
      } else {
        assert.equal(calls[0].name, 'noop');
      }
      assert.deepEqual(r.tool_choice, tool_choice);
    }
  });

  test(`${name}: text.format json_schema and json_object constrain the output`, async () => {
    const client = make();
    const schema = { type: 'object', properties: { ok: { type: 'boolean' } }, required: ['ok'], additionalProperties: false };
    const r = await client.responses.create({ model: MODEL, input: 'x', max_output_tokens: 200, text: { format: { type: 'json_schema', name: 'o', schema, strict: true } } });
    assert.equal(r.status, 'completed');
    assert.equal(typeof JSON.parse(r.output_text).ok, 'boolean', r.output_text);
    assert.equal(r.text.format.type, 'json_schema');
    const o = await client.responses.create({ model: MODEL, input: 'x', max_output_tokens: 3, text: { format: { type: 'json_object' } } });
    assert.ok(o.output_text.startsWith('{'), o.output_text);
  });

  test(`${name}: reasoning fields are accepted and echoed`, async () => {
    const client = make();
    const r = await client.responses.create({
      model: MODEL, input: 'Think.', max_output_tokens: 4, reasoning: { effort: 'low', summary: 'auto' },
      include: ['reasoning.encrypted_content'], text: { format: { type: 'text' }, verbosity: 'low' },
    });
    assert.deepEqual(r.reasoning, { effort: 'low', summary: 'auto' });
    assert.equal(r.usage.output_tokens_details.reasoning_tokens, 0);  // this template has no <think>
    await expectError(client.responses.create({
      model: MODEL, input: 'x', text: { format: { type: 'json_schema', name: 'o', schema: { type: 'object', properties: { n: { type: 'number', multipleOf: 3 } } } } },
    }), 400, 'text.format.schema.properties.n.multipleOf');
    await expectError(client.responses.create({ model: MODEL, input: 'x', reasoning: { effort: 'enormous' } }), 400, 'reasoning.effort');
  });
}

test('background responses can be polled and cancelled', async () => {
  const client = sdks['openai 7']();
  // A slow engine (every step stalls), so the response is still running when the
  // cancel lands, however fast or loaded the machine is.
  const fast = await slowEngine();
  let r;
  try {
    r = await client.responses.create({ model: MODEL, input: 'Write a long story.', background: true, max_output_tokens: 3000, ignore_eos: true });
    assert.equal(r.background, true);
    assert.equal(r.status, 'in_progress');
    assert.equal((await client.responses.retrieve(r.id)).status, 'in_progress');
    const cancelled = await client.responses.cancel(r.id);
    assert.equal(cancelled.status, 'cancelled');
    // Cancelled at once and for good: every retrieve says so, and once the generation
    // has stopped its usage is recorded.
    const last = await waitFor(async () => {
      const x = await client.responses.retrieve(r.id);
      assert.equal(x.status, 'cancelled');
      return x.usage ? x : null;
    }, { timeoutMs: 60_000, what: 'the cancelled response\'s usage' });
    assert.ok(last.usage.output_tokens < 3000);
    // A second cancel is harmless.
    assert.equal((await client.responses.cancel(r.id)).status, 'cancelled');
  } finally {
    await fast();
  }
  assert.equal((await client.responses.retrieve(r.id)).status, 'cancelled');
  let last;
  // A short one completes by itself.
  const short = await client.responses.create({ model: MODEL, input: 'Hi.', background: true, max_output_tokens: 3 });
  last = await waitFor(async () => {
    const x = await client.responses.retrieve(short.id);
    return x.status !== 'in_progress' ? x : null;
  }, { timeoutMs: 60_000, what: 'the short background response' });
  assert.equal(last.status, 'incomplete');
  // A finished response stays finished when cancelled.
  assert.equal((await client.responses.cancel(short.id)).status, 'incomplete');
  assert.equal(last.output[0].type, 'message');
  // Only background responses are cancellable.
  const fg = await client.responses.create({ model: MODEL, input: 'Hi.', max_output_tokens: 2 });
  await expectError(client.responses.cancel(fg.id), 400, 'response_id');
});

test('bad requests: 4xx in OpenAI format naming the field', async () => {
  const cases = [
    [{ model: MODEL, input: [{ type: 'computer_call', id: 'x' }] }, 400, 'input[0].type'],
    [{ model: MODEL, input: [{ type: 'message', role: 'user', content: [{ type: 'input_image', image_url: 'x' }] }] }, 400, 'input[0].content[0].type'],
    [{ model: MODEL, input: [{ type: 'message', role: 'robot', content: 'x' }] }, 400, 'input[0].role'],
    [{ model: MODEL, input: [{ type: 'function_call', call_id: 'c', name: 'f', arguments: { a: 1 } }] }, 400, 'input[0].arguments'],
    [{ model: MODEL, input: [{ type: 'reasoning', summary: 'not an array' }] }, 400, 'input[0].summary'],
    [{ model: MODEL, input: 42 }, 400, 'input'],
    [{ model: MODEL }, 400, 'input'],
    [{ model: MODEL, input: 'x', max_output_tokens: -1 }, 400, 'max_output_tokens'],
    [{ model: MODEL, input: 'x', text: { format: { type: 'json_schema', name: 'o' } } }, 400, 'text.format.schema'],
    [{ model: MODEL, input: 'x', conversation: 'conv_1' }, 400, 'conversation'],
    [{ model: MODEL, input: 'x'.repeat(30000) }, 400, 'input'],
    [{ model: 'no-such-model', input: 'x' }, 404, 'model'],
  ];
  for (const [body, status, param] of cases) {
    const r = await http('POST', '/v1/responses', { body });
    assert.equal(r.status, status, `${JSON.stringify(body).slice(0, 120)}: ${r.text}`);
    assert.equal(r.json.error.param, param, r.text);
    assert.equal(r.json.error.type, status === 404 ? 'not_found_error' : 'invalid_request_error');
    assert.ok(r.json.error.message.startsWith(`${param}:`), r.json.error.message);
  }
  const malformed = await http('POST', '/v1/responses', { raw: '{"model":', headers: { 'content-type': 'application/json' } });
  assert.equal(malformed.status, 400);
  assert.equal(malformed.json.error.param, 'body');
  const get = await http('GET', '/v1/responses/resp_missing');
  assert.equal(get.status, 404);
  assert.equal(get.json.error.type, 'not_found_error');
  assert.equal((await http('DELETE', '/v1/responses/resp_missing')).status, 404);
  const stored = await http('POST', '/v1/responses', { body: { model: MODEL, input: 'x', max_output_tokens: 1 } });
  for (const [q, param] of [['limit=0', 'limit'], ['limit=x', 'limit'], ['order=up', 'order'], ['after=nope', 'after']]) {
    const r = await http('GET', `/v1/responses/${stored.json.id}/input_items?${q}`);
    assert.equal(r.status, 400, r.text);
    assert.equal(r.json.error.param, param);
  }
  assert.equal((await http('GET', `/v1/responses/${stored.json.id}/other`)).status, 404);
  assert.equal((await http('PUT', '/v1/responses')).status, 405);
  assert.equal((await http('POST', '/v1/responses', { body: { model: MODEL, input: 'x' }, key: 'wrong' })).status, 401);
});

test('a client that leaves a stream aborts the generation', async () => {
  const client = sdks['openai 6']();
  const before = (await http('GET', '/api/status')).json.totals.client_aborts;
  // Slow on purpose: the generation is still running when the client leaves.
  const fast = await slowEngine({ secondsPerStep: 0.1 });
  try {
    const stream = await client.responses.create({ model: MODEL, input: 'Go on forever.', max_output_tokens: 3000, ignore_eos: true, stream: true });
    let n = 0;
    for await (const e of stream) if (e.type === 'response.output_text.delta' && ++n === 3) break;  // closes the connection
    await waitFor(async () => {
      const s = (await http('GET', '/api/status')).json;
      return s.totals.client_aborts > before && s.models.find((m) => m.id === MODEL).running === 0;
    }, { timeoutMs: 30_000, what: 'the abort of the left stream' });
  } finally {
    await fast();
  }
});

let thinking;
before(async () => {
  thinking = await startThinkingServer();
});
after(() => thinking?.stop());

for (const [name, make] of Object.entries(sdks)) {
  test(`${name}: thinking output becomes a reasoning item (its summary, or reasoning_text with summary none)`, async () => {
    const client = make(thinking.url, null);
    const r = await client.responses.create({ model: 'thinker', input: 'Hi', max_output_tokens: 12, temperature: 0, reasoning: { summary: 'auto' } });
    assert.equal(r.output[0].type, 'reasoning');
    assert.match(r.output[0].id, /^rs_/);
    assert.equal(r.output[0].summary[0].type, 'summary_text');
    assert.ok(r.output[0].summary[0].text.length > 0);
    assert.ok(r.usage.output_tokens_details.reasoning_tokens > 0);
    assert.ok(r.usage.output_tokens_details.reasoning_tokens <= r.usage.output_tokens + 2);
    const stream = await client.responses.create({ model: 'thinker', input: 'Hi', max_output_tokens: 12, temperature: 0, reasoning: { summary: 'auto' }, stream: true });
    const events = [];
    for await (const e of stream) events.push(e);
    const types = events.map((e) => e.type);
    for (const t of ['response.reasoning_summary_part.added', 'response.reasoning_summary_text.delta', 'response.reasoning_summary_text.done', 'response.reasoning_summary_part.done'])
      assert.ok(types.includes(t), `${t} in ${types}`);
    const summary = events.filter((e) => e.type === 'response.reasoning_summary_text.delta').map((e) => e.delta).join('');
    assert.equal(summary, r.output[0].summary[0].text);
    // Without reasoning.summary, the same summary; with summary "none", reasoning_text content.
    const dflt = await client.responses.create({ model: 'thinker', input: 'Hi', max_output_tokens: 12, temperature: 0 });
    assert.deepEqual(dflt.output[0].summary, r.output[0].summary);
    const raw = await client.responses.create({ model: 'thinker', input: 'Hi', max_output_tokens: 12, temperature: 0, reasoning: { summary: 'none' }, stream: true });
    const rawEvents = [];
    for await (const e of raw) rawEvents.push(e);
    const item = rawEvents.at(-1).response.output[0];
    assert.equal(item.content[0].type, 'reasoning_text');
    assert.equal(item.content[0].text, summary);
    assert.ok(rawEvents.some((e) => e.type === 'response.reasoning_text.delta'));
    // Sent back as input, a reasoning item is accepted.
    const next = await client.responses.create({ model: 'thinker', input: [{ role: 'user', content: 'Hi' }, item, { role: 'user', content: 'More' }], max_output_tokens: 2 });
    assert.equal(next.output[0].type, 'reasoning');
  });
}

test('an engine that crashes mid-turn fails the response at once: response.failed / 503, never a hang', async () => {
  const srv = await startModelServer('crashy', { args: ['--enable-fault-injection'] });
  try {
    const client = sdks['openai 7'](srv.url, null);
    // Arms a crash once the engine is up (after a crash, the next request restarts it).
    const crash = async () => {
      for (let i = 0; i < 100; i++) {
        await client.responses.create({ model: 'crashy', input: 'warm up', max_output_tokens: 1 }).catch(() => {});
        const r = await fetch(`${srv.url}/debug/faults`, {
          method: 'POST', headers: { 'content-type': 'application/json' },
          body: JSON.stringify({ model: 'crashy', kind: 'crash-engine' }),
        });
        if (r.status === 200) return;
        await new Promise((res) => setTimeout(res, 100));
      }
      assert.fail('could not arm the crash');
    };
    // Streamed: the stream ends with response.failed carrying the error.
    await client.responses.create({ model: 'crashy', input: 'warm up', max_output_tokens: 1 });
    // ignore_eos (keel's extension): a sampled end of text must not finish the response before
    // the crash lands (it did once, after ~40 tokens).
    const stream = await client.responses.create({ model: 'crashy', input: 'Go on.', max_output_tokens: 3000, ignore_eos: true, stream: true });
    const types = [];
    let failed;
    const t0 = Date.now();
    for await (const e of stream) {
      types.push(e.type);
      if (types.length === 3) await crash();
      if (e.type === 'response.failed') failed = e.response;
    }
    assert.ok(failed, types.join(' '));
    assert.equal(failed.status, 'failed');
    assert.ok(failed.error.message.length > 0);
    assert.ok(Date.now() - t0 < 20_000);
    // Whole: an OpenAI-format 5xx. The engine restarts for the next request.
    await crash();
    await assert.rejects(client.responses.create({ model: 'crashy', input: 'Go on.', max_output_tokens: 3000, ignore_eos: true }), (e) => {
      assert.ok(e.status >= 500, String(e));
      return true;
    });
    // Served again once the supervisor has restarted the engine.
    let ok;
    for (let i = 0; i < 100 && !ok; i++) {
      ok = await client.responses.create({ model: 'crashy', input: 'again', max_output_tokens: 2 }).catch(() => undefined);
      if (!ok) await new Promise((res) => setTimeout(res, 100));
    }
    assert.equal(ok?.output[0].type, 'message');
  } finally {
    srv.stop();
  }
});
