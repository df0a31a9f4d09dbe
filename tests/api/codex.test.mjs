// Codex (npm @openai/codex, pinned in tests/npm) against a real `keel serve`, headless:
// `codex exec` runs a turn over the Responses API and exits 0, and `codex exec resume`
// sends the first turn back as input items. Codex sends its whole agent prompt (~5k
// tokens of instructions plus ~17 KB of tools, including web_search and a namespace of
// sub-agent tools that keel leaves out), so the server here serves the tiny model with
// a 32k context. The random model rarely writes an end-of-sequence token, so this copy
// of it lists a sixteenth of its vocabulary as end tokens: each turn is ~16 tokens long.
// A logging proxy between Codex and keel records what Codex sent and what it got.
// tiny-codex-tools, a third copy, has keel force its first reply of a turn to call
// Codex's exec_command tool (--force-tool-call): Codex runs it (a fixed echo, outside
// its sandbox) and sends the output back.
import test, { after, before } from 'node:test';
import assert from 'node:assert/strict';
import { spawn } from 'node:child_process';
import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { startRecordingProxy } from './agent_clients.mjs';
import { editJson, makeThinking, startModelServer } from './responses_lib.mjs';

const CODEX = path.join(process.env.NODE_PATH, '.bin', 'codex');
const KEY = 'codex-test-key';
const TOOL_ARGS = { cmd: 'echo keel-tool-ran' };
let dir, server, proxy, proxyUrl;
let seen = [];  // {method, url, status, body, response}: the proxy's record

function codex(args, { timeoutMs = 120_000 } = {}) {
  return new Promise((resolve) => {
    const env = { ...process.env, CODEX_HOME: path.join(dir, 'codex-home'), KEEL_CODEX_KEY: KEY, NO_COLOR: '1' };
    delete env.OPENAI_API_KEY;
    const p = spawn(CODEX, ['exec', ...args], { cwd: path.join(dir, 'work'), env, stdio: ['ignore', 'pipe', 'pipe'] });
    let out = '';
    let err = '';
    p.stdout.on('data', (d) => (out += d));
    p.stderr.on('data', (d) => (err += d));
    const timer = setTimeout(() => p.kill('SIGKILL'), timeoutMs);
    p.on('exit', (code, signal) => {
      clearTimeout(timer);
      resolve({ code, signal, out, err });
    });
  });
}

// The SSE events of a recorded stream, parsed.
function events(sse) {
  return sse.split('\n').filter((l) => l.startsWith('data: ')).map((l) => JSON.parse(l.slice(6)));
}

before(async () => {
  dir = fs.mkdtempSync(path.join(os.tmpdir(), 'keel-codex-'));
  const thinker = path.join(dir, 'tiny-codex-think');
  const tools = path.join(dir, 'tiny-codex-tools');
  server = await startModelServer('tiny-codex', {
    // tiny-codex-tools: keel forces its first reply of a turn to call Codex's shell tool
    // (--force-tool-call, tests only) with a harmless command.
    args: [thinker, tools, '--kv-blocks', '2560', '--api-key', KEY, '--enable-fault-injection',
      '--force-tool-call', `tiny-codex-tools:exec_command=${JSON.stringify(TOOL_ARGS)}`],
    edit: (model) => {
      let vocab;
      editJson(path.join(model, 'config.json'), (c) => {
        c.max_position_embeddings = 32768;
        vocab = c.vocab_size;
      });
      editJson(path.join(model, 'generation_config.json'), (g) => {
        g.eos_token_id = Array.from({ length: Math.floor(vocab / 16) }, (_, i) => i + 1);
      });
      // Its end tokens are none the forced call's markup can be written with (else the
      // constrained reply could end mid-call): tokens with a character the call lacks.
      fs.cpSync(model, tools, { recursive: true });
      const markup = new Set(`<tool_call>\n{"name": "exec_command", "arguments": ${JSON.stringify(TOOL_ARGS)}}\n</tool_call>`);
      const vocabMap = JSON.parse(fs.readFileSync(path.join(tools, 'tokenizer.json'), 'utf8')).model.vocab;
      const ends = Object.entries(vocabMap)
        .filter(([tok]) => [...tok.replaceAll('Ġ', ' ').replaceAll('Ċ', '\n')].some((ch) => !markup.has(ch)))
        .map(([, id]) => id).filter((id) => id > 0).slice(0, Math.floor(vocab / 16));
      editJson(path.join(tools, 'generation_config.json'), (g) => { g.eos_token_id = ends; });
      // The same model with a thinking template, served beside it.
      fs.cpSync(model, thinker, { recursive: true });
      makeThinking(thinker);
    },
  });
  proxy = await startRecordingProxy(server.url);
  proxyUrl = proxy.url;
  seen = proxy.seen;
  fs.mkdirSync(path.join(dir, 'codex-home'));
  fs.mkdirSync(path.join(dir, 'work'));
  fs.writeFileSync(path.join(dir, 'codex-home', 'config.toml'), [
    'model = "tiny-codex"',
    'model_provider = "keel"',
    'check_for_update_on_startup = false',
    '[analytics]',
    'enabled = false',
    '[model_providers.keel]',
    'name = "keel"',
    `base_url = "${proxyUrl}/v1"`,
    'env_key = "KEEL_CODEX_KEY"',
    'wire_api = "responses"',
    'request_max_retries = 0',
    'stream_max_retries = 0',
    '',
  ].join('\n'));
});

