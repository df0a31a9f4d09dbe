// keel's dashboard. Everything shown goes into the page as text (textContent), never as
// markup, so a model id, a log line or an error text cannot inject anything; the page's
// Content-Security-Policy forbids inline script and any other origin besides.
'use strict';

const KEY_SLOT = 'keel.apiKey';
const POLL_MS = 1000;
const HISTORY = 120; // chart points kept

const $ = (id) => document.getElementById(id);

function el(tag, text, cls) {
  const e = document.createElement(tag);
  if (text !== undefined && text !== null) e.textContent = String(text);
  if (cls) e.className = cls;
  return e;
}

function apiKey() { return sessionStorage.getItem(KEY_SLOT) || ''; }

class Unauthorized extends Error {}

async function api(path, options = {}) {
  const headers = Object.assign({}, options.headers || {});
  const key = apiKey();
  if (key) headers.authorization = 'Bearer ' + key;
  if (options.body !== undefined) headers['content-type'] = 'application/json';
  const res = await fetch(path, {
    method: options.method || 'GET',
    headers,
    body: options.body === undefined ? undefined : JSON.stringify(options.body),
    credentials: 'omit',
    cache: 'no-store',
    signal: options.signal,
  });
  if (res.status === 401) throw new Unauthorized('the API key was refused');
  if (options.raw) return res;
  const text = await res.text();
  let body = null;
  try { body = JSON.parse(text); } catch { body = { error: { message: text } }; }
  if (!res.ok) {
    const msg = (body && body.error && body.error.message) || res.statusText;
    throw new Error(`${res.status}: ${msg}`);
  }
  return body;
}

function bytes(n) {
  if (!n) return '0 B';
  const u = ['B', 'KiB', 'MiB', 'GiB', 'TiB'];
  let i = 0;
  while (n >= 1024 && i < u.length - 1) { n /= 1024; i++; }
  return `${n.toFixed(i ? 1 : 0)} ${u[i]}`;
}

function pct(x) { return `${(100 * (x || 0)).toFixed(1)}%`; }

function bar(fraction, late) {
  const b = el('span', null, 'bar' + (late ? ' late' : ''));
  const fill = el('span');
  fill.style.width = `${Math.max(0, Math.min(1, fraction)) * 100}%`;
  b.append(fill);
  return b;
}

// ---- login ---------------------------------------------------------------------------

function showLogin(message) {
  $('main-view').hidden = true;
  $('login-view').hidden = false;
  $('logout').hidden = true;
  $('login-error').textContent = message || '';
}

function showMain() {
  $('login-view').hidden = true;
  $('main-view').hidden = false;
  $('logout').hidden = !apiKey();
}

$('login-form').addEventListener('submit', (ev) => {
  ev.preventDefault();
  sessionStorage.setItem(KEY_SLOT, $('login-key').value);
  $('login-key').value = '';
  poll();
});

$('logout').addEventListener('click', () => {
  sessionStorage.removeItem(KEY_SLOT);
  showLogin('');
});

// ---- charts (plain canvas) -----------------------------------------------------------

const series = { throughput: [], latency: [], requests: [] };

function push(list, point) {
  list.push(point);
  if (list.length > HISTORY) list.shift();
}

function drawChart(canvas, points, colors, labels) {
  const ctx = canvas.getContext('2d');
  const w = canvas.width, h = canvas.height, pad = 24;
  ctx.clearRect(0, 0, w, h);
  let max = 1;
  for (const p of points) for (const v of p) max = Math.max(max, v);
  ctx.strokeStyle = '#e3e6eb';
  ctx.fillStyle = '#555';
  ctx.font = '11px sans-serif';
  ctx.beginPath(); ctx.moveTo(pad, h - pad); ctx.lineTo(w, h - pad); ctx.stroke();
  ctx.fillText(max.toPrecision(3), 2, 12);
  ctx.fillText('0', 2, h - pad);
  colors.forEach((color, k) => {
    ctx.strokeStyle = color;
    ctx.lineWidth = 2;
    ctx.beginPath();
    points.forEach((p, i) => {
      const x = pad + (i * (w - pad)) / Math.max(1, HISTORY - 1);
      const y = h - pad - (p[k] / max) * (h - 2 * pad);
      if (i === 0) ctx.moveTo(x, y); else ctx.lineTo(x, y);
    });
    ctx.stroke();
    ctx.fillStyle = color;
    const last = points.length ? points[points.length - 1][k] : 0;
    ctx.fillText(`${labels[k]} ${last.toFixed(1)}`, pad + 8 + k * 130, h - 6);
  });
}

