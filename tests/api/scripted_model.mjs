// Turns a `keel make-model` Llama directory into a scripted model for client tests:
// whatever the prompt, its reply is the given token ids and then EOS. A random model
// writes random text until max_tokens, which agents such as Claude Code treat as a
// failed turn; this one ends its turn like a real model, so the client's whole loop
// (request, stream, end_turn, next turn) runs against the real server and engine.
//
// How: attention and MLP outputs are zeroed (o_proj, down_proj, their biases, and gpt-oss's
// fused experts.down_proj with its bias), so the last hidden
// state is the current token's embedding. Each embedding is one-hot: chain token i
// on dimension i + 1, every other token on dimension 0; lm_head then maps dimension 0
// to the first reply token, dimension i to chain token i + 1, the last to EOS.
//   node scripted_model.mjs MODEL_DIR EOS_ID ID,ID,...
import fs from 'node:fs';
import path from 'node:path';

const [dir, eosArg, idsArg] = process.argv.slice(2);
const eos = Number(eosArg);
const chain = idsArg.split(',').map(Number);
if (new Set(chain).size !== chain.length || chain.includes(eos)) throw new Error('reply tokens must be distinct and not EOS');

const file = path.join(dir, 'model.safetensors');
const buf = fs.readFileSync(file);
const headerLen = Number(buf.readBigUInt64LE(0));
const header = JSON.parse(buf.subarray(8, 8 + headerLen).toString());
const base = 8 + headerLen;
function tensor(name) {
  const t = header[name];
  if (!t || t.dtype !== 'F32') throw new Error(`${name}: missing or not F32`);
  const [a, b] = t.data_offsets;
  return { data: new Float32Array(buf.buffer, buf.byteOffset + base + a, (b - a) / 4), shape: t.shape };
}

const embed = tensor('model.embed_tokens.weight');
const head = tensor('lm_head.weight');
const [vocab, hidden] = embed.shape;
if (chain.length + 1 > hidden) throw new Error(`at most ${hidden - 1} reply tokens`);
for (const name of Object.keys(header))
  if (/\.(o_proj|down_proj)\.(weight|bias)$|\.experts\.down_proj(_bias)?$/.test(name)) tensor(name).data.fill(0);
for (const name of Object.keys(header)) if (/norm\.weight$/.test(name)) tensor(name).data.fill(1);
embed.data.fill(0);
head.data.fill(0);
const slot = new Map(chain.map((t, i) => [t, i + 1]));
for (let t = 0; t < vocab; t++) embed.data[t * hidden + (slot.get(t) ?? 0)] = 1;
const strong = 20; // a logit gap no sampling temperature a client sends undoes
head.data[chain[0] * hidden + 0] = strong;
for (let i = 1; i < chain.length; i++) head.data[chain[i] * hidden + i] = strong;
head.data[eos * hidden + chain.length] = strong;
fs.writeFileSync(file, buf);
