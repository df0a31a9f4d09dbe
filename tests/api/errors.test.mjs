import test from 'node:test';
import assert from 'node:assert/strict';
import { openai, anthropic, http, MODEL } from './helpers.mjs';

const chat = (extra) => ({ model: MODEL, messages: [{ role: 'user', content: 'hi' }], max_tokens: 4, ...extra });

function assertOpenAIError(r, status, param) {
  assert.equal(r.status, status, r.text);
  assert.equal(typeof r.json.error.message, 'string');
  if (param !== undefined) assert.equal(r.json.error.param, param, r.json.error.message);
}

function assertAnthropicError(r, status, type) {
  assert.equal(r.status, status, r.text);
  assert.equal(r.json.type, 'error');
  assert.equal(r.json.error.type, type);
}

test('malformed JSON', async () => {
  const r = await http('POST', '/v1/chat/completions', { raw: '{"model": "x", "messages": [', headers: { 'content-type': 'application/json' } });
  assertOpenAIError(r, 400, 'body');
  assert.match(r.json.error.message, /malformed JSON/);
  const a = await http('POST', '/v1/messages', { raw: 'not json' });
  assertAnthropicError(a, 400, 'invalid_request_error');
  const notObject = await http('POST', '/v1/completions', { raw: '[1,2]' });
  assertOpenAIError(notObject, 400, 'body');
});

test('wrong types name the field', async () => {
  assertOpenAIError(await http('POST', '/v1/chat/completions', { body: chat({ max_tokens: 'many' }) }), 400, 'max_tokens');
  assertOpenAIError(await http('POST', '/v1/chat/completions', { body: chat({ temperature: 'hot' }) }), 400, 'temperature');
  assertOpenAIError(await http('POST', '/v1/chat/completions', { body: chat({ messages: 'hi' }) }), 400, 'messages');
  assertOpenAIError(await http('POST', '/v1/chat/completions', { body: chat({ messages: [{ role: 'wizard', content: 'x' }] }) }), 400, 'messages[0].role');
  assertOpenAIError(await http('POST', '/v1/completions', { body: { model: MODEL, prompt: { a: 1 } } }), 400, 'prompt');
  assertOpenAIError(await http('POST', '/v1/completions', { body: { model: MODEL, prompt: [1, 'a'] } }), 400, 'prompt');
  assertOpenAIError(await http('POST', '/v1/completions', { body: { model: MODEL, prompt: 'x', stop: 5 } }), 400, 'stop');
  assertOpenAIError(await http('POST', '/v1/completions', { body: { model: MODEL, prompt: [99999999] } }), 400, 'prompt');
  const a = await http('POST', '/v1/messages', { body: { model: MODEL, messages: [{ role: 'user', content: 'x' }] } });
  assertAnthropicError(a, 400, 'invalid_request_error');
  assert.match(a.json.error.message, /max_tokens/);
  await assert.rejects(openai().chat.completions.create(chat({ top_p: 7 })), (e) => e.status === 400 && e.param === 'top_p');
});

test('unknown model', async () => {
  await assert.rejects(openai().chat.completions.create(chat({ model: 'no-such-model' })), (e) => e.status === 404 && /no-such-model/.test(e.message));
  await assert.rejects(
    anthropic().messages.create({ model: 'no-such-model', max_tokens: 2, messages: [{ role: 'user', content: 'x' }] }),
    (e) => e.status === 404 && e.error?.error?.type === 'not_found_error',
  );
});

test('prompt longer than the context, max_tokens out of range', async () => {
  const long = 'word '.repeat(5000);
  const r = await http('POST', '/v1/completions', { body: { model: MODEL, prompt: long, max_tokens: 1 } });
  assertOpenAIError(r, 400, 'prompt');
  assert.match(r.json.error.message, /context length/);
  assertOpenAIError(await http('POST', '/v1/chat/completions', { body: chat({ messages: [{ role: 'user', content: long }] }) }), 400, 'messages');
  assertOpenAIError(await http('POST', '/v1/completions', { body: { model: MODEL, prompt: 'x', max_tokens: 0 } }), 400, 'max_tokens');
  // Beyond any context: out of range. Within range but over what the context leaves: clamped.
  assertOpenAIError(await http('POST', '/v1/completions', { body: { model: MODEL, prompt: 'x', max_tokens: 2 ** 31 } }), 400, 'max_tokens');
  assertOpenAIError(await http('POST', '/v1/chat/completions', { body: chat({ max_tokens: -3 }) }), 400, 'max_tokens');
  const a = await http('POST', '/v1/messages', { body: { model: MODEL, max_tokens: 1, messages: [{ role: 'user', content: long }] } });
  assertAnthropicError(a, 400, 'invalid_request_error');
});

