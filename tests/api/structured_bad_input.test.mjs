// Bad structured-output input (issue 28): an unsatisfiable schema, a $ref cycle, a
// 10,000-value enum, a regex with nested quantifiers, left-recursive GBNF. Each is a 400
// naming the field (and the problem), or a compile bounded in time that then answers;
// never a 5xx, and the server keeps answering other requests meanwhile.
import test from 'node:test';
import assert from 'node:assert/strict';
import { MODEL, http } from './helpers.mjs';

const chat = (extra) => ({ model: MODEL, messages: [{ role: 'user', content: 'x' }], max_tokens: 8, ...extra });
const schemaFormat = (schema) => ({ response_format: { type: 'json_schema', json_schema: { name: 'x', schema } } });

const cases = [
  ['an unsatisfiable schema (minimum above maximum)',
    schemaFormat({ type: 'integer', minimum: 10, maximum: 5 }), /response_format\.json_schema\.schema/],
  ['an unsatisfiable schema (allOf of two types)',
    schemaFormat({ allOf: [{ type: 'string' }, { type: 'integer' }] }), /response_format\.json_schema\.schema/],
  ['a $ref cycle with no way out',
    schemaFormat({ $ref: '#/$defs/a', $defs: { a: { $ref: '#/$defs/b' }, b: { $ref: '#/$defs/a' } } }),
    /response_format\.json_schema\.schema/],
  ['a regex with nested quantifiers', { structured_outputs: { regex: '((a+)+)+b{2,}(c*)*' } }, /structured_outputs\.regex/],
  ['left-recursive GBNF', { structured_outputs: { grammar: 'root ::= root "a" | "b"' } }, /structured_outputs\.grammar/],
  ['a GBNF rule that is never defined', { structured_outputs: { grammar: 'root ::= missing' } }, /structured_outputs\.grammar/],
  ['a schema that is not an object', schemaFormat(42), /response_format\.json_schema\.schema/],
];

for (const [what, extra, field] of cases) {
  test(`${what}: a 400 naming the field, or a bounded compile that answers`, async () => {
    const t0 = Date.now();
    const r = await http('POST', '/v1/chat/completions', { body: chat(extra) });
    const ms = Date.now() - t0;
    assert.ok(r.status < 500, `${r.status} ${JSON.stringify(r.json)}`);
    if (r.status === 400) {
      const msg = r.json.error.message + ' ' + (r.json.error.param ?? '');
      assert.match(msg, field, JSON.stringify(r.json));
    } else {
      assert.equal(r.status, 200, JSON.stringify(r.json));
      assert.ok(ms < 20_000, `compile and answer took ${ms} ms`);
    }
  });
}

test('a 10,000-value enum compiles in bounded time and answers with one of its values (or length)', async () => {
  const values = Array.from({ length: 10_000 }, (_, i) => `value-${i}`);
  const t0 = Date.now();
  const r = await http('POST', '/v1/chat/completions', { body: chat({ max_tokens: 32, ...schemaFormat({ enum: values }) }) });
  assert.ok(r.status === 200 || r.status === 400, `${r.status} ${JSON.stringify(r.json).slice(0, 300)}`);
  assert.ok(Date.now() - t0 < 20_000);
  if (r.status === 200 && r.json.choices[0].finish_reason === 'stop')
    assert.ok(values.includes(JSON.parse(r.json.choices[0].message.content)), r.json.choices[0].message.content);
});

test('while a hostile grammar compiles, other requests are answered', async () => {
  const hostile = Array.from({ length: 4 }, (_, i) =>
    http('POST', '/v1/chat/completions', { body: chat(schemaFormat({ enum: Array.from({ length: 10_000 }, (_, k) => `h${i}-${k}-${'z'.repeat(20)}`) })) }));
  const plain = await http('POST', '/v1/chat/completions', { body: chat({}) });
  assert.equal(plain.status, 200, JSON.stringify(plain.json));
  for (const r of await Promise.all(hostile)) assert.ok(r.status < 500, `${r.status}`);
});

// Keywords the grammar cannot enforce are refused with a 400 naming the keyword's path
// (docs/structured-output.md), never ignored: an ignored keyword lets invalid documents
// through (MaskBench's invalid instances).
const refused = [
  ['minProperties', { type: 'object', minProperties: 1 }],
  ['maxProperties', { type: 'object', maxProperties: 2 }],
  ['not', { not: { type: 'string' } }],
  ['if', { if: { type: 'string' }, then: { minLength: 2 } }],
  ['uniqueItems', { type: 'array', items: { type: 'integer' }, uniqueItems: true }],
  ['dependencies', { type: 'object', properties: { a: {}, b: {} }, dependencies: { a: ['b'] } }],
  ['format', { type: 'string', format: 'regex' }],
];
for (const [keyword, sub] of refused)
  test(`${keyword}: refused with a 400 naming properties.x.${keyword}`, async () => {
    const r = await http('POST', '/v1/chat/completions', {
      body: chat(schemaFormat({ type: 'object', properties: { x: sub }, required: ['x'] })),
    });
    assert.equal(r.status, 400, JSON.stringify(r.json));
    assert.match(r.json.error.message, new RegExp(`properties\\.x\\.${keyword}`), JSON.stringify(r.json));
    assert.match(r.json.error.message, /not supported/, JSON.stringify(r.json));
  });
