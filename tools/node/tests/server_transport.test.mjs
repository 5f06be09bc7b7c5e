// The HTTP transport of `kvfork serve` from a raw socket (docs/server.md,
// "Transport"): header floods (431), chunked bodies over --max-body-mib (413),
// request smuggling framings (400), pipelining, half-close, a NUL in JSON,
// 405 + Allow, CORS, X-Request-Id and the access log, keep-alive, the drain
// deadline against clients that hold their connections, and start-up limits.
import { test, before, after } from 'node:test';
import assert from 'node:assert/strict';
import { spawnSync } from 'node:child_process';
import { startServer, tinyModelDir, postJson } from './server_harness.mjs';
import { connect, postHead, untilClosed, sleep, sseEvents, rssKiB } from './reliability_util.mjs';

let server;
before(async () => {
  server = await startServer(['--kv-blocks', '256', '--max-body-mib', '1',
    '--cors-origins', 'http://app.example,http://localhost:3000']);
});
after(async () => { if (server) assert.equal(await server.stop(), 0); });

// Sends raw bytes, then reads until the server closes (or ms pass).
async function raw(bytes, { halfClose = false, ms = 10000 } = {}) {
  const s = await connect(server.url);
  const closed = untilClosed(s);
  s.on('error', () => {});
  s.write(bytes);
  if (halfClose) s.end();
  const timer = setTimeout(() => s.destroy(), ms);
  const { data } = await closed;
  clearTimeout(timer);
  return data;
}

// The status lines of every final (non-1xx) response in a byte stream (a
// response may follow the last byte of the body before it).
const finalStatuses = (data) => [...data.matchAll(/HTTP\/1\.1 (\d{3}) /g)].map((m) => Number(m[1])).filter((c) => c >= 200);

test('header floods are a 431 and cost no memory that stays', async () => {
  // 13.9 MB of headers, the flood (cpp-httplib kept ~35 MB per flood).
  const line = (i) => `X-Flood-${String(i).padStart(7, '0')}: ${'a'.repeat(56)}\r\n`;
  const flood = 'GET /health HTTP/1.1\r\nHost: x\r\n' + Array.from({ length: 194000 }, (_, i) => line(i)).join('') + '\r\n';
  const rssBefore = rssKiB(server.proc.pid);
  for (let i = 0; i < 4; i++) {
    const data = await raw(flood);
    assert.match(data, /^HTTP\/1\.1 431 /, data.slice(0, 80));
    assert.match(data, /header_fields_too_large/);
  }
  const grown = (rssKiB(server.proc.pid) - rssBefore) / 1024;
  assert.ok(grown < 16, `RSS grew ${grown.toFixed(1)} MiB over four 13.9 MB header floods`);
  const many = 'GET /health HTTP/1.1\r\nHost: x\r\n' + Array.from({ length: 101 }, (_, i) => `A${i}: b\r\n`).join('') + '\r\n';
  assert.match(await raw(many), /^HTTP\/1\.1 431 /);
  assert.equal((await fetch(server.url + '/health')).status, 200, 'still serving');
});

test('a chunked body over --max-body-mib is a 413 while it is read', async () => {
  const s = await connect(server.url);
  const closed = untilClosed(s);
  s.on('error', () => {});
  s.write('POST /v1/completions HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\nTransfer-Encoding: chunked\r\n\r\n');
  const piece = 'x'.repeat(65536);
  // 3 MB against 1 MiB: the server answers before the body ends.
  for (let i = 0; i < 48 && !s.destroyed; i++) s.write(piece.length.toString(16) + '\r\n' + piece + '\r\n');
  const { data } = await closed;
  assert.match(data, /^HTTP\/1\.1 413 /, data.slice(0, 80));
  // A chunked body under the limit is a normal request.
  const body = JSON.stringify({ prompt: 'chunked hello', max_tokens: 2 });
  const half = Math.floor(body.length / 2);
  const ok = await raw('POST /v1/completions HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n' +
    'Transfer-Encoding: chunked\r\nConnection: close\r\n\r\n' +
    `${half.toString(16)}\r\n${body.slice(0, half)}\r\n${(body.length - half).toString(16)}\r\n${body.slice(half)}\r\n0\r\n\r\n`);
  assert.match(ok, /^HTTP\/1\.1 200 /, ok.slice(0, 200));
  assert.match(ok, /"completion_tokens":2/);
});

