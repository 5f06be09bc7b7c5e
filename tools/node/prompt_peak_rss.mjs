// Peak memory of one over-long prompt: starts `kvfork serve` (tiny random
// Qwen3 model, loopback) once per case, sends one request and reads the
// server's VmHWM (peak RSS) and VmRSS from /proc before, after, and 2 s later.
//
//   KVFORK_BIN=build/release/src/cli/kvfork KVFORK_BUILD_DIR=build/release \
//     node tools/node/prompt_peak_rss.mjs
//
// Prints one row per case (MiB): RSS before, peak increase, RSS after,
// status and the error's param. docs/server.md quotes the numbers.
import fs from 'node:fs';
import { startServer, postJson } from './tests/server_harness.mjs';

function status(pid) {
  const s = fs.readFileSync(`/proc/${pid}/status`, 'utf8');
  const kib = (k) => Number(s.match(new RegExp(k + ':\\s+(\\d+) kB'))[1]);
  return { hwm: kib('VmHWM') / 1024, rss: kib('VmRSS') / 1024 };
}

const MB = 1000 * 1000;
// Ordinary words: about 5 bytes per token.
const text = (bytes) => 'the quick brown fox jumps over a lazy dog '.repeat(Math.ceil(bytes / 42)).slice(0, bytes);
const cases = [
  ['completions, 10 MB prompt', '/v1/completions', () => ({ prompt: text(10 * MB), max_tokens: 1 })],
  ['chat, 10 MB message', '/v1/chat/completions', () => ({ messages: [{ role: 'user', content: text(10 * MB) }], max_tokens: 1 })],
  ['completions, 1.5 MB prompt', '/v1/completions', () => ({ prompt: text(1.5 * MB), max_tokens: 1 })],
  ['completions, 30 kB prompt', '/v1/completions', () => ({ prompt: text(30000), max_tokens: 1 })],
];

console.log('case'.padEnd(30) + 'status  param      RSS before  peak +  RSS after  RSS +2 s (MiB)');
for (const [name, route, body] of cases) {
  const server = await startServer(['--kv-blocks', '512', '--max-body-mib', '16']);
  const pid = server.proc.pid;
  try {
    await postJson(server.url + '/v1/completions', { prompt: 'warm up', max_tokens: 1 });
    const payload = JSON.stringify(body());
    const before = status(pid);
    const r = await postJson(server.url + route, payload);
    const after = status(pid);
    await new Promise((res) => setTimeout(res, 2000));
    const later = status(pid);
    const param = r.json?.error?.param ?? '-';
    console.log(name.padEnd(30) + String(r.status).padEnd(8) + String(param).padEnd(11) +
      before.rss.toFixed(1).padStart(10) + (after.hwm - before.hwm).toFixed(1).padStart(8) +
      after.rss.toFixed(1).padStart(11) + later.rss.toFixed(1).padStart(10));
    if (r.status !== 200 && process.env.VERBOSE) console.log('  ' + r.json?.error?.message);
  } finally {
    await server.stop();
  }
}
