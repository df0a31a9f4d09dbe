// Tool requests against a real `keel serve`: tools, tool_choice and tool-result turns
// are accepted by both APIs and rendered through the chat template. The tiny random
// model never writes a tool call by itself; a forced tool_choice constrains it to one,
// which must come back as a tool call whose arguments validate against the schema.
// Parsing calls out of free output is covered with scripted token streams in
// tests/unit/server/tool_calls_test.cpp and tests/unit/text/tool_call_parser_test.cpp.
import test, { after, before } from 'node:test';
import assert from 'node:assert/strict';
import { spawn } from 'node:child_process';
import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { createRequire } from 'node:module';
import { openai, anthropic, http, MODEL, KEEL_BIN, MODEL_PATH, OpenAI, Anthropic, URL_MAIN, KEY } from './helpers.mjs';

const require = createRequire(path.join(process.env.NODE_PATH, 'noop.js'));
const OpenAI7 = require('openai7').OpenAI;
const Ajv = require('ajv').default ?? require('ajv');

const tools = [
  {
    type: 'function',
    function: {
      name: 'get_weather',
      description: 'Weather of a city',
      parameters: { type: 'object', properties: { city: { type: 'string' } }, required: ['city'] },
    },
  },
];
const anthropicTools = [
  {
    name: 'get_weather',
    description: 'Weather of a city',
    input_schema: { type: 'object', properties: { city: { type: 'string' } }, required: ['city'] },
  },
];
// One tool round trip, in each API's shape.
const openaiTurns = [
  { role: 'system', content: 'Be brief.' },
  { role: 'user', content: 'Weather in Paris?' },
  {
    role: 'assistant',
    content: null,
    tool_calls: [{ id: 'call_1', type: 'function', function: { name: 'get_weather', arguments: '{"city": "Paris"}' } }],
  },
  { role: 'tool', tool_call_id: 'call_1', content: 'sunny, 21 C' },
];
const anthropicTurns = [
  { role: 'user', content: 'Weather in Paris?' },
  { role: 'assistant', content: [{ type: 'tool_use', id: 'call_1', name: 'get_weather', input: { city: 'Paris' } }] },
  { role: 'user', content: [{ type: 'tool_result', tool_use_id: 'call_1', content: 'sunny, 21 C' }] },
];

test('tools reach the prompt even when the template has no tools section', async () => {
  const client = openai();
  const base = { model: MODEL, messages: [{ role: 'user', content: 'Hello' }], max_tokens: 4, temperature: 0 };
  // The test model's template ignores tools: keel writes them into the system prompt
  // (Hermes style), so the prompt grows by the schemas, the same in both APIs.
  const plain = await client.chat.completions.create(base);
  const withTools = await client.chat.completions.create({ ...base, tools, tool_choice: 'auto', parallel_tool_calls: true });
  assert.ok(withTools.usage.prompt_tokens > plain.usage.prompt_tokens + 20, `${withTools.usage.prompt_tokens} vs ${plain.usage.prompt_tokens}`);
  assert.ok(['stop', 'length', 'tool_calls'].includes(withTools.choices[0].finish_reason));
  const a = anthropic();
  const abase = { model: MODEL, max_tokens: 4, temperature: 0, messages: [{ role: 'user', content: 'Hello' }] };
  const am = await a.messages.countTokens({ model: MODEL, messages: abase.messages });
  const at = await a.messages.countTokens({ model: MODEL, messages: abase.messages, tools: anthropicTools });
  assert.ok(at.input_tokens > am.input_tokens + 20, `${at.input_tokens} vs ${am.input_tokens}`);
  const m = await a.messages.create({ ...abase, tools: anthropicTools, tool_choice: { type: 'auto' } });
  assert.equal(m.usage.input_tokens + m.usage.cache_read_input_tokens, at.input_tokens);

});

