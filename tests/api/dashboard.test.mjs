// The dashboard (/admin) in a real browser: Debian's chromium, headless, driven over the
// DevTools protocol (cdp.mjs) against a keel serve this file starts with an API key and a
// model directory that holds a model whose directory name is an HTML tag. It logs in,
// checks the figures against /api/status, unloads and loads, pins, chats, runs the short
// benchmark, and checks that the hostile id is shown as text, that no script of its runs
// and that no request leaves the origin. Screenshots go to a directory it prints.
import test from 'node:test';
import assert from 'node:assert/strict';
import { spawn } from 'node:child_process';
import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { KEEL_BIN, MODEL_PATH, http, waitFor } from './helpers.mjs';
import { Browser, findChromium } from './cdp.mjs';

const CHROMIUM = findChromium();
const HOSTILE = '<img src=x onerror=window.__xss=1>';
const KEY = `dash-key-${process.pid}`;

// Skipped only outside CI: there, scripts/setup installs chromium and a missing one fails.
const skip = !CHROMIUM && !process.env.CI ? 'chromium is not installed (apt-get install chromium)' : false;

async function startServer(dir) {
  const proc = spawn(KEEL_BIN, ['serve', '--port', '0', '--threads', '1', '--workers', '8', '--api-key', KEY,
    '--model-dir', dir, '--kv-blocks', '128', '--speculative', 'ngram'], { stdio: ['ignore', 'ignore', 'pipe'] });
  let log = '';
  proc.stderr.on('data', (d) => { log += d; });
  try {
    const url = await waitFor(() => (log.match(/listening on (http\S+)/) || [])[1], { timeoutMs: 30_000, what: 'keel serve to listen' });
    return { proc, url, log: () => log };
  } catch (e) {
    proc.kill('SIGKILL');
    throw new Error(`${e.message}: ${log}`);
  }
}

