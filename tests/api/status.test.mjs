// /api/status counts never show a request the client has already seen end: right after a
// stream (or a plain request) that the front ended on a stop string, before the engine's
// next report, running and waiting are 0 (session 1 saw a phantom `running: 1` here).
import test from 'node:test';
import assert from 'node:assert/strict';
import { openai, status, modelStatus, MODEL } from './helpers.mjs';

test('no phantom running/waiting right after a request ended on a stop string', async () => {
  const client = openai();
  const prompt = 'The count of the lighthouse keeper';
  const full = (await client.completions.create({ model: MODEL, prompt, max_tokens: 24, temperature: 0, ignore_eos: true })).choices[0].text;
  // A stop string a few tokens in: the front ends the request, the engine would go on.
  const stop = full.slice(Math.floor(full.length / 3), Math.floor(full.length / 3) + 3);
  assert.ok(stop.trim().length > 0, `no usable stop string in ${JSON.stringify(full)}`);
  for (let i = 0; i < 8; i++) {
    const stream = i % 2 === 0;
    if (stream) {
      const s = await client.completions.create({ model: MODEL, prompt, max_tokens: 400, temperature: 0, ignore_eos: true, stop: [stop], stream: true });
      let last;
      for await (const c of s) last = c;
      assert.equal(last.choices[0].finish_reason, 'stop');
    } else {
      const r = await client.completions.create({ model: MODEL, prompt, max_tokens: 400, temperature: 0, ignore_eos: true, stop: [stop] });
      assert.equal(r.choices[0].finish_reason, 'stop');
    }
    const m = modelStatus(await status(), MODEL);
    assert.equal(m.running, 0, `round ${i}: running ${m.running} right after the request ended`);
    assert.equal(m.waiting, 0, `round ${i}: waiting ${m.waiting}`);
  }
});

test('/api/status: the KV pool in blocks and tokens and the memory by part, adding up', async () => {
  await openai().completions.create({ model: MODEL, prompt: 'Hello', max_tokens: 2 });
  const st = await status();
  const m = modelStatus(st, MODEL);
  assert.equal(m.kv_pool.blocks, 256);  // --kv-blocks 256 on the main server
  assert.equal(m.kv_pool.block_size, 16);
  assert.equal(m.kv_pool.tokens, 256 * 16);
  assert.equal(m.kv_pool.used_blocks, m.kv_blocks.used);
  assert.equal(m.memory.planned, false);
  assert.equal(m.memory.kv_rule, '--kv-blocks');
  const parts = m.memory.weights_bytes + m.memory.kv_pool_bytes + m.memory.workspace_bytes + m.memory.host_tier_bytes;
  assert.equal(parts, m.memory.total_bytes);
  assert.equal(m.memory.total_bytes, m.memory_bytes);
  assert.ok(m.memory.weights_bytes > 0 && m.memory.kv_pool_bytes > 0);
  // A model not loaded shows its plan.
  const spare = modelStatus(st, 'spare');
  if (spare.state === 'available') {
    assert.equal(spare.memory.planned, true);
    assert.equal(spare.kv_pool.blocks, 256);
    assert.equal(spare.memory.total_bytes, spare.memory.weights_bytes + spare.memory.kv_pool_bytes);
  }
});

// Issue 21's "920 KV blocks in use after the run, nothing running": the engine's report
// lagged its finish events by up to a heartbeat while running/waiting were capped by the
// front. Now a finish reaches the front after a status with its blocks freed.
test('KV blocks in use are 0 the moment the last request has ended (no report lag)', async () => {
  const client = openai();
  for (let i = 0; i < 6; i++) {
    const jobs = [0, 1, 2].map((j) => client.completions.create({
      model: MODEL, prompt: `Round ${i} job ${j}: ` + 'the lighthouse keeper wrote in his log. '.repeat(8),
      max_tokens: 12 + j, temperature: 0, ignore_eos: true,
    }));
    await Promise.all(jobs);
    const m = modelStatus(await status(), MODEL);
    assert.equal(m.running, 0);
    assert.equal(m.kv_blocks.used, 0, `round ${i}: ${m.kv_blocks.used} blocks in use right after the end`);
  }
});
