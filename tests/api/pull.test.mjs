// `keel pull` and `keel serve ORG/NAME` against a fake hub on loopback (fake_hub.mjs):
// a model fetched, verified and served; resumed after a cut connection; refused on a
// hash mismatch, a missing token, an unknown repository or revision, a disk too small,
// a hostile file name; served from the cache offline.
import test from 'node:test';
import assert from 'node:assert/strict';
import { execFile, spawn } from 'node:child_process';
import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { KEEL_BIN, MODEL_PATH } from './helpers.mjs';
import { repoFromDir, startFakeHub } from './fake_hub.mjs';

const COMMIT = 'a'.repeat(40);
const COMMIT2 = 'b'.repeat(40);

// Runs keel with the hub's address; resolves with the exit code and output whatever it
// is (async: the fake hub runs in this process and must keep answering).
function keel(args, env = {}, timeoutMs = 60_000) {
  return new Promise((resolve) => {
    execFile(KEEL_BIN, args, { timeout: timeoutMs, killSignal: 'SIGKILL', env: { ...process.env, HF_TOKEN: '', ...env } },
      (err, stdout, stderr) => resolve({ code: err ? (err.code ?? err.signal) : 0, stdout, stderr }));
  });
}

function tmp(name) {
  return fs.mkdtempSync(path.join(os.tmpdir(), `keel-pull-${name}-`));
}

function walk(dir) {
  const out = [];
  for (const e of fs.readdirSync(dir, { withFileTypes: true })) {
    const p = path.join(dir, e.name);
    if (e.isDirectory()) out.push(...walk(p));
    else out.push(p);
  }
  return out;
}

let hub;
let files;
test.before(async () => {
  if (!KEEL_BIN || !MODEL_PATH) return;
  files = repoFromDir(MODEL_PATH);
  hub = await startFakeHub({
    'keel-test/tiny': { commit: COMMIT, revisions: { main: COMMIT, v2: COMMIT2 }, files },
    'keel-test/gated': { commit: COMMIT, revisions: { main: COMMIT }, files, token: 'hf_secret' },
    'keel-test/gguf-only': {
      commit: COMMIT, revisions: { main: COMMIT },
      files: { 'tiny-q8_0.gguf': { data: Buffer.alloc(4096, 7), lfs: true }, 'README.md': { data: Buffer.from('# x'), lfs: false } },
    },
    'keel-test/huge': { commit: COMMIT, revisions: { main: COMMIT }, files, claimSize: { 'model.safetensors': 2 ** 52 } },
    'keel-test/hostile': {
      commit: COMMIT, revisions: { main: COMMIT }, files,
      extraSiblings: [{ rfilename: '../../escaped.json', size: 2 }, { rfilename: '/etc/escaped.json', size: 2 }],
    },
  });
});
test.after(async () => hub?.stop());

const env = (cache) => ({ HF_ENDPOINT: hub.url, KEEL_HUB_CACHE: cache });

test('pull fetches the model files, verified, and a second pull fetches nothing', async (t) => {
  if (!hub) return t.skip('no keel binary or test model');
  const cache = tmp('ok');
  const r = await keel(['pull', 'keel-test/tiny'], env(cache));
  assert.equal(r.code, 0, r.stderr);
  const dir = r.stdout.trim();
  assert.ok(dir.startsWith(cache), dir);
  assert.ok(dir.endsWith(COMMIT), dir);
  for (const [name, f] of Object.entries(files)) {
    if (!/\.(json|safetensors)$/.test(name)) continue;
    assert.ok(fs.readFileSync(path.join(dir, name)).equals(f.data), `${name} differs`);
  }
  assert.ok(!fs.existsSync(path.join(dir, 'README.md')), 'README.md is not a model file');
  // No partial files left, and the LFS file came from the CDN without the token.
  assert.deepEqual(walk(cache).filter((p) => p.endsWith('.part')), []);
  const again = await keel(['pull', 'keel-test/tiny'], env(cache));
  assert.equal(again.code, 0, again.stderr);
  assert.equal(again.stdout.trim(), dir);
  assert.match(again.stderr, /0 B downloaded/);
});

