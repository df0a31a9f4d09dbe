// Issue 8's scenario suite: the wedges the server keel is modelled on suffered, each
// repeated WEDGE_ROUNDS times (default 2) with random timing (WEDGE_SEED replays one),
// against a real `keel serve` with its SSD cache tier on (--cache-dir) and a small KV
// pool, so prefix blocks move between tiers. Pass, after every round: each request
// ended (completed or failed) within its deadline; /api/status back to zero running
// and waiting with no KV block in use; a probe completes; no orphan engine; greedy
// outputs of cached prompts equal the reference run (nothing stored is served wrong).
import test, { after, before } from 'node:test';
import assert from 'node:assert/strict';
import fs from 'node:fs';
import path from 'node:path';
import { MODEL_PATH } from './helpers.mjs';
import { startServer, inject, ends, settled, streamText, greedy, alive, sleep, rng, waitFor, ROUNDS } from './wedge_lib.mjs';

const DEADLINE_S = 2;
const REQ_MS = 12_000;  // every request's deadline here
const r = rng();
let srv;
const ref = {};
const texts = ['The keeper of the lighthouse wrote in his log every night. ', 'Rain fell on the harbour town all winter long. ',
  'A clock in the hall struck seven and the guests sat down. ', 'Ships came in at dawn with salt and wool and news. ',
  'The road north went over the hills and past the mill. ', 'She kept bees behind the house and sold the honey. '];
const LONG = texts.map((t) => t.repeat(10));  // ~160 tokens each: ten blocks, mostly cacheable
// As many blocks again: cycling through both overflows the 64-block device pool, so
// LONG's prefixes are evicted to the host/SSD tiers and come back by restore.
const CHURN = texts.map((t) => ('Once more: ' + t).repeat(10));

before(async () => {
  console.log(`# wedge scenarios: seed ${r.seed}, rounds ${ROUNDS}`);
  srv = await startServer({
    name: 'scen',
    args: ['--enable-fault-injection', '--pin', 'tiny', '--step-deadline', String(DEADLINE_S), '--heartbeat-timeout', '3',
      '--unload-grace', '1', '--kv-blocks', '64', '--max-concurrent', '16'],
    cache: true,
  });
  for (const p of [...LONG, 'short one', 'probe']) ref[p] = await greedy(srv.client, p);
});
after(async () => {
  // Issue 21: after every scenario, no KV block is left in use (cached blocks are free).
  await waitFor(async () => (await srv.model())?.kv_blocks?.used === 0, { timeoutMs: 10_000, what: 'KV blocks used back to 0' });
  const res = await srv.stop();
  assert.equal(res?.code, 0);
});

const refs = (...ps) => Object.fromEntries(ps.map((p) => [p, ref[p]]));
const req = (prompt, max_tokens = 8) => ends(REQ_MS, () => greedyFull(prompt, max_tokens), prompt.slice(0, 20));
async function greedyFull(prompt, max_tokens) {
  return (await srv.client.completions.create({ model: 'tiny', prompt, max_tokens, temperature: 0, ignore_eos: true })).choices[0].text;
}
function assertAllOk(results, what) {
  for (const x of results) assert.ok(x.ok, `${what}: a request failed: ${x.error}`);
}

test('1: identical pairs ~99% cached admitted while the previous pair\'s store drains (slow-store), plus a third', async () => {
  for (let round = 0; round < ROUNDS; round++) {
    const P = LONG[round % LONG.length] + ` round ${round} ${r.int(0, 1e6)}`;
    await inject(srv, { model: 'tiny', kind: 'slow-store', seconds: r.between(0.2, 0.8), count: 50 });
    const first = await Promise.all([req(P), req(P)]);
    assertAllOk(first, 'first pair');
    assert.equal(first[0].value, first[1].value);
    await sleep(r.between(0, 30));
    const second = await Promise.all([req(P), req(P), req(LONG[(round + 1) % LONG.length])]);
    assertAllOk(second, 'second pair + third');
    assert.equal(second[0].value, first[0].value, 'a cached prefix served a different greedy output');
    assert.equal(second[1].value, first[0].value);
    assert.equal(second[2].value, ref[LONG[(round + 1) % LONG.length]]);
    await srv.del('/debug/faults?model=tiny');
    await settled(srv, { reference: refs(LONG[0]) });
  }
});

