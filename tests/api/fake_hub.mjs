// A stand-in for the Hugging Face hub on loopback: the API path keel pull reads
// (/api/models/ORG/NAME/revision/REV?blobs=true, with sizes, LFS SHA-256 and git blob
// ids as the hub gives them) and the file path (/ORG/NAME/resolve/COMMIT/FILE, with
// byte ranges, and LFS files answered by a redirect to a second "CDN" server on another
// port, as the hub does). Knobs make it misbehave: cut a download mid-file, send
// corrupt bytes, demand a token, claim an impossible size.
import crypto from 'node:crypto';
import fs from 'node:fs';
import http from 'node:http';
import path from 'node:path';

const sha256 = (buf) => crypto.createHash('sha256').update(buf).digest('hex');
const gitBlob = (buf) =>
  crypto.createHash('sha1').update(Buffer.concat([Buffer.from(`blob ${buf.length}\0`), buf])).digest('hex');

export function repoFromDir(dir, { lfs = (n) => n.endsWith('.safetensors') || n.endsWith('.gguf') } = {}) {
  const files = {};
  for (const name of fs.readdirSync(dir)) {
    const p = path.join(dir, name);
    if (fs.statSync(p).isFile()) files[name] = { data: fs.readFileSync(p), lfs: lfs(name) };
  }
  return files;
}

function listen(server) {
  return new Promise((resolve) => server.listen(0, '127.0.0.1', () => resolve(server.address().port)));
}

// repos: { 'org/name': { commit, files: {name: {data, lfs}}, revisions: {main: commit},
//          token (required bearer), extraSiblings: [...], claimSize: {name: bytes} } }
export async function startFakeHub(repos) {
  const hub = {
    repos,
    log: [],          // {path, range, auth, host}
    cutAfter: null,   // {file, bytes, times}: close the socket after `bytes` of `file`, `times` times
    corrupt: null,    // file name whose bytes are served flipped
  };
  const serveFile = (req, res, repo, file) => {
    const f = repo.files[file];
    if (!f) {
      res.writeHead(404, { 'x-error-code': 'EntryNotFound' }).end('not found');
      return;
    }
    let data = f.data;
    if (hub.corrupt === file) {
      data = Buffer.from(data);
      data[data.length >> 1] ^= 0xff;
    }
    let start = 0;
    const m = /^bytes=(\d+)-$/.exec(req.headers.range ?? '');
    if (m) start = Number(m[1]);
    if (start > data.length) {
      res.writeHead(416).end();
      return;
    }
    const body = data.subarray(start);
    const headers = { 'content-type': 'application/octet-stream', 'content-length': body.length };
    if (m) headers['content-range'] = `bytes ${start}-${data.length - 1}/${data.length}`;
    res.writeHead(m ? 206 : 200, headers);
    const cut = hub.cutAfter;
    if (cut && cut.file === file && cut.times > 0) {
      cut.times -= 1;
      const n = Math.max(0, Math.min(body.length, cut.bytes - start));
      res.write(body.subarray(0, n), () => res.socket.destroy());
      return;
    }
    res.end(body);
  };

  const cdn = http.createServer((req, res) => {
    hub.log.push({ server: 'cdn', path: req.url, range: req.headers.range, auth: req.headers.authorization });
    const m = /^\/cdn\/([^/]+)\/([^/]+)\/(.+)$/.exec(req.url);
    const repo = m && hub.repos[`${m[1]}/${m[2]}`];
    if (!repo) return res.writeHead(404).end();
    serveFile(req, res, repo, decodeURIComponent(m[3]));
  });
  const cdnPort = await listen(cdn);

  const api = http.createServer((req, res) => {
    hub.log.push({ server: 'hub', path: req.url, range: req.headers.range, auth: req.headers.authorization });
    const url = new URL(req.url, 'http://x');
    let m = /^\/api\/models\/([^/]+)\/([^/]+)\/revision\/([^/]+)$/.exec(url.pathname);
    if (m) {
      const repo = hub.repos[`${m[1]}/${m[2]}`];
      if (!repo) return res.writeHead(401, { 'x-error-code': 'RepoNotFound' }).end('{"error":"Repository not found"}');
      if (repo.token && req.headers.authorization !== `Bearer ${repo.token}`)
        return res.writeHead(401).end('{"error":"Invalid credentials"}');
      const rev = decodeURIComponent(m[3]);
      const commit = repo.revisions?.[rev] ?? (rev === repo.commit ? repo.commit : null);
      if (!commit) return res.writeHead(404, { 'x-error-code': 'RevisionNotFound' }).end('{"error":"Invalid rev id"}');
      const siblings = Object.entries(repo.files).map(([name, f]) => {
        const size = repo.claimSize?.[name] ?? f.data.length;
        const s = { rfilename: name, size, blobId: f.lfs ? sha256(Buffer.from(name)).slice(0, 40) : gitBlob(f.data) };
        if (f.lfs) s.lfs = { sha256: sha256(f.data), size, pointerSize: 134 };
        return s;
      });
      for (const extra of repo.extraSiblings ?? []) siblings.push(extra);
      res.writeHead(200, { 'content-type': 'application/json' });
      return res.end(JSON.stringify({ id: m[1] + '/' + m[2], sha: commit, siblings }));
    }
    m = /^\/([^/]+)\/([^/]+)\/resolve\/([^/]+)\/(.+)$/.exec(url.pathname);
    if (m) {
      const repo = hub.repos[`${m[1]}/${m[2]}`];
      if (!repo) return res.writeHead(401, { 'x-error-code': 'RepoNotFound' }).end();
      if (repo.token && req.headers.authorization !== `Bearer ${repo.token}`) return res.writeHead(401).end();
      const file = decodeURIComponent(m[4]);
      if (repo.files[file]?.lfs) {
        // LFS files live on the CDN: a redirect to another host (port), as on the hub.
        res.writeHead(302, { location: `http://localhost:${cdnPort}/cdn/${m[1]}/${m[2]}/${m[4]}` });
        return res.end();
      }
      return serveFile(req, res, repo, file);
    }
    res.writeHead(404).end();
  });
  const port = await listen(api);
  hub.url = `http://127.0.0.1:${port}`;
  hub.close = () => Promise.all([new Promise((r) => api.close(r)), new Promise((r) => cdn.close(r))]).then(() => {
    api.closeAllConnections?.();
    cdn.closeAllConnections?.();
  });
  hub.stop = () => {
    api.closeAllConnections?.();
    cdn.closeAllConnections?.();
    return hub.close();
  };
  return hub;
}
