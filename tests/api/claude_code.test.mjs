// Claude Code, headless, against a real keel serve: `claude -p`, `--continue` and
// `--output-format stream-json` each run a turn and exit 0 with the model's reply.
// The server (run.sh, "agent") serves a scripted one-layer model that answers
// "Hello from keel." and ends its turn, so the client's whole loop runs: its ~15k-token
// prompt with a system entry inside messages, adaptive thinking, output_config,
// context_management, 32,000 max_tokens (clamped to the context), streaming, and the
// prefix cache on the second turn. Claude Code must not reach the internet: its
// telemetry, updater and other traffic are off, and HOME is a fresh directory.
import test, { before, after } from 'node:test';
import assert from 'node:assert/strict';
import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { CLAUDE, runClaude } from './agent_clients.mjs';

const URL_AGENT = process.env.KEEL_AGENT_URL;
const MODEL = process.env.KEEL_AGENT_MODEL;
const REPLY = 'Hello from keel.';
let home;
let cwd;

before(() => {
  home = fs.mkdtempSync(path.join(os.tmpdir(), 'keel-claude-home-'));
  cwd = fs.mkdtempSync(path.join(os.tmpdir(), 'keel-claude-work-'));
});

after(() => {
  for (const d of [home, cwd]) if (d) fs.rmSync(d, { recursive: true, force: true });
});

function claude(args, opts = {}) {
  return runClaude(args, { home, cwd, baseUrl: URL_AGENT, model: MODEL, ...opts });
}

test('claude -p answers through keel', async (t) => {
  if (!fs.existsSync(CLAUDE) || !URL_AGENT) return t.skip('no Claude Code CLI or agent server');
  const r = await claude(['-p', 'say hello']);
  assert.equal(r.code, 0, r.stderr + r.stdout);
  assert.equal(r.stdout.trim(), REPLY);
});

test('claude -p --continue runs a second turn of the same session', async (t) => {
  if (!fs.existsSync(CLAUDE) || !URL_AGENT) return t.skip('no Claude Code CLI or agent server');
  const r = await claude(['-p', '--continue', 'and again']);
  assert.equal(r.code, 0, r.stderr + r.stdout);
  assert.equal(r.stdout.trim(), REPLY);
});

test('claude -p --output-format stream-json streams events ending in a result', async (t) => {
  if (!fs.existsSync(CLAUDE) || !URL_AGENT) return t.skip('no Claude Code CLI or agent server');
  const r = await claude(['-p', '--output-format', 'stream-json', '--verbose', 'say hello']);
  assert.equal(r.code, 0, r.stderr + r.stdout);
  const events = r.stdout.trim().split('\n').map((l) => JSON.parse(l));
  assert.equal(events[0].type, 'system');
  assert.equal(events[0].model, MODEL);
  const assistant = events.filter((e) => e.type === 'assistant');
  assert.ok(assistant.length > 0, r.stdout);
  const text = assistant.flatMap((e) => e.message.content).filter((b) => b.type === 'text').map((b) => b.text).join('');
  assert.equal(text.trim(), REPLY);
  const result = events.at(-1);
  assert.equal(result.type, 'result');
  assert.equal(result.subtype, 'success');
  assert.equal(result.is_error, false);
  assert.equal(result.result.trim(), REPLY);
});
