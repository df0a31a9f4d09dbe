// Running the coding-agent CLIs against keel: Claude Code headless, and a recording proxy
// that sits between a client and keel so that a test can read every request the client
// sent (e.g. that a tool result came back for the call keel's model made).
import { spawn } from 'node:child_process';
import http from 'node:http';
import path from 'node:path';
import { KEY } from './helpers.mjs';

export const CLAUDE = path.join(process.env.NODE_PATH ?? '', '.bin', 'claude');

// Forwards to `target`, recording each exchange in `seen`: {method, url, status, body,
// response} (the response body in full, SSE streams included). Resolves to
// {url, seen, close}.
export function startRecordingProxy(target) {
  const seen = [];
  return new Promise((resolve) => {
    const srv = http.createServer((req, res) => {
      const chunks = [];
      req.on('data', (c) => chunks.push(c)).on('end', () => {
        const body = Buffer.concat(chunks);
        const entry = { method: req.method, url: req.url, body: body.toString(), response: '' };
        seen.push(entry);
        const up = http.request(new URL(req.url, target), { method: req.method, headers: req.headers }, (r) => {
          entry.status = r.statusCode;
          res.writeHead(r.statusCode, r.headers);
          r.on('data', (c) => { entry.response += c; res.write(c); });
          r.on('end', () => res.end());
        });
        up.on('error', (e) => { entry.status = 599; res.destroy(e); });
        up.end(body);
      });
    });
    srv.listen(0, '127.0.0.1', () => resolve({
      url: `http://127.0.0.1:${srv.address().port}`, seen, close: () => srv.close(),
    }));
  });
}

// Runs `claude ARGS` in `cwd` with HOME `home` against `baseUrl`, every model alias on
// `model`, and no traffic beyond keel (telemetry, updater, error reports off).
// Resolves to {code, stdout, stderr}; rejects on a timeout.
export function runClaude(args, { home, cwd, baseUrl, model, timeoutMs = 240_000 }) {
  const env = {
    PATH: process.env.PATH,
    HOME: home,
    ANTHROPIC_BASE_URL: baseUrl,
    ANTHROPIC_API_KEY: KEY,
    ANTHROPIC_AUTH_TOKEN: KEY,
    ANTHROPIC_MODEL: model,
    ANTHROPIC_DEFAULT_HAIKU_MODEL: model,
    ANTHROPIC_DEFAULT_SONNET_MODEL: model,
    ANTHROPIC_DEFAULT_OPUS_MODEL: model,
    ANTHROPIC_SMALL_FAST_MODEL: model,
    CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC: '1',
    DISABLE_TELEMETRY: '1',
    DISABLE_AUTOUPDATER: '1',
    DISABLE_ERROR_REPORTING: '1',
    DISABLE_BUG_COMMAND: '1',
    CI: '1',
  };
  return new Promise((resolve, reject) => {
    const p = spawn(CLAUDE, args, { cwd, env, stdio: ['ignore', 'pipe', 'pipe'] });
    let stdout = '';
    let stderr = '';
    p.stdout.on('data', (d) => (stdout += d));
    p.stderr.on('data', (d) => (stderr += d));
    const timer = setTimeout(() => {
      p.kill('SIGKILL');
      reject(new Error(`claude ${args.join(' ')} timed out after ${timeoutMs} ms\n${stderr}`));
    }, timeoutMs);
    p.on('close', (code) => {
      clearTimeout(timer);
      resolve({ code, stdout, stderr });
    });
  });
}
