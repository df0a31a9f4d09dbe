// Test vectors for keel's o200k_harmony tokenizer, made by the pinned gpt-tokenizer
// 4.0.0 (its o200k_harmony encoding: o200k_base ranks, the o200k split pattern, the
// harmony special tokens). Writes JSON [{text, ids}] to the path given, or stdout.
// Regenerate: node tests/npm/o200k_harmony_vectors.mjs tests/fixtures/harmony/o200k_harmony_vectors.json
import fs from 'node:fs';
import { encode, decode } from 'gpt-tokenizer/encoding/o200k_harmony';

const corpus = [
  'Hello, world!',
  "I'm sure they'll say we've done what you'd've DONE'S.",
  "DON'T SHOUT, it's fine. He'S HERE. They'RE gone.",
  'Zürich, São Paulo, Kraków and Ångström: naïve café déjà vu.',
  'Здравствуй, мир! Привет всем.',
  '日本語のテキストと中文文本，还有한국어 문장도 있습니다。',
  'مرحبا بالعالم — שלום עולם',
  'emoji: 👋🏽 🧑‍💻 🇫🇷 ❤️‍🔥 and symbols ∑∫√π ≤ ≥ ≠',
  'Numbers: 1 12 123 1234 12345 3.14159 -42 1e10 0x1F 1,000,000',
  'def fib(n):\n    if n < 2:\n        return n\n    return fib(n - 1) + fib(n - 2)\n',
  'for (int i = 0; i < n; ++i) { sum += a[i] * b[i]; }  // dot\n\tpath/to/file.cpp\r\n',
  '    leading spaces, trailing spaces    \n\n\n   \t\t mixed whitespace runs  ',
  'CamelCaseWords and snake_case_words and SCREAMING_CASE, HTTPServer XMLHttpRequest',
  'URLs: https://example.com/a/b?c=d&e=f#g and mail@example.org',
  '<|start|>system<|message|>You are ChatGPT.<|end|><|start|>user<|message|>Hi<|end|><|start|>assistant',
  '<|channel|>analysis<|message|>Think first.<|end|><|start|>assistant<|channel|>final<|message|>Done.<|return|>',
  '<|start|>assistant<|channel|>commentary to=functions.get_weather <|constrain|>json<|message|>{"city":"Paris"}<|call|>',
  '<|start|>functions.get_weather to=assistant<|channel|>commentary<|message|>{"temp": 21}<|end|>',
  '<|startoftext|><|endoftext|><|endofprompt|><|reserved_200000|><|reserved_201087|>',
  'Reasoning: high\n\n# Valid channels: analysis, commentary, final.',
  '"quotes" \'single\' `back` «guillemets» „low“',
  'a\u00A0b\u2003c\u200Bd',
];

// gpt-tokenizer 4.0.0 finds a special token only at the start of the text ("a<|end|>"
// encodes "<|end|>" as ordinary text), so texts are split at the specials here: each
// special alone (which it encodes right) and the text between them as ordinary text.
const specialRe = /<\|(?:start|end|message|channel|constrain|return|call|startoftext|endoftext|endofprompt|reserved_\d+)\|>/g;
function encodeWithSpecials(text) {
  const ids = [];
  let last = 0;
  for (const m of text.matchAll(specialRe)) {
    if (m.index > last) ids.push(...encode(text.slice(last, m.index)));
    const sp = encode(m[0], { allowedSpecial: 'all' });
    if (sp.length !== 1) throw new Error(`not one special token: ${m[0]}`);
    ids.push(sp[0]);
    last = m.index + m[0].length;
  }
  if (last < text.length) ids.push(...encode(text.slice(last)));
  return ids;
}

const vectors = corpus.map((text) => {
  const ids = encodeWithSpecials(text);
  if (decode(ids) !== text) throw new Error(`round trip failed: ${JSON.stringify(text)}`);
  return { text, ids };
});
const out = JSON.stringify(vectors, null, 0).replace(/\},\{/g, '},\n{') + '\n';
if (process.argv[2]) fs.writeFileSync(process.argv[2], out);
else process.stdout.write(out);
