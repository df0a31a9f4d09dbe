// wedge.test.mjs with speculative decoding on (issue 30: "the wedge suites pass with
// speculation on"): every server the suite starts drafts with n-gram lookup on every step
// (`--speculative ngram`, the governor off and no running-count limit, so verify steps
// with rolled-back KV blocks run throughout), while a real stalled step and a crashing
// engine are caught, their requests end with a clear error in the endpoint's own format
// while /health answers, the engine is killed and restarted, and the cached prompt's
// greedy tokens stay what they were (the CPU runner's output with drafts is the output
// without them, token for token). A last test checks that these flags do draft on the
// suite's model.
import test from 'node:test';
import assert from 'node:assert/strict';

const SPEC_ARGS = ['--speculative', 'ngram', '--num-speculative-tokens', '4',
  '--speculative-max-running', '0', '--speculative-adaptive', 'off'];
process.env.WEDGE_SERVE_ARGS = [process.env.WEDGE_SERVE_ARGS ?? '', ...SPEC_ARGS].join(' ').trim();
const { startServer } = await import('./wedge_lib.mjs');
await import('./wedge.test.mjs');

test('the suite\'s servers draft and verify on its model', async () => {
  const srv = await startServer({ name: 'spec-check' });
  try {
    const since = Date.now();
    const text = 'one two three four five one two three four five '.repeat(6);
    const r = await srv.post('/v1/completions', {
      model: 'tiny', prompt: text, max_tokens: 48, temperature: 0, ignore_eos: true,
    });
    assert.equal(r.status, 200, r.text);
    const s = await srv.speculative('tiny', since);
    assert.equal(s.method, 'ngram', JSON.stringify(s));
    assert.ok(s.drafted_tokens > 0, JSON.stringify(s));
  } finally {
    await srv.stop();
  }
});
