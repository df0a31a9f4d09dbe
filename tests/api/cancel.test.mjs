import test from 'node:test';
import assert from 'node:assert/strict';
import { openai, anthropic, status, modelStatus, waitFor, MODEL } from './helpers.mjs';

async function idle() {
  return waitFor(async () => {
    const m = modelStatus(await status(), MODEL);
    return m.running === 0 && m.waiting === 0 ? m : null;
  }, { timeoutMs: 3000, what: 'the engine to be idle' });
}

test('aborting an OpenAI stream frees the engine', async () => {
  const before = (await status()).totals.client_aborts;
  const controller = new AbortController();
  const stream = await openai().chat.completions.create(
    { model: MODEL, messages: [{ role: 'user', content: 'Write a long story.' }], max_tokens: 900, stream: true, ignore_eos: true },
    { signal: controller.signal },
  );
  let chunks = 0;
  // The SDK ends the iteration (or throws an abort error) once aborted; either is fine.
  try {
    for await (const _ of stream) {
      if (++chunks === 3) {
        const m = await waitFor(async () => {
          const s = modelStatus(await status(), MODEL);
          return s.running + s.waiting === 1 ? s : null;
        }, { timeoutMs: 2000, what: 'the request to show as running' });
        assert.equal(m.running + m.waiting, 1);
        controller.abort();
      }
    }
  } catch (e) {
    assert.match(String(e.name ?? e), /Abort/);
  }
  assert.ok(chunks < 100, 'the stream stopped soon after the abort');
  const m = await idle();
  assert.equal(m.running, 0);
  const after = (await status()).totals.client_aborts;
  assert.ok(after > before);
});

test('aborting an Anthropic stream frees the engine', async () => {
  const controller = new AbortController();
  const stream = await anthropic().messages.create(
    { model: MODEL, max_tokens: 900, messages: [{ role: 'user', content: 'Go on and on.' }], stream: true, ignore_eos: true },
    { signal: controller.signal },
  );
  let n = 0;
  try {
    for await (const ev of stream) if (ev.type === 'content_block_delta' && ++n === 2) controller.abort();
  } catch (e) {
    assert.match(String(e.name ?? e), /Abort/);
  }
  assert.ok(n < 100);
  await idle();
});
