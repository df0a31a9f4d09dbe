// `keel serve --speculative eagle3:PATH` (issue 30): a tiny random llama drafted for by a
// random EAGLE-3 head (`keel make-model --eagle3-for`) gives the same greedy text,
// streamed and not, through the official openai SDK as a server without drafts;
// /api/status names the method, counts its drafts and shows the head's weights; a head
// path that does not exist and a head with a missing tensor are refused naming the flag;
// keel run prints the same text with the head as without.
import test, { after, before } from 'node:test';
import assert from 'node:assert/strict';
import { execFileSync, spawnSync } from 'node:child_process';
import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { fileURLToPath } from 'node:url';
import { KEEL_BIN } from './helpers.mjs';
import { startServer } from './wedge_lib.mjs';

const here = path.dirname(fileURLToPath(import.meta.url));
const tokenizer = path.resolve(here, '../../models/default');
let plain, spec, work, head, target;

before(async () => {
  work = fs.mkdtempSync(path.join(os.tmpdir(), 'keel-eagle3-'));
  target = path.join(work, 'target');
  head = path.join(work, 'head');
  execFileSync(KEEL_BIN, ['make-model', '--arch', 'llama', '--shape', 'tiny', '--dtype', 'f32',
    '--seed', '11', '--tokenizer', tokenizer, '--out', target], { stdio: 'pipe' });
  execFileSync(KEEL_BIN, ['make-model', '--eagle3-for', target, '--seed', '5', '--out', head],
    { stdio: 'pipe' });
  const models = { tiny: target };
  plain = await startServer({ name: 'eagle3-off', models });
  spec = await startServer({ name: 'eagle3-on', models,
    args: ['--speculative', `eagle3:${head}`, '--num-speculative-tokens', '3',
      '--speculative-max-running', '0', '--speculative-adaptive', 'off'] });
});

after(async () => {
  await plain?.stop();
  await spec?.stop();
  fs.rmSync(work, { recursive: true, force: true });
});

const request = (content) => ({
  model: 'tiny', messages: [{ role: 'user', content }], temperature: 0, max_tokens: 48,
  ignore_eos: true,
});

async function streamChat(server, content) {
  const stream = await server.client.chat.completions.create({ ...request(content), stream: true });
  let text = '';
  for await (const c of stream) text += c.choices[0]?.delta?.content ?? '';
  return text;
}

async function chat(server, content) {
  const r = await server.client.chat.completions.create(request(content));
  return r.choices[0].message.content;
}

test('greedy output is the same with an EAGLE-3 head as without, streamed and not', async () => {
  await chat(spec, 'warm up');  // loads the model, so the counters exist
  const before = await spec.speculative('tiny', Date.now());
  assert.equal(before.method, 'eagle3');
  for (const prompt of ['Write a short poem about the sea.', 'Count: one two three four']) {
    const ref = await streamChat(plain, prompt);
    assert.ok(ref.length > 0);
    assert.equal(await streamChat(spec, prompt), ref);
    assert.equal(await chat(plain, prompt), ref);
    assert.equal(await chat(spec, prompt), ref);
  }
  const s = await spec.speculative('tiny', Date.now());
  assert.equal(s.method, 'eagle3');
  assert.ok(s.drafted_tokens > before.drafted_tokens, JSON.stringify({ before, s }));
  assert.ok(s.verify_steps > before.verify_steps, JSON.stringify({ before, s }));
  assert.ok(s.accepted_tokens <= s.drafted_tokens, JSON.stringify(s));
  assert.ok(s.draft_weights_bytes > 0, JSON.stringify(s));
});

function serveFails(...args) {
  return spawnSync(KEEL_BIN, ['serve', '--port', '0', '--model-dir', work, ...args],
    { encoding: 'utf8', timeout: 10000 });
}

test('a head path that does not exist is refused at startup naming the flag and path', () => {
  const missing = path.join(work, 'no-such-head');
  const r = serveFails('--speculative', `eagle3:${missing}`);
  assert.notEqual(r.status, 0);
  assert.ok(r.stderr.includes(`--speculative eagle3:${missing}: no such file or directory`), r.stderr);
});

test('a head without its fc weight is refused when the model loads, naming the tensor', async () => {
  // Drop fc.weight from the header's view by renaming it in place (same length).
  const broken = path.join(work, 'broken-head');
  fs.cpSync(head, broken, { recursive: true });
  const file = path.join(broken, 'model.safetensors');
  const bytes = fs.readFileSync(file);
  const at = bytes.indexOf(Buffer.from('"fc.weight"'));
  assert.ok(at > 0);
  Buffer.from('"fx.weight"').copy(bytes, at);
  fs.writeFileSync(file, bytes);
  const server = await startServer({ name: 'eagle3-broken', models: { tiny: target },
    args: ['--speculative', `eagle3:${broken}`] });
  try {
    const r = await server.post('/v1/chat/completions', {
      model: 'tiny', messages: [{ role: 'user', content: 'Hello' }], max_tokens: 4,
    });
    assert.ok(r.status >= 400, `status ${r.status}`);
    assert.match(r.json?.error?.message ?? '', /--speculative eagle3:\S+: fc\.weight: tensor missing/,
      r.text);
  } finally {
    await server.stop();
  }
});

test('keel run prints the same text with an EAGLE-3 head as without, greedy and seeded', () => {
  const run = (...extra) => spawnSync(KEEL_BIN, ['run', '-m', target, '-p', 'Once upon a time',
    '-n', '40', '--ignore-eos', '--threads', '1', ...extra], { encoding: 'utf8', timeout: 60000 });
  for (const sampling of [[], ['--temperature', '0.8', '--seed', '3']]) {
    const ref = run(...sampling);
    assert.equal(ref.status, 0, ref.stderr);
    assert.ok(ref.stdout.trim().length > 0);
    const got = run(...sampling, '--speculative', `eagle3:${head}`);
    assert.equal(got.status, 0, got.stderr);
    assert.equal(got.stdout, ref.stdout);
    const m = got.stderr.match(/speculative eagle3: (\d+) of (\d+) drafts accepted/);
    assert.ok(m && Number(m[2]) > 0, got.stderr);
  }
});