test('a connection cut mid-file is resumed with a byte range', async (t) => {
  if (!hub) return t.skip('no keel binary or test model');
  const cache = tmp('cut');
  const size = files['model.safetensors'].data.length;
  hub.cutAfter = { file: 'model.safetensors', bytes: size >> 1, times: 2 };
  hub.log.length = 0;
  const r = await keel(['pull', 'keel-test/tiny', '--quiet'], env(cache));
  assert.equal(r.code, 0, r.stderr);
  assert.ok(fs.readFileSync(path.join(r.stdout.trim(), 'model.safetensors')).equals(files['model.safetensors'].data));
  const ranges = hub.log.filter((l) => l.server === 'cdn' && l.range).map((l) => l.range);
  assert.ok(ranges.some((rg) => rg === `bytes=${size >> 1}-`), `resumed ranges: ${ranges}`);
  hub.cutAfter = null;
});

test('a pull that keeps failing says so, keeps the partial file, and the next run resumes it', async (t) => {
  if (!hub) return t.skip('no keel binary or test model');
  const cache = tmp('resume');
  const size = files['model.safetensors'].data.length;
  const cut = Math.floor(size / 3);
  hub.cutAfter = { file: 'model.safetensors', bytes: cut, times: 100 };
  const r = await keel(['pull', 'keel-test/tiny', '--attempts', '2', '--quiet'], env(cache));
  assert.notEqual(r.code, 0);
  assert.match(r.stderr, /model\.safetensors stopped at .* after 2 attempts.*run the same command again to resume/);
  const parts = walk(cache).filter((p) => p.endsWith('.part'));
  assert.equal(parts.length, 1);
  assert.equal(fs.statSync(parts[0]).size, cut);
  // Nothing a server would load: the cache does not hold the model.
  const off = await keel(['pull', 'keel-test/tiny', '--offline'], env(cache));
  assert.notEqual(off.code, 0);
  assert.match(off.stderr, /not in the cache|partly in the cache/);
  hub.cutAfter = null;
  hub.log.length = 0;
  const r2 = await keel(['pull', 'keel-test/tiny', '--quiet'], env(cache));
  assert.equal(r2.code, 0, r2.stderr);
  assert.ok(hub.log.some((l) => l.range === `bytes=${cut}-`), 'the second run asked for the rest only');
  assert.ok(fs.readFileSync(path.join(r2.stdout.trim(), 'model.safetensors')).equals(files['model.safetensors'].data));
});

test('a file whose hash does not match is removed and nothing is installed', async (t) => {
  if (!hub) return t.skip('no keel binary or test model');
  const cache = tmp('hash');
  hub.corrupt = 'model.safetensors';
  const r = await keel(['pull', 'keel-test/tiny', '--quiet'], env(cache));
  hub.corrupt = null;
  assert.notEqual(r.code, 0);
  assert.match(r.stderr, /model\.safetensors: SHA-256 mismatch/);
  assert.deepEqual(walk(cache).filter((p) => p.endsWith('model.safetensors') || p.endsWith('.part')), []);
  const off = await keel(['pull', 'keel-test/tiny', '--offline'], env(cache));
  assert.notEqual(off.code, 0);
  // A corrupt small (git) file is caught by its blob id too.
  hub.corrupt = 'config.json';
  const r2 = await keel(['pull', 'keel-test/tiny', '--quiet'], env(tmp('hash2')));
  hub.corrupt = null;
  assert.notEqual(r2.code, 0);
  assert.match(r2.stderr, /config\.json: git blob id mismatch/);
});

test('a gated repository needs HF_TOKEN; the token never goes to the CDN host', async (t) => {
  if (!hub) return t.skip('no keel binary or test model');
  const cache = tmp('token');
  const r = await keel(['pull', 'keel-test/gated'], env(cache));
  assert.notEqual(r.code, 0);
  assert.match(r.stderr, /needs a token: set HF_TOKEN/);
  const bad = await keel(['pull', 'keel-test/gated'], { ...env(cache), HF_TOKEN: 'wrong' });
  assert.match(bad.stderr, /refused the token/);
  hub.log.length = 0;
  const ok = await keel(['pull', 'keel-test/gated', '--quiet'], { ...env(cache), HF_TOKEN: 'hf_secret' });
  assert.equal(ok.code, 0, ok.stderr);
  assert.ok(hub.log.some((l) => l.server === 'hub' && l.auth === 'Bearer hf_secret'));
  const cdn = hub.log.filter((l) => l.server === 'cdn');
  assert.ok(cdn.length > 0, 'LFS files came through the CDN redirect');
  assert.ok(cdn.every((l) => !l.auth), 'no Authorization header on the CDN host');
});