after(() => {
  proxy?.close();
  server?.stop();
  if (dir) fs.rmSync(dir, { recursive: true, force: true });
});

test('codex exec runs a turn against keel over /v1/responses and exits 0', async () => {
  const r = await codex(['--skip-git-repo-check', 'say hello']);
  assert.equal(r.code, 0, `codex exited ${r.code} ${r.signal}\n${r.err}\n${r.out}\n${server.log()}`);
  const turns = seen.filter((e) => e.method === 'POST' && e.url === '/v1/responses');
  assert.ok(turns.length >= 1, JSON.stringify(seen.map((e) => [e.method, e.url, e.status])));
  for (const t of turns) assert.equal(t.status, 200, t.response);
  const body = JSON.parse(turns[0].body);
  // What Codex sends: a stream, function tools beside tool types keel leaves out, store false.
  assert.equal(body.stream, true);
  assert.equal(body.store, false);
  assert.ok(body.tools.some((t) => t.type === 'function'));
  assert.ok(body.input.some((i) => i.role === 'developer'));
  const ev = events(turns[0].response);
  const types = ev.map((e) => e.type);
  assert.equal(types[0], 'response.created');
  assert.equal(types.at(-1), 'response.completed');
  assert.deepEqual(ev.map((e) => e.sequence_number), ev.map((_, i) => i));
  const done = ev.at(-1).response;
  assert.equal(done.status, 'completed');
  assert.ok(done.usage.input_tokens > 1000, `Codex's prompt is long: ${done.usage.input_tokens}`);
  assert.equal(done.output[0].type, 'message');
  // Codex prints the reply it got (possibly empty text from the random model).
  const text = done.output[0].content[0].text.trim();
  if (text) assert.ok(r.out.includes(text.split('\n')[0]), `${text} not in ${r.out}`);
});

test('codex exec resume sends the first turn back as input items and exits 0', async () => {
  const before = seen.length;
  const r = await codex(['resume', '--last', '--skip-git-repo-check', 'say it again']);
  assert.equal(r.code, 0, `codex exited ${r.code} ${r.signal}\n${r.err}\n${r.out}`);
  const turns = seen.slice(before).filter((e) => e.method === 'POST' && e.url === '/v1/responses');
  assert.ok(turns.length >= 1);
  for (const t of turns) assert.equal(t.status, 200, t.response);
  const body = JSON.parse(turns.at(-1).body);
  const users = body.input.filter((i) => i.role === 'user').map((i) => JSON.stringify(i.content));
  assert.ok(users.some((c) => c.includes('say hello')), 'the first prompt is resent');
  assert.ok(users.some((c) => c.includes('say it again')));
  assert.ok(body.input.some((i) => i.type === 'message' && i.role === 'assistant'), 'the first reply is resent');
  // The whole previous prompt is a prefix of this one: the prefix cache serves it.
  const done = events(turns.at(-1).response).at(-1).response;
  assert.equal(done.status, 'completed');
  assert.ok(done.usage.input_tokens_details.cached_tokens > 1000, JSON.stringify(done.usage));
});

