// An FP8 e4m3 model (`keel make-model --dtype fp8`, 128 x 128 block scales with partial
// blocks, the tiny shape's 64-wide rows) served by keel on the CPU answers a chat request;
// a copy whose o_proj scale tensor was removed from the file is refused with an error
// that names the tensor, and the server keeps serving the good model.
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
const broken = 'model.layers.1.self_attn.o_proj.weight';
let server, work;

function makeFp8(dir) {
  execFileSync(KEEL_BIN, ['make-model', '--shape', 'tiny', '--dtype', 'fp8', '--tokenizer', tokenizer,
    '--seed', '5', '--out', dir], { stdio: 'pipe' });
}

// Drops one tensor from model.safetensors' header; the data section stays as it is
// (offsets are relative to it), so only the entry disappears.
function dropTensor(file, name) {
  const buf = fs.readFileSync(file);
  const n = Number(buf.readBigUInt64LE(0));
  const header = JSON.parse(buf.subarray(8, 8 + n).toString('utf8'));
  assert.ok(header[name], `${name} is in the file`);
  delete header[name];
  const h = Buffer.from(JSON.stringify(header), 'utf8');
  const len = Buffer.alloc(8);
  len.writeBigUInt64LE(BigInt(h.length));
  fs.writeFileSync(file, Buffer.concat([len, h, buf.subarray(8 + n)]));
}

before(async () => {
  work = fs.mkdtempSync(path.join(os.tmpdir(), 'keel-fp8-'));
  const good = path.join(work, 'fp8');
  const bad = path.join(work, 'fp8-broken');
  makeFp8(good);
  makeFp8(bad);
  dropTensor(path.join(bad, 'model.safetensors'), `${broken}_scale_inv`);
  server = await startServer({ name: 'fp8', models: { fp8: good, 'fp8-broken': bad } });
});

after(async () => {
  await server?.stop();
  fs.rmSync(work, { recursive: true, force: true });
});

test('an fp8 model answers a chat request', async () => {
  const cfg = JSON.parse(fs.readFileSync(path.join(work, 'fp8', 'config.json'), 'utf8'));
  assert.deepEqual(cfg.quantization_config.weight_block_size, [128, 128]);
  const r = await server.client.chat.completions.create({
    model: 'fp8', messages: [{ role: 'user', content: 'Hello there.' }], max_tokens: 8, temperature: 0,
  });
  assert.equal(r.usage.completion_tokens, 8);
  assert.equal(r.choices[0].finish_reason, 'length');
  const again = await server.client.chat.completions.create({
    model: 'fp8', messages: [{ role: 'user', content: 'Hello there.' }], max_tokens: 8, temperature: 0,
  });
  assert.equal(again.choices[0].message.content, r.choices[0].message.content);
  // /api/status says how the loaded weights are held: fp8 layers, the lm_head in bf16.
  assert.equal((await server.model('fp8')).memory.weights_format, 'bf16+fp8');
  assert.equal((await server.model('fp8-broken')).memory.weights_format, null);  // never loaded
});

test('an fp8 model without a scale tensor is refused naming it', async () => {
  const r = await server.post('/v1/chat/completions', {
    model: 'fp8-broken', messages: [{ role: 'user', content: 'Hello' }], max_tokens: 4,
  });
  assert.ok(r.status >= 400, `status ${r.status}`);
  const msg = r.json?.error?.message ?? '';
  assert.match(msg, new RegExp(`${broken.replaceAll('.', '\\.')}: fp8 weight without its scale`), r.text);
  // Greedy and ignore_eos, so only a serving fault can cut the reply short: a CI-like run
  // once got 1 token of 2 here when it was sampled (a stop token drawn first, most likely;
  // not reproduced in 150 sampled requests).
  const ok = await server.client.chat.completions.create({
    model: 'fp8', messages: [{ role: 'user', content: 'Hi' }], max_tokens: 2, temperature: 0,
    ignore_eos: true,
  });
  assert.equal(ok.usage.completion_tokens, 2);
});
