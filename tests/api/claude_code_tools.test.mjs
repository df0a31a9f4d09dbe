// Claude Code runs a tool that keel's model called: the agent server (run.sh) forces
// the first reply of each turn of its "agent-tools" model to call Claude Code's own Bash
// tool with `echo keel-tool-ran` (--force-tool-call, tests only, through the forced-tool
// grammar path); Claude Code, allowed to run Bash headless (--allowedTools), runs it and
// sends the result back; the turn after a tool result is not forced, and the scripted
// model answers "Hello from keel." and ends it. A recording proxy between Claude Code
// and keel shows what came back: a tool_result for the very tool_use id keel sent.
import test, { after, before } from 'node:test';
import assert from 'node:assert/strict';
import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { CLAUDE, runClaude, startRecordingProxy } from './agent_clients.mjs';

const URL_AGENT = process.env.KEEL_AGENT_URL;
const MODEL = 'agent-tools';
const REPLY = 'Hello from keel.';
let home, cwd, proxy;

before(async () => {
  home = fs.mkdtempSync(path.join(os.tmpdir(), 'keel-claude-tools-home-'));
  cwd = fs.mkdtempSync(path.join(os.tmpdir(), 'keel-claude-tools-work-'));
  if (URL_AGENT) proxy = await startRecordingProxy(URL_AGENT);
});

after(() => {
  proxy?.close();
  for (const d of [home, cwd]) if (d) fs.rmSync(d, { recursive: true, force: true });
});

function skip(t) {
  if (!fs.existsSync(CLAUDE) || !URL_AGENT) return t.skip('no Claude Code CLI or agent server');
  return false;
}

// The tool_use blocks keel answered with, and the tool_result blocks Claude Code sent,
// over the /v1/messages exchanges from `from` on.
function toolExchange(from) {
  const turns = proxy.seen.slice(from).filter((e) => e.method === 'POST' && e.url.startsWith('/v1/messages'));
  const uses = [];
  const results = [];
  for (const t of turns) {
    assert.equal(t.status, 200, t.response);
    const body = JSON.parse(t.body);
    if (body.model !== MODEL) continue;
    for (const m of body.messages)
      if (Array.isArray(m.content)) for (const b of m.content) if (b.type === 'tool_result') results.push(b);
    // Streamed (SSE) or whole: find the tool_use blocks either way.
    const blocks = t.response.startsWith('{')
      ? JSON.parse(t.response).content
      : t.response.split('\n').filter((l) => l.startsWith('data: ')).map((l) => JSON.parse(l.slice(6)))
        .filter((e) => e.type === 'content_block_start').map((e) => e.content_block);
    uses.push(...blocks.filter((b) => b.type === 'tool_use'));
  }
  return { uses, results };
}

function checkToolRan(from) {
  const { uses, results } = toolExchange(from);
  const bash = uses.find((u) => u.name === 'Bash');
  assert.ok(bash, `keel's reply called Bash: ${JSON.stringify(uses)}`);
  const result = results.find((r) => r.tool_use_id === bash.id);
  assert.ok(result, `a tool_result for ${bash.id} came back: ${JSON.stringify(results)}`);
  const text = typeof result.content === 'string' ? result.content : JSON.stringify(result.content);
  assert.match(text, /keel-tool-ran/, 'the result is the command\'s output: Claude Code ran it');
  assert.notEqual(result.is_error, true, text);
}

test('claude -p runs the Bash call keel\'s model made and sends its result back', async (t) => {
  if (skip(t)) return;
  const from = proxy.seen.length;
  const r = await runClaude(['-p', 'run the marker command', '--allowedTools', 'Bash'],
    { home, cwd, baseUrl: proxy.url, model: MODEL });
  assert.equal(r.code, 0, r.stderr + r.stdout);
  assert.equal(r.stdout.trim(), REPLY);
  checkToolRan(from);
});

test('claude -p --output-format stream-json shows the tool call and its result', async (t) => {
  if (skip(t)) return;
  const from = proxy.seen.length;
  const r = await runClaude(['-p', 'run the marker command', '--allowedTools', 'Bash', '--output-format', 'stream-json',
    '--verbose'], { home, cwd, baseUrl: proxy.url, model: MODEL });
  assert.equal(r.code, 0, r.stderr + r.stdout);
  const events = r.stdout.trim().split('\n').map((l) => JSON.parse(l));
  const blocks = (type) => events.filter((e) => e.message && Array.isArray(e.message.content))
    .flatMap((e) => e.message.content).filter((b) => b.type === type);
  const use = blocks('tool_use').find((b) => b.name === 'Bash');
  assert.ok(use, r.stdout);
  assert.deepEqual(use.input, { command: 'echo keel-tool-ran', description: 'Print a marker' });
  const result = blocks('tool_result').find((b) => b.tool_use_id === use.id);
  assert.ok(result, r.stdout);
  const last = events.at(-1);
  assert.equal(last.type, 'result');
  assert.equal(last.subtype, 'success');
  assert.equal(last.result.trim(), REPLY);
  checkToolRan(from);
});
