// Tools injected into the prompt when the model's template has no tools section (the
// test model's has none) are part of every view of the prompt: /apply-template shows
// them, /tokenize and Anthropic count_tokens count them, and each matches what a
// generation with the same tools is charged.
import test from 'node:test';
import assert from 'node:assert/strict';
import { MODEL, anthropic, http, openai } from './helpers.mjs';

const messages = [{ role: 'user', content: 'What is the weather in Paris?' }];
const tools = [{
  type: 'function',
  function: {
    name: 'get_weather',
    description: 'Looks up the current weather of a city',
    parameters: { type: 'object', properties: { city: { type: 'string' } }, required: ['city'] },
  },
}];

test('/apply-template renders injected tools, as generation does', async () => {
  const plain = await http('POST', '/apply-template', { body: { model: MODEL, messages } });
  const withTools = await http('POST', '/apply-template', { body: { model: MODEL, messages, tools } });
  assert.equal(plain.status, 200, plain.text);
  assert.equal(withTools.status, 200, withTools.text);
  assert.ok(!plain.json.prompt.includes('get_weather'));
  assert.ok(withTools.json.prompt.includes('get_weather'), withTools.json.prompt);
  assert.ok(withTools.json.prompt.includes('Looks up the current weather of a city'));
  // add_generation_prompt false drops only the assistant header.
  const noGen = await http('POST', '/apply-template',
    { body: { model: MODEL, messages, tools, add_generation_prompt: false } });
  assert.ok(noGen.json.prompt.includes('get_weather'));
  assert.ok(withTools.json.prompt.startsWith(noGen.json.prompt));
  assert.ok(withTools.json.prompt.length > noGen.json.prompt.length);
  // The same text is what a chat completion with these tools is charged for.
  const tok = await http('POST', '/tokenize', { body: { model: MODEL, messages, tools } });
  const chat = await openai().chat.completions.create({ model: MODEL, messages, tools, max_tokens: 1 });
  assert.equal(chat.usage.prompt_tokens, tok.json.count);
  const tokText = await http('POST', '/tokenize',
    { body: { model: MODEL, prompt: withTools.json.prompt, add_special_tokens: false } });
  assert.equal(tokText.json.count, tok.json.count);
});

test('count_tokens counts injected tools, as messages.create is charged', async () => {
  const client = anthropic();
  const atools = [{ name: 'get_weather', description: 'Looks up the current weather of a city',
    input_schema: tools[0].function.parameters }];
  const bare = await client.messages.countTokens({ model: MODEL, messages });
  const counted = await client.messages.countTokens({ model: MODEL, messages, tools: atools });
  assert.ok(counted.input_tokens > bare.input_tokens + 10, `${counted.input_tokens} vs ${bare.input_tokens}`);
  const msg = await client.messages.create({ model: MODEL, messages, tools: atools, max_tokens: 1 });
  const u = msg.usage;
  assert.equal(u.input_tokens + u.cache_read_input_tokens + u.cache_creation_input_tokens, counted.input_tokens);
});
