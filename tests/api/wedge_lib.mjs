// The wedge scenario suite's toolkit (issue 8): real `keel serve` processes started
// per test file, a seeded random timing source, and the pass criteria checked after
// every scenario: each request ended within its deadline, /api/status back to zero
// running and waiting, no KV block leaked, a probe completes, every engine pid seen is
// either the live one or gone, greedy outputs equal the reference run.
import { spawn } from 'node:child_process';
import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import assert from 'node:assert/strict';
import { Worker } from 'node:worker_threads';
import { OpenAI, KEEL_BIN, MODEL_PATH } from './helpers.mjs';

// Random timing, reproducible: WEDGE_SEED=N replays a run (the seed is printed).
export function rng(seed = Number(process.env.WEDGE_SEED ?? Math.floor(Math.random() * 2 ** 31))) {
  let s = seed >>> 0 || 1;
  const next = () => {
    s ^= s << 13; s >>>= 0;
    s ^= s >> 17;
    s ^= s << 5; s >>>= 0;
    return s / 2 ** 32;
  };
  return { seed, next, between: (a, b) => a + (b - a) * next(), int: (a, b) => a + Math.floor((b - a + 1) * next()) };
}

export const ROUNDS = Number(process.env.WEDGE_ROUNDS ?? 2);
export const sleep = (ms) => new Promise((r) => setTimeout(r, ms));

// The model the suites serve as 'tiny': the test model, or WEDGE_MODEL_PATH (another
// architecture, e.g. a mixture of experts: moe_wedge.test.mjs sets it).
export const WEDGE_MODEL = process.env.WEDGE_MODEL_PATH || MODEL_PATH;

// A `keel serve` of its own: `models` maps ids to model paths (copied by symlink), or
// `modelDir` names a directory of models to serve as it is (a server started again on
// the same paths finds its SSD-tier blocks: their keys name the model's path).
export async function startServer({ models = { tiny: WEDGE_MODEL }, modelDir, args = [], name = 'wedge', cache = false } = {}) {
  const dir = fs.mkdtempSync(path.join(os.tmpdir(), `keel-${name}-`));
  if (!modelDir) {
    modelDir = path.join(dir, 'models');
    fs.mkdirSync(modelDir);
    for (const [id, src] of Object.entries(models)) fs.symlinkSync(src, path.join(modelDir, id));
  }
  const logPath = path.join(dir, 'serve.log');
  const out = fs.openSync(logPath, 'w');
  const extra = (process.env.WEDGE_SERVE_ARGS ?? '').split(' ').filter(Boolean);
  if (cache) extra.push('--cache-dir', path.join(dir, 'cache'));
  const proc = spawn(KEEL_BIN, ['serve', '--port', '0', '--threads', '1', '--workers', '16',
    '--model-dir', modelDir, ...extra, ...args], { stdio: ['ignore', out, out] });
  const exited = new Promise((resolve) => proc.on('exit', (code, signal) => resolve({ code, signal })));
  const log = () => fs.readFileSync(logPath, 'utf8');
  let url;
  for (let i = 0; i < 400 && !url; i++) {
    const m = log().match(/listening on (http:\/\/\S+)/);
    if (m) url = m[1];
    else if (proc.exitCode !== null) break;
    else await sleep(25);
  }
  if (!url) throw new Error(`keel serve did not start:\n${log()}`);
  const server = {
    url, proc, exited, log, dir, pids: new Set(),
    client: new OpenAI({ baseURL: `${url}/v1`, apiKey: 'none', maxRetries: 0, timeout: 30_000 }),
    async get(p) { return request(url, 'GET', p); },
    async post(p, body) { return request(url, 'POST', p, body); },
    async del(p) { return request(url, 'DELETE', p); },
    async status() {
      const r = await request(url, 'GET', '/api/status');
      assert.equal(r.status, 200, r.text);
      for (const m of r.json.models) if (m.pid > 0) server.pids.add(m.pid);
      return r.json;
    },
    async model(id = 'tiny') { return (await server.status()).models.find((m) => m.id === id); },
    // The model's /api/status `speculative` from a heartbeat sent after `sinceMs` with
    // nothing running (so the counters include every request finished before then).
    async speculative(id, sinceMs) {
      const deadline = Date.now() + 10000;
      for (;;) {
        const asked = Date.now();
        const m = await server.model(id);
        if (m.running === 0 && asked - m.heartbeat_age_seconds * 1000 > sinceMs) return m.speculative;
        if (Date.now() > deadline) throw new Error(`no heartbeat after the request: ${JSON.stringify(m)}`);
        await sleep(50);
      }
    },
    // SIGTERM and wait; then no engine it ever had may be left.
    async stop() {
      if (proc.exitCode === null) proc.kill('SIGTERM');
      const r = await Promise.race([exited, sleep(15_000).then(() => null)]);
      if (!r) proc.kill('SIGKILL');
      const line = log().match(/keel serve: exited cleanly.*/);
      console.log(`# ${name}: ${line ? line[0] : 'no exit line'}`);
      await assertGone([...server.pids]);
      fs.rmSync(dir, { recursive: true, force: true });
      return r;
    },
  };
  return server;
}

