// gpt-oss (`keel make-model --arch gpt_oss --shape tiny`: attention sinks, a window of 16
// on alternate layers, a biased router, experts with biases and the clamped SwiGLU, in
// the released layout) served by keel on the CPU and asked through the official OpenAI
// SDK's completions API: a scripted f32 copy gives its exact reply and stops; a random
// MXFP4 copy streams the same greedy tokens as it returns whole, serves a prompt longer
// than its window again from the prefix cache with the same tokens, and reports its
// weights as bf16+mxfp4. (The harmony chat format is the tokenizer's and template's
// business; these requests use none.)
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
let server, work;

function makeGptOss(dir, dtype) {
  execFileSync(KEEL_BIN, ['make-model', '--arch', 'gpt_oss', '--shape', 'tiny', '--dtype', dtype,
    '--tokenizer', tokenizer, '--seed', '5', '--out', dir], { stdio: 'pipe' });
}

before(async () => {
  work = fs.mkdtempSync(path.join(os.tmpdir(), 'keel-gpt-oss-'));
  const scripted = path.join(work, 'oss-scripted');
  const random = path.join(work, 'oss-mxfp4');
  makeGptOss(scripted, 'f32');
  makeGptOss(random, 'mxfp4');
  const cfg = JSON.parse(fs.readFileSync(path.join(scripted, 'config.json'), 'utf8'));
  assert.equal(cfg.model_type, 'gpt_oss');
  const eos = [].concat(cfg.eos_token_id)[0];
  const ids = execFileSync(KEEL_BIN, ['tokenize', '--model', scripted, ' Hello from keel.']).toString().replace(/[[\] \n]/g, '');
  execFileSync('node', [path.join(here, 'scripted_model.mjs'), scripted, String(eos), ids]);
  server = await startServer({ name: 'gpt-oss', models: { 'oss-scripted': scripted, 'oss-mxfp4': random } });
});

after(async () => {
  await server?.stop();
  fs.rmSync(work, { recursive: true, force: true });
});

test('a scripted gpt_oss model completes a prompt with its exact reply and stops', async () => {
  const r = await server.client.completions.create({
    // (not ending in a reply token: the reply's last token is scripted to lead to EOS)
    model: 'oss-scripted', prompt: 'Plan a walk by the river', max_tokens: 30, temperature: 0.7,
  });
  assert.equal(r.choices[0].text, ' Hello from keel.');
  assert.equal(r.choices[0].finish_reason, 'stop');
  assert.ok(r.usage.prompt_tokens > 3);
});

test('a random MXFP4 gpt_oss model streams the same greedy tokens as it returns whole', async () => {
  const req = { model: 'oss-mxfp4', prompt: 'Rivers run to the sea, and the sea is never full.',
    max_tokens: 12, temperature: 0 };
  const whole = await server.client.completions.create(req);
  assert.equal(whole.usage.completion_tokens, 12);
  assert.ok(whole.choices[0].text.length > 0);
  let streamed = '';
  for await (const chunk of await server.client.completions.create({ ...req, stream: true }))
    streamed += chunk.choices[0]?.text ?? '';
  assert.equal(streamed, whole.choices[0].text);
  assert.equal((await server.model('oss-mxfp4')).memory.weights_format, 'bf16+mxfp4');
});

test('a prompt longer than the window is served again from the prefix cache, the same tokens', async () => {
  const prompt = 'The keeper of the lighthouse wrote in his log every night. '.repeat(5);
  const ask = () => server.client.completions.create({ model: 'oss-mxfp4', prompt, max_tokens: 10, temperature: 0 });
  const first = await ask();
  const second = await ask();
  assert.ok(first.usage.prompt_tokens > 48, JSON.stringify(first.usage));
  assert.ok((second.usage.prompt_tokens_details?.cached_tokens ?? 0) >= 16, JSON.stringify(second.usage));
  assert.equal(second.choices[0].text, first.choices[0].text);
});
