// Issue 21, memory planning, against real `keel serve` processes and engines: the KV
// pool sized from memory with default flags (a model trained for 65,536 tokens takes a
// 20,000-token prompt), max_model_len before the first load, /api/status memory by part
// adding up, and several models under one budget: two started in either order both
// serve, a third that does not fit is refused with 507 naming the bytes and the holders.
import test, { after } from 'node:test';
import assert from 'node:assert/strict';
import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { MODEL_PATH } from './helpers.mjs';
import { startServer } from './wedge_lib.mjs';

const tmp = fs.mkdtempSync(path.join(os.tmpdir(), 'keel-memory-test-'));
after(() => fs.rmSync(tmp, { recursive: true, force: true }));

// The test model with another trained context (config.json's max_position_embeddings).
function withContext(name, context) {
  const dir = path.join(tmp, name);
  fs.cpSync(MODEL_PATH, dir, { recursive: true });
  const cfgPath = path.join(dir, 'config.json');
  const cfg = JSON.parse(fs.readFileSync(cfgPath, 'utf8'));
  cfg.max_position_embeddings = context;
  fs.writeFileSync(cfgPath, JSON.stringify(cfg));
  return dir;
}
const weightsOf = (dir) => fs.readdirSync(dir).filter((f) => f.endsWith('.safetensors'))
  .reduce((n, f) => n + fs.statSync(path.join(dir, f)).size, 0);

test('default flags: a model trained for 65,536 tokens offers them and takes a 20,000-token prompt', async () => {
  const long = withContext('long', 65536);
  const srv = await startServer({ name: 'mem-long', models: { long } });
  try {
    const before = await srv.get('/v1/models');
    assert.equal(before.status, 200, before.text);
    const listed = before.json.data.find((m) => m.id === 'long');
    assert.equal(listed.state, 'available');
    assert.equal(listed.max_model_len, 65536, 'max_model_len before the first load');
    const planned = await srv.model('long');
    assert.equal(planned.memory.planned, true);
    assert.ok(planned.kv_pool.tokens >= 65536, `planned pool ${JSON.stringify(planned.kv_pool)}`);

    const cfg = JSON.parse(fs.readFileSync(path.join(long, 'config.json'), 'utf8'));
    const prompt = Array.from({ length: 20000 }, (_, i) => 3 + ((i * 7919) % (cfg.vocab_size - 3)));
    const r = await srv.post('/v1/completions', { model: 'long', prompt, max_tokens: 2, temperature: 0, ignore_eos: true });
    assert.equal(r.status, 200, r.text.slice(0, 400));
    assert.equal(r.json.usage.prompt_tokens, 20000);
    assert.equal(r.json.usage.completion_tokens, 2);

    const m = await srv.model('long');
    assert.equal(m.context_length, 65536);
    assert.equal(m.memory.planned, false);
    assert.equal(m.kv_pool.tokens, m.kv_pool.blocks * m.kv_pool.block_size);
    assert.ok(m.kv_pool.tokens >= 65536);
    // The parts add up to the total the budget counts.
    const mem = m.memory;
    assert.equal(mem.weights_bytes + mem.kv_pool_bytes + mem.workspace_bytes + mem.host_tier_bytes, mem.total_bytes);
    assert.equal(mem.total_bytes, m.memory_bytes);
    assert.equal(mem.weights_bytes, weightsOf(long));
    const blockBytes = 16 * cfg.num_hidden_layers * 2 * cfg.num_key_value_heads * cfg.head_dim * 4;
    assert.equal(mem.kv_pool_bytes, m.kv_pool.blocks * blockBytes);
    assert.equal(m.kv_blocks.used, 0);
  } finally {
    await srv.stop();
  }
});

