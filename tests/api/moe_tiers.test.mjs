// Mixtures of experts and the SSD tier (issue 19): a tiny gpt_oss (MXFP4 experts, a
// window of 16 on its sliding layer), a tiny qwen3_moe, and the multi-head latent
// attention models of issue 32 (deepseek_v3, and glm_moe_dsa whose DSA indexer keeps 16
// of the prompt's positions per query), whose blocks hold the latent row, served by
// `keel serve` on the CPU with --cache-dir. A long prompt's full KV blocks go to the SSD tier when the
// server stops; a new server on the same model paths and cache directory restores them
// (its own counters: SSD hit blocks and restored tokens, the prompt's cached tokens)
// and gives the same greedy tokens and logprobs as the cold run, through the OpenAI SDK.
// A windowed layer reads only the last 16 positions, but the blocks are shared by all
// layers and the full-attention layer reads every position, so the cache keeps and
// restores every block; a prompt whose restored prefix ends inside another prompt (its
// window reaching back into restored blocks) is checked against its own cold run too.
import test, { after, before } from 'node:test';
import assert from 'node:assert/strict';
import { execFileSync } from 'node:child_process';
import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { fileURLToPath } from 'node:url';
import { KEEL_BIN } from './helpers.mjs';
import { startServer, rng } from './wedge_lib.mjs';

const here = path.dirname(fileURLToPath(import.meta.url));
const tokenizer = path.resolve(here, '../../models/default');
const MODELS = { oss: ['gpt_oss', 'mxfp4'], qwen: ['qwen3_moe', 'f32'], ds: ['deepseek_v3', 'bf16'],
  glm5: ['glm_moe_dsa', 'f32'] };
// /api/status kv_pool.bytes_per_token: f32 values a token leaves, all layers. qwen3_moe tiny:
// 2 layers x K and V x 2 heads x 32; the latent rows: 3 layers x (32 + 8), and + 16 for
// GLM-5's index key.
const BYTES_PER_TOKEN = { qwen: 2 * 2 * 2 * 32 * 4, ds: 3 * 40 * 4, glm5: 3 * 56 * 4 };
const ARGS = ['--kv-blocks', '64'];
let work, modelDir, cacheDir;

// Prompts as token ids, so their lengths in blocks (16 tokens) are exact: A is ten
// full blocks and 11 tokens; B shares A's first 100 tokens (six full blocks, the
// seventh diverges) and then goes its own way; C is exactly ten blocks (an exact full
// hit: its last block is recomputed, copy on write).
const r = rng(19);
const ids = (n) => Array.from({ length: n }, () => r.int(100, 4000));
const A = ids(171);
const B = [...A.slice(0, 100), ...ids(37)];
const C = ids(160);

async function complete(server, model, prompt) {
  const res = await server.client.completions.create({ model, prompt, max_tokens: 8, temperature: 0,
    ignore_eos: true, logprobs: 1 });
  const c = res.choices[0];
  return { text: c.text, logprobs: c.logprobs.token_logprobs, cached: res.usage.prompt_tokens_details?.cached_tokens ?? 0 };
}

function sameAsCold(got, cold, what) {
  assert.equal(got.text, cold.text, `${what}: the restored prefix changed the greedy tokens`);
  assert.equal(got.logprobs.length, cold.logprobs.length);
  got.logprobs.forEach((lp, i) => assert.ok(Math.abs(lp - cold.logprobs[i]) < 1e-4, `${what}: logprob ${i}: ${lp} vs ${cold.logprobs[i]}`));
}

const cold = {};

