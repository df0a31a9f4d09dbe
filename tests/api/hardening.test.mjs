// Issue 31's findings, one test each (bounded in time and size, loopback only): bodies
// that crashed the server (deep nesting) or held a worker for minutes (many keys),
// cross-site requests, connection exhaustion, a stuck handler pool behind a green
// /health, forged log lines, 401 floods, 1e400, `bearer` in lower case. After each the
// server must answer /health and a small completion within a second.
import { test, before, beforeEach, after } from 'node:test';
import assert from 'node:assert/strict';
import { spawn } from 'node:child_process';
import fs from 'node:fs';
import http from 'node:http';
import net from 'node:net';
import os from 'node:os';
import path from 'node:path';
import { KEEL_BIN, MODEL_PATH } from './helpers.mjs';

const KEY = 'hardening-key';
const sleep = (ms) => new Promise((r) => setTimeout(r, ms));

// A `keel serve` of its own. `shell` runs it under bash first (ulimit).
async function startServer(args, { shell = '' } = {}) {
  const dir = fs.mkdtempSync(path.join(os.tmpdir(), 'keel-hardening-'));
  const logPath = path.join(dir, 'serve.log');
  const out = fs.openSync(logPath, 'w');
  const argv = ['serve', '--port', '0', '--threads', '1', MODEL_PATH, '--pin', 'tiny', ...args];
  const proc = shell
    ? spawn('bash', ['-c', `${shell} && exec "$0" "$@"`, KEEL_BIN, ...argv], { stdio: ['ignore', out, out] })
    : spawn(KEEL_BIN, argv, { stdio: ['ignore', out, out] });
  const log = () => fs.readFileSync(logPath, 'utf8');
  let url;
  for (let i = 0; i < 400 && !url; i++) {
    const m = log().match(/listening on (http:\/\/\S+)/);
    if (m) url = m[1];
    else if (proc.exitCode !== null) break;
    else await sleep(25);
  }
  if (!url) throw new Error(`keel serve did not start:\n${log()}`);
  const u = new URL(url);
  const srv = {
    url, proc, log, dir, port: Number(u.port), host: u.hostname,
    async stop() {
      if (proc.exitCode === null && proc.signalCode === null) {
        proc.kill('SIGTERM');
        await Promise.race([new Promise((r) => proc.once('exit', r)), sleep(10_000)]);
        if (proc.exitCode === null && proc.signalCode === null) proc.kill('SIGKILL');
      }
      fs.rmSync(dir, { recursive: true, force: true });
    },
  };
  // The pinned model is loaded before the tests start.
  for (let i = 0; i < 400; i++) {
    const r = await req(srv, 'GET', '/api/status', { key: KEY }).catch(() => null);
    if (r?.json?.models?.every((m) => m.state === 'ready')) break;
    await sleep(25);
  }
  // One completion first, without the one-second bound: the first step's one-time costs are not
  // a finding (on a loaded two-core CI machine the first test's check took over a second).
  await req(srv, 'POST', '/v1/completions', {
    key: KEY, timeoutMs: 30_000, body: { model: 'tiny', prompt: 'warm up', max_tokens: 2, temperature: 0 },
  }).catch(() => null);
  return srv;
}

// One HTTP request with exactly these headers (node:http lets Host and Origin through).
function req(srv, method, p, { body, headers = {}, key, timeoutMs = 10_000, localAddress } = {}) {
  return new Promise((resolve, reject) => {
    const h = { ...headers };
    if (key) h.authorization = `Bearer ${key}`;
    let payload;
    if (body !== undefined) {
      payload = Buffer.from(typeof body === 'string' ? body : JSON.stringify(body));
      if (!Object.keys(h).some((k) => k.toLowerCase() === 'content-type')) h['content-type'] = 'application/json';
      h['content-length'] = payload.length;
    }
    const t0 = performance.now();
    const r = http.request({ host: srv.host, port: srv.port, method, path: p, headers: h, agent: false, localAddress }, (res) => {
      const chunks = [];
      res.on('data', (c) => chunks.push(c));
      res.on('end', () => {
        const text = Buffer.concat(chunks).toString('utf8');
        let json;
        try { json = JSON.parse(text); } catch { json = undefined; }
        resolve({ status: res.statusCode, text, json, ms: performance.now() - t0 });
      });
      res.on('error', reject);
    });
    r.setTimeout(timeoutMs, () => r.destroy(new Error(`${method} ${p}: no answer within ${timeoutMs} ms`)));
    r.on('error', reject);
    if (payload) r.write(payload);
    r.end();
  });
}