// Bounded schemas, so that a random model finishes a call well within max_tokens.
const forcedSchemas = {
  get_weather: { type: 'object', properties: { city: { type: 'string', maxLength: 10 }, unit: { enum: ['c', 'f'] } }, required: ['city', 'unit'], additionalProperties: false },
  add: { type: 'object', properties: { a: { type: 'integer', minimum: 0, maximum: 99 }, b: { type: 'integer', minimum: 0, maximum: 99 } }, required: ['a', 'b'], additionalProperties: false },
};
const forcedTools = Object.entries(forcedSchemas).map(([name, parameters]) => ({ type: 'function', function: { name, parameters } }));
const validators = Object.fromEntries(Object.entries(forcedSchemas).map(([n, s]) => [n, new Ajv({ strict: false }).compile(s)]));
const validArgs = (name, args) => {
  assert.ok(validators[name], `unknown tool ${name}`);
  assert.ok(validators[name](args), `${name} ${JSON.stringify(args)}: ${JSON.stringify(validators[name].errors)}`);
};

for (const [pkg, make] of [['openai 6', () => openai()], ['openai 7', () => new OpenAI7({ baseURL: `${URL_MAIN}/v1`, apiKey: KEY ?? 'none', maxRetries: 0 })]]) {
  test(`${pkg}: a forced tool_choice always comes back as a valid tool call (plain and streamed)`, async () => {
    const client = make();
    const base = { model: MODEL, messages: [{ role: 'user', content: 'Hello' }], tools: forcedTools, max_tokens: 300, temperature: 1 };
    for (const [tool_choice, allowed] of [['required', ['get_weather', 'add']], [{ type: 'function', function: { name: 'add' } }, ['add']]]) {
      for (const seed of [1, 2, 3]) {
        const r = await client.chat.completions.create({ ...base, tool_choice, seed });
        const c = r.choices[0];
        assert.equal(c.finish_reason, 'tool_calls', JSON.stringify(c.message));
        assert.equal(c.message.tool_calls.length, 1);
        const call = c.message.tool_calls[0];
        assert.equal(call.type, 'function');
        assert.ok(allowed.includes(call.function.name), call.function.name);
        validArgs(call.function.name, JSON.parse(call.function.arguments));
      }
      // Streamed: the deltas assemble into the same kind of call.
      const stream = await client.chat.completions.create({ ...base, tool_choice, seed: 4, stream: true });
      let name = '', args = '', finish;
      for await (const chunk of stream) {
        const ch = chunk.choices[0];
        if (!ch) continue;
        for (const tc of ch.delta?.tool_calls ?? []) {
          name += tc.function?.name ?? '';
          args += tc.function?.arguments ?? '';
        }
        finish = ch.finish_reason ?? finish;
      }
      assert.equal(finish, 'tool_calls');
      assert.ok(allowed.includes(name), name);
      validArgs(name, JSON.parse(args));
    }
  });
}

test('Anthropic SDK: tool_choice any and tool always come back as a valid tool_use (plain and streamed)', async () => {
  const a = anthropic();
  const atools = forcedTools.map(({ function: f }) => ({ name: f.name, input_schema: f.parameters }));
  const base = { model: MODEL, max_tokens: 300, temperature: 1, tools: atools, messages: [{ role: 'user', content: 'Hello' }] };
  for (const [tool_choice, allowed] of [[{ type: 'any' }, ['get_weather', 'add']], [{ type: 'tool', name: 'get_weather' }, ['get_weather']]]) {
    for (let i = 0; i < 2; i++) {
      const m = await a.messages.create({ ...base, tool_choice });
      assert.equal(m.stop_reason, 'tool_use', JSON.stringify(m.content));
      const uses = m.content.filter((b) => b.type === 'tool_use');
      assert.equal(uses.length, 1, JSON.stringify(m.content));
      assert.ok(allowed.includes(uses[0].name), uses[0].name);
      validArgs(uses[0].name, uses[0].input);
    }
    const final = await a.messages.stream({ ...base, tool_choice }).finalMessage();
    assert.equal(final.stop_reason, 'tool_use');
    const use = final.content.find((b) => b.type === 'tool_use');
    assert.ok(use && allowed.includes(use.name), JSON.stringify(final.content));
    validArgs(use.name, use.input);
  }
});