test('2: a prewarm loop (long cached prompt, max_tokens 1), an idle gap, then a short probe', async () => {
  for (let round = 0; round < ROUNDS; round++) {
    const P = LONG[(round + 2) % LONG.length];
    for (let i = 0; i < 8; i++) {
      const x = await req(P, 1);
      assert.ok(x.ok, String(x.error));
      assert.ok(ref[P].startsWith(x.value), `prewarm gave ${JSON.stringify(x.value)}`);  // the reference's first token
      await sleep(r.between(0, 20));
    }
    await sleep(r.between(200, 1000));
    const probe = await ends(5000, () => greedyFull('short one', 8), 'probe after the idle gap');
    assert.ok(probe.ok, String(probe.error));
    assert.equal(probe.value, ref['short one']);
    await settled(srv, { reference: refs(P) });
  }
});

test('3: dozens of aborts mid-prefill, mid-decode and while blocks restore', async () => {
  for (let round = 0; round < ROUNDS; round++) {
    // Churn the small device pool so earlier prefixes live only in the lower tiers.
    for (const p of [...LONG, ...CHURN]) assert.ok((await req(p, 1)).ok);
    const jobs = [];
    for (let i = 0; i < 30; i++) {
      const ac = new AbortController();
      const prompt = i % 3 === 0 ? `fresh ${i} ${r.int(0, 1e6)} ` + texts[i % texts.length].repeat(8) : LONG[i % LONG.length];
      const abortAfterChunks = r.int(0, 4);  // 0: right away (prefill or restore)
      const delay = r.between(0, 15);
      jobs.push(ends(REQ_MS, async () => {
        try {
          if (abortAfterChunks === 0) setTimeout(() => ac.abort(), delay);
          await streamText(srv.client, { model: 'tiny', prompt, max_tokens: 200, ignore_eos: true },
            { signal: ac.signal, onChunk: (n) => { if (n === abortAfterChunks) ac.abort(); } });
        } catch (e) {
          if (!/abort/i.test(`${e.name} ${e.message}`)) throw e;
        }
      }, `abort job ${i}`));
      if (i % 10 === 9) await sleep(r.between(0, 50));
    }
    const res = await Promise.all(jobs);
    assertAllOk(res, 'aborted streams');
    await settled(srv, { reference: refs(LONG[0], LONG[3]) });
  }
});

test('4: a second model auto-loaded beside the first under a tight memory budget, traffic to both', async () => {
  // Budget: one loaded model and a half: every switch evicts the idle one.
  const weights = fs.readdirSync(MODEL_PATH).filter((f) => f.endsWith('.safetensors'))
    .reduce((n, f) => n + fs.statSync(path.join(MODEL_PATH, f)).size, 0);
  const cfg = JSON.parse(fs.readFileSync(path.join(MODEL_PATH, 'config.json'), 'utf8'));
  const kv = 64 * 16 * cfg.num_hidden_layers * 2 * cfg.num_key_value_heads * cfg.head_dim * 4;
  const budget = Math.floor(1.5 * (weights + kv));
  const two = await startServer({ name: 'two', models: { a: MODEL_PATH, b: MODEL_PATH },
    args: ['--memory-budget', String(budget), '--kv-blocks', '64', '--step-deadline', String(DEADLINE_S)] });
  try {
    let okA = 0, okB = 0;
    for (let round = 0; round < ROUNDS + 1; round++) {
      const jobs = [];
      for (let i = 0; i < 6; i++) {
        const model = (i + round) % 2 ? 'a' : 'b';
        await sleep(r.between(0, 60));
        jobs.push(ends(20_000, async () => {
          const x = await two.client.completions.create({ model, prompt: LONG[i % 2], max_tokens: 6, temperature: 0, ignore_eos: true });
          return { model, text: x.choices[0].text, want: ref[LONG[i % 2]] };
        }, `model ${model}`));
      }
      for (const x of await Promise.all(jobs)) {
        if (x.ok) {
          // Same weights under both names: both serve the reference.
          assert.ok(x.value.want.startsWith(x.value.text), `${x.value.model}: ${JSON.stringify(x.value.text)} is not the reference's start`);
          x.value.model === 'a' ? okA++ : okB++;
        } else {
          // Busy elsewhere: a clear 507/503, never a hang.
          assert.ok([503, 507].includes(x.error.status), `unexpected failure: ${x.error}`);
        }
      }
    }
    assert.ok(okA > 0 && okB > 0, `both models served (a ${okA}, b ${okB})`);
    const st = await two.status();
    assert.ok(st.totals.memory_bytes <= st.totals.memory_budget_bytes);
    for (const id of ['a', 'b']) {
      const p = await ends(20_000, () => two.client.completions.create({ model: id, prompt: 'probe', max_tokens: 2, temperature: 0 }));
      assert.ok(p.ok, String(p.error));
    }
    const end = await two.status();
    assert.equal(end.totals.running + end.totals.waiting, 0);
    // No block leaked: KV usage comes with the engines' next reports (100 ms).
    await waitFor(async () => (await two.status()).models.every((m) => m.state !== 'ready' || m.kv_blocks.used === 0),
      { timeoutMs: 3000, what: 'no KV block in use once idle' });
    const live = new Set(end.models.map((m) => m.pid).filter((p) => p > 0));
    for (const pid of two.pids) if (!live.has(pid)) assert.equal(alive(pid), false, `evicted engine ${pid} still alive`);
  } finally {
    const res = await two.stop();
    assert.equal(res?.code, 0);
  }
});