// The check after every finding: /health and a 2-token completion, each within a second.
async function assertHealthy(srv, what) {
  const h = await req(srv, 'GET', '/health', { timeoutMs: 1000 });
  assert.equal(h.status, 200, `${what}: /health ${h.status} ${h.text}`);
  const c = await req(srv, 'POST', '/v1/completions', {
    key: KEY, timeoutMs: 1000, body: { model: 'tiny', prompt: 'Hello', max_tokens: 2, temperature: 0 },
  });
  assert.equal(c.status, 200, `${what}: completion ${c.status} ${c.text}`);
  assert.ok(c.ms < 1000, `${what}: completion took ${c.ms} ms`);
}

const deep = (n) => '['.repeat(n) + ']'.repeat(n);
const DEPTH = 100_000; // 200 KB: the crash

let srv;
const startMain = () => startServer(['--api-key', KEY, '--workers', '2', '--log-level', 'info']);
before(async () => { srv = await startMain(); });
// A server that a finding killed (the old crash) is replaced, so each test stands alone.
beforeEach(async () => {
  const alive = await req(srv, 'GET', '/health', { timeoutMs: 2000 }).then(() => true, () => false);
  if (!alive) {
    console.log(`# the server had died (${srv.proc.signalCode ?? srv.proc.exitCode}); starting another`);
    await srv.stop();
    srv = await startMain();
  }
});
after(async () => { await srv?.stop(); });

test('100,000-deep JSON in every field the server copies is a 400 naming the limit, not a crash', async () => {
  const D = deep(DEPTH);
  const user = '[{"role":"user","content":"hi"}]';
  const cases = [
    ['/v1/chat/completions', `{"model":"tiny","max_tokens":1,"messages":[{"role":"user","content":${D}}]}`],
    ['/v1/chat/completions', `{"model":"tiny","max_tokens":1,"messages":${user},"tools":[{"type":"function","function":{"name":"f","parameters":${D}}}]}`],
    ['/v1/chat/completions', `{"model":"tiny","max_tokens":1,"messages":${user},"response_format":{"type":"json_schema","json_schema":{"name":"x","schema":${D}}}}`],
    ['/v1/messages', `{"model":"tiny","max_tokens":1,"messages":${user},"metadata":${D}}`],
    ['/v1/messages', `{"model":"tiny","max_tokens":1,"messages":${user},"tools":[{"name":"f","input_schema":${D}}]}`],
    ['/v1/messages', `{"model":"tiny","max_tokens":1,"messages":[{"role":"user","content":"hi"},{"role":"assistant","content":[{"type":"tool_use","id":"t1","name":"f","input":${D}}]}]}`],
    ['/v1/responses', `{"model":"tiny","max_output_tokens":16,"input":"hi","text":{"format":{"type":"json_schema","name":"x","schema":${D}}}}`],
    ['/tokenize', `{"model":"tiny","messages":[{"role":"user","content":${D}}]}`],
    ['/apply-template', `{"model":"tiny","messages":[{"role":"user","content":${D}}]}`],
  ];
  for (const [p, body] of cases) {
    const r = await req(srv, 'POST', p, { key: KEY, body });
    assert.equal(r.status, 400, `${p}: ${r.status} ${r.text.slice(0, 300)}`);
    assert.match(r.text, /nesting deeper than the limit of 128 levels/, p);
    assert.ok(r.ms < 1000, `${p}: took ${r.ms} ms`);
  }
  await assertHealthy(srv, 'deep JSON');
});

test('nesting up to the documented bound is accepted; one level more is refused', async () => {
  // The body is level 1, so `x` holds 127 more levels at the bound.
  const ok = await req(srv, 'POST', '/tokenize', { key: KEY, body: `{"model":"tiny","prompt":"hi","x":${deep(127)}}` });
  assert.equal(ok.status, 200, ok.text);
  const over = await req(srv, 'POST', '/tokenize', { key: KEY, body: `{"model":"tiny","prompt":"hi","x":${deep(128)}}` });
  assert.equal(over.status, 400, over.text);
  assert.match(over.json.error.message, /^body: .*128 levels/);
  await assertHealthy(srv, 'nesting bound');
});

