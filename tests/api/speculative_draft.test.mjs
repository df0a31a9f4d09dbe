// `keel serve --speculative draft:PATH` (issue 30): a tiny random llama drafted for by a
// model sharing its tokenizer and first layer (`keel make-model --layers 1`, the same
// seed) gives the same greedy text, streamed and not, through the official openai SDK
// as a server without drafts; /api/status names the method, counts its drafts and shows
// the draft model's memory; a target whose tokenizer is not the draft's is refused
// naming the flag, and so are a draft path that does not exist and --device cuda; keel
// run prints the same text with drafts as without.
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
let plain, spec, adaptive, work, draft, target;

function makeLlama(dir, layers, extra = ['--tokenizer', tokenizer]) {
  execFileSync(KEEL_BIN, ['make-model', '--arch', 'llama', '--shape', 'tiny', '--dtype', 'f32',
    '--layers', String(layers), '--seed', '11', ...extra, '--out', dir], { stdio: 'pipe' });
}

before(async () => {
  work = fs.mkdtempSync(path.join(os.tmpdir(), 'keel-draft-'));
  target = path.join(work, 'target');
  const other = path.join(work, 'other-tokenizer');
  draft = path.join(work, 'draft');
  makeLlama(target, 2);
  makeLlama(draft, 1);
  makeLlama(other, 2, []);  // make-model's own generated tokenizer
  const models = { tiny: target, other };
  plain = await startServer({ name: 'draft-off', models });
  // Drafting whatever it measures (--speculative-adaptive off): these tests are about the
  // verify; `adaptive` keeps the default, which measures whether drafting pays.
  spec = await startServer({ name: 'draft-on', models,
    args: ['--speculative', `draft:${draft}`, '--num-speculative-tokens', '4',
      '--speculative-max-running', '0', '--speculative-adaptive', 'off'] });
  adaptive = await startServer({ name: 'draft-adaptive', models,
    args: ['--speculative', `draft:${draft}`, '--speculative-max-running', '0'] });
});

after(async () => {
  await plain?.stop();
  await spec?.stop();
  await adaptive?.stop();
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

test('greedy output is the same with a draft model as without, streamed and not', async () => {
  await chat(spec, 'warm up');  // loads the model, so the counters exist
  const before = await spec.speculative('tiny', Date.now());
  assert.equal(before.method, 'draft');
  for (const prompt of ['Write a short poem about the sea.', 'Count: one two three four']) {
    const ref = await streamChat(plain, prompt);
    assert.ok(ref.length > 0);
    assert.equal(await streamChat(spec, prompt), ref);
    assert.equal(await chat(plain, prompt), ref);
    assert.equal(await chat(spec, prompt), ref);
  }
  const s = await spec.speculative('tiny', Date.now());
  assert.equal(s.method, 'draft');
  assert.ok(s.drafted_tokens > before.drafted_tokens, JSON.stringify({ before, s }));
  assert.ok(s.verify_steps > before.verify_steps, JSON.stringify({ before, s }));
  assert.ok(s.accepted_tokens > 0, JSON.stringify(s));
  assert.ok(s.accepted_tokens <= s.drafted_tokens, JSON.stringify(s));
  assert.ok(s.draft_weights_bytes > 0 && s.draft_kv_bytes > 0, JSON.stringify(s));
});

// By default the server times decoding with drafts and without (SpeculationGovernor) and
// drafts only where that pays: after enough tokens /api/status says which it chose and the
// speed-up it measured, and the output is the same either way.
test('the adaptive default reports whether drafting paid, and keeps the output', async () => {
  const prompt = 'Write a short poem about the sea.';
  const ref = await chat(plain, prompt);
  for (let i = 0; i < 4; ++i) assert.equal(await chat(adaptive, prompt), ref);  // 192 tokens
  const s = await adaptive.speculative('tiny', Date.now());
  assert.equal(s.method, 'draft');
  assert.equal(typeof s.paused, 'boolean', JSON.stringify(s));
  assert.equal(typeof s.speedup, 'number', JSON.stringify(s));  // both kinds of step measured
  assert.ok(s.speedup > 0, JSON.stringify(s));
  assert.equal(s.paused, s.speedup < 1 / 1.03, JSON.stringify(s));  // the rule it applies
  // /metrics says the same.
  const metrics = (await adaptive.get('/metrics')).text;
  const gauge = (name) => Number(metrics.match(new RegExp(`^${name}\\{model="tiny"\\} (\\S+)$`, 'm'))?.[1]);
  assert.equal(gauge('keel_spec_paused'), s.paused ? 1 : 0, metrics);
  assert.ok(Math.abs(gauge('keel_spec_measured_speedup') - s.speedup) <= 1e-4 * s.speedup, metrics);
  const off = await spec.speculative('tiny', Date.now());
  assert.equal(off.paused, false);  // adaptive off: never paused, nothing measured
  assert.equal(off.speedup, null);
});

test('a target whose tokenizer is not the draft model\'s is refused naming the flag', async () => {
  const r = await spec.post('/v1/chat/completions', {
    model: 'other', messages: [{ role: 'user', content: 'Hello' }], max_tokens: 4,
  });
  assert.ok(r.status >= 400, `status ${r.status}`);
  const msg = r.json?.error?.message ?? '';
  assert.match(msg, /--speculative draft:\S+: the draft model's tokenizer is not the target's \(8192 tokens against the target's \d+\)/, r.text);
  const ok = await plain.client.chat.completions.create({
    model: 'other', messages: [{ role: 'user', content: 'Hi' }], max_tokens: 2,
  });
  assert.equal(ok.usage.completion_tokens, 2);
});

test('a draft path that does not exist is refused at startup naming the flag and path', () => {
  const missing = path.join(work, 'no-such-draft');
  const r = spawnSync(KEEL_BIN, ['serve', '--port', '0', '--model-dir', work,
    '--speculative', `draft:${missing}`], { encoding: 'utf8', timeout: 10000 });
  assert.notEqual(r.status, 0);
  assert.ok(r.stderr.includes(`--speculative draft:${missing}: no such file or directory`), r.stderr);
});

test('keel run prints the same text with a draft model as without, greedy and seeded', () => {
  const run = (...extra) => spawnSync(KEEL_BIN, ['run', '-m', target, '-p', 'Once upon a time',
    '-n', '40', '--ignore-eos', '--threads', '1', ...extra], { encoding: 'utf8', timeout: 60000 });
  for (const sampling of [[], ['--temperature', '0.8', '--seed', '3']]) {
    const ref = run(...sampling);
    assert.equal(ref.status, 0, ref.stderr);
    assert.ok(ref.stdout.trim().length > 0);
    for (const d of [draft, target]) {
      const got = run(...sampling, '--speculative', `draft:${d}`);
      assert.equal(got.status, 0, got.stderr);
      assert.equal(got.stdout, ref.stdout);
      const m = got.stderr.match(/speculative draft: (\d+) of (\d+) drafts accepted/);
      assert.ok(m && Number(m[2]) > 0, got.stderr);
      // The target drafting for itself, greedy: every draft accepted.
      if (d === target && sampling.length === 0) assert.equal(m[1], m[2], got.stderr);
    }
  }
});
