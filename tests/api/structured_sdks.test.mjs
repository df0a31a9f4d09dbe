// Structured output through the AI SDK and LangChain against a real `keel serve` with a
// random-weight model (issue 17): AI SDK generateObject and Output.object over the chat
// and Responses providers, LangChain withStructuredOutput by JSON schema and by a forced
// function call. Whatever the model "wants", the object validates (ajv) against the
// schema the SDK sent; a max_tokens too small for the document ends with `length` and
// the SDK says so. A recording fetch checks which wire field carried the schema.
import test from 'node:test';
import assert from 'node:assert/strict';
import { createRequire } from 'node:module';
import path from 'node:path';
import { KEY, MODEL, URL_MAIN } from './helpers.mjs';

const require = createRequire(path.join(process.env.NODE_PATH, 'noop.js'));
const { generateObject, generateText, Output, NoObjectGeneratedError } = require('ai');
const { createOpenAI } = require('@ai-sdk/openai');
const { ChatOpenAI } = require('@langchain/openai');
const { z } = require('zod');
const Ajv = require('ajv').default ?? require('ajv');

const sent = [];  // {url, body}
async function recording(u, init) {
  sent.push({ url: String(u), body: init?.body ? JSON.parse(init.body) : undefined });
  return fetch(u, init);
}
const provider = createOpenAI({ baseURL: `${URL_MAIN}/v1`, apiKey: KEY ?? 'none', fetch: recording });

// Bounded everywhere, so a random model finishes well inside the token budget.
const Person = z.object({
  name: z.string().max(10),
  age: z.number().int().min(0).max(120),
  role: z.enum(['admin', 'user', 'guest']),
  tags: z.array(z.string().max(5)).max(2),
});
// Ajv's default draft is 07: the 2020-12 $schema tag zod writes is dropped.
const { $schema: _draft, ...personSchema } = z.toJSONSchema(Person);
const validatePerson = new Ajv({ strict: false }).compile(personSchema);
// A document no 3-token answer can finish.
const Long = z.object({ text: z.string().min(60) });

const check = (obj, what) => assert.ok(validatePerson(obj), `${what}: ${JSON.stringify(validatePerson.errors)} ${JSON.stringify(obj)}`);
const lastSent = (n) => sent.slice(n).at(-1);

for (const [api, model] of [['chat', () => provider.chat(MODEL)], ['responses', () => provider.responses(MODEL)]]) {
  test(`AI SDK generateObject over ${api} validates`, async () => {
    for (const seed of [1, 2]) {
      const n = sent.length;
      const r = await generateObject({ model: model(), schema: Person, prompt: 'Make up a person.',
        temperature: 1, seed, maxOutputTokens: 300, maxRetries: 0 });
      check(r.object, `${api} seed ${seed}`);
      assert.equal(r.finishReason, 'stop');
      const body = lastSent(n).body;
      if (api === 'chat') assert.equal(body.response_format?.type, 'json_schema', JSON.stringify(body));
      else assert.equal(body.text?.format?.type, 'json_schema', JSON.stringify(body));
    }
  });

  test(`AI SDK generateText with Output.object over ${api} validates`, async () => {
    const r = await generateText({ model: model(), output: Output.object({ schema: Person }),
      prompt: 'Make up a person.', temperature: 0.8, seed: 3, maxOutputTokens: 300, maxRetries: 0 });
    check(r.output, api);
    assert.equal(r.finishReason, 'stop');
  });

  test(`AI SDK generateObject over ${api}: too few tokens ends with length and the SDK says so`, async () => {
    await assert.rejects(
      generateObject({ model: model(), schema: Long, prompt: 'x', maxOutputTokens: 3, maxRetries: 0 }),
      (e) => {
        assert.ok(NoObjectGeneratedError.isInstance(e), String(e));
        assert.equal(e.finishReason, 'length');
        return true;
      });
  });
}

const chat = (fields = {}) => new ChatOpenAI({
  model: MODEL, apiKey: KEY ?? 'none', maxRetries: 0, temperature: 1, maxTokens: 300,
  configuration: { baseURL: `${URL_MAIN}/v1`, fetch: recording }, ...fields,
});

for (const method of ['jsonSchema', 'functionCalling']) {
  for (const useResponsesApi of [false, true]) {
    const what = `${method}${useResponsesApi ? ' over responses' : ''}`;
    test(`LangChain withStructuredOutput ${what} validates`, async () => {
      for (const seed of [4, 5]) {
        const n = sent.length;
        const s = chat({ useResponsesApi, seed }).withStructuredOutput(Person, { method, name: 'person' });
        const obj = await s.invoke('Make up a person.');
        check(obj, `${what} seed ${seed}`);
        const body = lastSent(n).body;
        if (method === 'functionCalling') {
          // A forced call of the one tool: the grammar makes its arguments validate.
          const forced = body.tool_choice;
          assert.ok(forced && forced !== 'auto' && forced !== 'none', JSON.stringify(body));
        } else if (useResponsesApi) {
          assert.equal(body.text?.format?.type, 'json_schema', JSON.stringify(body));
        } else {
          assert.equal(body.response_format?.type, 'json_schema', JSON.stringify(body));
        }
      }
    });
  }
}

test('LangChain withStructuredOutput: too few tokens ends with length and LangChain says so', async () => {
  const n = sent.length;
  const s = chat({ maxTokens: 3 }).withStructuredOutput(Long, { method: 'jsonSchema' });
  // Its parse helper refuses a document cut by the length limit (openai's
  // LengthFinishReasonError) instead of returning a partial object.
  await assert.rejects(s.invoke('x'), (e) => {
    assert.equal(e.constructor.name, 'LengthFinishReasonError', String(e));
    assert.match(e.message, /length limit/);
    return true;
  });
  assert.equal(lastSent(n).body.response_format?.type, 'json_schema');
});