test('deep JSON inside a string (tool-call arguments) is not parsed into a crash', async () => {
  const args = '{"a":' + deep(DEPTH) + '}';
  const body = {
    model: 'tiny',
    messages: [
      { role: 'user', content: 'hi' },
      { role: 'assistant', content: null, tool_calls: [{ id: 'c1', type: 'function', function: { name: 'f', arguments: args } }] },
      { role: 'tool', tool_call_id: 'c1', content: 'ok' },
    ],
  };
  for (const p of ['/apply-template', '/tokenize']) {
    const r = await req(srv, 'POST', p, { key: KEY, body });
    assert.ok(r.status === 200 || r.status === 400, `${p}: ${r.status} ${r.text.slice(0, 300)}`);
  }
  await assertHealthy(srv, 'deep arguments string');
});

test('200,000 keys in one object are refused at once; 4,096-key objects parse in linear time', async () => {
  let many = '{';
  for (let i = 0; i < 200_000; i++) many += `${i ? ',' : ''}"k${i}":1`;
  many += '}';
  const t0 = performance.now();
  const r = await req(srv, 'POST', '/v1/completions', {
    key: KEY, timeoutMs: 5000, body: `{"model":"tiny","prompt":"hi","max_tokens":1,"ignored":${many}}`,
  });
  const refusedMs = performance.now() - t0;
  assert.equal(r.status, 400, r.text.slice(0, 300));
  assert.match(r.json.error.message, /more than 4096 keys/);
  // At the limit: 400 objects of 4,096 keys (7.5 MB). ordered_json's own parser compares
  // each key with every earlier one (8M compares an object, minutes in all).
  let obj = '{';
  for (let i = 0; i < 4096; i++) obj += `${i ? ',' : ''}"k${i}":1`;
  obj += '}';
  const t1 = performance.now();
  const big = await req(srv, 'POST', '/v1/completions', {
    key: KEY, timeoutMs: 10_000,
    body: `{"model":"tiny","prompt":"hi","max_tokens":1,"ignored":[${Array(400).fill(obj).join(',')}]}`,
  });
  const atLimitMs = performance.now() - t1;
  assert.equal(big.status, 200, big.text.slice(0, 300));
  console.log(`# 200,000 keys refused in ${refusedMs.toFixed(0)} ms; 400 x 4,096 keys served in ${atLimitMs.toFixed(0)} ms`);
  assert.ok(refusedMs < 1000, `200,000 keys took ${refusedMs} ms`);
  assert.ok(atLimitMs < 5000, `400 x 4,096 keys took ${atLimitMs} ms`);
  await assertHealthy(srv, 'many keys');
});

test('1e400 is a 400 naming the number, not a 500', async () => {
  const r = await req(srv, 'POST', '/v1/completions', { key: KEY, body: '{"model":"tiny","prompt":"hi","max_tokens":1,"temperature":1e400}' });
  assert.equal(r.status, 400, r.text);
  assert.match(r.json.error.message, /number out of range: 1e400/);
  await assertHealthy(srv, '1e400');
});

test('the Bearer scheme is case-insensitive', async () => {
  for (const scheme of ['bearer', 'BEARER', 'Bearer', 'bEaReR']) {
    const r = await req(srv, 'GET', '/v1/models', { headers: { authorization: `${scheme} ${KEY}` } });
    assert.equal(r.status, 200, `${scheme}: ${r.text}`);
  }
  const wrong = await req(srv, 'GET', '/v1/models', { headers: { authorization: `Basic ${KEY}` } });
  assert.equal(wrong.status, 401);
  await assertHealthy(srv, 'bearer');
});