test('dashboard in headless chromium', { skip, timeout: 600_000 }, async (t) => {
  assert.ok(CHROMIUM, 'chromium must be installed in CI (scripts/setup)');
  // KEEL_TEST_ARTIFACTS names a directory to keep them in (CI); a fresh temporary one otherwise.
  const artifacts = fs.mkdtempSync(path.join(process.env.KEEL_TEST_ARTIFACTS || os.tmpdir(), 'keel-dashboard-'));
  t.diagnostic(`screenshots in ${artifacts}`);
  console.log(`dashboard test: screenshots in ${artifacts}`);

  const models = fs.mkdtempSync(path.join(os.tmpdir(), 'keel-dash-models-'));
  fs.cpSync(MODEL_PATH, path.join(models, 'tiny'), { recursive: true });
  fs.cpSync(MODEL_PATH, path.join(models, HOSTILE), { recursive: true });
  let server = null, browser = null;
  t.after(async () => {  // registered first, so a failure below still cleans up
    if (browser) await browser.close();
    if (server) server.proc.kill('SIGTERM');
    fs.rmSync(models, { recursive: true, force: true });
  });
  server = await startServer(models);
  browser = await Browser.launch(CHROMIUM);
  const api = (method, p, body) => http(method, p, { url: server.url, key: KEY, body });
  const origin = new URL(server.url).origin;

  const page = await browser.newPage();
  await page.send('Page.enable');
  await page.send('Network.enable');
  await page.send('Runtime.enable');
  // Records violations of the page's Content-Security-Policy: an injected tag would
  // raise one even though the policy stops it, so escaping is checked on its own.
  await page.send('Page.addScriptToEvaluateOnNewDocument', {
    source: `window.__csp = []; document.addEventListener('securitypolicyviolation',
      (e) => window.__csp.push(e.violatedDirective + ' ' + e.blockedURI));`,
  });
  const shot = (name) => page.screenshot(path.join(artifacts, `${name}.png`));

  await page.send('Page.navigate', { url: `${server.url}/admin` });
  await page.waitFor(`!document.getElementById('login-view').hidden`, { what: 'the login form' });
  await shot('1-login');

  // A wrong key is refused and the form stays.
  await page.type('#login-key', 'wrong-key');
  await page.click('#login-submit');
  await page.waitFor(`document.getElementById('login-error').textContent.includes('refused')`);
  await page.type('#login-key', KEY);
  await page.click('#login-submit');
  await page.waitFor(`!document.getElementById('main-view').hidden && Number(document.body.dataset.updates) >= 2`,
    { what: 'the dashboard after login' });
  assert.equal(await page.eval(`sessionStorage.getItem('keel.apiKey')`), KEY);
  assert.ok(!(await page.eval('location.href')).includes(KEY));
  await shot('2-dashboard');

  // The figures shown are /api/status's (models idle: nothing changes between reads).
  const rows = `[...document.querySelectorAll('#models tbody tr')].map((tr) => ({
      id: tr.dataset.model, idText: tr.querySelector('.model-id').textContent,
      state: tr.querySelector('.state').textContent, pinned: tr.querySelector('.pinned').textContent,
      bytes: Number(tr.children[3].dataset.bytes), kvTotal: Number(tr.querySelector('.kv').dataset.total) }))`;
  const st = (await api('GET', '/api/status')).json;
  await page.waitFor(`(${rows}).length === ${st.models.length}`);
  const shown = await page.eval(rows);
  for (const m of st.models) {
    const r = shown.find((x) => x.id === m.id);
    assert.ok(r, `row for ${m.id}`);
    assert.equal(r.idText, m.id);
    assert.equal(r.state, m.state);
    assert.equal(r.pinned, m.pinned ? 'yes' : 'no');
    assert.equal(r.bytes, m.memory_bytes);
    assert.equal(r.kvTotal, m.kv_blocks ? m.kv_blocks.total : m.kv_pool.blocks);
  }

  // The hostile id is text: no element made of it, no script of it ran, no violation.
  assert.ok(shown.some((r) => r.idText === HOSTILE), 'the hostile id is shown literally');
  assert.equal(await page.eval(`document.querySelectorAll('img').length`), 0);
  assert.equal(await page.eval(`window.__xss`), undefined);
  // It is in a log line too ("models: ..."), also shown as text.
  await page.waitFor(`[...document.querySelectorAll('#logs td')].some((td) => td.textContent.includes(${JSON.stringify(HOSTILE)}))`,
    { what: 'the hostile id in the log lines' });
  assert.equal(await page.eval(`document.querySelectorAll('img').length`), 0);

  // Load, then unload, then pin, by the page's buttons.
  const stateOf = async (id) => (await api('GET', '/api/status')).json.models.find((m) => m.id === id);
  const rowSel = `#models tbody tr[data-model="tiny"]`;
  await page.click(`${rowSel} button[data-action="load"]`);
  await waitFor(async () => (await stateOf('tiny')).state === 'ready', { timeoutMs: 60_000, what: 'tiny to load' });
  await page.waitFor(`document.querySelector('${rowSel} .state').textContent === 'ready'`);
  await page.waitFor(`document.querySelector('${rowSel} .liveness').textContent.includes(' s / ')`, { what: 'step age against the deadline' });
  // The server drafts by n-gram lookup: a loaded model shows its acceptance, an unloaded one none.
  await page.waitFor(`document.querySelector('${rowSel} .spec').textContent.startsWith('ngram: length ')`,
    { what: 'the speculative decoding cell' });
  assert.equal(await page.eval(`document.querySelector('#models tbody tr:not([data-model="tiny"]) .spec').textContent`), '—');
  await shot('3-loaded');
  await page.click(`${rowSel} button[data-action="unload"]`);
  await waitFor(async () => (await stateOf('tiny')).state === 'available', { timeoutMs: 30_000, what: 'tiny to unload' });
  await page.waitFor(`document.querySelector('${rowSel} .state').textContent === 'available'`);
  await page.click(`${rowSel} button[data-action="pin"]`);
  await waitFor(async () => (await stateOf('tiny')).pinned === true, { what: 'tiny to be pinned' });
  await page.waitFor(`document.querySelector('${rowSel} .pinned').textContent === 'yes'`);

  // A chat message streams a reply (this loads the model again).
  await page.eval(`document.getElementById('chat-model').value = 'tiny'`);
  await page.type('#chat-input', 'Tell me about Debian.');
  await page.click('#chat-send');
  await page.waitFor(`document.querySelector('#chat-log .assistant')?.dataset.done === 'true'`, { timeoutMs: 60_000, what: 'the chat reply' });
  const reply = await page.eval(`document.querySelector('#chat-log .assistant span').textContent`);
  assert.ok(reply.length > 0 && !reply.startsWith('error:'), `reply: ${reply}`);
  await shot('4-chat');

  // The short benchmark runs in the server and its figures show.
  await page.eval(`document.getElementById('bench-model').value = 'tiny'`);
  await page.click('#bench-run');
  await page.waitFor(`document.getElementById('bench-state').textContent !== 'running…'`, { timeoutMs: 120_000, what: 'the benchmark' });
  assert.equal(await page.eval(`document.getElementById('bench-state').textContent`), 'done');
  assert.match(await page.eval(`document.getElementById('bench-result').textContent`), /8 of 8 completed, 0 failed/);
  assert.equal(await page.eval(`document.getElementById('bench-report').hidden`), false);
  await page.waitFor(`[...document.querySelectorAll('#logs td')].some((td) => td.textContent.includes('benchmark of tiny started'))`);
  await shot('5-bench');

  // The latency figures: the chat and the benchmark's requests are in the last minute.
  const lat = (await api('GET', '/api/status')).json.totals.latency;
  assert.ok(lat.requests >= 9, JSON.stringify(lat));
  assert.ok(lat.ttft_ms.p50 > 0 && lat.ttft_ms.p50 <= lat.e2e_ms.p50 && lat.e2e_ms.p50 <= lat.e2e_ms.p90, JSON.stringify(lat));
  await page.waitFor(`Number(document.getElementById('latency-figures').dataset.requests) === ${lat.requests}`,
    { what: `the page to show ${lat.requests} requests in the latency window` });

  // Nothing left the origin, the key never rode in a URL, and no policy was violated.
  const requests = page.events.filter((e) => e.method === 'Network.requestWillBeSent').map((e) => e.params.request.url);
  assert.ok(requests.some((u) => u.startsWith(`${origin}/api/status`)));
  for (const u of requests) {
    if (u.startsWith('data:') || u.startsWith('blob:') || u === 'about:blank') continue;
    assert.equal(new URL(u).origin, origin, `request to another origin: ${u}`);
    assert.ok(!u.includes(KEY), `the key in a URL: ${u}`);
  }
  assert.deepEqual(await page.eval('window.__csp'), []);
  assert.ok(!server.log().includes(KEY), 'the key is not in the server log');
});

