// Client details found by trying keel as a new user would (issue 31, items 8-11),
// each through the client that found it.
import test from 'node:test';
import assert from 'node:assert/strict';
import fs from 'node:fs';
import { http, openai, MODEL, KEY, KEEL_BIN } from './helpers.mjs';

const URL_AGENT = process.env.KEEL_AGENT_URL;
const AGENT_LOG = process.env.KEEL_AGENT_LOG;

test('completions logprobs.text_offset counts characters, not UTF-8 bytes (openai@7)', async () => {
  const prompt = 'a Ünïcödé ok';
  const r = await openai().completions.create({
    model: MODEL, prompt, max_tokens: 4, echo: true, logprobs: 0, temperature: 0,
  });
  const lp = r.choices[0].logprobs;
  const text = r.choices[0].text;
  assert.ok(text.startsWith(prompt));
  // The first generated token starts right after the echoed prompt: 12 characters in
  // (its UTF-8 is 17 bytes, which the offsets counted before).
  const first = r.usage.prompt_tokens;
  assert.equal(lp.text_offset[first], [...prompt].length);
  for (let i = 1; i < lp.text_offset.length; ++i) assert.ok(lp.text_offset[i] >= lp.text_offset[i - 1]);
  assert.ok(lp.text_offset.at(-1) <= [...text].length);
});

test('a 404 for an unknown model lists the known ones (openai@7)', async () => {
  await assert.rejects(
    openai().chat.completions.create({ model: 'no-such', messages: [{ role: 'user', content: 'x' }] }),
    (e) => e.status === 404 && e.param === 'model' && /it serves: .*tiny/.test(e.message) && /spare/.test(e.message),
  );
  const r = await http('GET', '/v1/models/no-such');
  assert.equal(r.status, 404);
  assert.match(r.json.error.message, /it serves: .*tiny/);
});

test('/apply-template and /tokenize honour a top-level reasoning_effort as chat does', async (t) => {
  if (!URL_AGENT) return t.skip('no agent server');
  const messages = [{ role: 'user', content: 'hi' }];
  const base = { model: 'thinker', messages };
  const on = await http('POST', '/apply-template', { url: URL_AGENT, body: base });
  const off = await http('POST', '/apply-template', { url: URL_AGENT, body: { ...base, reasoning_effort: 'none' } });
  assert.equal(on.status, 200, on.text);
  assert.equal(off.status, 200, off.text);
  assert.match(off.json.prompt, /<think>\n\n<\/think>/);
  assert.doesNotMatch(on.json.prompt, /<\/think>/);
  const tOn = await http('POST', '/tokenize', { url: URL_AGENT, body: base });
  const tOff = await http('POST', '/tokenize', { url: URL_AGENT, body: { ...base, reasoning_effort: 'none' } });
  assert.ok(tOff.json.count > tOn.json.count, `${tOff.json.count} vs ${tOn.json.count}`);
});

test('/v1/responses log lines name the model (openai@7)', async (t) => {
  if (!URL_AGENT || !AGENT_LOG) return t.skip('no agent server');
  const r = await openai(URL_AGENT, KEY).responses.create({ model: 'agent', input: 'hi', max_output_tokens: 4 });
  assert.ok(['completed', 'incomplete'].includes(r.status), r.status);
  const log = fs.readFileSync(AGENT_LOG, 'utf8');
  assert.match(log, /POST \/v1\/responses model=agent status=200/);
  assert.doesNotMatch(log, /POST \/v1\/responses model=- /);
});

test('keel serve refuses a folder that is not a model at start', async (t) => {
  if (!KEEL_BIN) return t.skip('no keel binary');
  const { execFile } = await import('node:child_process');
  const os = await import('node:os');
  const path = await import('node:path');
  const dir = fs.mkdtempSync(path.join(os.tmpdir(), 'keel-not-a-model-'));
  fs.writeFileSync(path.join(dir, 'notes.txt'), 'hello');
  try {
    const r = await new Promise((resolve) => {
      execFile(KEEL_BIN, ['serve', '--port', '0', dir], { timeout: 20_000 }, (err, stdout, stderr) =>
        resolve({ code: err ? err.code : 0, stderr }));
    });
    assert.notEqual(r.code, 0);
    assert.match(r.stderr, /not a model folder \(it has no config\.json and no \*\.safetensors/);
  } finally {
    fs.rmSync(dir, { recursive: true, force: true });
  }
});

test('make-model --arch qwen3 writes Qwen3\'s own chat template, <think> and all', async (t) => {
  if (!KEEL_BIN || !process.env.KEEL_TEST_MODEL_PATH) return t.skip('no keel binary');
  const { execFileSync } = await import('node:child_process');
  const os = await import('node:os');
  const path = await import('node:path');
  const dir = fs.mkdtempSync(path.join(os.tmpdir(), 'keel-qwen3-'));
  try {
    const out = path.join(dir, 'q3');
    execFileSync(KEEL_BIN, ['make-model', '--arch', 'qwen3', '--shape', 'tiny', '--dtype', 'f32',
      '--tokenizer', process.env.KEEL_TEST_MODEL_PATH, '--out', out], { stdio: 'ignore' });
    const msgs = path.join(dir, 'msgs.json');
    fs.writeFileSync(msgs, JSON.stringify([{ role: 'user', content: 'hi' }]));
    const render = (extra) => execFileSync(KEEL_BIN, ['template', '--model', out, '--messages', msgs,
      '--add-generation-prompt', ...extra], { encoding: 'utf8' });
    assert.equal(render([]).trimEnd(), '<|im_start|>user\nhi<|im_end|>\n<|im_start|>assistant');
    assert.match(render(['--kwargs', '{"enable_thinking":false}']), /<\|im_start\|>assistant\n<think>\n\n<\/think>\n\n/);
  } finally {
    fs.rmSync(dir, { recursive: true, force: true });
  }
});