test('cross-site requests: Content-Type, Origin and Host are checked', async () => {
  const body = '{"model":"tiny","prompt":"hi","max_tokens":1}';
  // A page's no-preflight POST: text/plain, a form, or no type at all.
  for (const type of ['text/plain', 'application/x-www-form-urlencoded', 'multipart/form-data; boundary=x']) {
    const r = await req(srv, 'POST', '/v1/completions', { key: KEY, body, headers: { 'content-type': type } });
    assert.equal(r.status, 415, `${type}: ${r.text}`);
    assert.match(r.json.error.message, /application\/json/);
  }
  // Unauthenticated endpoints too, and before any model work (unload is a POST).
  const unload = await req(srv, 'POST', '/v1/models/tiny/unload', { key: KEY, body: '{}', headers: { 'content-type': 'text/plain' } });
  assert.equal(unload.status, 415);
  const json = await req(srv, 'POST', '/v1/completions', { key: KEY, body, headers: { 'content-type': 'Application/JSON; charset=utf-8' } });
  assert.equal(json.status, 200, json.text);

  const own = `http://127.0.0.1:${srv.port}`;
  for (const origin of ['https://evil.example', 'null', `http://127.0.0.1:${srv.port + 1}`, 'http://localhost.evil.example']) {
    const r = await req(srv, 'POST', '/v1/completions', { key: KEY, body, headers: { origin } });
    assert.equal(r.status, 403, `${origin}: ${r.text}`);
    const g = await req(srv, 'GET', '/api/logs', { key: KEY, headers: { origin } });
    assert.equal(g.status, 403, `GET with ${origin}`);
  }
  for (const [origin, host] of [[own, `127.0.0.1:${srv.port}`], [`http://localhost:${srv.port}`, `localhost:${srv.port}`]]) {
    const r = await req(srv, 'POST', '/v1/completions', { key: KEY, body, headers: { origin, host } });
    assert.equal(r.status, 200, `${origin} via ${host}: ${r.text}`);
  }
  // DNS rebinding: a page on evil.example resolved to 127.0.0.1 sends its own name.
  for (const host of ['evil.example', `evil.example:${srv.port}`, 'localhost.evil.example', '127.0.0.1.nip.io']) {
    const r = await req(srv, 'GET', '/api/logs', { key: KEY, headers: { host } });
    assert.equal(r.status, 421, `${host}: ${r.text}`);
    const h = await req(srv, 'GET', '/health', { headers: { host } });
    assert.equal(h.status, 421, `/health via ${host}`);
  }
  for (const host of [`127.0.0.1:${srv.port}`, `localhost:${srv.port}`, 'LOCALHOST', `[::1]:${srv.port}`, '10.1.2.3',
    `${os.hostname()}:${srv.port}`]) {
    const r = await req(srv, 'GET', '/v1/models', { key: KEY, headers: { host } });
    assert.equal(r.status, 200, `${host}: ${r.text}`);
  }
  await assertHealthy(srv, 'cross-site');
});

test('--allowed-origins and --allowed-hosts admit what they list', async () => {
  const listed = await startServer(['--allowed-origins', 'http://app.example:3000,https://b.example',
    '--allowed-hosts', 'keel.internal']);
  try {
    const body = '{"model":"tiny","prompt":"hi","max_tokens":1}';
    for (const origin of ['http://app.example:3000', 'https://b.example']) {
      const r = await req(listed, 'POST', '/v1/completions', { body, headers: { origin } });
      assert.equal(r.status, 200, `${origin}: ${r.text}`);
    }
    assert.equal((await req(listed, 'POST', '/v1/completions', { body, headers: { origin: 'http://app.example:3001' } })).status, 403);
    for (const host of ['keel.internal', `keel.internal:${listed.port}`, 'KEEL.internal'])
      assert.equal((await req(listed, 'GET', '/v1/models', { headers: { host } })).status, 200, host);
    assert.equal((await req(listed, 'GET', '/v1/models', { headers: { host: 'other.internal' } })).status, 421);
    // No key on this server: the guard holds without one.
    assert.equal((await req(listed, 'POST', '/v1/cache/clear', { body: '{}', headers: { 'content-type': 'text/plain' } })).status, 415);
    assert.equal((await req(listed, 'POST', '/v1/cache/clear', { body: '{}', headers: { origin: 'https://evil.example' } })).status, 403);
    await assertHealthy(listed, 'allowed lists');
  } finally {
    await listed.stop();
  }
});

test('model names with control characters cannot forge log lines', async () => {
  const forged = 'x\nkeel serve: FORGED line\u001b[31m';
  const r = await req(srv, 'POST', '/v1/chat/completions', { key: KEY, body: { model: forged, messages: [{ role: 'user', content: 'hi' }], max_tokens: 1 } });
  assert.equal(r.status, 404);
  await sleep(50);
  const lines = srv.log().split('\n');
  assert.ok(!lines.some((l) => l.startsWith('keel serve: FORGED')), 'a forged line reached the log');
  assert.ok(lines.some((l) => l.includes('model=x\\nkeel serve: FORGED line\\x1b[31m')), 'the escaped name is logged');
  assert.ok(!srv.log().includes('\u001b'), 'an escape sequence reached the log');
  const logs = await req(srv, 'GET', '/api/logs', { key: KEY });
  assert.ok(!logs.json.lines.some((l) => /\n/.test(l.text)), '/api/logs holds a line with a newline');
  await assertHealthy(srv, 'log forging');
});