test('body over the size limit', async () => {
  const big = JSON.stringify(chat({ messages: [{ role: 'user', content: 'x'.repeat(2 * 1024 * 1024) }] }));
  const r = await http('POST', '/v1/chat/completions', { raw: big });
  assertOpenAIError(r, 413, 'body');
  const a = await http('POST', '/v1/messages', { raw: big });
  assertAnthropicError(a, 413, 'request_too_large');
});

test('invalid UTF-8', async () => {
  const bytes = Buffer.concat([Buffer.from('{"model":"' + MODEL + '","prompt":"a'), Buffer.from([0xff, 0xfe]), Buffer.from('","max_tokens":1}')]);
  const r = await http('POST', '/v1/completions', { raw: bytes });
  assertOpenAIError(r, 400, 'body');
  assert.match(r.json.error.message, /UTF-8/);
  const lone = await http('POST', '/v1/completions', { raw: '{"model":"' + MODEL + '","prompt":"\\ud800","max_tokens":1}' });
  assertOpenAIError(lone, 400, 'body');
});

test('unknown endpoint and wrong method', async () => {
  assert.equal((await http('GET', '/v1/nothing')).status, 404);
  assert.equal((await http('GET', '/v1/chat/completions')).status, 405);
});

test('OpenAI: invalid or unsupported values name the field', async () => {
  const cases = [
    // [endpoint, extra fields, param]
    ['chat', { n: 17 }, 'n'],
    ['chat', { n: 'two' }, 'n'],
    ['chat', { logprobs: 'yes' }, 'logprobs'],
    ['chat', { logprobs: true, top_logprobs: 21 }, 'top_logprobs'],
    ['chat', { top_logprobs: 2 }, 'top_logprobs'],
    ['chat', { seed: 1.5 }, 'seed'],
    ['chat', { presence_penalty: 3 }, 'presence_penalty'],
    ['chat', { frequency_penalty: 'x' }, 'frequency_penalty'],
    ['chat', { stream: 'yes' }, 'stream'],
    ['chat', { stream_options: { include_usage: true } }, 'stream_options'],
    ['chat', { stream: true, stream_options: { include_usage: 1 } }, 'stream_options.include_usage'],
    ['chat', { stop: ['a', ''] }, 'stop'],
    ['chat', { stop: Array(17).fill('x') }, 'stop'],
    ['chat', { response_format: { type: 'xml' } }, 'response_format.type'],
    ['chat', { response_format: { type: 'json_schema', json_schema: { name: 'x', schema: { type: 'object', properties: { a: { not: {} } } } } } }, 'response_format.json_schema.schema.properties.a.not'],
    ['chat', { structured_outputs: { regex: '(' } }, 'structured_outputs.regex'],
    ['chat', { response_format: 'json' }, 'response_format'],
    ['chat', { logit_bias: { 5: 10 } }, 'logit_bias'],
    ['chat', { logit_bias: { 5: 500 } }, 'logit_bias'],
    ['chat', { functions: [{ name: 'f' }] }, 'functions'],
    ['chat', { function_call: 'auto' }, 'function_call'],
    ['chat', { modalities: ['text', 'audio'] }, 'modalities'],
    ['chat', { audio: { voice: 'x', format: 'mp3' } }, 'audio'],
    ['chat', { user: 5 }, 'user'],
    ['chat', { store: 'no' }, 'store'],
    ['chat', { metadata: { k: 1 } }, 'metadata.k'],
    ['chat', { messages: [{ role: 'user', content: [{ type: 'image_url', image_url: { url: 'http://x' } }] }] }, 'messages[0].content[0].type'],
    ['chat', { messages: [{ role: 'user', content: [{ type: 'text' }] }] }, 'messages[0].content[0].text'],
    ['chat', { messages: [{ role: 'user' }] }, 'messages[0].content'],
    ['chat', { messages: [{ role: 'user', content: 'x', name: 3 }] }, 'messages[0].name'],
    ['chat', { max_completion_tokens: 0 }, 'max_completion_tokens'],
    ['completions', { logprobs: 21 }, 'logprobs'],
    ['completions', { echo: 'yes' }, 'echo'],
    ['completions', { suffix: 'x' }, 'suffix'],
    ['completions', { n: 2, best_of: 3 }, 'best_of'],
    ['completions', { logit_bias: { 1: 1 } }, 'logit_bias'],
  ];
  for (const [ep, extra, param] of cases) {
    const body = ep === 'chat' ? chat(extra) : { model: MODEL, prompt: 'x', max_tokens: 2, ...extra };
    assertOpenAIError(await http('POST', `/v1/${ep === 'chat' ? 'chat/completions' : 'completions'}`, { body }), 400, param);
  }
});

