// Issue 8, liveness and teardown against real `keel serve` processes: a REAL stalled
// step (stall-step fault inside the engine's step) and a crashing engine are caught,
// their requests end at once in the endpoint's own format, the engine is killed (its
// pid gone) and restarted, counts return to zero; /debug/faults and /v1/cache/clear;
// unload of a wedged engine and SIGTERM are bounded.
import test, { after, before } from 'node:test';
import assert from 'node:assert/strict';
import { http, URL_LRU } from './helpers.mjs';
import { startServer, inject, ends, settled, streamText, waitFor, greedy, alive, sleep, rng, WEDGE_MODEL } from './wedge_lib.mjs';

const DEADLINE_S = 2;
let srv;
let reference = {};
const LONG = 'The keeper of the lighthouse wrote in his log every night. '.repeat(12);

before(async () => {
  srv = await startServer({
    args: ['--enable-fault-injection', '--pin', 'tiny', '--step-deadline', String(DEADLINE_S), '--heartbeat-timeout', '3',
      '--unload-grace', '1', '--kv-blocks', '128', '--log-level', 'info'],
  });
  reference = { [LONG]: await greedy(srv.client, LONG), 'short one': await greedy(srv.client, 'short one') };
});
after(async () => {
  const r = await srv.stop();
  assert.equal(r?.code, 0);
});

// Watches /api/status and /health every 25 ms until stopped: the states seen and when
// /health first turned 503.
function watch(server) {
  const seen = [];
  let red = null, stop = false;
  const t0 = Date.now();
  const done = (async () => {
    while (!stop) {
      const [m, h] = await Promise.all([server.model(), server.get('/health')]);
      if (seen.at(-1) !== m.state) seen.push(m.state);
      if (h.status === 503 && !red) red = { at: Date.now() - t0, body: h.json };
      await sleep(25);
    }
  })();
  return { seen, red: () => red, stop: async () => { stop = true; await done; } };
}

test('a real stalled step: /health 503 in time, streams and plain requests end at once, engine killed and restarted', async () => {
  const r = rng();
  console.log(`# seed ${r.seed}`);
  const before = await srv.model();
  const w = watch(srv);
  // A stream in progress, and a plain request, when the step wedges.
  let armedAt = 0;
  const stream = ends(DEADLINE_S * 1000 + 4000, () => streamText(srv.client,
    { model: 'tiny', prompt: 'Once', max_tokens: 2000, ignore_eos: true },
    { onChunk: async (n) => { if (n === 3) { armedAt = Date.now(); await inject(srv, { model: 'tiny', kind: 'stall-step' }); } } }), 'stream');
  await sleep(r.between(0, 40));
  const plain = ends(DEADLINE_S * 1000 + 4000, () => srv.client.completions.create({ model: 'tiny', prompt: 'plain', max_tokens: 400, ignore_eos: true }), 'plain');
  const [s, p] = await Promise.all([stream, plain]);
  assert.equal(s.ok, false, 'the stream must fail');
  assert.match(String(s.error.message ?? s.error), /stalled|deadline/);
  const endedAfter = Date.now() - armedAt;
  assert.ok(endedAfter < DEADLINE_S * 1000 + 1500, `the stream ended ${endedAfter} ms after the stall began`);
  // The plain request either finished before the stall or got a 503 naming the stall.
  if (!p.ok) {
    assert.equal(p.error.status, 503);
    assert.match(p.error.message, /stalled/);
  }
  const back = await waitFor(async () => {
    const m = await srv.model();
    return m.state === 'ready' && m.pid !== before.pid ? m : null;
  }, { timeoutMs: 15_000, what: 'the restarted engine' });
  await w.stop();
  // /health turned 503 within the deadline plus one second of the step starting, and
  // named the engine and its step's age.
  const red = w.red();
  assert.ok(red, '/health never turned 503');
  assert.equal(red.body.problems[0].model, 'tiny');
  assert.match(red.body.problems[0].reason, /stalled/);
  // The states went stalled -> restarting -> ready (from the registry's own history).
  const hist = back.history.map((h) => h.state);
  const i = hist.lastIndexOf('stalled');
  assert.ok(i >= 0, `history: ${hist}`);
  assert.deepEqual(hist.slice(i, i + 3), ['stalled', 'restarting', 'ready']);
  assert.equal(back.restarts, before.restarts + 1);
  assert.equal(alive(before.pid), false, 'the wedged engine is gone (its memory with it)');
  assert.ok(/stalled: a step has run for/.test(back.last_error));
  assert.match(srv.log(), /killing engine pid \d+/);
  assert.match(srv.log(), new RegExp(`engine pid ${before.pid} for 'tiny' is gone`));
  assert.equal((await srv.get('/health')).status, 200);
  await settled(srv, { reference });
});