// ---- status --------------------------------------------------------------------------

// A loading model's phase, a bar when its work is counted, and the time it has taken.
function progressCell(p) {
  const c = el('span');
  if (!p) return c;
  c.append(el('span', p.phase, 'phase'));
  const count = (n) => (p.unit === 'bytes' ? bytes(n) : `${n} ${p.unit}`.trim());
  if (p.fraction !== null && p.fraction !== undefined) {
    c.append(' ', bar(p.fraction, false), el('span', ` ${pct(p.fraction)} (${count(p.done)} of ${count(p.total)})`));
  } else if (p.done > 0) {
    c.append(el('span', ` ${count(p.done)}`));
  }
  c.append(el('span', ` ${(p.elapsed_seconds || 0).toFixed(1)} s`, 'elapsed'));
  return c;
}

let lastStatus = null;

function modelRow(m) {
  const tr = el('tr');
  tr.dataset.model = m.id;
  const td = (content, cls) => {
    const c = el('td', null, cls);
    if (content instanceof Node) c.append(content); else c.textContent = content ?? '';
    tr.append(c);
    return c;
  };
  td(m.id).className = 'model-id';
  td(m.state, 'state state-' + m.state);
  td((m.history || []).slice(-4).map((h) => `${h.state} ${Math.round(h.seconds_ago)}s ago`).join(' → '));
  td(bytes(m.memory_bytes)).dataset.bytes = m.memory_bytes;
  td(m.pinned ? 'yes' : 'no', 'pinned');
  td(m.idle_ttl_seconds > 0 ? `${m.idle_ttl_seconds} s` : 'none');
  const live = el('span');
  if (m.state === 'ready') {
    const age = m.step_age_seconds || 0, deadline = m.step_deadline_seconds || 1;
    live.append(bar(age / deadline, age > deadline),
      el('span', ` ${age.toFixed(2)} s / ${deadline.toFixed(0)} s`));
  } else {
    live.textContent = m.last_error ? `last error: ${m.last_error}` : '—';
  }
  td(live, 'liveness');
  td(`${m.running} running, ${m.waiting} waiting, ${m.preempted} preempted`, 'requests');
  const kv = m.kv_pool || {};
  const kvCell = td(m.kv_blocks
    ? `${m.kv_blocks.used}/${m.kv_blocks.total} blocks (${pct(m.kv_usage)}), ${m.kv_blocks.cached} cached`
    : `${kv.blocks} blocks planned`, 'kv');
  kvCell.dataset.total = m.kv_blocks ? m.kv_blocks.total : kv.blocks;
  td(m.prefix_cache_hit_rate !== undefined ? pct(m.prefix_cache_hit_rate) : '—', 'hit-rate');
  // Speculative decoding: tokens a verify step emits on average, drafts accepted, and
  // (--speculative-adaptive) the speed-up the server measured and whether it paused drafting.
  const sp = m.speculative;
  const measured = sp && typeof sp.speedup === 'number'
    ? `; ${sp.paused ? 'paused' : 'drafting'}, measured ${sp.speedup.toFixed(2)}x` : '';
  td(sp ? `${sp.method}: length ${sp.acceptance_length.toFixed(2)}, ${sp.accepted_tokens}/${sp.drafted_tokens} drafts accepted${measured}`
    : (m.speculative === null ? 'off' : '—'), 'spec');
  const tier = (t) => t && t.capacity_bytes
    ? `${bytes(t.used_bytes)} / ${bytes(t.capacity_bytes)}, ${t.blocks} blocks, ${t.hit_blocks} hits, ${t.errors} errors`
    : 'off';
  td(tier(m.tiers && m.tiers.host));
  td(tier(m.tiers && m.tiers.ssd));
  td(progressCell(m.progress), 'progress');
  const actions = el('td', null, 'actions');
  const button = (label, path) => {
    const b = el('button', label);
    b.type = 'button';
    b.dataset.action = label.toLowerCase();
    b.addEventListener('click', async () => {
      b.disabled = true;
      $('action-error').textContent = '';
      try {
        await api(`/v1/models/${encodeURIComponent(m.id)}/${path}`, { method: 'POST', body: {} });
      } catch (e) {
        $('action-error').textContent = `${label} ${m.id}: ${e.message}`;
      }
      b.disabled = false;
      poll();
    });
    actions.append(b);
  };
  button('Load', 'load');
  button('Unload', 'unload');
  button(m.pinned ? 'Unpin' : 'Pin', m.pinned ? 'unpin' : 'pin');
  tr.append(actions);
  return tr;
}

