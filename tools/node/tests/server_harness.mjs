// Starts the real `kvfork serve` on a free loopback port with a tiny random
// Qwen3-shaped model (made once per build dir), for the node e2e tests.
import { spawn, execFileSync } from 'node:child_process';
import fs from 'node:fs';
import path from 'node:path';

const bin = process.env.KVFORK_BIN || 'kvfork';
const buildDir = process.env.KVFORK_BUILD_DIR || '.';
const cacheDir = process.env.KVFORK_CACHE_DIR || '.cache';

// Several e2e tests may start at once on a fresh build dir (ctest -j): each
// writes the model to its own temporary directory and renames it into
// place, so no test ever reads a half-written model.
export function tinyModelDir() {
  const dir = path.join(buildDir, 'test-models', 'server-tiny-qwen3');
  if (!fs.existsSync(path.join(dir, 'config.json'))) {
    fs.mkdirSync(path.dirname(dir), { recursive: true });
    const tmp = `${dir}.tmp-${process.pid}`;
    fs.rmSync(tmp, { recursive: true, force: true });
    execFileSync(bin, ['make-model', '--shape', 'tiny', '--seed', '1', '--tokenizer',
      path.join(cacheDir, 'npm/tokenizer-qwen3/package/models'), '--out', tmp], { stdio: 'inherit' });
    try {
      fs.renameSync(tmp, dir);
    } catch (e) {
      // Another test got there first: its model is the same (same seed).
      fs.rmSync(tmp, { recursive: true, force: true });
      if (!fs.existsSync(path.join(dir, 'config.json'))) throw e;
    }
  }
  return dir;
}

// Returns {url, baseURL, proc, log(), stop()}; stop() sends SIGTERM and
// resolves with the exit code.
export async function startServer(extraArgs = [], env = {}) {
  const model = tinyModelDir();
  const args = ['serve', '--model', model, '--host', '127.0.0.1', '--port', '0', '--threads', '2',
    '--kv-blocks', '2048', ...extraArgs];
  const proc = spawn(bin, args, { env: { ...process.env, ...env }, stdio: ['ignore', 'inherit', 'pipe'] });
  let stderr = '';
  const url = await new Promise((resolve, reject) => {
    const timer = setTimeout(() => reject(new Error('server did not start in 60 s:\n' + stderr)), 60000);
    proc.stderr.on('data', (d) => {
      stderr += d.toString();
      const m = stderr.match(/listening on (http:\/\/[0-9.]+:\d+)/);
      if (m) { clearTimeout(timer); resolve(m[1]); }
    });
    proc.on('exit', (code) => { clearTimeout(timer); reject(new Error(`server exited ${code}:\n${stderr}`)); });
  });
  proc.removeAllListeners('exit');
  const exited = new Promise((resolve) => proc.on('exit', (code, sig) => resolve(code ?? sig)));
  return {
    url, baseURL: url + '/v1', proc,
    log: () => stderr,
    stop: async () => { proc.kill('SIGTERM'); return exited; },
    exited,
  };
}

export async function modelId(url, headers = {}) {
  const r = await fetch(url + '/v1/models', { headers });
  return (await r.json()).data[0].id;
}

export async function postJson(url, body, headers = {}) {
  const r = await fetch(url, {
    method: 'POST', headers: { 'Content-Type': 'application/json', ...headers },
    body: typeof body === 'string' || body instanceof Uint8Array ? body : JSON.stringify(body),
  });
  const text = await r.text();
  let json = null;
  try { json = JSON.parse(text); } catch { /* not JSON */ }
  return { status: r.status, headers: r.headers, text, json };
}

// A strict reader of the Prometheus text format (0.0.4): every sample follows
// its family's HELP and TYPE lines, names and labels are well formed,
// histogram buckets are cumulative and end in +Inf equal to _count.
export function parsePrometheus(text) {
  const samples = new Map();
  const families = new Map();
  const sampleRe = /^([a-zA-Z_:][a-zA-Z0-9_:]*)(\{(?:[a-zA-Z_][a-zA-Z0-9_]*="(?:\\.|[^"\\])*")(?:,[a-zA-Z_][a-zA-Z0-9_]*="(?:\\.|[^"\\])*")*\})? (-?[0-9.]+(?:[eE][+-]?[0-9]+)?|\+Inf|-Inf|NaN)$/;
  const lines = text.split('\n');
  if (lines[lines.length - 1] !== '') throw new Error('metrics text must end with a newline');
  lines.pop();
  let family = null, type = null;
  for (let i = 0; i < lines.length; i++) {
    const line = lines[i];
    if (line.startsWith('# HELP ')) {
      family = line.slice(7).split(' ')[0];
      if (families.has(family)) throw new Error('family twice: ' + family);
      const t = lines[++i] || '';
      const m = t.match(/^# TYPE (\S+) (counter|gauge|histogram|summary|untyped)$/);
      if (!m || m[1] !== family) throw new Error('HELP without matching TYPE: ' + t);
      type = m[2];
      families.set(family, type);
      continue;
    }
    if (line.startsWith('#')) throw new Error('unexpected comment: ' + line);
    const m = line.match(sampleRe);
    if (!m) throw new Error('bad sample line: ' + line);
    const name = m[1];
    const ok = type === 'histogram'
      ? [family + '_bucket', family + '_sum', family + '_count'].includes(name)
      : name === family;
    if (!ok) throw new Error(`sample ${name} outside its family ${family}`);
    const v = m[3] === '+Inf' ? Infinity : m[3] === '-Inf' ? -Infinity : Number(m[3]);
    samples.set(name + (m[2] || ''), v);
  }
  // Histogram consistency.
  for (const [fam, t] of families) {
    if (t !== 'histogram') continue;
    const buckets = [...samples].filter(([k]) => k.startsWith(fam + '_bucket'));
    let prev = -1;
    for (const [, v] of buckets) { if (v < prev) throw new Error(fam + ' buckets not cumulative'); prev = v; }
    const inf = buckets.find(([k]) => k.includes('le="+Inf"'));
    if (!inf) throw new Error(fam + ' has no +Inf bucket');
    const count = [...samples].find(([k]) => k.startsWith(fam + '_count'));
    if (!count || count[1] !== inf[1]) throw new Error(fam + ' +Inf bucket != _count');
  }
  return { samples, families };
}

// Sum of all samples of a name (over label sets).
export function metricSum(parsed, name) {
  let s = 0;
  for (const [k, v] of parsed.samples) if (k === name || k.startsWith(name + '{')) s += v;
  return s;
}
