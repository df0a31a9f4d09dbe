// `keel bench` end to end: the real binary against the test server (each workload at
// tiny sizes), against a server it starts itself (--self), and on bad input. Figures
// are checked for consistency with what the server reported (usage), not for speed.
import test from 'node:test';
import assert from 'node:assert/strict';
import { execFile } from 'node:child_process';
import fs from 'node:fs';
import net from 'node:net';
import os from 'node:os';
import path from 'node:path';
import { KEEL_BIN, URL_MAIN, KEY, MODEL } from './helpers.mjs';

// Runs keel bench; resolves with its exit code and output, whatever the code. The
// kill timer makes a hang a test failure rather than a stuck suite.
function bench(args, { timeoutMs = 120_000 } = {}) {
  return new Promise((resolve) => {
    const t0 = Date.now();
    execFile(KEEL_BIN, ['bench', ...args], { timeout: timeoutMs, killSignal: 'SIGKILL' }, (err, stdout, stderr) => {
      resolve({ code: err ? (err.code ?? err.signal) : 0, stdout, stderr, ms: Date.now() - t0 });
    });
  });
}

function outDir(name) {
  return fs.mkdtempSync(path.join(os.tmpdir(), `keel-bench-${name}-`));
}

const PERCENTILES = ['ttft_ms', 'itl_ms', 'e2e_ms'];

// What must hold for any successful level: every request completed, token totals are
// the sum of the per-request usage, percentiles ordered, throughputs from the counts.
function checkLevel(level, { numPrompts, outputLen }) {
  assert.equal(level.requests, numPrompts);
  assert.equal(level.completed, numPrompts, JSON.stringify(level.errors));
  assert.equal(level.failed, 0);
  const detail = level.requests_detail;
  assert.equal(detail.length, numPrompts);
  const sum = (k) => detail.reduce((a, r) => a + r[k], 0);
  assert.equal(level.output_tokens, sum('output_tokens'));
  assert.equal(level.prompt_tokens, sum('prompt_tokens'));
  assert.equal(level.cached_tokens, sum('cached_tokens'));
  // ignore_eos: each request generates exactly --output-len tokens by the server's count.
  for (const r of detail) assert.equal(r.output_tokens, outputLen);
  assert.equal(level.output_tokens, numPrompts * outputLen);
  for (const m of PERCENTILES) {
    const s = level[m];
    assert.equal(s.count, m === 'itl_ms' && outputLen < 2 ? 0 : numPrompts, m);
    assert.ok(s.min <= s.p50 && s.p50 <= s.p90 && s.p90 <= s.p99 && s.p99 <= s.max, `${m} ordered: ${JSON.stringify(s)}`);
    assert.ok(s.min >= 0, m);
  }
  for (const r of detail) {
    assert.ok(r.ttft_s >= 0 && r.start_s + r.ttft_s <= r.end_s + 1e-9, JSON.stringify(r));
  }
  assert.ok(level.e2e_ms.p50 >= level.ttft_ms.p50);
  assert.ok(level.duration_s > 0);
  assert.ok(Math.abs(level.output_token_throughput - level.output_tokens / level.duration_s) < 1e-6 * level.output_token_throughput + 1e-9);
  assert.ok(Math.abs(level.request_throughput - level.completed / level.duration_s) < 1e-6 * level.request_throughput + 1e-9);
}

function parseCsv(text) {
  const lines = text.trim().split('\n');
  const header = lines[0].split(',');
  return lines.slice(1).map((l) => {
    const cells = l.split(',');
    assert.equal(cells.length, header.length, `csv row: ${l}`);
    return Object.fromEntries(header.map((h, i) => [h, Number(cells[i])]));
  });
}