test('a max_tokens too small to finish a forced call ends with length, in both APIs', async () => {
  const r = await openai().chat.completions.create({
    model: MODEL, messages: [{ role: 'user', content: 'Hello' }], tools: forcedTools, tool_choice: 'required', max_tokens: 3 });
  assert.equal(r.choices[0].finish_reason, 'length');
  assert.equal(r.usage.completion_tokens, 3);
  const m = await anthropic().messages.create({
    model: MODEL, max_tokens: 3, messages: [{ role: 'user', content: 'Hello' }], tool_choice: { type: 'any' },
    tools: forcedTools.map(({ function: f }) => ({ name: f.name, input_schema: f.parameters })) });
  assert.equal(m.stop_reason, 'max_tokens');
});

test('tool-result turns are accepted by both APIs', async () => {
  const r = await openai().chat.completions.create({ model: MODEL, messages: openaiTurns, tools, max_tokens: 4 });
  assert.equal(r.choices[0].message.role, 'assistant');
  const m = await anthropic().messages.create({ model: MODEL, max_tokens: 4, system: 'Be brief.', tools: anthropicTools, messages: anthropicTurns });
  assert.equal(m.type, 'message');
  const counted = await anthropic().messages.countTokens({ model: MODEL, system: 'Be brief.', tools: anthropicTools, messages: anthropicTurns });
  assert.equal(counted.input_tokens, m.usage.input_tokens + m.usage.cache_read_input_tokens);
});

test('bad tool requests name the field', async () => {
  const bad = async (body, param) => {
    const r = await http('POST', '/v1/chat/completions', { body: { model: MODEL, max_tokens: 2, messages: openaiTurns, tools, ...body } });
    assert.equal(r.status, 400, r.text);
    assert.equal(r.json.error.param, param, r.json.error.message);
  };
  await bad({ tool_choice: { type: 'function', function: { name: 'launch_rocket' } } }, 'tool_choice.function.name');
  await bad({ tool_choice: 'always' }, 'tool_choice');
  await bad({ tools: [{ type: 'retrieval' }] }, 'tools[0].type');
  await bad({ tools: [{ type: 'function', function: { name: 'has space' } }] }, 'tools[0].function.name');
  await bad({ messages: [{ role: 'tool', content: 'x' }] }, 'messages[0].tool_call_id');
  await bad({ messages: [{ role: 'assistant', tool_calls: [{ type: 'function', function: { name: 'f', arguments: 7 } }] }] }, 'messages[0].tool_calls[0].function.arguments');
  await bad({ tools: undefined, tool_choice: 'required' }, 'tool_choice');
  // A forced tool's schema the grammar engine refuses names its path.
  const odd = [...tools, { type: 'function', function: { name: 'odd', parameters: { type: 'object', properties: { n: { type: 'number', multipleOf: 3 } } } } }];
  await bad({ tools: odd, tool_choice: 'required' }, 'tools[1].function.parameters.properties.n.multipleOf');
  await bad({ tool_choice: 'required', response_format: { type: 'json_object' } }, 'tool_choice');
  const abad = async (body, field) => {
    const r = await http('POST', '/v1/messages', { body: { model: MODEL, max_tokens: 2, messages: anthropicTurns, tools: anthropicTools, ...body } });
    assert.equal(r.status, 400, r.text);
    assert.equal(r.json.type, 'error');
    assert.equal(r.json.error.type, 'invalid_request_error');
    assert.ok(r.json.error.message.startsWith(field + ':'), r.json.error.message);
  };
  await abad({ tool_choice: { type: 'tool', name: 'launch_rocket' } }, 'tool_choice.name');
  await abad({ tools: [{ type: 'web_search_20250305', name: 'web_search' }] }, 'tools.0.type');
  await abad({ tools: [{ name: 'f' }] }, 'tools.0.input_schema');
  await abad({ tools: [{ name: 'f', input_schema: { type: 'object', properties: { n: { type: 'number', multipleOf: 3 } } } }], tool_choice: { type: 'any' } },
    'tools.0.input_schema.properties.n.multipleOf');
  await abad({ messages: [{ role: 'user', content: [{ type: 'tool_result', content: 'x' }] }] }, 'messages.0.content.0.tool_use_id');
  await abad({ messages: [{ role: 'assistant', content: [{ type: 'tool_use', id: 't', name: 'f', input: 'x' }] }] }, 'messages.0.content.0.input');
});