test('a flood of 401s is rate-limited in the log', async () => {
  const before = srv.log().split('\n').filter((l) => /status=401/.test(l)).length;
  await Promise.all(Array.from({ length: 8 }, async () => {
    for (let i = 0; i < 25; i++) {
      const r = await req(srv, 'POST', '/v1/completions', { body: { model: 'tiny', prompt: 'x' }, key: 'wrong' });
      assert.equal(r.status, 401);
    }
  }));
  await sleep(50);
  const lines = srv.log().split('\n').filter((l) => /status=401/.test(l)).length - before;
  // 5 a minute: at most two windows' worth even if the flood straddles a window's end.
  assert.ok(lines <= 10, `${lines} lines for 200 401s`);
  await assertHealthy(srv, '401 flood');
});

test('/health reports a handler pool that takes no request while requests wait', async () => {
  const one = await startServer(['--api-key', KEY, '--workers', '1', '--worker-deadline', '0.5', '--enable-fault-injection']);
  try {
    await assertHealthy(one, 'before the stall');
    const stall = req(one, 'POST', '/debug/faults', { key: KEY, body: { kind: 'stall-worker', seconds: 2.5 } });
    await sleep(100);
    const waiting = req(one, 'POST', '/tokenize', { key: KEY, body: { model: 'tiny', prompt: 'hi' } });
    let h;
    for (let i = 0; i < 40; i++) {
      h = await req(one, 'GET', '/health', { timeoutMs: 1000 });
      if (h.status === 503) break;
      await sleep(50);
    }
    assert.equal(h.status, 503, h.text);
    const p = h.json.problems.find((x) => x.component === 'workers');
    assert.ok(p, h.text);
    assert.match(p.reason, /no request handler took a request for .* while 1 wait/);
    assert.equal((await stall).status, 200);
    assert.equal((await waiting).status, 200);
    await assertHealthy(one, 'after the stall');
  } finally {
    await one.stop();
  }
});

// Idle sockets from one address; resolves once each is connected.
async function openSockets(srv, n, localAddress = '127.0.0.1') {
  const socks = [];
  for (let i = 0; i < n; i++) {
    socks.push(await new Promise((resolve, reject) => {
      const s = net.connect({ host: srv.host, port: srv.port, localAddress }, () => resolve(s));
      s.on('error', () => {});
      setTimeout(() => reject(new Error('connect timed out')), 2000);
    }));
  }
  return socks;
}

test('one client cannot hold every connection: a per-client cap', async () => {
  const capped = await startServer(['--api-key', KEY, '--max-connections-per-client', '16']);
  try {
    const held = await openSockets(capped, 16);
    await sleep(100);
    // The 17th from the same address is answered 503 and closed at once.
    const extra = await req(capped, 'GET', '/health', { timeoutMs: 1000 }).catch((e) => ({ error: e }));
    assert.ok(extra.error || extra.status === 503, `17th connection: ${JSON.stringify(extra.status)}`);
    // Another address is served.
    const other = await req(capped, 'GET', '/health', { timeoutMs: 1000, localAddress: '127.0.0.2' });
    assert.equal(other.status, 200);
    for (const s of held) s.destroy();
    await sleep(100);
    await assertHealthy(capped, 'per-client cap');
    const st = await req(capped, 'GET', '/api/status', { key: KEY });
    assert.ok(st.json.totals.http.refused >= 1);
  } finally {
    await capped.stop();
  }
});

function cpuTicks(pid) {
  const f = fs.readFileSync(`/proc/${pid}/stat`, 'utf8');
  const rest = f.slice(f.lastIndexOf(')') + 2).split(' ');
  return Number(rest[11]) + Number(rest[12]); // utime + stime
}

