// MXFP4 weights served by keel on the CPU: a dense llama GGUF whose linear weights are
// MXFP4 blocks (`keel make-model --dtype mxfp4 --format gguf`) and a qwen3_moe whose
// experts are gpt-oss-style _blocks / _scales pairs in safetensors each answer an OpenAI
// chat request, greedily and repeatably.
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

before(async () => {
  work = fs.mkdtempSync(path.join(os.tmpdir(), 'keel-mxfp4-'));
  const dense = path.join(work, 'dense.gguf');
  const moe = path.join(work, 'moe');
  execFileSync(KEEL_BIN, ['make-model', '--arch', 'llama', '--shape', 'tiny', '--dtype', 'mxfp4',
    '--format', 'gguf', '--tokenizer', tokenizer, '--seed', '4', '--out', dense], { stdio: 'pipe' });
  execFileSync(KEEL_BIN, ['make-model', '--arch', 'qwen3_moe', '--shape', 'tiny', '--dtype', 'mxfp4',
    '--tokenizer', tokenizer, '--seed', '5', '--out', moe], { stdio: 'pipe' });
  const st = fs.readFileSync(path.join(moe, 'model.safetensors'));
  const header = st.subarray(8, 8 + Number(st.readBigUInt64LE(0))).toString();
  assert.match(header, /mlp\.experts\.gate_up_proj_blocks/);
  assert.match(header, /mlp\.experts\.down_proj_scales/);
  // A .gguf file in the model directory is served under its stem.
  server = await startServer({ name: 'mxfp4', models: { 'mx-dense.gguf': dense, 'mx-moe': moe } });
});

after(async () => {
  await server?.stop();
  fs.rmSync(work, { recursive: true, force: true });
});

for (const model of ['mx-dense', 'mx-moe']) {
  test(`${model} answers a chat request, the same tokens twice when greedy`, async () => {
    const ask = () => server.client.chat.completions.create({
      model, messages: [{ role: 'user', content: 'Say something about microscaling.' }],
      max_tokens: 16, temperature: 0,
    });
    const first = await ask();
    const second = await ask();
    const c = first.choices[0];
    assert.ok(['stop', 'length'].includes(c.finish_reason), c.finish_reason);
    assert.ok(first.usage.completion_tokens > 0);
    assert.equal(typeof c.message.content, 'string');
    assert.equal(second.choices[0].message.content, c.message.content);
  });
}
