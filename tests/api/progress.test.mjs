// Load progress (issue 22): while an engine loads its model, /api/status shows a progress
// object per model (phase, counts, fraction, elapsed) that only moves forward and is gone
// once the model is ready, and the log has a few progress lines, not a flood. The load
// is stretched to a few seconds with the test-only --fault-slow-load.
import test from 'node:test';
import assert from 'node:assert/strict';
import fs from 'node:fs';
import path from 'node:path';
import { spawnSync } from 'node:child_process';
import { startServer, sleep } from './wedge_lib.mjs';
import { KEEL_BIN, MODEL_PATH } from './helpers.mjs';

const PHASES = ['starting engine', 'reading weights', 'preparing weights', 'rebuilding cache index'];

test('a loading model reports progress in /api/status and the log, then none when ready', async () => {
  const server = await startServer({
    name: 'progress', cache: true,
    args: ['--enable-fault-injection', '--fault-slow-load', '3'],
  });
  try {
    const weights = fs.readdirSync(MODEL_PATH).filter((f) => f.endsWith('.safetensors'))
      .reduce((n, f) => n + fs.statSync(path.join(MODEL_PATH, f)).size, 0);
    const before = await server.model();
    assert.equal(before.state, 'available');
    assert.equal(before.progress, null);
    const load = server.post('/v1/models/tiny/load', {});
    const seen = [];
    let m;
    for (let i = 0; i < 400; i++) {
      m = await server.model();
      if (m.state === 'ready') break;
      if (m.state === 'loading') {
        assert.ok(m.progress, `loading without a progress object: ${JSON.stringify(m)}`);
        seen.push(m.progress);
      }
      await sleep(50);
    }
    const loaded = await load;
    assert.equal(loaded.status, 200, loaded.text);
    assert.equal(m.state, 'ready');
    assert.equal(m.progress, null, 'a ready model shows no progress');

    // Phases in the load's order; within one, the counts never go back.
    let phase = -1;
    let last = null;
    for (const p of seen) {
      const k = PHASES.indexOf(p.phase);
      assert.ok(k >= 0, `unknown phase ${p.phase}`);
      assert.ok(k >= phase, `phase ${p.phase} after ${PHASES[phase]}`);
      if (last && last.phase === p.phase) {
        assert.ok(p.done >= last.done, `${p.phase}: done went from ${last.done} to ${p.done}`);
        assert.ok(p.phase_elapsed_seconds >= last.phase_elapsed_seconds);
      }
      if (last) assert.ok(p.elapsed_seconds >= last.elapsed_seconds);
      assert.ok(p.started_at > 1.7e9 && p.started_at <= Date.now() / 1000 + 1);
      phase = k;
      last = p;
    }
    const reading = seen.filter((p) => p.phase === 'reading weights');
    assert.ok(reading.length >= 5, `only ${reading.length} looks at 'reading weights' in a 3 s read: ${JSON.stringify(seen)}\n${server.log()}`);
    for (const p of reading) {
      assert.equal(p.unit, 'bytes');
      assert.equal(p.total, weights);
      assert.ok(p.fraction >= 0 && p.fraction <= 1);
      assert.equal(p.fraction, p.done / p.total);
    }
    // It advanced while we watched: several distinct figures, rising.
    const fractions = [...new Set(reading.map((p) => p.fraction))];
    assert.ok(fractions.length >= 3, `the fraction did not advance: ${fractions}`);

    // The log: a line at the start of each phase and a few within, never one per report.
    const lines = server.log().split('\n').filter((l) => l.includes("loading 'tiny': "));
    const readingLines = lines.filter((l) => l.includes('reading weights'));
    assert.ok(readingLines.length >= 2, `progress lines:\n${lines.join('\n')}`);
    assert.ok(readingLines.length <= 8, `a flood of progress lines:\n${lines.join('\n')}`);
    assert.match(readingLines.at(-1), /reading weights 100% \(/, lines.join('\n'));
    // Every phase is in the log, however short (the engine sends each one's start and end).
    for (const phase of PHASES.slice(1))
      assert.ok(lines.some((l) => l.includes(phase)), `no '${phase}' line:\n${lines.join('\n')}`);
  } finally {
    await server.stop();
  }
});

test('--fault-slow-load is refused without --enable-fault-injection', () => {
  const r = spawnSync(KEEL_BIN, ['serve', '--port', '0', '--fault-slow-load', '2', MODEL_PATH],
    { encoding: 'utf8', timeout: 20_000 });
  assert.notEqual(r.status, 0);
  assert.match(r.stderr, /--fault-slow-load: tests only, needs --enable-fault-injection/);
});