// results.json, results.csv and report.html agree and the report is self-contained.
function checkFiles(dir, levels) {
  const results = JSON.parse(fs.readFileSync(path.join(dir, 'results.json'), 'utf8'));
  assert.equal(results.levels.length, levels);
  const rows = parseCsv(fs.readFileSync(path.join(dir, 'results.csv'), 'utf8'));
  assert.equal(rows.length, levels);
  rows.forEach((row, i) => {
    for (const k of Object.keys(row)) assert.ok(Number.isFinite(row[k]), `csv ${k}`);
    assert.equal(row.completed, results.levels[i].completed);
    assert.equal(row.output_tokens, results.levels[i].output_tokens);
    assert.ok(Math.abs(row.ttft_ms_p99 - results.levels[i].ttft_ms.p99) <= 1e-3 * Math.max(1, row.ttft_ms_p99));
  });
  const html = fs.readFileSync(path.join(dir, 'report.html'), 'utf8');
  assert.doesNotMatch(html, /https?:\/\//i, 'report.html refers to another origin');
  assert.doesNotMatch(html, /<script|<link|@import|url\(/i);
  assert.equal((html.match(/<svg/g) ?? []).length, 6);
  return results;
}

const common = ['--base-url', URL_MAIN, '--api-key', KEY, '--model', MODEL, '--timeout', '90'];

test('fixed: token-id prompts of exact length at two concurrency levels', async () => {
  const dir = outDir('fixed');
  const r = await bench([...common, '--workload', 'fixed', '--num-prompts', '6', '--concurrency', '1,3',
    '--input-len', '20', '--output-len', '5', '--out', dir]);
  assert.equal(r.code, 0, r.stderr);
  const results = checkFiles(dir, 2);
  assert.equal(results.config.prompts, 'token ids');
  assert.deepEqual(results.levels.map((l) => l.concurrency), [1, 3]);
  for (const l of results.levels) {
    checkLevel(l, { numPrompts: 6, outputLen: 5 });
    assert.equal(l.prompt_tokens, 6 * 20);  // token ids: the server counts what was sent
  }
  assert.match(r.stderr, /c=3: 6\/6 requests done/);  // plain progress lines off a terminal
});

test('random: text prompts at a request rate', async () => {
  const dir = outDir('random');
  const r = await bench([...common, '--workload', 'random', '--prompt-format', 'text', '--num-prompts', '5',
    '--request-rate', '20', '--input-len', '16', '--output-len', '4', '--seed', '3', '--out', dir]);
  assert.equal(r.code, 0, r.stderr);
  const results = checkFiles(dir, 1);
  assert.equal(results.config.prompts, 'text');
  assert.equal(results.levels[0].request_rate, 20);
  checkLevel(results.levels[0], { numPrompts: 5, outputLen: 4 });
});

test('shared-prefix: the prefix cache serves the later requests', async () => {
  const dir = outDir('shared');
  const r = await bench([...common, '--workload', 'shared-prefix', '--num-prompts', '8', '--num-prefixes', '2',
    '--concurrency', '1', '--input-len', '72', '--prefix-len', '64', '--output-len', '3', '--seed', String(Date.now() % 100000), '--out', dir]);
  assert.equal(r.code, 0, r.stderr);
  const level = checkFiles(dir, 1).levels[0];
  checkLevel(level, { numPrompts: 8, outputLen: 3 });
  assert.ok(level.cached_share > 0, `cached share ${level.cached_share}`);
  // After the first requests, requests reuse at least the full blocks of their prefix.
  const later = level.requests_detail.slice(4);
  assert.ok(later.some((x) => x.cached_tokens >= 48), JSON.stringify(later));
});

test('agent: multi-turn chat sessions whose prompt grows and is cached', async () => {
  const dir = outDir('agent');
  const r = await bench([...common, '--workload', 'agent', '--num-prompts', '6', '--turns', '3',
    '--concurrency', '2', '--input-len', '24', '--output-len', '4', '--out', dir]);
  assert.equal(r.code, 0, r.stderr);
  const level = checkFiles(dir, 1).levels[0];
  checkLevel(level, { numPrompts: 6, outputLen: 4 });
  for (const s of [0, 1]) {
    const turns = level.requests_detail.filter((x) => x.session === s).sort((a, b) => a.turn - b.turn);
    assert.equal(turns.length, 3);
    assert.ok(turns[1].prompt_tokens > turns[0].prompt_tokens && turns[2].prompt_tokens > turns[1].prompt_tokens);
    assert.ok(turns[2].cached_tokens > 0, JSON.stringify(turns));
  }
});

test('--self starts keel serve on the default model, runs, and stops it', async () => {
  const dir = outDir('self');
  const r = await bench(['--self', '--serve-arg=--threads=1', '--workload', 'fixed', '--num-prompts', '3',
    '--concurrency', '1,2', '--input-len', '16', '--output-len', '3', '--timeout', '120', '--out', dir]);
  assert.equal(r.code, 0, r.stderr);
  const results = checkFiles(dir, 2);
  assert.equal(results.config.model, 'default');
  for (const l of results.levels) checkLevel(l, { numPrompts: 3, outputLen: 3 });
  for (const l of results.levels) assert.equal(l.speculative, undefined);  // no drafter there
  assert.match(fs.readFileSync(path.join(dir, 'server.log'), 'utf8'), /listening on/);
  // The server is gone once bench has exited.
  await assert.rejects(fetch(`http://${results.config.server}/health`));
});

test('--self with speculative decoding: each level reports the drafts it verified', async () => {
  const dir = outDir('spec');
  const r = await bench(['--self', '--serve-arg=--threads=1', '--serve-arg=--speculative=ngram',
    '--workload', 'edit', '--prompt-format', 'text', '--num-prompts', '2', '--concurrency', '1',
    '--input-len', '128', '--output-len', '48', '--timeout', '120', '--out', dir]);
  assert.equal(r.code, 0, r.stderr);
  const results = checkFiles(dir, 1);
  const s = results.levels[0].speculative;
  assert.ok(s, JSON.stringify(results.levels[0]));
  assert.equal(s.method, 'ngram');
  assert.ok(s.verify_steps > 0 && s.drafted_tokens >= s.accepted_tokens && s.accepted_tokens >= 0, JSON.stringify(s));
  assert.equal(s.accepted_per_position.reduce((a, b) => a + b, 0), s.accepted_tokens);
  assert.ok(Math.abs(s.acceptance_length - (1 + s.accepted_tokens / s.verify_steps)) < 1e-9);
  assert.match(r.stdout, /speculative ngram: acceptance length \d/);
  assert.match(fs.readFileSync(path.join(dir, 'report.html'), 'utf8'), /Speculative decoding/);
});

async function closedPort() {
  const srv = net.createServer();
  await new Promise((res) => srv.listen(0, '127.0.0.1', res));
  const port = srv.address().port;
  await new Promise((res) => srv.close(res));
  return port;
}

test('bad input: a clear error and a non-zero exit, quickly', async () => {
  const dir = outDir('bad');
  const cases = [
    [['--base-url', `http://127.0.0.1:${await closedPort()}`, '--out', dir], /cannot reach 127\.0\.0\.1:\d+/],
    [['--base-url', URL_MAIN, '--api-key', KEY, '--model', 'no-such-model', '--out', dir], /model 'no-such-model' is not served .*it serves: .*tiny/],
    [['--base-url', URL_MAIN, '--api-key', 'wrong-key', '--out', dir], /refused the API key/],
    [['--base-url', URL_MAIN, '--workload', 'bogus', '--out', dir], /--workload: 'bogus'/],
    [['--base-url', URL_MAIN, '--concurrency', '0', '--out', dir], /--concurrency/],
    [['--base-url', URL_MAIN, '--concurrency', '2', '--request-rate', '1', '--out', dir], /not both/],
    [['--base-url', 'localhost:8000', '--out', dir], /must start with http:\/\//],
    [['--out', dir], /exactly one of --base-url URL or --self/],
    [['--base-url', URL_MAIN, '--no-such-flag'], /no-such-flag/],
  ];
  for (const [args, want] of cases) {
    const r = await bench(args, { timeoutMs: 30_000 });
    assert.notEqual(r.code, 0, `${args.join(' ')}: exit 0`);
    assert.match(r.stderr, want, args.join(' '));
    assert.ok(r.ms < 20_000, `${args.join(' ')} took ${r.ms} ms`);
  }
});

test('requests the server refuses are counted as failures, with its message', async () => {
  const dir = outDir('refused');
  // A prompt longer than the test model's context: every request fails with a 400 (a
  // max_tokens past the context is clamped, not refused).
  const r = await bench([...common, '--workload', 'fixed', '--num-prompts', '3', '--input-len', '100000', '--output-len', '8', '--out', dir]);
  assert.equal(r.code, 1);
  assert.match(r.stderr, /3 of 3 requests failed/);
  const level = checkFiles(dir, 1).levels[0];
  assert.equal(level.failed, 3);
  assert.equal(level.completed, 0);
  assert.match(level.errors[0].message, /^HTTP 400: .*context/);
});

test('--timeout bounds the whole run: in-flight requests end as failures', async () => {
  const dir = outDir('timeout');
  const r = await bench(['--base-url', URL_MAIN, '--api-key', KEY, '--model', MODEL, '--workload', 'fixed',
    '--num-prompts', '60', '--concurrency', '2', '--input-len', '8', '--output-len', '2000', '--timeout', '1.5',
    '--out', dir], { timeoutMs: 30_000 });
  assert.equal(r.code, 1, r.stderr);
  assert.ok(r.ms < 15_000, `took ${r.ms} ms`);
  const level = checkFiles(dir, 1).levels[0];
  assert.equal(level.requests, 60);
  assert.ok(level.failed > 0);
  assert.equal(level.completed + level.failed, 60);
  assert.ok(level.errors.some((e) => /timed out|before --timeout/.test(e.message)), JSON.stringify(level.errors));
});