// Completes prompt `name` on `server`: the cold run's tokens, `cached` prompt tokens, and
// the model's own counters so far: SSD blocks hit and tokens restored.
async function restored(server, model, name, { cached, ssdHits, restoredTokens }) {
  const got = await complete(server, model, { A, B, C }[name]);
  sameAsCold(got, cold[`${model}/${name}`], `${model} ${name}`);
  assert.equal(got.cached, cached, `${model} ${name}: cached tokens`);
  const m = await server.model(model);
  assert.equal(m.tiers.ssd.hit_blocks, ssdHits, `${model} after ${name}: ${JSON.stringify(m.tiers.ssd)}`);
  assert.equal(m.tiers.ssd.errors, 0);
  assert.equal(m.restored_tokens, restoredTokens, `${model} after ${name}: restored tokens`);
}

before(async () => {
  work = fs.mkdtempSync(path.join(os.tmpdir(), 'keel-moe-tiers-'));
  modelDir = path.join(work, 'models');
  cacheDir = path.join(work, 'cache');
  for (const [id, [arch, dtype]] of Object.entries(MODELS))
    execFileSync(KEEL_BIN, ['make-model', '--arch', arch, '--shape', 'tiny', '--dtype', dtype,
      '--tokenizer', tokenizer, '--seed', '19', '--out', path.join(modelDir, id)], { stdio: 'pipe' });
  // Cold references, each prompt the first of its server (no cache to hit), then the
  // server that fills the SSD tier: A and C, then stop (the device's cached blocks are
  // flushed to SSD at shutdown).
  for (const id of Object.keys(MODELS)) {
    for (const [name, prompt] of Object.entries({ A, B, C })) {
      const s = await startServer({ name: 'moe-cold', modelDir, args: [...ARGS, '--cache-dir', path.join(work, `cold-${id}-${name}`)] });
      try {
        cold[`${id}/${name}`] = await complete(s, id, prompt);
      } finally {
        assert.equal((await s.stop())?.code, 0);
      }
    }
  }
  const first = await startServer({ name: 'moe-fill', modelDir, args: [...ARGS, '--cache-dir', cacheDir] });
  try {
    for (const id of Object.keys(MODELS)) {
      for (const [name, prompt] of Object.entries({ A, C })) {
        const c = await complete(first, id, prompt);
        sameAsCold(c, cold[`${id}/${name}`], `${id} ${name} on the first server`);
        assert.equal(c.cached, 0);
      }
    }
  } finally {
    assert.equal((await first.stop())?.code, 0);
  }
});

after(() => fs.rmSync(work, { recursive: true, force: true }));

for (const id of Object.keys(MODELS)) {
  test(`${MODELS[id][0]}: a long prompt's blocks on SSD are restored after a restart, the cold run's tokens`, async () => {
    const s = await startServer({ name: `moe-restore-${id}`, modelDir, args: [...ARGS, '--cache-dir', cacheDir] });
    try {
      // The new engine found the blocks the first server left (A's ten, C's ten).
      const load = await s.post(`/v1/models/${id}/load`);
      assert.equal(load.status, 200, load.text);
      const m0 = await s.model(id);
      if (BYTES_PER_TOKEN[id]) assert.equal(m0.kv_pool.bytes_per_token, BYTES_PER_TOKEN[id], JSON.stringify(m0.kv_pool));
      assert.ok(m0.tiers.ssd.blocks >= 20, JSON.stringify(m0.tiers.ssd));
      assert.equal(m0.tiers.ssd.hit_blocks, 0);
      assert.equal(m0.restored_tokens, 0);

      // B first: its six blocks shared with A come from SSD; its windowed layer's first
      // computed positions (96..) look back into them.
      await restored(s, id, 'B', { cached: 96, ssdHits: 6, restoredTokens: 96 });
      // A: six blocks are on the device now, four more come from SSD.
      await restored(s, id, 'A', { cached: 160, ssdHits: 10, restoredTokens: 160 });
      // C: all ten blocks from SSD; its last token is computed again for its logits.
      await restored(s, id, 'C', { cached: 159, ssdHits: 20, restoredTokens: 160 + 159 });
    } finally {
      assert.equal((await s.stop())?.code, 0);
    }
  });
}