// Three ids of the test model under one budget; a and b pinned with shares of 0.4 each,
// c asks for 0.4 too: 1.2 of the budget in all. A share of 0.4 x 5 x the weights leaves
// each pool the room of one more copy of the weights (less than 4 full contexts), so
// every model's plan is its whole share.
async function threeUnderBudget(name, order) {
  const weights = weightsOf(MODEL_PATH);
  const budget = 5 * weights;
  const srv = await startServer({
    name, models: { a: MODEL_PATH, b: MODEL_PATH, c: MODEL_PATH },
    args: ['--memory-budget', String(budget), '--pin', 'a', '--pin', 'b',
      '--gpu-memory-fraction', 'a=0.4', '--gpu-memory-fraction', 'b=0.4', '--gpu-memory-fraction', 'c=0.4'],
  });
  try {
    for (const id of order) {
      const r = await srv.post('/v1/completions', { model: id, prompt: 'Hello there', max_tokens: 3, temperature: 0 });
      assert.equal(r.status, 200, `${id}: ${r.text}`);
    }
    // Both still loaded and serving.
    for (const id of order) {
      const m = await srv.model(id);
      assert.equal(m.state, 'ready');
      assert.ok(m.memory_bytes <= 0.4 * budget + 1, `${id} holds ${m.memory_bytes} > its share`);
      assert.ok(m.memory.kv_pool_bytes > 0.9 * weights, `${id}: pool ${m.memory.kv_pool_bytes}`);
      assert.equal(m.memory.kv_rule, 'budget');
    }
    const c = await srv.post('/v1/completions', { model: 'c', prompt: 'Hello there', max_tokens: 3 });
    assert.equal(c.status, 507, c.text);
    const msg = c.json.error.message;
    assert.match(msg, /model 'c' needs .*\(\d+ bytes\)/);
    assert.match(msg, /'a' .*\(\d+ bytes\) \(pinned\)/);
    assert.match(msg, /'b' .*\(\d+ bytes\) \(pinned\)/);
    assert.match(msg, new RegExp(`\\(${budget} bytes\\) memory budget`));
    assert.equal((await srv.model('c')).state, 'available');
    // The refusal changed nothing: a and b still serve.
    for (const id of order)
      assert.equal((await srv.post('/v1/completions', { model: id, prompt: 'Hi', max_tokens: 2 })).status, 200);
    // Unloaded and loaded again (three times), a model plans the same bytes.
    const first = (await srv.model(order[0])).memory;
    for (let i = 0; i < 3; i++) {
      assert.equal((await srv.post(`/v1/models/${order[0]}/unload`)).status, 200);
      assert.equal((await srv.post(`/v1/models/${order[0]}/load`)).status, 200);
    }
    assert.deepEqual((await srv.model(order[0])).memory, first);
  } finally {
    await srv.stop();
  }
}

test('two models under one budget, a then b: both serve; a third is refused with 507 and byte figures', async () => {
  await threeUnderBudget('mem-ab', ['a', 'b']);
});

test('the same in the other order, b then a', async () => {
  await threeUnderBudget('mem-ba', ['b', 'a']);
});

test('a model whose share cannot hold its weights and a minimal pool is refused before its engine starts', async () => {
  const weights = weightsOf(MODEL_PATH);
  const srv = await startServer({ name: 'mem-small', models: { tiny: MODEL_PATH },
    args: ['--memory-budget', String(weights + 1024)] });
  try {
    const r = await srv.post('/v1/completions', { model: 'tiny', prompt: 'Hello', max_tokens: 2 });
    assert.equal(r.status, 507, r.text);
    assert.match(r.json.error.message, /needs .*\(\d+ bytes\) \(weights .*\((\d+) bytes\)/);
    assert.ok(r.json.error.message.includes(`(${weights} bytes)`), r.json.error.message);
    const m = await srv.model('tiny');
    assert.equal(m.state, 'available');
    assert.equal(m.pid, 0, 'no engine was started');
  } finally {
    await srv.stop();
  }
});

test('an explicit --kv-blocks larger than the host\'s memory is refused with 507, not left to the OOM killer', async () => {
  const srv = await startServer({ name: 'mem-huge-pool', models: { tiny: MODEL_PATH }, args: ['--kv-blocks', '100000000'] });
  try {
    const r = await srv.post('/v1/completions', { model: 'tiny', prompt: 'Hello', max_tokens: 2 });
    assert.equal(r.status, 507, r.text);
    assert.match(r.json.error.message, /KV pool of 100000000 blocks \(--kv-blocks\), .*\(\d+ bytes\), but the host has only .*\(\d+ bytes\) available/);
    assert.equal((await srv.model('tiny')).pid, 0);
  } finally {
    await srv.stop();
  }
});

test('explicit shares that take the whole budget leave the other models none: 507, not an unbounded pool', async () => {
  const srv = await startServer({ name: 'mem-noshare', models: { a: MODEL_PATH, b: MODEL_PATH },
    args: ['--memory-budget', String(10 * weightsOf(MODEL_PATH)), '--gpu-memory-fraction', 'a=1'] });
  try {
    assert.equal((await srv.post('/v1/completions', { model: 'a', prompt: 'Hi', max_tokens: 2 })).status, 200);
    const r = await srv.post('/v1/completions', { model: 'b', prompt: 'Hi', max_tokens: 2 });
    assert.equal(r.status, 507, r.text);
    assert.match(r.json.error.message, /model 'b' has no share of the memory budget left/);
  } finally {
    await srv.stop();
  }
});

test('flags: a bad --gpu-memory-fraction stops the server with a message naming the flag', async () => {
  await assert.rejects(
    startServer({ name: 'mem-bad', args: ['--gpu-memory-fraction', 'tiny=1.5'] }),
    /--gpu-memory-fraction: 'tiny=1.5'/,
  );
});