// The dashboard's endpoints on the main server (run.sh's, with an API key): the page is
// public, its data is not; bad input is a 4xx naming the field.
test('dashboard endpoints: key, bad input, pin', async () => {
  const page = await http('GET', '/admin', { key: null });
  assert.equal(page.status, 200);
  assert.match(page.headers.get('content-security-policy'), /default-src 'none'.*connect-src 'self'/);
  assert.match(page.text, /<script src="\/admin\/app.js"/);
  assert.equal((await http('GET', '/admin/app.js', { key: null })).status, 200);
  assert.equal((await http('GET', '/admin/nope.js', { key: null })).status, 401);
  assert.equal((await http('GET', '/api/logs', { key: null })).status, 401);
  assert.equal((await http('POST', '/api/bench', { key: null, body: { model: 'tiny' } })).status, 401);
  assert.equal((await http('POST', '/v1/models/tiny/pin', { key: null })).status, 401);

  const logs = await http('GET', '/api/logs');
  assert.equal(logs.status, 200);
  assert.ok(Array.isArray(logs.json.lines) && logs.json.capacity > 0);
  const bad = await http('GET', '/api/logs?after=-1');
  assert.equal(bad.status, 400);
  assert.equal(bad.json.error.param, 'after');
  const noModel = await http('POST', '/api/bench', { body: {} });
  assert.equal(noModel.status, 400);
  assert.equal(noModel.json.error.param, 'model');
  const unknown = await http('POST', '/v1/models/no-such-model/pin', { body: {} });
  assert.equal(unknown.status, 404);
  assert.equal(unknown.json.error.param, 'model');
  assert.equal((await http('GET', '/v1/models/spare/pin')).status, 405);

  // pin / unpin show in /api/status and in the log ring.
  const pin = await http('POST', '/v1/models/spare/pin', { body: {} });
  assert.equal(pin.status, 200);
  assert.equal(pin.json.pinned, true);
  const st = (await http('GET', '/api/status')).json;
  assert.equal(st.models.find((m) => m.id === 'spare').pinned, true);
  const after = logs.json.lines.length ? logs.json.lines.at(-1).seq : 0;
  const newer = (await http('GET', `/api/logs?after=${after}`)).json.lines;
  assert.ok(newer.some((l) => l.text === 'model spare: pinned from the API'), JSON.stringify(newer));
  assert.ok(newer.every((l) => l.seq > after));
  assert.equal((await http('POST', '/v1/models/spare/unpin', { body: {} })).json.pinned, false);
});
