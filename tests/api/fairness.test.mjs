// Fair admission by request (issue 31 item 4): one completion of many prompts x n must
// not hold a small request that arrives while it runs until the big one drains. A server
// of its own with 4 seats (--max-concurrent 4): a 32-sequence completion takes them all;
// a 1-sequence completion sent once the big one streams is admitted at the next step
// (a seat is swapped from the big request), so it ends while the big one has most of its
// sequences unfinished. Asserted by counts, not by time (the suite runs on a loaded machine);
// the engine is slowed on purpose (fault injection) so the big request outlasts a round trip.
import { test, before, after } from 'node:test';
import assert from 'node:assert/strict';
import { MODEL_PATH, openai, serveKeel, slowEngine } from './helpers.mjs';

const sleep = (ms) => new Promise((r) => setTimeout(r, ms));
let srv;

before(async () => {
  srv = await serveKeel(['--port', '0', '--threads', '1', MODEL_PATH, '--pin', 'tiny', '--max-concurrent', '4',
    '--kv-blocks', '256', '--enable-fault-injection']);
});

after(async () => {
  if (!srv) return;
  if (srv.proc.exitCode === null) {
    srv.proc.kill('SIGTERM');
    await Promise.race([new Promise((r) => srv.proc.once('exit', r)), sleep(10_000)]);
    if (srv.proc.exitCode === null) srv.proc.kill('SIGKILL');
  }
});

test('a small request is served while a 32-sequence completion still runs (openai@7)', { timeout: 300_000 }, async () => {
  const client = openai(srv.url, undefined);
  await client.completions.create({ model: 'tiny', prompt: 'warm', max_tokens: 1 });
  // Slow on purpose (10 ms a step): on a tiny model the whole big request can otherwise
  // end in well under a second, before the small one arrives, whatever the admission.
  const fast = await slowEngine({ model: 'tiny', secondsPerStep: 0.01, url: srv.url });
  try {
    const prompts = Array.from({ length: 8 }, (_, i) => `prompt number ${i}`);
    const big = await client.completions.create({
      model: 'tiny', prompt: prompts, n: 4, max_tokens: 64, temperature: 0, ignore_eos: true, stream: true,
    });
    let bigFinished = 0;
    let started;
    const firstChunk = new Promise((r) => { started = r; });
    const bigDone = (async () => {
      for await (const chunk of big) {
        started();
        for (const c of chunk.choices) if (c.finish_reason) bigFinished++;
      }
    })();
    await firstChunk;  // the big request holds every seat now
    const small = await client.completions.create({
      model: 'tiny', prompt: 'hello', max_tokens: 4, temperature: 0, ignore_eos: true,
    });
    const finishedWhenSmallEnded = bigFinished;
    assert.equal(small.usage.completion_tokens, 4);
    await bigDone;
    assert.equal(bigFinished, 32);
    // First come first served would have admitted all 32 big sequences first: at least 28
    // would have finished (4 seats) before the small one could start.
    assert.ok(finishedWhenSmallEnded < 16, `the small request ended after ${finishedWhenSmallEnded} of 32 big sequences`);
  } finally {
    await fast();
  }
  const log = srv.log();
  assert.doesNotMatch(log, /internal error/);
});