// A server whose model has a tool-use template (Qwen2.5's), to see the tools and the
// tool round trip reach the prompt.
let server;
let url;
let dir;

before(async () => {
  // ../shared/testdata beside the checkout, or $KEEL_TESTDATA (as tests/support/paths.h).
  const testdata = process.env.KEEL_TESTDATA ?? path.resolve(path.dirname(new URL(import.meta.url).pathname), '../../../shared/testdata');
  const found = path.join(testdata, 'chat-templates', 'Qwen-Qwen2.5-7B-Instruct.jinja');
  if (!fs.existsSync(found)) return;
  dir = fs.mkdtempSync(path.join(os.tmpdir(), 'keel-tools-'));
  const model = path.join(dir, 'qwen-tmpl');
  fs.cpSync(MODEL_PATH, model, { recursive: true });
  const template = fs.readFileSync(found, 'utf8');
  const cfgPath = path.join(model, 'tokenizer_config.json');
  const cfg = JSON.parse(fs.readFileSync(cfgPath, 'utf8'));
  cfg.chat_template = template;
  fs.writeFileSync(cfgPath, JSON.stringify(cfg));
  for (const f of ['chat_template.jinja', 'chat_template.json']) fs.rmSync(path.join(model, f), { force: true });
  server = spawn(KEEL_BIN, ['serve', model, '--port', '0', '--threads', '1'], { stdio: ['ignore', 'pipe', 'pipe'] });
  url = await new Promise((resolve, reject) => {
    let log = '';
    const onData = (d) => {
      log += d;
      const m = /listening on (http\S+)/.exec(log);
      if (m) resolve(m[1]);
    };
    server.stdout.on('data', onData);
    server.stderr.on('data', onData);
    server.on('exit', (code) => reject(new Error(`tool-template server exited ${code}: ${log}`)));
    setTimeout(() => reject(new Error(`tool-template server did not start: ${log}`)), 20_000);
  });
});

after(() => {
  if (server) server.kill('SIGTERM');
  if (dir) fs.rmSync(dir, { recursive: true, force: true });
});

test('a tool-use template renders tools and tool turns the same from both APIs', async (t) => {
  if (!url) return t.skip('no ../shared/testdata chat templates');
  const oc = new OpenAI({ baseURL: `${url}/v1`, apiKey: 'none', maxRetries: 0 });
  const ac = new Anthropic({ baseURL: url, apiKey: 'none', maxRetries: 0 });
  const model = 'qwen-tmpl';
  const user = [{ role: 'user', content: 'Weather in Paris?' }];
  const without = await oc.chat.completions.create({ model, messages: user, max_tokens: 1 });
  const withTools = await oc.chat.completions.create({ model, messages: user, tools, max_tokens: 1 });
  // The template writes the tool schemas into the system turn.
  assert.ok(withTools.usage.prompt_tokens > without.usage.prompt_tokens + 20, `${withTools.usage.prompt_tokens} vs ${without.usage.prompt_tokens}`);
  const none = await oc.chat.completions.create({ model, messages: user, tools, tool_choice: 'none', max_tokens: 1 });
  assert.equal(none.usage.prompt_tokens, withTools.usage.prompt_tokens);
  // The round trip: the call and its result are in the prompt, and both APIs agree.
  const round = await oc.chat.completions.create({ model, messages: openaiTurns, tools, max_tokens: 1 });
  const counted = await ac.messages.countTokens({ model, system: 'Be brief.', tools: anthropicTools, messages: anthropicTurns });
  assert.equal(counted.input_tokens, round.usage.prompt_tokens);
  const shorter = await oc.chat.completions.create({
    model,
    messages: [...openaiTurns.slice(0, 3), { role: 'tool', tool_call_id: 'call_1', content: 'x' }],
    tools,
    max_tokens: 1,
  });
  assert.ok(shorter.usage.prompt_tokens < round.usage.prompt_tokens, 'the tool result is rendered');
  const m = await ac.messages.create({ model, max_tokens: 2, system: 'Be brief.', tools: anthropicTools, messages: anthropicTurns });
  assert.equal(m.usage.input_tokens + m.usage.cache_read_input_tokens, round.usage.prompt_tokens);
});