export async function request(url, method, p, body) {
  const init = { method, headers: {} };
  if (body !== undefined) {
    init.body = typeof body === 'string' ? body : JSON.stringify(body);
    init.headers['content-type'] = 'application/json';
  }
  const res = await fetch(`${url}${p}`, init);
  const text = await res.text();
  let json;
  try { json = JSON.parse(text); } catch { json = undefined; }
  return { status: res.status, text, json };
}

export function alive(pid) {
  try {
    process.kill(pid, 0);
  } catch {
    return false;
  }
  // A zombie is dead: its memory is already back with the system.
  try { return !/^State:\s+Z/m.test(fs.readFileSync(`/proc/${pid}/status`, 'utf8')); } catch { return false; }
}

export async function assertGone(pids, ms = 5000) {
  const until = Date.now() + ms;
  let left = pids.filter(alive);
  while (left.length && Date.now() < until) {
    await sleep(50);
    left = left.filter(alive);
  }
  assert.deepEqual(left, [], `engine processes left behind: ${left}`);
}

export async function waitFor(fn, { timeoutMs = 10_000, intervalMs = 25, what = 'condition' } = {}) {
  const until = Date.now() + timeoutMs;
  for (;;) {
    const v = await fn();
    if (v) return v;
    if (Date.now() > until) throw new Error(`timed out waiting for ${what}`);
    await sleep(intervalMs);
  }
}

// Runs `fn` and checks it settles (resolves or rejects) within `ms`: a request that
// ends, either way, within its deadline. Returns {ok, value|error, ms}.
export async function ends(ms, fn, what = 'request') {
  const t0 = Date.now();
  let timer;
  const timeout = new Promise((_, rej) => { timer = setTimeout(() => rej(new Error(`${what} did not end within ${ms} ms`)), ms); });
  try {
    const value = await Promise.race([fn(), timeout]);
    return { ok: true, value, ms: Date.now() - t0 };
  } catch (error) {
    if (/did not end within/.test(String(error.message))) throw error;
    return { ok: false, error, ms: Date.now() - t0 };
  } finally {
    clearTimeout(timer);
  }
}

// A streamed completion read to its end; resolves to the text, rejects with the
// stream's error event (the SDK raises it) or on abort.
export async function streamText(client, body, { signal, onChunk } = {}) {
  const stream = await client.completions.create({ ...body, stream: true }, { signal });
  let text = '';
  let n = 0;
  for await (const c of stream) {
    text += c.choices?.[0]?.text ?? '';
    if (onChunk) await onChunk(++n, c);
  }
  return text;
}

export async function greedy(client, prompt, max_tokens = 8, model = 'tiny') {
  const r = await client.completions.create({ model, prompt, max_tokens, temperature: 0, ignore_eos: true });
  return r.choices[0].text;
}

// The pass criteria after a scenario, on one model.
export async function settled(server, { model = 'tiny', reference = {}, timeoutMs = 8000 } = {}) {
  const m = await waitFor(async () => {
    const s = await server.model(model);
    if (!s || s.state !== 'ready') return null;
    const idle = s.running === 0 && s.waiting === 0 && s.preempted === 0 && s.loading_cache === 0 &&
      s.kv_blocks && s.kv_blocks.used === 0;
    return idle ? s : null;
  }, { timeoutMs, what: `'${model}' to be ready and idle with no KV block in use` });
  const st = await server.status();
  assert.equal(st.totals.running, 0);
  assert.equal(st.totals.waiting, 0);
  // A probe completes, and what the cache stored is served right.
  const probe = await ends(10_000, () => greedy(server.client, 'probe', 2, model), 'probe');
  assert.ok(probe.ok, `the probe failed: ${probe.error}`);
  for (const [prompt, text] of Object.entries(reference))
    assert.equal(await greedy(server.client, prompt, 8, model), text, `greedy output of a cached prompt changed: ${prompt.slice(0, 30)}...`);
  // Every engine pid this server had is the live one or gone.
  const live = new Set((await server.status()).models.map((x) => x.pid).filter((p) => p > 0));
  await assertGone([...server.pids].filter((p) => !live.has(p)));
  return m;
}