test('/health turns 503 within the deadline plus one second of a stalled step', async () => {
  const before = await srv.model();
  const t0 = Date.now();
  await inject(srv, { model: 'tiny', kind: 'stall-step' });
  const req = ends(DEADLINE_S * 1000 + 4000, () => srv.client.completions.create({ model: 'tiny', prompt: 'x', max_tokens: 50 }));
  const red = await waitFor(async () => {
    const h = await srv.get('/health');
    return h.status === 503 ? h : null;
  }, { timeoutMs: DEADLINE_S * 1000 + 3000, intervalMs: 20, what: '/health 503' });
  const ms = Date.now() - t0;
  assert.ok(ms <= DEADLINE_S * 1000 + 1000, `/health took ${ms} ms to turn 503`);
  assert.equal(red.json.problems[0].model, 'tiny');
  const res = await req;
  assert.equal(res.ok, false);
  assert.equal(res.error.status, 503);
  await waitFor(async () => { const m = await srv.model(); return m.state === 'ready' && m.pid !== before.pid; },
    { timeoutMs: 15_000, what: 'restart' });
  await settled(srv, { reference });
});

test('a crashing engine (crash-engine) ends its requests with an error event and comes back', async () => {
  const before = await srv.model();
  const anth = await fetch(`${srv.url}/v1/messages`, {
    method: 'POST', headers: { 'content-type': 'application/json' },
    body: JSON.stringify({ model: 'tiny', max_tokens: 2000, stream: true, ignore_eos: true, messages: [{ role: 'user', content: 'go' }] }),
  });
  const reader = anth.body.getReader();
  let text = '';
  const first = await reader.read();
  text += new TextDecoder().decode(first.value);
  await inject(srv, { model: 'tiny', kind: 'crash-engine' });
  const t0 = Date.now();
  for (;;) {
    const { value, done } = await reader.read();
    if (done) break;
    text += new TextDecoder().decode(value);
  }
  assert.ok(Date.now() - t0 < 3000, 'the stream ended soon after the crash');
  // Anthropic's own error event, not a silent end.
  assert.match(text, /event: error\ndata: \{"type":"error","error":\{"type":"[a-z_]+","message":"[^"]*(exited|died|signal)/);
  const back = await waitFor(async () => {
    const m = await srv.model();
    return m.state === 'ready' && m.pid !== before.pid ? m : null;
  }, { timeoutMs: 15_000, what: 'the restarted engine' });
  assert.equal(alive(before.pid), false);
  assert.equal(back.restarts, before.restarts + 1);
  await settled(srv, { reference });
});

test('/debug/faults: validation, listing, disarming; off unless enabled; /v1/cache/clear', async () => {
  // The LRU server runs without --enable-fault-injection (the main one has it, for slowEngine).
  const off = await http('POST', '/debug/faults', { url: URL_LRU, key: null, body: { model: 'lru-a', kind: 'stall-step' } });
  assert.equal(off.status, 403);
  assert.match(off.json.error.message, /--enable-fault-injection/);
  assert.equal((await http('GET', '/debug/faults', { url: URL_LRU, key: null })).status, 403);
  assert.ok(URL_LRU);

  for (const [body, field] of [[{ model: 'tiny' }, 'kind'], [{ model: 'tiny', kind: 'melt' }, 'kind'],
    [{ model: 'tiny', kind: 'slow-store' }, 'seconds'], [{ model: 'tiny', kind: 'ssd-write-error', count: 0 }, 'count'],
    [{ model: 'tiny', kind: 'stall-step', extra: 1 }, 'extra']]) {
    const r = await srv.post('/debug/faults', body);
    assert.equal(r.status, 400, r.text);
    assert.equal(r.json.error.param, field);
  }
  assert.equal((await srv.post('/debug/faults', '{bad')).status, 400);
  assert.equal((await srv.post('/debug/faults', { model: 'nope', kind: 'crash-engine' })).status, 404);

  const armed = await inject(srv, { model: 'tiny', kind: 'ssd-write-error', count: 3 });
  assert.deepEqual(armed.armed, [{ kind: 'ssd-write-error', seconds: null, count: 3 }]);
  await inject(srv, { model: 'tiny', kind: 'slow-store', seconds: 0.5, count: 2 });
  // The list comes from the engine's heartbeat (sent when it changes, every 100 ms):
  // wait for the beat after the second fault instead of hoping it came already.
  let kinds = [];
  await waitFor(async () => {
    const list = await srv.get('/debug/faults');
    assert.equal(list.status, 200);
    kinds = list.json.models.find((m) => m.id === 'tiny').armed.map((f) => f.kind).sort();
    return kinds.length === 2;
  }, { timeoutMs: 3000, what: 'both faults listed' });
  assert.deepEqual(kinds, ['slow-store', 'ssd-write-error']);
  const del = await srv.del('/debug/faults?model=tiny');
  assert.equal(del.status, 200);
  assert.deepEqual(del.json.disarmed, ['tiny']);
  await waitFor(async () => (await srv.get('/debug/faults')).json.models[0].armed.length === 0, { what: 'disarmed' });

  // Cache clear: the next identical prompt hits no cached block.
  await greedy(srv.client, LONG);
  const hit = await srv.client.completions.create({ model: 'tiny', prompt: LONG, max_tokens: 1 });
  assert.ok(hit.usage.prompt_tokens_details.cached_tokens > 0);
  const c = await srv.post('/v1/cache/clear', { model: 'tiny' });
  assert.equal(c.status, 200, c.text);
  assert.deepEqual(c.json.cleared, ['tiny']);
  const all = await srv.post('/v1/cache/clear');
  assert.deepEqual(all.json.cleared, ['tiny']);
  assert.equal((await srv.post('/v1/cache/clear', { model: 'nope' })).status, 404);
  assert.equal((await srv.post('/v1/cache/clear', { modle: 'tiny' })).status, 400);
  await waitFor(async () => (await srv.model()).kv_blocks.cached === 0, { what: 'the cache to empty' });
  const miss = await srv.client.completions.create({ model: 'tiny', prompt: LONG, max_tokens: 1 });
  assert.equal(miss.usage.prompt_tokens_details?.cached_tokens ?? 0, 0);

  // Tiers in /api/status and /metrics.
  const m = await srv.model();
  for (const t of ['host', 'ssd']) assert.equal(typeof m.tiers[t].used_bytes, 'number');
  assert.equal(typeof m.restored_tokens, 'number');
  const metrics = (await srv.get('/metrics')).text;
  assert.match(metrics, /keel_kv_tier_used_bytes\{model="tiny",tier="ssd"\} \d+/);
  assert.match(metrics, /keel_kv_tier_used_bytes\{model="tiny",tier="host"\} \d+/);
  assert.match(metrics, /keel_step_deadline_seconds\{model="tiny"\} 2/);
  await settled(srv, { reference });
});

test('unload of a wedged engine returns within its grace plus 5 s and frees it', async () => {
  await srv.post('/v1/models/tiny/load');
  const before = await srv.model();
  await inject(srv, { model: 'tiny', kind: 'stall-step' });
  const req = ends(8000, () => srv.client.completions.create({ model: 'tiny', prompt: 'wedge me', max_tokens: 50 }));
  await waitFor(async () => (await srv.model()).step_in_progress_seconds > 0.2, { what: 'the step to wedge' });
  const t0 = Date.now();
  const u = await srv.post('/v1/models/tiny/unload');
  const ms = Date.now() - t0;
  assert.equal(u.status, 200, u.text);
  assert.ok(ms < 1000 + 5000, `unload took ${ms} ms`);
  const res = await req;
  assert.equal(res.ok, false);
  assert.equal(res.error.status, 503);
  await waitFor(() => !alive(before.pid), { timeoutMs: 3000, what: 'the engine to be gone' });
  await srv.post('/v1/models/tiny/load');
  await settled(srv, { reference });
});

test('SIGTERM with streams in flight: exits 0 within the grace plus 5 s, says so, leaves no engine', async () => {
  const s = await startServer({ name: 'term', args: ['--shutdown-grace', '1', '--log-level', 'warn'] });
  await greedy(s.client, 'warm');
  const pid = (await s.model()).pid;
  const streams = [1, 2, 3].map(() => ends(10_000, () => streamText(s.client, { model: 'tiny', prompt: 'Long', max_tokens: 3000, ignore_eos: true })));
  await waitFor(async () => (await s.model()).running > 0, { what: 'streams running' });
  const t0 = Date.now();
  s.proc.kill('SIGTERM');
  const r = await s.exited;
  const ms = Date.now() - t0;
  assert.equal(r.code, 0);
  assert.ok(ms < 1000 + 5000, `exit took ${ms} ms`);
  for (const st of await Promise.all(streams)) assert.equal(st.ok, false, 'a stream cut at the grace ends with an error');
  assert.match(s.log(), /keel serve: exited cleanly in [\d.]+ s \(3 request\(s\) in flight at the signal, 3 ended at the grace period/);
  assert.doesNotMatch(s.log(), /keel serve: models:/, '--log-level warn hides info lines');
  assert.equal(alive(pid), false);
  await s.stop();
});

test('per-model pin and idle TTL from the settings file; a stalled engine nobody waits for is not restarted', async () => {
  const fs = await import('node:fs');
  const path = await import('node:path');
  const os = await import('node:os');
  const conf = path.join(fs.mkdtempSync(path.join(os.tmpdir(), 'keel-ttl-')), 'keel.toml');
  fs.writeFileSync(conf, 'pin = ["b"]\nmodel-ttl = ["a=2.5"]\nidle-ttl = 0.4\nstep-deadline = 1\nenable-fault-injection = true\n');
  const MP = WEDGE_MODEL;
  const s = await startServer({ name: 'ttl', models: { a: MP, b: MP, c: MP }, args: ['--config', conf] });
  try {
    const st0 = await s.status();
    const ttl = Object.fromEntries(st0.models.map((m) => [m.id, [m.pinned, m.idle_ttl_seconds]]));
    assert.deepEqual(ttl, { a: [false, 2.5], b: [true, 0.4], c: [false, 0.4] });
    await Promise.all(['a', 'b', 'c'].map((model) => s.client.completions.create({ model, prompt: 'x', max_tokens: 1 })));
    // a used last: its idle time starts after c's.
    await s.client.completions.create({ model: 'a', prompt: 'x', max_tokens: 1 });
    const t0 = Date.now();
    const state = async () => Object.fromEntries((await s.status()).models.map((m) => [m.id, m.state]));
    await waitFor(async () => (await state()).c === 'available', { timeoutMs: 4000, what: 'c to unload after 0.4 s idle' });
    assert.equal((await state()).a, 'ready', 'a has its own longer TTL');
    await waitFor(async () => (await state()).a === 'available', { timeoutMs: 6000, what: 'a to unload after 2.5 s idle' });
    assert.ok(Date.now() - t0 >= 2000);
    await sleep(300);
    assert.equal((await state()).b, 'ready', 'b is pinned');

    // A stall in c (not pinned): killed, and nobody waits for it, so it is not restarted.
    const cPid = (await (async () => { await s.client.completions.create({ model: 'c', prompt: 'x', max_tokens: 1 }); return (await s.model('c')).pid; })());
    await inject(s, { model: 'c', kind: 'stall-step' });
    const res = await ends(6000, () => s.client.completions.create({ model: 'c', prompt: 'y', max_tokens: 5 }));
    assert.equal(res.ok, false);
    assert.equal(res.error.status, 503);
    const c = await waitFor(async () => { const m = await s.model('c'); return m.state === 'available' ? m : null; },
      { timeoutMs: 4000, what: 'c to be available' });
    assert.equal(c.restarts, 0);
    assert.deepEqual(c.history.slice(-2).map((h) => h.state), ['stalled', 'available']);
    assert.equal(alive(cPid), false);
    // It loads again on next use.
    const again = await s.client.completions.create({ model: 'c', prompt: 'z', max_tokens: 1 });
    assert.equal(again.choices.length, 1);
  } finally {
    const r = await s.stop();
    assert.equal(r?.code, 0);
  }
});

test('SIGKILL of the server while its engine is wedged in a step leaves no engine behind', async () => {
  const s = await startServer({ name: 'kill', args: ['--enable-fault-injection', '--step-deadline', '60'] });
  await greedy(s.client, 'warm');
  const pid = (await s.model()).pid;
  await inject(s, { model: 'tiny', kind: 'stall-step' });
  const req = ends(10_000, () => s.client.completions.create({ model: 'tiny', prompt: 'x', max_tokens: 5 }));
  await waitFor(async () => (await s.model()).step_in_progress_seconds > 0.2, { what: 'the step to wedge' });
  s.proc.kill('SIGKILL');
  await s.exited;
  assert.equal((await req).ok, false);
  await waitFor(() => !alive(pid), { timeoutMs: 3000, what: `engine ${pid} to die with its server` });
  await s.stop();
});
