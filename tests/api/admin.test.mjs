import test from 'node:test';
import assert from 'node:assert/strict';
import { openai, http, status, modelStatus, waitFor, MODEL, URL_LRU } from './helpers.mjs';

test('/health, /api/status and /metrics', async () => {
  await openai().completions.create({ model: MODEL, prompt: 'warm up', max_tokens: 3 });
  const h = await http('GET', '/health', { key: null });
  assert.equal(h.status, 200);
  assert.equal(h.json.status, 'ok');
  assert.ok(h.json.models.some((m) => m.id === MODEL && m.state === 'ready'));

  // Engine figures arrive with its heartbeat (every 100 ms): wait for one after the load.
  const st = await waitFor(async () => {
    const s = await status();
    return modelStatus(s, MODEL).steps > 0 ? s : null;
  }, { timeoutMs: 3000, what: 'a status report with steps' });
  const m = modelStatus(st, MODEL);
  assert.equal(m.state, 'ready');
  for (const k of ['running', 'waiting', 'preempted', 'loading_cache', 'step_in_progress_seconds', 'last_step_seconds',
    'prefill_tokens_per_second', 'decode_tokens_per_second', 'kv_usage', 'prefix_cache_hit_rate', 'memory_bytes'])
    assert.equal(typeof m[k], 'number', k);
  assert.ok(m.steps > 0);
  assert.ok(m.pid > 0);
  assert.equal(typeof st.totals.running, 'number');

  const metrics = await http('GET', '/metrics');
  assert.equal(metrics.status, 200);
  assert.match(metrics.headers.get('content-type'), /text\/plain/);
  for (const family of ['keel_model_loaded', 'keel_requests_running', 'keel_requests_waiting', 'keel_step_in_progress_seconds',
    'keel_decode_tokens_total', 'keel_kv_blocks_used', 'keel_http_open_connections'])
    assert.match(metrics.text, new RegExp(`# TYPE ${family} `));
  assert.match(metrics.text, new RegExp(`keel_model_loaded\\{model="${MODEL}"\\} 1`));
  // Engine counters arrive with its heartbeat: wait for the one after our request.
  await waitFor(async () => {
    const text = (await http('GET', '/metrics')).text;
    const m = text.match(new RegExp(`keel_decode_tokens_total\\{model="${MODEL}"\\} (\\d+)`));
    return m && Number(m[1]) >= 2;
  }, { timeoutMs: 3000, what: 'decode tokens in /metrics' });
});

test('load and unload', async () => {
  const load = await http('POST', '/v1/models/spare/load');
  assert.equal(load.status, 200, load.text);
  assert.equal(load.json.state, 'ready');
  assert.equal(modelStatus(await status(), 'spare').state, 'ready');
  const r = await openai().completions.create({ model: 'spare', prompt: 'hello', max_tokens: 2 });
  assert.equal(r.model, 'spare');
  const t0 = Date.now();
  const unload = await http('POST', '/v1/models/spare/unload');
  assert.equal(unload.status, 200, unload.text);
  assert.equal(unload.json.state, 'available');
  assert.ok(Date.now() - t0 < 5000, 'unload is bounded');
  assert.equal(modelStatus(await status(), 'spare').state, 'available');
  assert.equal((await http('POST', '/v1/models/nope/load')).status, 404);
});