test('unknown repository, unknown revision, unknown file: clear errors', async (t) => {
  if (!hub) return t.skip('no keel binary or test model');
  const cache = tmp('unknown');
  let r = await keel(['pull', 'keel-test/nope'], env(cache));
  assert.notEqual(r.code, 0);
  assert.match(r.stderr, /'keel-test\/nope' does not exist on the hub \(or it is private: set HF_TOKEN\)/);
  r = await keel(['pull', 'keel-test/tiny:nope'], env(cache));
  assert.match(r.stderr, /revision 'nope' of 'keel-test\/tiny' does not exist/);
  r = await keel(['pull', 'keel-test/gguf-only'], env(cache));
  assert.notEqual(r.code, 0);
  assert.match(r.stderr, /holds GGUF files, no safetensors: name one as keel-test\/gguf-only\/FILE \(tiny-q8_0\.gguf\)/);
  r = await keel(['pull', 'keel-test/gguf-only/missing.gguf'], env(cache));
  assert.match(r.stderr, /has no file 'missing\.gguf' \(GGUF files: tiny-q8_0\.gguf\)/);
  r = await keel(['pull', 'keel-test/gguf-only/tiny-q8_0.gguf', '--quiet'], env(cache));
  assert.equal(r.code, 0, r.stderr);
  assert.ok(r.stdout.trim().endsWith('tiny-q8_0.gguf'));
  assert.equal(fs.statSync(r.stdout.trim()).size, 4096);
  r = await keel(['pull', 'not a repo'], env(cache));
  assert.match(r.stderr, /is not a repository: expected ORG\/NAME/);
  r = await keel(['pull', 'keel-test/tiny:../x'], env(cache));
  assert.notEqual(r.code, 0);
  // "." names the refs folder itself: refused before any request, no stray refs/..tmp.
  r = await keel(['pull', 'keel-test/tiny:.'], env(cache));
  assert.notEqual(r.code, 0);
  assert.match(r.stderr, /revision/);
  assert.ok(!walk(cache).some((f) => f.endsWith('..tmp')), walk(cache).join('\n'));
});

test('a disk too small is refused before any byte is written', async (t) => {
  if (!hub) return t.skip('no keel binary or test model');
  const cache = tmp('disk');
  const r = await keel(['pull', 'keel-test/huge'], env(cache));
  assert.notEqual(r.code, 0);
  assert.match(r.stderr, /'keel-test\/huge' needs 4\.5 PB more on .*, .* free/);
  assert.deepEqual(walk(cache).filter((p) => !p.endsWith('.lock')), []);
});

// A disk that fills during the download (here a file-size limit: the write fails with
// EFBIG as it would with ENOSPC) is a clear error, not a killed process; the partial file
// stays, nothing is installed, and a later run resumes it.
test('a disk that fills mid-file: a clear error, the partial file kept, the next run resumes', async (t) => {
  if (!hub) return t.skip('no keel binary or test model');
  const size = files['model.safetensors'].data.length;
  if (size <= 2 << 20) return t.skip('the test model is too small for a 1 MiB limit');
  const cache = tmp('full');
  const r = await new Promise((resolve) => {
    execFile('bash', ['-c', 'ulimit -f 1024; exec "$0" "$@"', KEEL_BIN, 'pull', 'keel-test/tiny', '--quiet'],
      { timeout: 60_000, killSignal: 'SIGKILL', env: { ...process.env, HF_TOKEN: '', ...env(cache) } },
      (err, stdout, stderr) => resolve({ code: err ? (err.code ?? err.signal) : 0, stdout, stderr }));
  });
  assert.equal(r.code, 1, `exit ${r.code}: ${r.stderr}`);  // an error, not SIGXFSZ
  assert.match(r.stderr, /writing model\.safetensors to .* failed: File too large \(the partial file is kept: run again to resume\)/);
  const parts = walk(cache).filter((p) => p.endsWith('.part'));
  assert.equal(parts.length, 1);
  const kept = fs.statSync(parts[0]).size;
  assert.ok(kept > 0 && kept <= 1 << 20, `partial file of ${kept} bytes`);
  const off = await keel(['pull', 'keel-test/tiny', '--offline'], env(cache));
  assert.notEqual(off.code, 0, 'nothing installed that a server would load');
  hub.log.length = 0;
  const r2 = await keel(['pull', 'keel-test/tiny', '--quiet'], env(cache));
  assert.equal(r2.code, 0, r2.stderr);
  assert.ok(hub.log.some((l) => l.range === `bytes=${kept}-`), JSON.stringify(hub.log));
  assert.ok(fs.readFileSync(path.join(r2.stdout.trim(), 'model.safetensors')).equals(files['model.safetensors'].data));
});