function fillModelSelect(select, ids) {
  const have = [...select.options].map((o) => o.value);
  if (have.join('\n') === ids.join('\n')) return;
  const keep = select.value;
  select.replaceChildren(...ids.map((id) => { const o = el('option', id); o.value = id; return o; }));
  if (ids.includes(keep)) select.value = keep;
}

function render(status, health) {
  lastStatus = status;
  const t = status.totals;
  $('totals').textContent =
    `${t.running} running · ${t.waiting} waiting · ${t.decode_tokens_per_second.toFixed(1)} tok/s decode · ` +
    `memory ${bytes(t.memory_bytes)}${t.memory_budget_bytes ? ' of ' + bytes(t.memory_budget_bytes) : ''}`;
  const hb = $('health');
  hb.textContent = health.ok ? 'healthy' : 'unhealthy';
  hb.title = health.reason || '';
  hb.className = 'badge ' + (health.ok ? 'ok' : 'bad');
  $('models').tBodies[0].replaceChildren(...status.models.map(modelRow));
  const ids = status.models.map((m) => m.id);
  fillModelSelect($('chat-model'), ids);
  fillModelSelect($('bench-model'), ids);
  const step = Math.max(0, ...status.models.map((m) => (m.last_step_seconds || 0) * 1000));
  push(series.throughput, [t.decode_tokens_per_second, t.prefill_tokens_per_second]);
  const lat = t.latency || { requests: 0, ttft_ms: { p50: 0 }, e2e_ms: { p50: 0 }, window_seconds: 60 };
  push(series.latency, [lat.ttft_ms.p50, lat.e2e_ms.p50, step]);
  const figures = $('latency-figures');
  figures.textContent = `${lat.requests} requests in the last ${lat.window_seconds} s`;
  figures.dataset.requests = String(lat.requests);
  push(series.requests, [t.running, t.waiting]);
  drawChart($('chart-throughput'), series.throughput, ['#1976d2', '#ef6c00'], ['decode', 'prefill']);
  drawChart($('chart-latency'), series.latency, ['#00838f', '#6a1b9a', '#9e9e9e'], ['TTFT', 'e2e', 'step']);
  drawChart($('chart-requests'), series.requests, ['#2e7d32', '#c62828'], ['running', 'waiting']);
  document.body.dataset.updates = String(Number(document.body.dataset.updates || 0) + 1);
}

async function health() {
  const res = await fetch('/health', { cache: 'no-store', credentials: 'omit' });
  const body = await res.json().catch(() => ({}));
  const reason = (body.problems || []).map((p) => `${p.model}: ${p.reason}`).join('; ');
  return { ok: res.ok, reason };
}

// ---- logs ----------------------------------------------------------------------------

let logSeq = 0;
const LOG_ROWS = 300;

async function pollLogs() {
  const body = await api(`/api/logs?after=${logSeq}`);
  const tbody = $('logs').tBodies[0];
  for (const l of body.lines) {
    logSeq = Math.max(logSeq, l.seq);
    const tr = el('tr', null, l.level);
    tr.append(el('td', new Date(l.time * 1000).toLocaleTimeString()), el('td', l.level), el('td', l.text));
    tbody.prepend(tr);
  }
  while (tbody.rows.length > LOG_ROWS) tbody.deleteRow(-1);
}

// ---- polling -------------------------------------------------------------------------

let polling = false;

