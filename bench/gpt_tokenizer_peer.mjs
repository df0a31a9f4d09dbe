// Peer figure for keel's o200k_harmony tokenizer: gpt-tokenizer 4.0.0 (pure JavaScript,
// the pinned npm package) encoding the same corpus, whole and line by line, single
// thread. Prints MB/s and the token count (to compare with keel's tokenizer_bench).
//   zstd -dc tests/fixtures/tokenizer/corpus.txt.zst > /tmp/corpus.txt
//   NODE_PATH=tests/npm/node_modules node bench/gpt_tokenizer_peer.mjs /tmp/corpus.txt
import fs from 'node:fs';
import path from 'node:path';
import { createRequire } from 'node:module';

const require = createRequire(path.resolve(process.env.NODE_PATH ?? 'tests/npm/node_modules', 'noop.js'));
const pkg = path.dirname(require.resolve('gpt-tokenizer/package.json'));
const { encode } = await import(path.join(pkg, 'esm', 'encoding', 'o200k_harmony.js'));
const text = fs.readFileSync(process.argv[2], 'utf8');
const mb = Buffer.byteLength(text) / 1e6;
encode(text.slice(0, 100000));  // warm up
for (const [name, run] of [
  ['whole', () => encode(text).length],
  ['lines', () => text.split('\n').reduce((n, l) => n + encode(l).length, 0)],
]) {
  const t0 = process.hrtime.bigint();
  const n = run();
  const s = Number(process.hrtime.bigint() - t0) / 1e9;
  console.log(`${name}: ${(mb / s).toFixed(2)} MB/s, ${n} tokens, ${s.toFixed(2)} s`);
}