test('smuggling framings are a 400 and close the connection', async () => {
  const body = '{"prompt":"x","max_tokens":1}';
  const head = 'POST /v1/completions HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n';
  const cases = {
    'duplicate Content-Length': `Content-Length: ${body.length}\r\nContent-Length: ${body.length}\r\n`,
    'conflicting Content-Length': `Content-Length: ${body.length}\r\nContent-Length: 5\r\n`,
    'Content-Length list': `Content-Length: ${body.length}, ${body.length}\r\n`,
    'Content-Length with chunked': `Content-Length: ${body.length}\r\nTransfer-Encoding: chunked\r\n`,
    'chunked with Content-Length': `Transfer-Encoding: chunked\r\nContent-Length: ${body.length}\r\n`,
    'space before colon': `Content-Length : ${body.length}\r\n`,
  };
  for (const [what, fields] of Object.entries(cases)) {
    // A second request follows: it must not be read as a smuggled one.
    const data = await raw(head + fields + '\r\n' + body + 'GET /health HTTP/1.1\r\nHost: x\r\n\r\n');
    assert.deepEqual(finalStatuses(data), [400], `${what}: ${data.slice(0, 120)}`);
    assert.match(data, /Connection: close/, what);
  }
});

test('pipelined requests each get a response, in order', async () => {
  const a = JSON.stringify({ prompt: 'first of two', max_tokens: 2 });
  const b = JSON.stringify({ prompt: 'second of two', max_tokens: 3 });
  const data = await raw(postHead('/v1/completions', a.length) + a + postHead('/v1/completions', b.length) + b +
    'GET /health HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n');
  assert.deepEqual(finalStatuses(data), [200, 200, 200], data.slice(0, 300));
  const first = data.indexOf('"completion_tokens":2'), second = data.indexOf('"completion_tokens":3');
  assert.ok(first > 0 && second > first, 'answers in request order');
  assert.ok(data.indexOf('{"status":"ok"}') > second);
});

test('a half-closed client still gets its response', async () => {
  const body = JSON.stringify({ prompt: 'half closed', max_tokens: 40, ignore_eos: true });
  const data = await raw(postHead('/v1/completions', body.length) + body, { halfClose: true });
  assert.deepEqual(finalStatuses(data), [200], data.slice(0, 200));
  assert.match(data, /"completion_tokens":40/);
  const stream = JSON.stringify({ prompt: 'half closed stream', max_tokens: 8, stream: true, ignore_eos: true });
  const sdata = await raw(postHead('/v1/completions', stream.length) + stream, { halfClose: true });
  assert.match(sdata, /data: \[DONE\]/);
});

test('a NUL byte in a JSON body is a 400, not a truncation', async () => {
  for (const body of ['{"prompt": "hi", "max_tokens": 2}\0trailing', '{"prompt": "a\0b", "max_tokens": 2}',
    '{"prompt": "hi",\0 "max_tokens": 2}']) {
    const r = await postJson(server.url + '/v1/completions', Buffer.from(body, 'latin1'));
    assert.equal(r.status, 400, JSON.stringify(body) + ': ' + r.text);
    assert.equal(r.json.error.code, 'invalid_json');
  }
});

