// `keel serve --speculative mtp` (issues 30 and 32): a tiny random GLM-4.5 (GQA), a
// tiny random DeepSeek-V3 (multi-head latent attention) and a tiny random GLM-5 (latent
// attention with DSA: its MTP layer selects with its own indexer; index_topk 16, so the
// chat prompts select), each with an MTP layer (`keel make-model --mtp-layers 1`), stream
// the same greedy text with the MTP drafter as without it, /api/status names the method
// and counts its drafts, and a model with no MTP layer is refused naming the flag and the
// model's architecture.
import test, { after, before } from 'node:test';
import assert from 'node:assert/strict';
import { execFileSync } from 'node:child_process';
import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { fileURLToPath } from 'node:url';
import { KEEL_BIN } from './helpers.mjs';
import { startServer } from './wedge_lib.mjs';

const here = path.dirname(fileURLToPath(import.meta.url));
const tokenizer = path.resolve(here, '../../models/default');
let plain, spec, work;

function makeModel(arch, dir, mtpLayers) {
  execFileSync(KEEL_BIN, ['make-model', '--arch', arch, '--shape', 'tiny', '--layers', '2',
    '--mtp-layers', String(mtpLayers), '--tokenizer', tokenizer, '--seed', '11', '--out', dir],
  { stdio: 'pipe' });
}

before(async () => {
  work = fs.mkdtempSync(path.join(os.tmpdir(), 'keel-mtp-'));
  const withHead = path.join(work, 'glm-mtp');
  const without = path.join(work, 'glm-plain');
  const deepseek = path.join(work, 'deepseek-mtp');
  makeModel('glm4_moe', withHead, 1);
  makeModel('glm4_moe', without, 0);
  makeModel('deepseek_v3', deepseek, 1);
  const dsa = path.join(work, 'glm5-mtp');
  makeModel('glm_moe_dsa', dsa, 1);
  const models = { mtp: withHead, nohead: without, 'deepseek-mtp': deepseek, 'glm5-mtp': dsa };
  plain = await startServer({ name: 'mtp-off', models });
  spec = await startServer({ name: 'mtp-on', models,
    args: ['--speculative', 'mtp', '--num-speculative-tokens', '3', '--speculative-max-running', '0'] });
});

after(async () => {
  await plain?.stop();
  await spec?.stop();
  fs.rmSync(work, { recursive: true, force: true });
});

async function streamChat(server, content, model = 'mtp') {
  const stream = await server.client.chat.completions.create({
    model, messages: [{ role: 'user', content }], temperature: 0, max_tokens: 48,
    ignore_eos: true, stream: true,
  });
  let text = '';
  for await (const c of stream) text += c.choices[0]?.delta?.content ?? '';
  return text;
}

test('greedy output is the same with the MTP drafter as without', async () => {
  for (const prompt of ['Write a short poem about the sea.', 'Count: one two three four']) {
    const ref = await streamChat(plain, prompt);
    const got = await streamChat(spec, prompt);
    assert.ok(ref.length > 0);
    assert.equal(got, ref);
  }
  const s = await spec.speculative('mtp', Date.now());
  assert.equal(s.method, 'mtp');
  assert.ok(s.drafted_tokens > 0, JSON.stringify(s));
  assert.ok(s.accepted_tokens <= s.drafted_tokens, JSON.stringify(s));
});

for (const [label, model] of [['DeepSeek-V3 (MLA)', 'deepseek-mtp'],
  ['GLM-5 (MLA + DSA)', 'glm5-mtp']]) {
  test(`${label}: greedy output is the same with the MTP drafter as without`, async () => {
    for (const prompt of ['Write a short poem about the sea.', 'Count: one two three four']) {
      const ref = await streamChat(plain, prompt, model);
      const got = await streamChat(spec, prompt, model);
      assert.ok(ref.length > 0);
      assert.equal(got, ref);
    }
    const s = await spec.speculative(model, Date.now());
    assert.equal(s.method, 'mtp');
    assert.ok(s.drafted_tokens > 0, JSON.stringify(s));  // its own engine's count
    assert.ok(s.accepted_tokens <= s.drafted_tokens, JSON.stringify(s));
  });
}

test('a model without an MTP layer is refused naming the flag', async () => {
  const r = await spec.post('/v1/chat/completions', {
    model: 'nohead', messages: [{ role: 'user', content: 'Hello' }], max_tokens: 4,
  });
  assert.ok(r.status >= 400, `status ${r.status}`);
  const msg = r.json?.error?.message ?? '';
  assert.match(msg, /--speculative mtp: glm4_moe: .*no MTP layer/, r.text);
  // The same model serves without the flag.
  const ok = await plain.client.chat.completions.create({
    model: 'nohead', messages: [{ role: 'user', content: 'Hi' }], max_tokens: 2,
  });
  assert.equal(ok.usage.completion_tokens, 2);
});
