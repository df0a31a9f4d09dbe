// `keel serve --tensor-parallel 2` on the CPU: the engine runs as rank 0 with a worker
// rank as its child process. Its greedy output equals one rank's; a worker killed with
// SIGKILL ends the group, the request in flight ends with an error (never a hang), the
// pinned model restarts, and a probe completes again with the same output.
import test, { after, before } from 'node:test';
import assert from 'node:assert/strict';
import fs from 'node:fs';
import { startServer, greedy, waitFor, alive, assertGone, ends } from './wedge_lib.mjs';

let one, two;
const PROMPT = 'The keeper of the lighthouse wrote in his log';

function children(pid) {
  let out = [];
  for (const t of fs.readdirSync(`/proc/${pid}/task`)) {
    const c = fs.readFileSync(`/proc/${pid}/task/${t}/children`, 'utf8').trim();
    if (c) out = out.concat(c.split(/\s+/).map(Number));
  }
  return out;
}

before(async () => {
  one = await startServer({ name: 'tp1' });
  two = await startServer({ name: 'tp2', args: ['--tensor-parallel', '2', '--pin', 'tiny', '--step-deadline', '5'] });
});
after(async () => {
  await one?.stop();
  const r = await two?.stop();
  assert.equal(r?.code, 0);
});

test('two ranks give the one-rank greedy output', async () => {
  const ref = await greedy(one.client, PROMPT, 16);
  assert.equal(await greedy(two.client, PROMPT, 16), ref);
  const m = await two.model();
  const workers = children(m.pid);
  assert.equal(workers.length, 1, `rank 0 (pid ${m.pid}) should have one worker rank`);
});

test('a killed worker rank fails the request, the group restarts, a probe completes', async () => {
  const ref = await greedy(one.client, PROMPT, 16);
  const m = await two.model();
  const [worker] = children(m.pid);
  const inflight = ends(20_000, () => greedy(two.client, PROMPT.repeat(8), 200).then(() => 'done', (e) => e));
  process.kill(worker, 'SIGKILL');
  await inflight;  // completes or errors, within its deadline: never hangs
  await assertGone([m.pid, worker]);
  const probe = await waitFor(async () => {
    try {
      return await greedy(two.client, PROMPT, 16);
    } catch {
      return null;
    }
  }, { timeoutMs: 20_000, what: 'a probe after the group restarted' });
  assert.equal(probe, ref);
  const again = await two.model();
  assert.notEqual(again.pid, m.pid);
  assert.ok(children(again.pid).every(alive));
});