export async function inject(server, body) {
  const r = await server.post('/debug/faults', body);
  assert.equal(r.status, 200, r.text);
  return r.json;
}

// A copy of a model directory (symlinks) whose config allows `maxPos` positions, for
// prompts longer than the test model's own context (random weights: any length works).
export function longContextModel(src, dir, maxPos) {
  fs.mkdirSync(dir, { recursive: true });
  for (const f of fs.readdirSync(src)) {
    if (f === 'config.json') continue;
    fs.symlinkSync(path.join(src, f), path.join(dir, f));
  }
  const cfg = JSON.parse(fs.readFileSync(path.join(src, 'config.json'), 'utf8'));
  cfg.max_position_embeddings = Math.max(cfg.max_position_embeddings ?? 0, maxPos);
  fs.writeFileSync(path.join(dir, 'config.json'), JSON.stringify(cfg));
  return dir;
}

// Nearest-rank percentile of a list of numbers.
export function percentile(xs, p) {
  const s = [...xs].sort((a, b) => a - b);
  return s.length ? s[Math.min(s.length - 1, Math.ceil((p / 100) * s.length) - 1)] : NaN;
}

// One completion as raw HTTP (so a 503's status and body are seen as sent), streamed or
// not. Resolves to {status, ms, error (the message of an error body or SSE error
// event), disconnected (we cut it)}; `cutAfterMs` disconnects a stream that long after it
// was sent. `body` may be JSON text already (built ahead, off the clock).
export async function rawCompletion(url, body, { cutAfterMs, signal } = {}) {
  const text0 = typeof body === 'string' ? body : JSON.stringify(body);
  if (typeof body === 'string') body = { stream: /"stream":true/.test(body) };
  const t0 = Date.now();
  const ac = new AbortController();
  let timer;
  if (cutAfterMs !== undefined) timer = setTimeout(() => ac.abort(), cutAfterMs);
  signal?.addEventListener('abort', () => ac.abort());  // the caller's cut, beside the timed one
  try {
    const res = await fetch(`${url}/v1/completions`, {
      method: 'POST', headers: { 'content-type': 'application/json' }, body: text0, signal: ac.signal,
    });
    const text = await res.text();
    let error;
    if (body.stream) {
      for (const line of text.split('\n')) {
        if (!line.startsWith('data: {')) continue;
        const ev = JSON.parse(line.slice(6));
        if (ev.error) error = ev.error.message;
      }
    } else if (res.status !== 200) {
      try { error = JSON.parse(text).error?.message ?? text; } catch { error = text; }
    }
    return { status: res.status, ms: Date.now() - t0, error, disconnected: false };
  } catch (e) {
    if (e.name === 'AbortError') return { status: 0, ms: Date.now() - t0, disconnected: true };
    throw e;
  } finally {
    clearTimeout(timer);
  }
}

// Back-to-back completions from a worker thread of their own, so that the latency
// measured is the server's, not this process's event loop busy with other traffic.
// Returns {stop}: stop() resolves to [[start time (Date.now()), latency ms], ...].
export function probeLoop(url, body) {
  const code = `
    const { parentPort, workerData } = require('node:worker_threads');
    let running = true;
    parentPort.on('message', () => { running = false; });
    (async () => {
      const out = [];
      while (running) {
        const at = Date.now(), t = performance.now();
        const res = await fetch(workerData.url + '/v1/completions', { method: 'POST',
          headers: { 'content-type': 'application/json' }, body: workerData.body });
        const j = await res.json();
        if (res.status !== 200 || !j.choices?.[0]?.text) throw new Error('probe failed: ' + JSON.stringify(j));
        out.push([at, Math.round(performance.now() - t)]);
      }
      parentPort.postMessage(out);
    })().catch((e) => parentPort.postMessage({ error: String(e) }));`;
  const w = new Worker(code, { eval: true, workerData: { url, body: JSON.stringify(body) } });
  const done = new Promise((resolve, reject) => {
    w.once('message', (m) => (m.error ? reject(new Error(m.error)) : resolve(m)));
    w.once('error', reject);
  });
  done.catch(() => {});  // stop() reports it; a test that failed first must not die of it
  // stop() ends the worker whatever the probes met (a worker left running keeps node up).
  let stopped;
  const stop = () => (stopped ??= (async () => {
    w.postMessage('stop');
    try { return await done; } finally { await w.terminate(); }
  })());
  return { stop };
}
