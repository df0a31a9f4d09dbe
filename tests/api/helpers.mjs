// Shared setup for the API tests: SDK clients bound to the servers run.sh started.
import { spawn } from 'node:child_process';
import { createRequire } from 'node:module';
import path from 'node:path';

const require = createRequire(path.join(process.env.NODE_PATH, 'noop.js'));
const OpenAIModule = require('openai');
const AnthropicModule = require('@anthropic-ai/sdk');
export const OpenAI = OpenAIModule.OpenAI ?? OpenAIModule.default ?? OpenAIModule;
export const Anthropic = AnthropicModule.Anthropic ?? AnthropicModule.default ?? AnthropicModule;

export const URL_MAIN = process.env.KEEL_URL;
export const URL_LRU = process.env.KEEL_LRU_URL;
export const KEY = process.env.KEEL_API_KEY_FOR_TESTS;
export const MODEL = process.env.KEEL_TEST_MODEL;
export const KEEL_BIN = process.env.KEEL_BIN;
export const MODEL_PATH = process.env.KEEL_TEST_MODEL_PATH;

export function openai(url = URL_MAIN, key = KEY) {
  return new OpenAI({ baseURL: `${url}/v1`, apiKey: key ?? 'none', maxRetries: 0, timeout: 60_000 });
}

export function anthropic(url = URL_MAIN, key = KEY) {
  return new Anthropic({ baseURL: url, apiKey: key ?? 'none', maxRetries: 0, timeout: 60_000 });
}

// Raw HTTP for what SDKs cannot send (malformed bodies) and for admin endpoints.
export async function http(method, pathname, { body, raw, headers = {}, url = URL_MAIN, key = KEY } = {}) {
  const h = { ...headers };
  if (key) h.authorization = `Bearer ${key}`;
  let payload;
  if (raw !== undefined) {
    payload = raw;
    // Bodies are JSON to the server (anything else is a 415): say so unless the test does.
    if (!Object.keys(h).some((k) => k.toLowerCase() === 'content-type')) h['content-type'] = 'application/json';
  }
  else if (body !== undefined) {
    payload = JSON.stringify(body);
    h['content-type'] = 'application/json';
  }
  const res = await fetch(`${url}${pathname}`, { method, headers: h, body: payload });
  const text = await res.text();
  let json;
  try {
    json = JSON.parse(text);
  } catch {
    json = undefined;
  }
  return { status: res.status, text, json, headers: res.headers };
}

export async function status(url = URL_MAIN) {
  const r = await http('GET', '/api/status', { url });
  if (r.status !== 200) throw new Error(`/api/status: ${r.status} ${r.text}`);
  return r.json;
}

// Starts a `keel serve ARGS` of a test's own and resolves once it says where it listens:
// {url, proc, log()} (log: its stdout and stderr so far); rejects with the log if it exits
// first or does not listen within timeoutMs (then it is killed). The caller stops it.
export function serveKeel(args, { what = 'keel serve', timeoutMs = 60_000 } = {}) {
  const proc = spawn(KEEL_BIN, ['serve', ...args], { stdio: ['ignore', 'pipe', 'pipe'] });
  let log = '';
  return new Promise((resolve, reject) => {
    const timer = setTimeout(() => {
      proc.kill('SIGKILL');
      reject(new Error(`${what} did not listen within ${timeoutMs} ms: ${log}`));
    }, timeoutMs);
    const on = (d) => {
      log += d;
      const m = /listening on (http\S+)/.exec(log);
      if (m) {
        clearTimeout(timer);
        resolve({ url: m[1], proc, log: () => log });
      }
    };
    proc.stdout.on('data', on);
    proc.stderr.on('data', on);
    proc.on('exit', (c) => {
      clearTimeout(timer);
      reject(new Error(`${what} exited ${c}: ${log}`));
    });
  });
}

export function modelStatus(st, id) {
  return st.models.find((m) => m.id === id);
}

export async function waitFor(fn, { timeoutMs = 10_000, intervalMs = 50, what = 'condition' } = {}) {
  const until = Date.now() + timeoutMs;
  let last;
  while (Date.now() < until) {
    last = await fn();
    if (last) return last;
    await new Promise((r) => setTimeout(r, intervalMs));
  }
  throw new Error(`timed out waiting for ${what}`);
}

// Makes MODEL's engine on the main server slow on purpose (run.sh starts it with
// --enable-fault-injection): every step stalls `secondsPerStep`, so a test that needs a
// generation still running when it acts (cancel, poll, disconnect) has one, however
// fast or loaded the machine. Returns the function that makes it fast again; call it in
// a finally.
export async function slowEngine({ model = MODEL, secondsPerStep = 0.2, url = URL_MAIN } = {}) {
  const r = await http('POST', '/debug/faults', {
    url, body: { model, kind: 'stall-step', seconds: secondsPerStep, count: 1_000_000 },
  });
  if (r.status !== 200) throw new Error(`slowEngine: /debug/faults answered ${r.status} ${r.text}`);
  return async () => {
    const d = await http('DELETE', `/debug/faults?model=${encodeURIComponent(model)}`, { url });
    if (d.status !== 200) throw new Error(`slowEngine: disarm answered ${d.status} ${d.text}`);
  };
}