async function poll() {
  if (polling) return;
  polling = true;
  try {
    const [status, h] = await Promise.all([api('/api/status'), health()]);
    showMain();
    render(status, h);
    await pollLogs();
  } catch (e) {
    if (e instanceof Unauthorized) {
      showLogin(apiKey() ? 'That key was refused.' : '');
      sessionStorage.removeItem(KEY_SLOT);
    } else {
      $('health').textContent = 'unreachable';
      $('health').className = 'badge bad';
    }
  } finally {
    polling = false;
  }
}

// ---- chat ----------------------------------------------------------------------------

const chatHistory = [];

function addMessage(who, text) {
  const div = el('div', null, 'msg ' + who);
  div.append(el('b', who), el('span', text));
  $('chat-log').append(div);
  return div.lastChild;
}

$('chat-form').addEventListener('submit', async (ev) => {
  ev.preventDefault();
  const text = $('chat-input').value;
  $('chat-input').value = '';
  chatHistory.push({ role: 'user', content: text });
  addMessage('user', text);
  const out = addMessage('assistant', '');
  out.parentNode.dataset.done = 'false';
  $('chat-send').disabled = true;
  try {
    const res = await api('/v1/chat/completions', {
      method: 'POST',
      raw: true,
      body: { model: $('chat-model').value, messages: chatHistory, stream: true, max_tokens: 64 },
    });
    if (!res.ok) {
      const b = await res.json().catch(() => ({}));
      throw new Error(`${res.status}: ${(b.error && b.error.message) || res.statusText}`);
    }
    const reader = res.body.getReader();
    const decoder = new TextDecoder();
    let buf = '';
    for (;;) {
      const { value, done } = await reader.read();
      if (done) break;
      buf += decoder.decode(value, { stream: true });
      let nl;
      while ((nl = buf.indexOf('\n')) >= 0) {
        const line = buf.slice(0, nl).trim();
        buf = buf.slice(nl + 1);
        if (!line.startsWith('data:')) continue;
        const data = line.slice(5).trim();
        if (data === '[DONE]') continue;
        const chunk = JSON.parse(data);
        if (chunk.error) throw new Error(chunk.error.message);
        const delta = chunk.choices && chunk.choices[0] && chunk.choices[0].delta;
        if (delta && delta.content) out.textContent += delta.content;
      }
    }
    chatHistory.push({ role: 'assistant', content: out.textContent });
  } catch (e) {
    out.textContent = `error: ${e.message}`;
    out.className = 'error';
    chatHistory.pop();
  }
  out.parentNode.dataset.done = 'true';
  $('chat-send').disabled = false;
});

// ---- benchmark -----------------------------------------------------------------------

let reportUrl = null;

$('bench-run').addEventListener('click', async () => {
  const b = $('bench-run');
  b.disabled = true;
  $('bench-state').textContent = 'running…';
  $('bench-state').className = '';
  $('bench-report').hidden = true;
  try {
    const r = await api('/api/bench', { method: 'POST', body: { model: $('bench-model').value } });
    const level = r.levels[0];
    const rows = [
      ['requests', `${level.completed} of ${level.requests} completed, ${level.failed} failed`],
      ['TTFT p50 / p99', `${level.ttft_ms.p50.toFixed(1)} / ${level.ttft_ms.p99.toFixed(1)} ms`],
      ['inter-token p50', `${level.itl_ms.p50.toFixed(2)} ms`],
      ['end to end p50 / p99', `${level.e2e_ms.p50.toFixed(1)} / ${level.e2e_ms.p99.toFixed(1)} ms`],
      ['output tokens/s', level.output_token_throughput.toFixed(1)],
      ['requests/s', level.request_throughput.toFixed(2)],
    ];
    $('bench-result').tBodies[0].replaceChildren(...rows.map(([k, v]) => {
      const tr = el('tr');
      tr.append(el('th', k), el('td', v));
      return tr;
    }));
    if (reportUrl) URL.revokeObjectURL(reportUrl);
    reportUrl = URL.createObjectURL(new Blob([r.report_html], { type: 'text/html' }));
    $('bench-report').href = reportUrl;
    $('bench-report').hidden = false;
    $('bench-state').textContent = 'done';
  } catch (e) {
    $('bench-state').textContent = `error: ${e.message}`;
    $('bench-state').className = 'error';
  }
  b.disabled = false;
});

poll();
setInterval(poll, POLL_MS);
