// /api/status counts never show a request the client has already seen end: right after a
// stream (or a plain request) that the front ended on a stop string, before the engine's
// next report, running and waiting are 0 (session 1 saw a phantom `running: 1` here).
import test from 'node:test';
import assert from 'node:assert/strict';
import { openai, status, modelStatus, MODEL } from './helpers.mjs';

test('no phantom running/waiting right after a request ended on a stop string', async () => {
  const client = openai();
  const prompt = 'The count of the lighthouse keeper';
  const full = (await client.completions.create({ model: MODEL, prompt, max_tokens: 24, temperature: 0, ignore_eos: true })).choices[0].text;
  // A stop string a few tokens in: the front ends the request, the engine would go on.
  const stop = full.slice(Math.floor(full.length / 3), Math.floor(full.length / 3) + 3);
  assert.ok(stop.trim().length > 0, `no usable stop string in ${JSON.stringify(full)}`);
  for (let i = 0; i < 8; i++) {
    const stream = i % 2 === 0;
    if (stream) {
      const s = await client.completions.create({ model: MODEL, prompt, max_tokens: 400, temperature: 0, ignore_eos: true, stop: [stop], stream: true });
      let last;
      for await (const c of s) last = c;
      assert.equal(last.choices[0].finish_reason, 'stop');
    } else {
      const r = await client.completions.create({ model: MODEL, prompt, max_tokens: 400, temperature: 0, ignore_eos: true, stop: [stop] });
      assert.equal(r.choices[0].finish_reason, 'stop');
    }
    const m = modelStatus(await status(), MODEL);
    assert.equal(m.running, 0, `round ${i}: running ${m.running} right after the request ended`);
    assert.equal(m.waiting, 0, `round ${i}: waiting ${m.waiting}`);
  }
});