test('out of descriptors, accept backs off instead of spinning, and recovers', async () => {
  // 64 open files (soft and hard, so keel cannot raise it): 100 idle sockets pass it.
  const low = await startServer(['--api-key', KEY], { shell: 'ulimit -n 64' });
  try {
    const socks = await openSockets(low, 100);
    await sleep(300);
    const t0 = cpuTicks(low.proc.pid);
    await sleep(1500);
    const pct = (cpuTicks(low.proc.pid) - t0) / 1.5; // ticks are 1/100 s
    console.log(`# server CPU with 100 sockets over a 64-file limit: ${pct.toFixed(0)}%`);
    assert.ok(pct < 25, `the accept loop spins: ${pct}% CPU`);
    for (const s of socks) s.destroy();
    await sleep(500);
    await assertHealthy(low, 'EMFILE');
  } finally {
    await low.stop();
  }
});

test('Expect: 100-continue is answered, so large bodies from curl do not stall a second', async () => {
  const body = JSON.stringify({ model: 'tiny', prompt: 'x'.repeat(1_500_000), max_tokens: 1 });
  const sock = net.connect({ host: srv.host, port: srv.port });
  sock.on('error', () => {});
  let got = '';
  sock.on('data', (d) => { got += d.toString('latin1'); });
  await new Promise((r) => sock.once('connect', r));
  const t0 = performance.now();
  sock.write(`POST /tokenize HTTP/1.1\r\nHost: 127.0.0.1:${srv.port}\r\nAuthorization: Bearer ${KEY}\r\n` +
    `Content-Type: application/json\r\nContent-Length: ${Buffer.byteLength(body)}\r\nExpect: 100-continue\r\n\r\n`);
  for (let i = 0; i < 100 && !got.includes('\r\n\r\n'); i++) await sleep(5);
  const waited = performance.now() - t0;
  assert.match(got, /^HTTP\/1\.1 100 Continue\r\n\r\n/, `no 100 Continue within ${waited} ms: ${JSON.stringify(got.slice(0, 80))}`);
  sock.write(body);
  // The prompt is past /tokenize's text budget: the answer is that 400, in full.
  for (let i = 0; i < 400 && !/\r\n\r\n[\s\S]*"param":"prompt"/.test(got.slice(25)); i++) await sleep(25);
  sock.destroy();
  assert.match(got.slice(25), /^HTTP\/1\.1 400 Bad Request/, got.slice(0, 300));
  assert.match(got.slice(25), /"param":"prompt"/, got.slice(0, 300));
  assert.ok(waited < 500, `100 Continue after ${waited} ms`);
  await assertHealthy(srv, 'expect 100-continue');
});

// Host, Origin, Content-Type and the API key are checked on the headers: a refused request
// is answered before its body is read, so a 30 MB Content-Length costs no 30 MB read (nor
// the wait for it). The body is never sent here: the reply can only come from the headers.
test('refusals are answered on the headers, before a huge body is read', async () => {
  const own = `127.0.0.1:${srv.port}`;
  const cases = [
    [421, { host: 'evil.example', authorization: `Bearer ${KEY}`, 'content-type': 'application/json' }],
    [403, { host: own, origin: 'https://evil.example', authorization: `Bearer ${KEY}`, 'content-type': 'application/json' }],
    [415, { host: own, authorization: `Bearer ${KEY}`, 'content-type': 'text/plain' }],
    [401, { host: own, 'content-type': 'application/json' }],
    [401, { host: own, authorization: 'Bearer wrong', 'content-type': 'application/json', expect: '100-continue' }],
  ];
  for (const [want, headers] of cases) {
    const sock = net.connect({ host: srv.host, port: srv.port });
    sock.on('error', () => {});
    let got = '';
    let closed = false;
    sock.on('data', (d) => { got += d.toString('latin1'); });
    sock.on('close', () => { closed = true; });
    await new Promise((r) => sock.once('connect', r));
    const lines = Object.entries(headers).map(([k, v]) => `${k}: ${v}\r\n`).join('');
    sock.write(`POST /v1/completions HTTP/1.1\r\n${lines}Content-Length: 30000000\r\n\r\n`);
    // Bounded by the server's idle timeout (75 s), which is what waiting for the body
    // would cost: the answer comes without a byte of it.
    for (let i = 0; i < 400 && !(/\r\n\r\n[\s\S]*\}/.test(got) && closed); i++) await sleep(25);
    sock.destroy();
    assert.match(got, new RegExp(`^HTTP/1\\.1 ${want} `), `${JSON.stringify(headers)}: ${JSON.stringify(got.slice(0, 200))}`);
    assert.doesNotMatch(got, /100 Continue/);
    assert.ok(closed, `${want}: the connection stays open after a refusal with an unread body`);
  }
  await assertHealthy(srv, 'refused on headers');
});
