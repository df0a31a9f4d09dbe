// Serves the wedge suites' model ('tiny') as a mixture of experts (issue 19): makes a
// tiny random model of `arch` (`keel make-model --shape tiny`, the default model's
// tokenizer) and points WEDGE_MODEL_PATH at it. Imports nothing of the suites: call it
// before importing one, since wedge_lib.mjs reads WEDGE_MODEL_PATH when it loads.
import { execFileSync } from 'node:child_process';
import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { fileURLToPath } from 'node:url';

export function serveMoeInWedgeSuites(arch, dtype) {
  const here = path.dirname(fileURLToPath(import.meta.url));
  const work = fs.mkdtempSync(path.join(os.tmpdir(), `keel-wedge-${arch}-`));
  const dir = path.join(work, arch);
  execFileSync(process.env.KEEL_BIN, ['make-model', '--arch', arch, '--shape', 'tiny', '--dtype', dtype,
    '--tokenizer', path.resolve(here, '../../models/default'), '--seed', '8', '--out', dir], { stdio: 'pipe' });
  process.env.WEDGE_MODEL_PATH = dir;
  process.on('exit', () => fs.rmSync(work, { recursive: true, force: true }));
  console.log(`# the wedge suite's model 'tiny' is a ${arch} (${dtype})`);
}
