// Servers of their own for the Responses API tests (responses, codex, ai_sdk, langchain):
// `keel serve` on a copy of the test model, changed where a test needs it.
import { spawn } from 'node:child_process';
import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { KEEL_BIN, MODEL_PATH } from './helpers.mjs';

// Copies the test model to DIR/NAME, lets `edit(modelDir)` change it, starts keel serve
// on it (extra args after the defaults) and resolves once it listens.
export async function startModelServer(name, { edit = () => {}, args = [] } = {}) {
  const dir = fs.mkdtempSync(path.join(os.tmpdir(), `keel-${name}-`));
  const modelDir = path.join(dir, name);
  fs.cpSync(MODEL_PATH, modelDir, { recursive: true });
  edit(modelDir);
  const proc = spawn(KEEL_BIN, ['serve', modelDir, '--port', '0', '--threads', '1', ...args],
    { stdio: ['ignore', 'pipe', 'pipe'] });
  let log = '';
  const url = await new Promise((resolve, reject) => {
    const on = (d) => {
      log += d;
      const m = /listening on (http\S+)/.exec(log);
      if (m) resolve(m[1]);
    };
    proc.stdout.on('data', on);
    proc.stderr.on('data', on);
    proc.on('exit', (code) => reject(new Error(`keel serve exited ${code}: ${log}`)));
  });
  return {
    url, model: name, proc, dir, log: () => log,
    stop() {
      proc.kill('SIGTERM');
      fs.rmSync(dir, { recursive: true, force: true });
    },
  };
}

export function editJson(file, fn) {
  const j = fs.existsSync(file) ? JSON.parse(fs.readFileSync(file, 'utf8')) : {};
  fn(j);
  fs.writeFileSync(file, JSON.stringify(j));
}

// Gives the model in `dir` a chat template that ends its generation prompt inside a
// <think> block (as the DeepSeek-R1 and Qwen3 thinking templates do): all the random
// model writes is then reasoning.
export function makeThinking(dir) {
  editJson(path.join(dir, 'tokenizer_config.json'), (tc) => {
    tc.chat_template = "{% for m in messages %}{{ '<|' + m['role'] + '|>\\n' + m['content'] + '\\n' }}{% endfor %}" +
      "{% if add_generation_prompt %}{{ '<|assistant|>\\n<think>\\n' }}{% endif %}";
  });
}

export function startThinkingServer() {
  return startModelServer('thinker', { edit: makeThinking });
}