test('codex reads reasoning from a thinking model and sends it back on resume', async () => {
  // Sampled at temperature 1, a turn may end at once (an end token first, ~6%): then
  // there is no reasoning to read, so try again, up to three times.
  let turn;
  for (let attempt = 0; attempt < 3; attempt++) {
    const before = seen.length;
    const r = await codex(['-m', 'tiny-codex-think', '--skip-git-repo-check', 'think first']);
    assert.equal(r.code, 0, `codex exited ${r.code} ${r.signal}\n${r.err}\n${r.out}`);
    turn = seen.slice(before).find((e) => e.method === 'POST' && e.url === '/v1/responses');
    assert.equal(turn.status, 200, turn.response);
    if (events(turn.response).at(-1).response.usage.output_tokens > 1) break;
  }
  assert.deepEqual(JSON.parse(turn.body).reasoning, { summary: 'auto' });
  const ev = events(turn.response);
  assert.ok(ev.some((e) => e.type === 'response.reasoning_summary_text.delta'), ev.map((e) => e.type).join(' '));
  const done = ev.at(-1).response;
  assert.equal(done.output[0].type, 'reasoning');
  const summary = done.output[0].summary[0].text;
  assert.ok(summary.length > 0);
  assert.ok(done.usage.output_tokens_details.reasoning_tokens > 0);
  // Resumed, Codex sends the reasoning item back; keel takes it as the assistant's.
  const next = seen.length;
  const r2 = await codex(['resume', '--last', '-m', 'tiny-codex-think', '--skip-git-repo-check', 'and again']);
  assert.equal(r2.code, 0, `codex exited ${r2.code} ${r2.signal}\n${r2.err}\n${r2.out}`);
  const turn2 = seen.slice(next).find((e) => e.method === 'POST' && e.url === '/v1/responses');
  assert.equal(turn2.status, 200, turn2.response);
  const sentBack = JSON.parse(turn2.body).input.filter((i) => i.type === 'reasoning');
  assert.ok(sentBack.length >= 1, JSON.stringify(JSON.parse(turn2.body).input.map((i) => i.type)));
  assert.equal(events(turn2.response).at(-1).type, 'response.completed');
});

test('codex exec runs the shell call keel\'s model made and sends its output back', async () => {
  const before = seen.length;
  // The command is fixed by the server (echo into stdout), so Codex runs it outside its
  // sandbox: bubblewrap needs user namespaces, which a CI container may not grant.
  const r = await codex(['-m', 'tiny-codex-tools', '--skip-git-repo-check',
    '--dangerously-bypass-approvals-and-sandbox', 'run the marker command']);
  assert.equal(r.code, 0, `codex exited ${r.code} ${r.signal}\n${r.err}\n${r.out}`);
  const turns = seen.slice(before).filter((e) => e.method === 'POST' && e.url === '/v1/responses');
  for (const t of turns) assert.equal(t.status, 200, t.response);
  assert.ok(turns.length >= 2, `a second request carries the tool output\n${r.out}\n${r.err}\n${turns[0]?.response.slice(-3000)}`);
  // The first reply is the forced call, with the fixed arguments.
  const first = events(turns[0].response).at(-1).response;
  const call = first.output.find((o) => o.type === 'function_call');
  assert.ok(call, JSON.stringify(first.output));
  assert.equal(call.name, 'exec_command');
  assert.deepEqual(JSON.parse(call.arguments), TOOL_ARGS);
  // The next request sends the command's output back for that call id.
  const input = JSON.parse(turns[1].body).input;
  const output = input.find((i) => i.type === 'function_call_output' && i.call_id === call.call_id);
  assert.ok(output, JSON.stringify(input.map((i) => [i.type, i.call_id])));
  const text = typeof output.output === 'string' ? output.output : JSON.stringify(output.output);
  assert.match(text, /keel-tool-ran/, 'Codex ran the command');
  assert.equal(events(turns[1].response).at(-1).type, 'response.completed');
});
