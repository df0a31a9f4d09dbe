// A headless Chromium driven over the DevTools protocol through a pipe
// (--remote-debugging-pipe: JSON messages ended by NUL on fds 3 and 4), so the browser
// tests need no npm package and no debugging port.
import { spawn } from 'node:child_process';
import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';

export function findChromium() {
  for (const p of [process.env.KEEL_CHROMIUM, '/usr/bin/chromium', '/usr/bin/chromium-browser', '/usr/bin/google-chrome']) {
    if (p && fs.existsSync(p)) return p;
  }
  return null;
}

export class Browser {
  static async launch(executable) {
    const profile = fs.mkdtempSync(path.join(os.tmpdir(), 'keel-chromium-'));
    const args = ['--headless=new', '--remote-debugging-pipe', '--no-first-run', '--no-default-browser-check',
      '--disable-gpu', '--disable-dev-shm-usage', '--disable-extensions', '--disable-background-networking',
      '--disable-component-update', '--disable-sync', '--metrics-recording-only', '--mute-audio',
      `--user-data-dir=${profile}`, '--window-size=1400,1000', 'about:blank'];
    if (process.getuid && process.getuid() === 0) args.unshift('--no-sandbox');
    const proc = spawn(executable, args, { stdio: ['ignore', 'ignore', 'pipe', 'pipe', 'pipe'] });
    const b = new Browser(proc, profile);
    await b.send('Target.setDiscoverTargets', { discover: false });
    return b;
  }

  constructor(proc, profile) {
    this.proc = proc;
    this.profile = profile;
    this.nextId = 1;
    this.pending = new Map();
    this.listeners = [];
    this.stderr = '';
    proc.stderr.on('data', (d) => { this.stderr = (this.stderr + d).slice(-4000); });
    let buf = Buffer.alloc(0);
    proc.stdio[4].on('data', (chunk) => {
      buf = Buffer.concat([buf, chunk]);
      let end;
      while ((end = buf.indexOf(0)) >= 0) {
        const msg = JSON.parse(buf.subarray(0, end).toString('utf8'));
        buf = buf.subarray(end + 1);
        this.dispatch(msg);
      }
    });
    proc.on('exit', () => {
      for (const { reject } of this.pending.values()) reject(new Error(`chromium exited: ${this.stderr}`));
      this.pending.clear();
    });
  }

  dispatch(msg) {
    if (msg.id !== undefined) {
      const p = this.pending.get(msg.id);
      if (!p) return;
      this.pending.delete(msg.id);
      if (msg.error) p.reject(new Error(`${p.method}: ${msg.error.message}`));
      else p.resolve(msg.result);
    } else {
      for (const l of this.listeners) l(msg);
    }
  }

  send(method, params = {}, sessionId) {
    const id = this.nextId++;
    const msg = { id, method, params };
    if (sessionId) msg.sessionId = sessionId;
    return new Promise((resolve, reject) => {
      this.pending.set(id, { resolve, reject, method });
      this.proc.stdio[3].write(JSON.stringify(msg) + '\0');
    });
  }

  on(fn) { this.listeners.push(fn); }

  async newPage() {
    const { targetId } = await this.send('Target.createTarget', { url: 'about:blank' });
    const { sessionId } = await this.send('Target.attachToTarget', { targetId, flatten: true });
    return new Page(this, sessionId);
  }

  async close() {
    try { await Promise.race([this.send('Browser.close'), new Promise((r) => setTimeout(r, 3000))]); } catch { /* gone */ }
    const exited = new Promise((r) => (this.proc.exitCode !== null ? r() : this.proc.once('exit', r)));
    const late = setTimeout(() => this.proc.kill('SIGKILL'), 3000);
    await exited;
    clearTimeout(late);
    fs.rmSync(this.profile, { recursive: true, force: true, maxRetries: 5 });
  }
}

export class Page {
  constructor(browser, sessionId) {
    this.browser = browser;
    this.sessionId = sessionId;
    this.events = [];
    browser.on((msg) => { if (msg.sessionId === sessionId) this.events.push(msg); });
  }

  send(method, params) { return this.browser.send(method, params, this.sessionId); }

  // The value of a JavaScript expression in the page (awaited when it is a promise).
  async eval(expression) {
    const r = await this.send('Runtime.evaluate', { expression, awaitPromise: true, returnByValue: true });
    if (r.exceptionDetails) throw new Error(`in page: ${r.exceptionDetails.exception?.description ?? r.exceptionDetails.text}`);
    return r.result.value;
  }

  // Polls `expression` until it is truthy (a bounded wait).
  async waitFor(expression, { timeoutMs = 60_000, what = expression } = {}) {  // a page on a loaded machine
    const until = Date.now() + timeoutMs;
    let v;
    while (Date.now() < until) {
      try {
        v = await this.eval(expression);
      } catch (e) {
        v = String(e.message); // not there yet (say, the page is still loading)
        if (!v.startsWith('in page:')) throw e;
        v = undefined;
      }
      if (v) return v;
      await new Promise((r) => setTimeout(r, 100));
    }
    throw new Error(`timed out waiting in the page for ${what} (last: ${JSON.stringify(v)})`);
  }

  async type(selector, text) {
    await this.eval(`document.querySelector(${JSON.stringify(selector)}).focus()`);
    await this.send('Input.insertText', { text });
  }

  click(selector) {
    return this.eval(`(() => { const e = document.querySelector(${JSON.stringify(selector)});
      if (!e) throw new Error('no element ' + ${JSON.stringify(selector)}); e.click(); return true; })()`);
  }

  async screenshot(file) {
    const { data } = await this.send('Page.captureScreenshot', { format: 'png', captureBeyondViewport: true });
    fs.writeFileSync(file, Buffer.from(data, 'base64'));
  }
}