test('a route under the wrong method is a 405 with Allow', async () => {
  const get = await fetch(server.url + '/v1/completions');
  assert.equal(get.status, 405);
  assert.equal(get.headers.get('allow'), 'POST');
  assert.equal((await get.json()).error.code, 'method_not_allowed');
  const post = await fetch(server.url + '/health', { method: 'POST' });
  assert.equal(post.status, 405);
  assert.equal(post.headers.get('allow'), 'GET, HEAD');
  assert.equal((await fetch(server.url + '/nope')).status, 404);
  const head = await fetch(server.url + '/health', { method: 'HEAD' });
  assert.equal(head.status, 200);
});

test('CORS: listed origins get the allow headers, others none', async () => {
  const pre = await fetch(server.url + '/v1/chat/completions', {
    method: 'OPTIONS', headers: { Origin: 'http://app.example', 'Access-Control-Request-Method': 'POST',
      'Access-Control-Request-Headers': 'authorization, content-type' },
  });
  assert.equal(pre.status, 204);
  assert.equal(pre.headers.get('access-control-allow-origin'), 'http://app.example');
  assert.match(pre.headers.get('access-control-allow-methods'), /POST/);
  assert.match(pre.headers.get('access-control-allow-headers'), /Authorization/);
  const denied = await fetch(server.url + '/v1/chat/completions', {
    method: 'OPTIONS', headers: { Origin: 'http://evil.example', 'Access-Control-Request-Method': 'POST' },
  });
  assert.equal(denied.status, 403);
  assert.equal(denied.headers.get('access-control-allow-origin'), null);
  const get = await fetch(server.url + '/v1/models', { headers: { Origin: 'http://localhost:3000' } });
  assert.equal(get.headers.get('access-control-allow-origin'), 'http://localhost:3000');
  const other = await fetch(server.url + '/v1/models', { headers: { Origin: 'http://evil.example' } });
  assert.equal(other.headers.get('access-control-allow-origin'), null);
});

test('X-Request-Id is echoed or made, and each request has one access-log line', async () => {
  const mine = await postJson(server.url + '/v1/completions', { prompt: 'traced', max_tokens: 3 }, { 'X-Request-Id': 'trace-42' });
  assert.equal(mine.headers.get('x-request-id'), 'trace-42');
  const made = await fetch(server.url + '/health');
  assert.match(made.headers.get('x-request-id'), /^[0-9a-f]{32}$/);
  const r = await fetch(server.url + '/v1/chat/completions', {
    method: 'POST', headers: { 'Content-Type': 'application/json', 'X-Request-Id': 'trace-stream' },
    body: JSON.stringify({ messages: [{ role: 'user', content: 'secret words' }], max_tokens: 4, stream: true, ignore_eos: true }),
  });
  sseEvents(await r.text());
  await sleep(200);
  const log = server.log();
  const line = log.split('\n').find((l) => l.includes('id=trace-42'));
  assert.ok(line, 'an access line for the request: ' + log.slice(-500));
  assert.match(line, /access time=\d{4}-\d\d-\d\dT[\d:.]+Z id=trace-42 remote=127\.0\.0\.1:\d+ method=POST route=\/v1\/completions status=200 duration_ms=[\d.]+ prompt_tokens=\d+ cached_tokens=\d+ completion_tokens=3/);
  const streamLine = log.split('\n').find((l) => l.includes('id=trace-stream'));
  assert.match(streamLine, /status=200 .*completion_tokens=4/, 'a stream logs its tokens once it ends');
  assert.ok(!log.includes('secret words'), 'no prompt text without --log-prompts');
  assert.equal(log.split('\n').filter((l) => l.includes('id=trace-42')).length, 1, 'one line per request');
});

