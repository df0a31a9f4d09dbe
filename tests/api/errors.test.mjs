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
  assertOpenAIError(await http('POST', '/v1/completions', { body: { model: MODEL, prompt: 'x', max_tokens: 1000000 } }), 400, 'max_tokens');
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

test('the server still serves after all that', async () => {
  const r = await openai().completions.create({ model: MODEL, prompt: 'ok', max_tokens: 2 });
  assert.equal(r.choices.length, 1);
});