test('5: unload and reload during traffic', async () => {
  for (let round = 0; round < ROUNDS; round++) {
    const before = await srv.model();
    const streams = [0, 1, 2, 3].map((i) => ends(REQ_MS, () => streamText(srv.client,
      { model: 'tiny', prompt: LONG[i], max_tokens: 800, ignore_eos: true }), `stream ${i}`));
    const plain = [0, 1].map((i) => req(LONG[i + 4]));
    await sleep(r.between(20, 300));
    const t0 = Date.now();
    const u = await srv.post('/v1/models/tiny/unload');
    assert.equal(u.status, 200, u.text);
    assert.ok(Date.now() - t0 < 1000 + 5000, 'unload within its grace plus 5 s');
    const res = await Promise.all([...streams, ...plain]);
    for (const x of res) if (!x.ok) assert.match(String(x.error.message ?? x.error), /unload/);
    assert.ok(res.slice(0, 4).every((x) => !x.ok), 'long streams were cut by the unload');
    await waitFor(() => !alive(before.pid), { timeoutMs: 3000, what: 'the unloaded engine to be gone' });
    // Traffic right after reloads it on first use (and an explicit load works too).
    const again = await Promise.all([req(LONG[0]), req('short one')]);
    assertAllOk(again, 'after reload');
    assert.equal(again[0].value, ref[LONG[0]]);
    assert.equal((await srv.post('/v1/models/tiny/load')).status, 200);
    await settled(srv, { reference: refs(LONG[1]) });
  }
});

test('6: every fault kind injected during traffic', async () => {
  const kinds = [
    { kind: 'stall-step', seconds: 0.5 },  // a slow step under its deadline: everything completes
    { kind: 'ssd-write-error', count: 5 },
    { kind: 'ssd-read-corrupt', count: 5 },
    { kind: 'slow-store', seconds: 0.3, count: 5 },
    { kind: 'crash-engine' },
    { kind: 'stall-step' },  // forever: caught at the deadline, killed, restarted
  ];
  for (let round = 0; round < ROUNDS; round++) {
    for (const f of kinds) {
      const destructive = f.kind === 'crash-engine' || (f.kind === 'stall-step' && f.seconds === undefined);
      const before = await srv.model();
      // Cached prompts (restored from the tiers once churned out) and churn (stores).
      const jobs = [0, 1, 2, 3, 4, 5].map((i) => req(LONG[i], 24));
      for (let i = 0; i < 3; i++) jobs.push(req(CHURN[(i + round) % 6], 4));
      jobs.push(ends(REQ_MS, () => streamText(srv.client, { model: 'tiny', prompt: LONG[0], max_tokens: 60, temperature: 0, ignore_eos: true })));
      await sleep(r.between(0, 40));
      await inject(srv, { model: 'tiny', ...f });
      const res = await Promise.all(jobs);
      if (!destructive) {
        assertAllOk(res, f.kind);
        for (let i = 0; i < 6; i++) assert.equal(res[i].value.slice(0, ref[LONG[i]].length), ref[LONG[i]], `${f.kind}: output changed`);
        // Churned out and restored while the fault was armed: still served right.
        for (const p of CHURN.slice(0, 2)) assert.equal((await req(p, 4)).ok, true);
        for (const p of LONG.slice(0, 3)) assert.equal(await greedyFull(p, 8), ref[p], `${f.kind}: a restored prefix was served wrong`);
      } else {
        for (const x of res) if (!x.ok) assert.match(String(x.error.message ?? x.error), /stalled|exited|died|signal/);
        // Nothing was running when the fault struck? Drive one step so it does.
        await req('short one');
        await waitFor(async () => {
          const m = await srv.model();
          return m.state === 'ready' && m.pid !== before.pid;
        }, { timeoutMs: 15_000, what: `restart after ${f.kind}` });
        assert.equal(alive(before.pid), false);
      }
      await srv.del('/debug/faults?model=tiny');
      await settled(srv, { reference: refs(LONG[round % 6], 'short one') });
    }
  }
});