test('LRU eviction under a small memory budget', async () => {
  const client = openai(URL_LRU, null);
  const state = async () => Object.fromEntries((await status(URL_LRU)).models.map((m) => [m.id, m.state]));
  await client.completions.create({ model: 'lru-a', prompt: 'a', max_tokens: 1 });
  await client.completions.create({ model: 'lru-b', prompt: 'b', max_tokens: 1 });
  assert.deepEqual(await state(), { 'lru-a': 'ready', 'lru-b': 'ready', 'lru-c': 'available', huge: 'available' });
  await client.completions.create({ model: 'lru-a', prompt: 'a again', max_tokens: 1 }); // b is now least recent
  await client.completions.create({ model: 'lru-c', prompt: 'c', max_tokens: 1 });
  assert.deepEqual(await state(), { 'lru-a': 'ready', 'lru-b': 'available', 'lru-c': 'ready', huge: 'available' });
  const st = await status(URL_LRU);
  assert.ok(st.totals.memory_bytes <= st.totals.memory_budget_bytes);
  // Settings came from --config and KEEL_MEMORY_BUDGET.
  assert.ok(st.totals.memory_budget_bytes > 0);

  // A model bigger than the whole budget: 507, and nothing else is unloaded for it.
  await assert.rejects(client.completions.create({ model: 'huge', prompt: 'x', max_tokens: 1 }),
    (e) => e.status === 507 && /budget/.test(e.message));
  const anth = await http('POST', '/v1/messages', { url: URL_LRU, key: null, body: { model: 'huge', max_tokens: 1, messages: [{ role: 'user', content: 'x' }] } });
  assert.equal(anth.status, 507);
  assert.equal(anth.json.type, 'error');
  assert.deepEqual(await state(), { 'lru-a': 'ready', 'lru-b': 'available', 'lru-c': 'ready', huge: 'available' });
});

test('a killed engine fails its requests at once and is restarted', async () => {
  await openai().completions.create({ model: MODEL, prompt: 'x', max_tokens: 1 });
  const pid = modelStatus(await status(), MODEL).pid;
  const stream = await openai().completions.create({ model: MODEL, prompt: 'A long tale', max_tokens: 900, stream: true, ignore_eos: true });
  let chunks = 0;
  const t0 = Date.now();
  await assert.rejects(async () => {
    for await (const _ of stream) if (++chunks === 2) process.kill(pid, 'SIGKILL');
  }, (e) => /died|exited|signal/.test(String(e.message ?? e)));
  assert.ok(Date.now() - t0 < 10_000);
  const back = await waitFor(async () => {
    const m = modelStatus(await status(), MODEL);
    return m.state === 'ready' && m.pid !== pid ? m : null;
  }, { timeoutMs: 20_000, what: 'the engine to restart' });
  assert.equal(back.restarts, 1);
  const h = await http('GET', '/health', { key: null });
  assert.equal(h.status, 200);
  const r = await openai().completions.create({ model: MODEL, prompt: 'after', max_tokens: 2 });
  assert.equal(r.choices.length, 1);
});

test('a frozen engine (SIGSTOP) turns /health red, is killed at its heartbeat deadline and restarted', async () => {
  await openai().completions.create({ model: MODEL, prompt: 'x', max_tokens: 1 });
  const before = modelStatus(await status(), MODEL);
  const stream = await openai().completions.create({ model: MODEL, prompt: 'Frozen', max_tokens: 900, stream: true, ignore_eos: true });
  let chunks = 0;
  let sawRed = null;
  const t0 = Date.now();
  await assert.rejects(async () => {
    for await (const _ of stream) {
      if (++chunks === 2) {
        process.kill(before.pid, 'SIGSTOP');
        // While it is frozen and not yet killed, /health names it.
        sawRed = await waitFor(async () => {
          const h = await http('GET', '/health', { key: null });
          return h.status === 503 ? h.json : null;
        }, { timeoutMs: 5000, intervalMs: 100, what: '/health to turn 503' });
      }
    }
  }, (e) => /stalled|heartbeat/.test(String(e.message ?? e)));
  assert.ok(Date.now() - t0 < 8000, 'the stream failed within the heartbeat deadline');
  assert.equal(sawRed.problems[0].model, MODEL);
  const back = await waitFor(async () => {
    const m = modelStatus(await status(), MODEL);
    return m.state === 'ready' && m.pid !== before.pid ? m : null;
  }, { timeoutMs: 20_000, what: 'the engine to restart' });
  assert.equal(back.restarts, before.restarts + 1);
  assert.equal((await http('GET', '/health', { key: null })).status, 200);
});
