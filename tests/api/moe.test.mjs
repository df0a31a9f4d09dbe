// A mixture-of-experts model (qwen3_moe, `keel make-model --arch qwen3_moe --shape
// tiny`) served by keel on the CPU: a scripted copy answers an OpenAI chat request
// with its reasoning split out, and a random copy answers a forced tool call that
// parses against the tool's schema and serves a repeated prompt from the prefix cache.
// A glm4_moe (GLM-4.5: grouped sigmoid routing, a shared expert, a dense first layer)
// does the same scripted chat, and a random one answers a streamed chat request.
import test, { after, before } from 'node:test';
import assert from 'node:assert/strict';
import { execFileSync } from 'node:child_process';
import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { fileURLToPath } from 'node:url';
import { KEEL_BIN } from './helpers.mjs';
import { startServer } from './wedge_lib.mjs';

const here = path.dirname(fileURLToPath(import.meta.url));
const tokenizer = path.resolve(here, '../../models/default');
let server, work;

function makeMoe(dir, arch = 'qwen3_moe') {
  execFileSync(KEEL_BIN, ['make-model', '--arch', arch, '--shape', 'tiny', '--dtype', 'f32',
    '--tokenizer', tokenizer, '--seed', '11', '--out', dir], { stdio: 'pipe' });
}

// Scripts `dir` to reply "Plan first</think>Hello from keel." after a template that
// opens <think> (scripted_model.mjs zeroes every o_proj and down_proj, the routed and
// shared experts' too, so the reply does not depend on the routing).
function scriptThinker(dir, modelType) {
  const tc = path.join(dir, 'tokenizer_config.json');
  const t = JSON.parse(fs.readFileSync(tc, 'utf8'));
  t.chat_template = '{{ bos_token }}{% for m in messages %}{{ "<|" + m.role + "|>\\n" + m.content + "<|eos|>\\n" }}{% endfor %}{% if add_generation_prompt %}<|assistant|>\n<think>\n{% endif %}';
  fs.writeFileSync(tc, JSON.stringify(t, null, 2));
  const cfg = JSON.parse(fs.readFileSync(path.join(dir, 'config.json'), 'utf8'));
  assert.equal(cfg.model_type, modelType);
  const eos = [].concat(cfg.eos_token_id)[0];
  const ids = execFileSync(KEEL_BIN, ['tokenize', '--model', dir, 'Plan first</think>Hello from keel.']).toString().replace(/[[\] \n]/g, '');
  execFileSync('node', [path.join(here, 'scripted_model.mjs'), dir, String(eos), ids]);
}

before(async () => {
  work = fs.mkdtempSync(path.join(os.tmpdir(), 'keel-moe-'));
  const thinker = path.join(work, 'moe-thinker');
  const random = path.join(work, 'moe-random');
  const glmThinker = path.join(work, 'glm-thinker');
  const glmRandom = path.join(work, 'glm-random');
  makeMoe(thinker);
  makeMoe(random);
  makeMoe(glmThinker, 'glm4_moe');
  makeMoe(glmRandom, 'glm4_moe');
  scriptThinker(thinker, 'qwen3_moe');
  scriptThinker(glmThinker, 'glm4_moe');
  server = await startServer({ name: 'moe', models: {
    'moe-thinker': thinker, 'moe-random': random, 'glm-thinker': glmThinker, 'glm-random': glmRandom,
  } });
});

after(async () => {
  await server?.stop();
  fs.rmSync(work, { recursive: true, force: true });
});

test('a qwen3_moe model answers a chat request with its reasoning split out', async () => {
  const r = await server.client.chat.completions.create({
    model: 'moe-thinker', messages: [{ role: 'user', content: 'Plan a walk.' }], max_tokens: 40,
  });
  const m = r.choices[0].message;
  assert.equal(m.reasoning_content, 'Plan first');
  assert.equal(m.content, 'Hello from keel.');
  assert.equal(r.choices[0].finish_reason, 'stop');
  assert.ok(r.usage.completion_tokens > 3);
});

test('a random qwen3_moe model answers a forced tool call that parses', async () => {
  const tools = [{ type: 'function', function: { name: 'get_weather', parameters: {
    type: 'object', properties: { city: { type: 'string', maxLength: 10 } }, required: ['city'], additionalProperties: false } } }];
  const r = await server.client.chat.completions.create({
    model: 'moe-random', messages: [{ role: 'user', content: 'Weather in Paris?' }], tools,
    tool_choice: 'required', max_tokens: 200, temperature: 1, seed: 3,
  });
  const c = r.choices[0];
  assert.equal(c.finish_reason, 'tool_calls', JSON.stringify(c.message));
  assert.equal(c.message.tool_calls[0].function.name, 'get_weather');
  const args = JSON.parse(c.message.tool_calls[0].function.arguments);
  assert.equal(typeof args.city, 'string');
  assert.ok([...args.city].length <= 10, args.city);  // code points, as maxLength counts
  const st = await server.model('moe-random');
  assert.ok(st, 'the MoE model is listed in /api/status');
});

test('a repeated prompt reuses the qwen3_moe model\'s cached KV blocks and gives the same tokens', async () => {
  const content = 'The keeper of the lighthouse wrote in his log every night. '.repeat(6);
  const ask = () => server.client.chat.completions.create({
    model: 'moe-random', messages: [{ role: 'user', content }], max_tokens: 12, temperature: 0,
  });
  const first = await ask();
  const second = await ask();
  assert.ok(first.usage.prompt_tokens > 32);
  assert.ok((second.usage.prompt_tokens_details?.cached_tokens ?? 0) >= 16, JSON.stringify(second.usage));
  assert.equal(second.choices[0].message.content, first.choices[0].message.content);
});

test('a glm4_moe model answers a chat request with its reasoning split out', async () => {
  const r = await server.client.chat.completions.create({
    model: 'glm-thinker', messages: [{ role: 'user', content: 'Plan a walk.' }], max_tokens: 40,
  });
  const m = r.choices[0].message;
  assert.equal(m.reasoning_content, 'Plan first');
  assert.equal(m.content, 'Hello from keel.');
  assert.equal(r.choices[0].finish_reason, 'stop');
});

test('a random glm4_moe model streams a chat answer, the same tokens as unstreamed', async () => {
  const req = { model: 'glm-random', messages: [{ role: 'user', content: 'Tell me about rivers.' }],
    max_tokens: 16, temperature: 0 };
  const whole = await server.client.chat.completions.create(req);
  assert.ok(whole.usage.completion_tokens >= 1 && whole.usage.completion_tokens <= 16);
  assert.ok(whole.choices[0].message.content.length > 0);
  let streamed = '';
  for await (const chunk of await server.client.chat.completions.create({ ...req, stream: true }))
    streamed += chunk.choices[0]?.delta?.content ?? '';
  assert.equal(streamed, whole.choices[0].message.content);
});