test('small routes: /version, /ping, the vLLM /tokenize body', async () => {
  const v = await (await fetch(server.url + '/version')).json();
  assert.equal(typeof v.version, 'string');
  assert.equal((await fetch(server.url + '/ping')).status, 200);
  assert.equal((await fetch(server.url + '/ping', { method: 'POST' })).status, 200);
  const t = await postJson(server.url + '/tokenize', { prompt: 'hello world' });
  assert.equal(t.status, 200, t.text);
  assert.equal(t.json.count, t.json.tokens.length);
  assert.ok(t.json.count > 0);
  const card = await (await fetch(server.url + '/v1/models')).json();
  assert.equal(t.json.max_model_len, card.data[0].max_model_len);
  const llama = await postJson(server.url + '/tokenize', { content: 'hello world' });
  assert.deepEqual(Object.keys(llama.json), ['tokens']);
  const bad = await postJson(server.url + '/tokenize', { prompt: 5 });
  assert.equal(bad.status, 400);
  assert.equal(bad.json.error.param, 'prompt');
});

test('keep-alive: a connection idle for 2.5 s is still served', async () => {
  const s = await connect(server.url);
  let data = '';
  s.on('data', (d) => { data += d.toString('latin1'); });
  s.write('GET /health HTTP/1.1\r\nHost: x\r\n\r\n');
  await sleep(2500);
  assert.ok(!s.destroyed && s.readyState === 'open', 'the server kept the connection');
  s.write('GET /health HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n');
  await new Promise((r) => s.once('close', r));
  assert.deepEqual(finalStatuses(data), [200, 200]);
  assert.match(data, /Keep-Alive: timeout=5/);
});

test('--http-keep-alive-timeout closes idle connections', async () => {
  const short = await startServer(['--kv-blocks', '64', '--http-keep-alive-timeout', '1']);
  try {
    const s = await connect(short.url);
    const closed = untilClosed(s);
    s.write('GET /health HTTP/1.1\r\nHost: x\r\n\r\n');
    const { data, ms } = await closed;
    assert.deepEqual(finalStatuses(data), [200]);
    assert.ok(ms >= 900 && ms < 3000, `closed after ${ms} ms`);
  } finally {
    assert.equal(await short.stop(), 0);
  }
});

test('the drain deadline holds against a trickling client and a stalled reader', async () => {
  const s2 = await startServer(['--kv-blocks', '2048', '--drain-seconds', '2', '--max-num-seqs', '4']);
  const sockets = [];
  try {
    // One client sends its request a byte a second.
    const trickle = await connect(s2.url);
    trickle.on('error', () => {});
    sockets.push(trickle);
    const head = postHead('/v1/completions', 100);
    let i = 0;
    const timer = setInterval(() => { if (!trickle.destroyed && i < head.length) trickle.write(head[i++]); }, 1000);
    // One streams a long answer and stops reading it.
    const body = JSON.stringify({ messages: [{ role: 'user', content: 'fill the pipe' }], stream: true, n: 4,
      max_tokens: 3000, logprobs: true, top_logprobs: 20, ignore_eos: true });
    const stalled = await connect(s2.url);
    stalled.on('error', () => {});
    sockets.push(stalled);
    stalled.write(postHead('/v1/chat/completions', Buffer.byteLength(body)) + body);
    await new Promise((r) => stalled.once('data', r));
    stalled.pause();
    await sleep(1500);
    const t0 = Date.now();
    s2.proc.kill('SIGTERM');
    const code = await s2.exited;
    const ms = Date.now() - t0;
    clearInterval(timer);
    assert.equal(code, 0);
    // --drain-seconds 2, then at most the 2 s grace for responses in flight.
    assert.ok(ms < 5500, `exited ${ms} ms after SIGTERM with --drain-seconds 2`);
  } finally {
    for (const s of sockets) s.destroy();
    s2.proc.kill('SIGKILL');
  }
});

test('--http-threads beyond the limit is refused at start, naming it', () => {
  const bin = process.env.KVFORK_BIN || 'kvfork';
  const r = spawnSync(bin, ['serve', '--model', tinyModelDir(), '--port', '0', '--http-threads', '100000'], { encoding: 'utf8' });
  assert.equal(r.status, 1, r.stderr);
  assert.match(r.stderr, /--http-threads must be in \[1, 4096\]/);
});