test('hostile file names from the hub are never written', async (t) => {
  if (!hub) return t.skip('no keel binary or test model');
  const root = tmp('hostile');
  const cache = path.join(root, 'a', 'b');
  const r = await keel(['pull', 'keel-test/hostile', '--include', '*', '--quiet'], env(cache));
  assert.equal(r.code, 0, r.stderr);
  assert.deepEqual(walk(root).filter((p) => p.includes('escaped')), []);
  assert.ok(!fs.existsSync('/etc/escaped.json'));
});

// Starts `keel serve SPEC` and waits for its URL; the caller kills it.
function serve(spec, extraEnv) {
  return new Promise((resolve, reject) => {
    const p = spawn(KEEL_BIN, ['serve', '--port', '0', '--threads', '1', spec], { env: { ...process.env, HF_TOKEN: '', ...extraEnv } });
    let log = '';
    const timer = setTimeout(() => { p.kill('SIGKILL'); reject(new Error(`serve did not start: ${log}`)); }, 60_000);
    const onData = (d) => {
      log += d;
      const m = /listening on (http\S+)/.exec(log);
      if (m) { clearTimeout(timer); resolve({ proc: p, url: m[1], log: () => log }); }
    };
    p.stdout.on('data', onData);
    p.stderr.on('data', onData);
    p.on('exit', (code) => { clearTimeout(timer); reject(new Error(`serve exited ${code}: ${log}`)); });
  });
}

async function chat(url, model) {
  const r = await fetch(`${url}/v1/chat/completions`, {
    method: 'POST', headers: { 'content-type': 'application/json' },
    body: JSON.stringify({ model, messages: [{ role: 'user', content: 'hi' }], max_tokens: 3 }),
  });
  return { status: r.status, body: await r.json() };
}

test('keel serve ORG/NAME fetches and serves the model; offline it serves from the cache', async (t) => {
  if (!hub) return t.skip('no keel binary or test model');
  const cache = tmp('serve');
  const s = await serve('keel-test/tiny', env(cache));
  try {
    const models = await (await fetch(`${s.url}/v1/models`)).json();
    assert.deepEqual(models.data.map((m) => m.id), ['tiny']);
    const r = await chat(s.url, 'tiny');
    assert.equal(r.status, 200, JSON.stringify(r.body));
    assert.equal(r.body.usage.completion_tokens, 3);
  } finally {
    s.proc.removeAllListeners('exit');
    s.proc.kill('SIGKILL');
  }
  // The hub unreachable and offline mode: the cached copy serves.
  const off = await serve('keel-test/tiny', { KEEL_HUB_CACHE: cache, HF_ENDPOINT: 'http://127.0.0.1:9', HF_HUB_OFFLINE: '1' });
  try {
    assert.equal((await chat(off.url, 'tiny')).status, 200);
  } finally {
    off.proc.removeAllListeners('exit');
    off.proc.kill('SIGKILL');
  }
  // Not cached and offline: a clear error, no server.
  const r = await keel(['serve', '--port', '0', 'keel-test/gated'], { KEEL_HUB_CACHE: cache, HF_HUB_OFFLINE: '1' });
  assert.notEqual(r.code, 0);
  assert.match(r.stderr, /'keel-test\/gated' is not in the cache .* \(offline\)/);
});
