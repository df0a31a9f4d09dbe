// Structured output through the SDKs against a random-weight model: whatever the model
// "wants", the output validates against the schema (issue 17).
import test from 'node:test';
import assert from 'node:assert/strict';
import { createRequire } from 'node:module';
import path from 'node:path';
import { http, MODEL, URL_MAIN, KEY } from './helpers.mjs';

const require = createRequire(path.join(process.env.NODE_PATH, 'noop.js'));
const OpenAI7 = require('openai7').OpenAI;
const { zodResponseFormat } = require('openai7/helpers/zod');
const { z } = require('zod');
const Ajv = require('ajv').default ?? require('ajv');

const client = () => new OpenAI7({ baseURL: `${URL_MAIN}/v1`, apiKey: KEY ?? 'none', maxRetries: 0, timeout: 120_000 });

test('openai7 chat.completions.parse with a zod schema returns an object that validates', async () => {
  const Person = z.object({
    name: z.string().max(12),
    age: z.number().int().min(0).max(120),
    role: z.enum(['admin', 'user', 'guest']),
    tags: z.array(z.string().max(6)).max(3),
  });
  const format = zodResponseFormat(Person, 'person');
  const validate = new Ajv({ strict: false }).compile(format.json_schema.schema);
  for (const seed of [1, 2, 3]) {
    const r = await client().chat.completions.parse({
      model: MODEL, messages: [{ role: 'user', content: 'Make up a person.' }],
      response_format: format, max_completion_tokens: 400, temperature: 1, seed,
    });
    const choice = r.choices[0];
    assert.equal(choice.finish_reason, 'stop', choice.message.content);
    assert.ok(choice.message.parsed, choice.message.content);
    assert.ok(validate(choice.message.parsed), JSON.stringify(validate.errors) + choice.message.content);
  }
});

test('response_format json_object gives a JSON object', async () => {
  const r = await client().chat.completions.create({
    model: MODEL, messages: [{ role: 'user', content: 'json please' }],
    response_format: { type: 'json_object' }, max_completion_tokens: 400, temperature: 0.7, seed: 5,
  });
  const c = r.choices[0];
  if (c.finish_reason === 'stop') assert.equal(typeof JSON.parse(c.message.content), 'object');
  else assert.equal(c.finish_reason, 'length');
});

test('structured_outputs choice and regex', async () => {
  const choice = await http('POST', '/v1/chat/completions', { body: {
    model: MODEL, messages: [{ role: 'user', content: 'pick' }], max_tokens: 20,
    structured_outputs: { choice: ['positive', 'negative', 'neutral'] } } });
  assert.equal(choice.status, 200, choice.text);
  assert.ok(['positive', 'negative', 'neutral'].includes(choice.json.choices[0].message.content), choice.text);
  const regex = await http('POST', '/v1/completions', { body: {
    model: MODEL, prompt: 'A code:', max_tokens: 20, structured_outputs: { regex: '[A-Z]{3}-\\d{3}' } } });
  assert.equal(regex.status, 200, regex.text);
  assert.match(regex.json.choices[0].text, /^[A-Z]{3}-\d{3}$/);
});

test('a max_tokens too small to finish the document ends with length', async () => {
  const r = await http('POST', '/v1/chat/completions', { body: {
    model: MODEL, messages: [{ role: 'user', content: 'x' }], max_tokens: 3,
    response_format: { type: 'json_schema', json_schema: { name: 'x', schema: {
      type: 'object', properties: { text: { type: 'string', minLength: 50 } }, required: ['text'] } } } } });
  assert.equal(r.status, 200, r.text);
  assert.equal(r.json.choices[0].finish_reason, 'length');
});

test('an unsupported or invalid schema is a 400 naming the path', async () => {
  const bad = await http('POST', '/v1/chat/completions', { body: {
    model: MODEL, messages: [{ role: 'user', content: 'x' }],
    response_format: { type: 'json_schema', json_schema: { name: 'x', schema: {
      type: 'object', properties: { age: { type: 'integer', multipleOf: 2 } } } } } } });
  assert.equal(bad.status, 400, bad.text);
  assert.match(bad.text, /response_format\.json_schema\.schema\.properties\.age\.multipleOf/);
  const regex = await http('POST', '/v1/chat/completions', { body: {
    model: MODEL, messages: [{ role: 'user', content: 'x' }], structured_outputs: { regex: '(?=x)y' } } });
  assert.equal(regex.status, 400, regex.text);
  assert.match(regex.text, /structured_outputs\.regex/);
  const gbnf = await http('POST', '/v1/chat/completions', { body: {
    model: MODEL, messages: [{ role: 'user', content: 'x' }], structured_outputs: { grammar: 'root ::= a\na ::= a "x"' } } });
  assert.equal(gbnf.status, 400, gbnf.text);
  assert.match(gbnf.text, /left recursion|never complete/);
});
