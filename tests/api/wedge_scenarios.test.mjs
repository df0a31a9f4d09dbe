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
import { startServer, inject, ends, settled, streamText, greedy, alive, sleep, rng, waitFor, ROUNDS,
  longContextModel, percentile, rawCompletion, probeLoop, WEDGE_MODEL } from './wedge_lib.mjs';

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
  const weights = fs.readdirSync(WEDGE_MODEL).filter((f) => f.endsWith('.safetensors'))
    .reduce((n, f) => n + fs.statSync(path.join(WEDGE_MODEL, f)).size, 0);
  const cfg = JSON.parse(fs.readFileSync(path.join(WEDGE_MODEL, 'config.json'), 'utf8'));
  const kv = 64 * 16 * cfg.num_hidden_layers * 2 * cfg.num_key_value_heads * cfg.head_dim * 4;
  const budget = Math.floor(1.5 * (weights + kv));
  const two = await startServer({ name: 'two', models: { a: WEDGE_MODEL, b: WEDGE_MODEL },
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
    // Slow steps (10 ms each, under the deadline) keep the streams running until the
    // unload comes, however fast decode is; the faults die with the unloaded engine.
    await inject(srv, { model: 'tiny', kind: 'stall-step', seconds: 0.01, count: 100000 });
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
    assert.ok(res.slice(0, 4).every((x) => !x.ok), 'long streams were cut by the unload: ' + JSON.stringify(res.slice(0, 4)).slice(0, 600));
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

// Issue 24: SIGSTOP one engine of two (a wedged GPU step or a swapped-out process, seen
// from outside) and pile long-prompt requests onto it while half its streaming clients
// leave. Its socket buffer fills (it never reads) and the queue in front of it fills:
// requests for it fail with 503 naming it, within the IPC deadline; /health names it;
// the supervisor kills and restarts it; the other model's p99 latency while the engine
// is stalled stays within 2x its unloaded p99 (measured in this test; the p99 through
// the restart, a model load competing for this 2-core machine, is reported beside it);
// then everything drains to zero.
// Bigger runs: WEDGE_STALL_REQUESTS (150), WEDGE_STALL_PROMPT (2000-8000 tokens),
// WEDGE_STALL_CUT (share of streams disconnected, 0.5). WEDGE_P99_SLACK_MS (100) is
// added to the 2x bound for a shared CI machine, where other jobs' load alone moves a
// p99 of ~50 samples by tens of ms (0: the strict bound); the bug it guards against
// showed as 10 s waits.
test('7: one SIGSTOPped engine of two: 503s in time, /health names it, the other model keeps its latency, all drains', async () => {
  const N = Number(process.env.WEDGE_STALL_REQUESTS ?? 150);
  const [PMIN, PMAX] = (process.env.WEDGE_STALL_PROMPT ?? '2000-8000').split('-').map(Number);
  const CUT = Number(process.env.WEDGE_STALL_CUT ?? 0.5);
  // A bigger pile takes longer to arrive than the default stall window (the queue-full
  // verdict kills the engine about 1 s after it stops reading; requests arriving after
  // the restart would be served, minutes of prefill here): past 200 requests the queue
  // never fills and the IPC deadline covers the pile, so its requests fail by deadline.
  const big = N > 200;
  const IPC_S = big ? Math.ceil(N / 100) + 2 : 2, HB_S = IPC_S + 1;
  // The queue-full path must be met whatever the machine's load: a request frame is
  // 10-40 kB (2,000-8,000 token ids as JSON), the stopped engine's socket takes ~200 kB,
  // so a 64 kB queue is full after about a dozen requests, well inside the 2 s deadline
  // even on a loaded machine (a 3 MB queue needed ~130 requests to arrive in time, and a
  // run under load met none: {"killed":100,"deadline":10}).
  const QUEUE = big ? '256M' : '64K';
  const dir = fs.mkdtempSync(path.join(srv.dir, 'long-'));
  const long = longContextModel(WEDGE_MODEL, path.join(dir, 'long'), PMAX + 256);
  const two = await startServer({ name: 'stall', models: { stuck: long, good: long },
    args: ['--pin', 'stuck', '--pin', 'good', '--heartbeat-timeout', String(HB_S), '--ipc-deadline', String(IPC_S),
      '--ipc-queue-size', QUEUE, '--kv-blocks', '1024', '--max-concurrent', '256', '--step-deadline', '10'] });
  const fig = {};
  let probes;
  try {
    // The other model's latency: back-to-back requests from a worker thread.
    const probeBody = { model: 'good', prompt: LONG[1], max_tokens: 48, temperature: 0, ignore_eos: true };
    await greedy(two.client, 'warm', 2, 'stuck');
    await greedy(two.client, 'warm', 2, 'good');
    probes = probeLoop(two.url, probeBody);
    await sleep(500);  // warm-up, not counted
    const tUnloaded = Date.now();
    await sleep(2500);

    // The pile, built ahead (off the clock): long prompts as token ids (no tokenizer
    // time in the way), half streamed, CUT of the streams cut by their client.
    const pile = [];
    for (let i = 0; i < N; i++) {
      const prompt = Array.from({ length: r.int(PMIN, PMAX) }, () => r.int(100, 4000));
      const stream = i % 2 === 0;
      pile.push({ body: JSON.stringify({ model: 'stuck', prompt, max_tokens: 8, stream }),
        cut: stream && r.next() < CUT ? r.between(0, 800) : undefined });
    }

    const stuck = await two.model('stuck');
    process.kill(stuck.pid, 'SIGSTOP');
    const tStop = Date.now();
    // /health, every 50 ms: when it first names the stalled engine.
    let healthRed = null, watching = true;
    const healthSeen = [];
    const healthWatch = (async () => {
      while (watching && healthRed === null) {
        const h = await two.get('/health');
        healthSeen.push([Date.now() - tStop, h.status, JSON.stringify(h.json?.problems ?? h.json?.models)]);
        if (h.status === 503 && h.json?.problems?.some((p) => p.model === 'stuck')) healthRed = Date.now() - tStop;
        else await sleep(50);
      }
    })();
    // The other model, probed back to back all through the stall.
    const jobs = [];
    const cutAll = new AbortController();
    for (let i = 0; i < N; i++) {
      jobs.push(rawCompletion(two.url, pile[i].body, { cutAfterMs: pile[i].cut, signal: cutAll.signal }));
      if (i % 10 === 9) await sleep(r.between(0, 20));
    }
    // On a loaded machine the pile can still be arriving when the supervisor has already
    // restarted the engine: those requests are served by the new engine (minutes of
    // prefill here). Whatever is pending after the stall's window must be held by the new
    // engine, not by the stopped one; it is then cut by this client (the drain below
    // checks that the cut requests leave nothing behind).
    const pending = new Set(jobs.map((_, i) => i));
    jobs.forEach((j, i) => j.finally(() => pending.delete(i)));
    await Promise.race([Promise.all(jobs), sleep((IPC_S + 15) * 1000)]);
    let heldByNew = 0;
    if (pending.size > 0) {
      const m = await two.model('stuck');
      assert.ok(m.pid !== stuck.pid && m.state === 'ready',
        `${pending.size} requests for the stalled model pending ${IPC_S + 15} s after the stop, and no restart: ${JSON.stringify(m)}`);
      assert.ok(m.active_requests >= pending.size, `${pending.size} requests pending, ${m.active_requests} held by the new engine`);
      heldByNew = pending.size;
      cutAll.abort();
    }
    let timer;
    const res = await Promise.race([Promise.all(jobs), new Promise((_, reject) => {
      timer = setTimeout(() => reject(new Error(`requests for the stalled model did not all end: ${pending.size} pending`)), 30_000);
    })]).finally(() => clearTimeout(timer));
    const tPiled = Date.now() - tStop;
    // Every request for the stalled model ended within the IPC deadline (plus the
    // supervisor's tick and this machine's slack): a 503 (or a stream's error event)
    // naming the model, or cut by its client; or it came after the restart and was served.
    const ended = res.filter((x) => !x.disconnected);
    const served = ended.filter((x) => x.status === 200 && !x.error);
    const failed = ended.filter((x) => !served.includes(x));
    const reasons = {};
    for (const x of failed) {
      assert.ok(x.error, `a request for the stalled model did not fail: status ${x.status}`);
      assert.match(x.error, /engine for model 'stuck'/);
      if (x.status !== 200) assert.equal(x.status, 503, x.error);  // 200: a stream's error event
      assert.ok(x.ms < (IPC_S + 1.5) * 1000, `a request for the stalled model took ${x.ms} ms`);
      const why = /not reading its requests fast enough/.test(x.error) ? 'queue_full' : /did not read this request/.test(x.error) ? 'deadline' : 'killed';
      reasons[why] = (reasons[why] ?? 0) + 1;
    }
    if (!big) assert.ok(reasons.queue_full > 0, `no request met a full queue: ${JSON.stringify(reasons)}`);
    else assert.ok(reasons.deadline > 0, `no request failed by its deadline: ${JSON.stringify(reasons)}`);
    // The supervisor's verdict: killed (SIGKILL ends a stopped process) and restarted.
    const back = await waitFor(async () => {
      const m = await two.model('stuck');
      return m.state === 'ready' && m.pid !== stuck.pid ? m : null;
    }, { timeoutMs: 15_000, what: 'the stalled engine to be restarted' });
    const tSeen = Date.now();
    assert.ok(back.history.some((h) => h.state === 'stalled'));
    // When it was ready again, from its history (the pile may have ended long after).
    const ready = back.history.slice(back.history.findLastIndex((h) => h.state === 'stalled')).find((h) => h.state === 'ready');
    const tBack = Math.round(tSeen - ready.seconds_ago * 1000 - tStop);
    // The front's own verdict, well before the heartbeat timeout: it reads nothing.
    assert.match(back.last_error, /engine for model 'stuck' stalled: .*(read nothing|did not read its socket)/);
    // The verdict is the promise (within the IPC deadline plus the supervisor's tick);
    // the reload after it is a model load, slower on a loaded machine.
    const tVerdict = Math.round(tSeen - back.history.findLast((h) => h.state === 'stalled').seconds_ago * 1000 - tStop);
    assert.ok(tVerdict < (IPC_S + 1) * 1000, `stalled verdict only after ${tVerdict} ms`);
    assert.ok(tBack < tVerdict + 10_000, `restarted ${tBack - tVerdict} ms after the verdict`);
    if (alive(stuck.pid)) process.kill(stuck.pid, 'SIGCONT');
    const all = await probes.stop();
    const agoStalled = back.history.findLast((h) => h.state === 'stalled').seconds_ago;
    const tKilled = Date.now() - agoStalled * 1000;
    const window = (a, b) => all.filter(([at, ms]) => at >= a && at + ms <= b).map(([, ms]) => ms);
    const unloaded = window(tUnloaded, tStop);
    const stalled = window(tStop, tKilled);  // whole probes between SIGSTOP and the kill
    const through = all.filter(([at]) => at >= tStop).map(([, ms]) => ms);
    watching = false;
    await healthWatch;
    assert.ok(healthRed !== null && healthRed < 2500, `/health named the stalled engine after ${healthRed} ms: ${JSON.stringify(healthSeen)}`);
    const lat = failed.map((x) => x.ms);
    Object.assign(fig, { unloaded_p50_ms: percentile(unloaded, 50), unloaded_p99_ms: percentile(unloaded, 99), unloaded_n: unloaded.length,
      stalled_p50_ms: percentile(stalled, 50), stalled_p99_ms: percentile(stalled, 99), stalled_n: stalled.length,
      through_restart_p99_ms: percentile(through, 99), through_restart_n: through.length, killed_ms: tKilled - tStop,
      requests: N, streams_cut: res.length - ended.length, served_after_restart: served.length, cut_in_new_engine: heldByNew, failed_p50_ms: percentile(lat, 50), failed_max_ms: Math.max(...lat),
      reasons, health_red_ms: healthRed, piled_ms: tPiled, restarted_ms: tBack,
      slowest_probes: all.filter(([at]) => at >= tStop).sort((a, b) => b[1] - a[1]).slice(0, 4).map(([at, ms]) => [at - tStop, ms]) });
    // Drained: both models idle, no KV block held, probes complete.
    await settled(two, { model: 'stuck' });
    await settled(two, { model: 'good' });
    fig.drained_ms = Date.now() - tStop;
    console.log(`# stall figures: ${JSON.stringify(fig)}`);
    assert.ok(stalled.length >= 10, `too few probes while the engine was stalled: ${stalled.length}`);
    const slack = Number(process.env.WEDGE_P99_SLACK_MS ?? 100);
    assert.ok(fig.stalled_p99_ms <= 2 * fig.unloaded_p99_ms + slack,
      `the other model's p99 went from ${fig.unloaded_p99_ms} ms unloaded to ${fig.stalled_p99_ms} ms with the stalled engine (bound: 2x + ${slack} ms)`);
  } finally {
    await probes?.stop().catch(() => {});  // already stopped unless an assertion failed first
    const res = await two.stop();
    assert.equal(res?.code, 0);
  }
});

// Issue 24, the other way out: the stopped engine resumes (SIGCONT) before any verdict.
// Requests queued meanwhile (their frames waiting in its socket and in the front's
// queue) complete, the aborts of the streams cut meanwhile reach it after their
// submits, nothing is restarted, and everything drains to zero.
test('8: a SIGSTOPped engine resumed before its deadline serves its backlog and drains', async () => {
  const HB_S = 4;
  const two = await startServer({ name: 'cont', models: { stuck: WEDGE_MODEL, good: WEDGE_MODEL },
    args: ['--pin', 'stuck', '--heartbeat-timeout', String(HB_S), '--kv-blocks', '256', '--step-deadline', '10'] });
  try {
    const want = await greedy(two.client, LONG[2], 8, 'stuck');
    // The other model loaded first: a load during the stop could outlast the heartbeat
    // deadline on a busy machine, and the stopped engine would be (rightly) killed.
    await greedy(two.client, 'warm', 2, 'good');
    const stuck = await two.model('stuck');
    process.kill(stuck.pid, 'SIGSTOP');
    const tStop = Date.now();
    const plain = [], cut = [];
    for (let i = 0; i < 12; i++) {
      plain.push(rawCompletion(two.url, { model: 'stuck', prompt: LONG[2], max_tokens: 8, temperature: 0, ignore_eos: true }));
      cut.push(rawCompletion(two.url, { model: 'stuck', prompt: LONG[i % 6], max_tokens: 400, ignore_eos: true, stream: true },
        { cutAfterMs: r.between(50, 600) }));
    }
    // The other model is served meanwhile.
    const other = await ends(5000, () => greedy(two.client, 'short one', 4, 'good'), 'the other model');
    assert.ok(other.ok, String(other.error));
    await sleep(Math.max(0, 1000 - (Date.now() - tStop)));
    assert.ok(alive(stuck.pid), `the stopped engine was gone ${Date.now() - tStop} ms after SIGSTOP, before its resume`);
    process.kill(stuck.pid, 'SIGCONT');
    const done = await Promise.all(plain);
    for (const x of done) {
      assert.equal(x.status, 200, x.error);
      assert.ok(x.ms < HB_S * 1000 + 3000, `took ${x.ms} ms`);
    }
    const cuts = await Promise.all(cut);
    assert.ok(cuts.every((x) => x.disconnected || x.status === 200), 'a cut stream failed otherwise');
    const m = await settled(two, { model: 'stuck', reference: { [LONG[2]]: want } });
    assert.equal(m.pid, stuck.pid, 'the resumed engine was restarted');
    assert.equal(m.restarts, 0);
    console.log(`# resumed after ${Date.now() - tStop} ms: ${done.length} requests served, ${cuts.filter((x) => x.disconnected).length} streams cut`);
  } finally {
    const res = await two.stop();
    assert.equal(res?.code, 0);
  }
});