test('OpenAI: unknown fields and accepted hints are ignored', async () => {
  // Unknown fields pass (SDKs send extra_body and newer fields); hints keel need not act on too.
  const r = await openai().chat.completions.create(
    chat({ user: 'u1', store: false, metadata: { k: 'v' }, service_tier: 'auto', logit_bias: {}, modalities: ['text'], prediction: { type: 'content', content: 'x' }, reasoning_effort: 'low' }),
  );
  assert.equal(r.object, 'chat.completion');
  const extra = await http('POST', '/v1/chat/completions', { body: chat({ some_future_field: { a: 1 }, top_k: 1, min_p: 0.1, repetition_penalty: 1.1 }) });
  assert.equal(extra.status, 200, extra.text);
  const c = await http('POST', '/v1/completions', { body: { model: MODEL, prompt: 'x', max_tokens: 1, whatever: true, user: 'u' } });
  assert.equal(c.status, 200, c.text);
});

test('Anthropic: invalid or unsupported values name the field', async () => {
  const base = { model: MODEL, max_tokens: 2, messages: [{ role: 'user', content: 'hi' }] };
  const cases = [
    [{ max_tokens: 0 }, 'max_tokens'],
    [{ max_tokens: 'x' }, 'max_tokens'],
    [{ temperature: -0.1 }, 'temperature'],
    [{ top_p: 'x' }, 'top_p'],
    [{ top_k: 1.5 }, 'top_k'],
    [{ stop_sequences: 'x' }, 'stop_sequences'],
    [{ stream: 1 }, 'stream'],
    [{ system: 5 }, 'system'],
    [{ system: [{ type: 'image', source: {} }] }, 'system.0.type'],
    [{ metadata: 'x' }, 'metadata'],
    [{ metadata: { user_id: 5 } }, 'metadata.user_id'],
    [{ thinking: { type: 'enabled' } }, 'thinking.budget_tokens'],
    [{ mcp_servers: [{ type: 'url', url: 'http://x', name: 'x' }] }, 'mcp_servers'],
    [{ messages: [{ role: 'system', content: 'x' }] }, 'messages'],  // system entries merge; no turn left
    [{ messages: [{ role: 'developer', content: 'x' }] }, 'messages.0.role'],
    [{ thinking: { type: 'sometimes' } }, 'thinking.type'],
    [{ output_config: { format: { type: 'json_schema', schema: { type: 'object', properties: { a: { not: {} } } } } } }, 'output_config.format.schema.properties.a.not'],
    [{ messages: [{ role: 'user', content: [{ type: 'sparkle' }] }] }, 'messages.0.content.0.type'],
    [{ messages: [{ role: 'user', content: [{ type: 'image', source: { type: 'base64', media_type: 'image/png', data: 'AA==' } }] }] }, 'messages.0.content.0.type'],
    [{ messages: [{ role: 'user', content: 7 }] }, 'messages.0.content'],
    [{ messages: [{ role: 'assistant', content: [{ type: 'tool_result', tool_use_id: 'x' }] }] }, 'messages.0.content.0.type'],
  ];
  for (const [extra, field] of cases) {
    const r = await http('POST', '/v1/messages', { body: { ...base, ...extra } });
    assert.equal(r.status, 400, `${field}: ${r.text}`);
    assertAnthropicError(r, 400, 'invalid_request_error');
    assert.ok(r.json.error.message.startsWith(field + ':'), `${field}: ${r.json.error.message}`);
  }
  const ok = await http('POST', '/v1/messages', { body: { ...base, some_future_field: 1, service_tier: 'auto', metadata: { user_id: 'u' }, thinking: { type: 'disabled' } } });
  assert.equal(ok.status, 200, ok.text);
});

test('the server still serves after all that', async () => {
  const r = await openai().completions.create({ model: MODEL, prompt: 'ok', max_tokens: 2 });
  assert.equal(r.choices.length, 1);
});
