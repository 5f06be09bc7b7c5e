// Fault injection against the real `kvfork serve`: broken model files, a
// port in use, a pool too small for one request, a client that stalls
// mid-body, a client that stops reading its stream, SIGTERM during a burst.
// Each fault must give a clear error or a clean drain, leak nothing (no
// referenced block, no stuck request, KV check clean) and leave other
// requests unaffected.
import { test } from 'node:test';
import assert from 'node:assert/strict';
import { spawn } from 'node:child_process';
import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { startServer, tinyModelDir, modelId, postJson, parsePrometheus, metricSum } from './server_harness.mjs';
import { sleep, cacheStats, expectIdle, connect, postHead, untilClosed, sseEvents, checkStream } from './reliability_util.mjs';

const bin = process.env.KVFORK_BIN || 'kvfork';

// Runs `kvfork serve` expecting it to fail; resolves {code, stderr}.
function serveExpectingFailure(args) {
  return new Promise((resolve, reject) => {
    const p = spawn(bin, ['serve', '--host', '127.0.0.1', '--threads', '2', ...args], { stdio: ['ignore', 'ignore', 'pipe'] });
    let stderr = '';
    p.stderr.on('data', (d) => { stderr += d; });
    const timer = setTimeout(() => { p.kill('SIGKILL'); reject(new Error('serve did not exit in 60 s:\n' + stderr)); }, 60000);
    p.on('exit', (code) => { clearTimeout(timer); resolve({ code, stderr }); });
  });
}

// A copy of the tiny model whose files the test may damage.
function modelCopy(name) {
  const src = tinyModelDir();
  const dir = fs.mkdtempSync(path.join(os.tmpdir(), 'kvfork-fault-' + name + '-'));
  for (const f of fs.readdirSync(src)) fs.copyFileSync(path.join(src, f), path.join(dir, f));
  return dir;
}

// Tensor names and data offsets of a safetensors file's header.
function safetensorsHeader(file) {
  const buf = fs.readFileSync(file);
  const len = Number(buf.readBigUInt64LE(0));
  return { header: JSON.parse(buf.subarray(8, 8 + len).toString('utf8')), dataStart: 8 + len };
}

async function metric(url, name) {
  return metricSum(parsePrometheus(await (await fetch(url + '/metrics')).text()), name);
}

test('a model file truncated mid-tensor: serve exits 1 naming the file', async () => {
  const dir = modelCopy('truncated');
  try {
    const file = path.join(dir, 'model.safetensors');
    const { header, dataStart } = safetensorsHeader(file);
    // Cut in the middle of the tensor whose data ends last.
    const [name, last] = Object.entries(header).filter(([k]) => k !== '__metadata__')
      .sort((a, b) => b[1].data_offsets[1] - a[1].data_offsets[1])[0];
    const cut = dataStart + Math.floor((last.data_offsets[0] + last.data_offsets[1]) / 2);
    fs.truncateSync(file, cut);
    const r = await serveExpectingFailure(['--model', dir, '--port', '0']);
    assert.equal(r.code, 1, r.stderr);
    assert.match(r.stderr, /kvfork serve: .*model\.safetensors.*truncated/, r.stderr);
    assert.ok(r.stderr.includes(name) || /truncated: \d+/.test(r.stderr), 'names the tensor or the sizes: ' + r.stderr);
  } finally {
    fs.rmSync(dir, { recursive: true, force: true });
  }
});

test('a shard missing from a sharded model: serve exits 1 naming the shard', async () => {
  const dir = modelCopy('shard');
  try {
    const { header } = safetensorsHeader(path.join(dir, 'model.safetensors'));
    const names = Object.keys(header).filter((k) => k !== '__metadata__');
    fs.renameSync(path.join(dir, 'model.safetensors'), path.join(dir, 'model-00001-of-00002.safetensors'));
    const weightMap = {};
    for (const n of names) weightMap[n] = 'model-00001-of-00002.safetensors';
    // The index names a second shard that is not on disk.
    weightMap[names[names.length - 1]] = 'model-00002-of-00002.safetensors';
    fs.writeFileSync(path.join(dir, 'model.safetensors.index.json'), JSON.stringify({ metadata: {}, weight_map: weightMap }));
    const r = await serveExpectingFailure(['--model', dir, '--port', '0']);
    assert.equal(r.code, 1, r.stderr);
    assert.match(r.stderr, /kvfork serve: .*model-00002-of-00002\.safetensors/, r.stderr);
  } finally {
    fs.rmSync(dir, { recursive: true, force: true });
  }
});

test('a port already in use: the second server exits 1, the first keeps serving', async () => {
  const first = await startServer(['--kv-blocks', '64']);
  try {
    const port = new URL(first.url).port;
    const r = await serveExpectingFailure(['--model', tinyModelDir(), '--port', port]);
    assert.equal(r.code, 1, r.stderr);
    assert.match(r.stderr, new RegExp(`cannot bind 127\\.0\\.0\\.1:${port} \\(in use`), r.stderr);
    assert.equal((await fetch(first.url + '/health')).status, 200);
    const ok = await postJson(first.url + '/v1/completions', { prompt: 'still here', max_tokens: 2 });
    assert.equal(ok.status, 200, ok.text);
  } finally {
    assert.equal(await first.stop(), 0);
  }
});

test('a pool too small for one request: clear 400s, fitting requests all finish', async () => {
  // 8 blocks of 16 tokens: no sequence may hold more than 128 tokens.
  const server = await startServer(['--kv-blocks', '8', '--max-num-seqs', '4', '--max-num-batched-tokens', '32']);
  try {
    const url = server.url + '/v1/completions';
    const model = await modelId(server.url);
    const card = await (await fetch(server.url + '/v1/models')).json();
    assert.equal(card.data[0].max_model_len, 128, 'the context is capped by the pool');
    const long = await postJson(url, { model, prompt: 'many words '.repeat(100), max_tokens: 1 });
    assert.equal(long.status, 400, long.text);
    assert.equal(long.json.error.code, 'context_length_exceeded');
    assert.equal(long.json.error.param, 'prompt');
    assert.match(long.json.error.message, /context is 128 tokens/);
    const tooMany = await postJson(url, { model, prompt: 'hi', max_tokens: 500 });
    assert.equal(tooMany.status, 400, tooMany.text);
    assert.equal(tooMany.json.error.param, 'max_tokens');
    const nChoices = await postJson(url, { model, prompt: 'hi', max_tokens: 60, n: 4 });
    assert.equal(nChoices.status, 400, nChoices.text);
    assert.match(nChoices.json.error.message, /can never fit the KV pool/);
    // Four requests of ~70 tokens each fit alone but not together: they take
    // turns through preemption and each gives the text it gives alone.
    const body = (i) => ({ model, prompt: `turn ${i} of the small pool test`, max_tokens: 60, temperature: 0, ignore_eos: true });
    const together = await Promise.all([0, 1, 2, 3].map((i) => postJson(url, body(i))));
    for (const [i, r] of together.entries()) {
      assert.equal(r.status, 200, r.text);
      assert.equal(r.json.usage.completion_tokens, 60);
      const alone = await postJson(url, body(i));
      assert.equal(r.json.choices[0].text, alone.json.choices[0].text, `request ${i} differs from running alone`);
    }
    const s = await expectIdle(server.url);
    assert.ok(s.preemptions > 0, 'the pool forced preemption: ' + JSON.stringify(s));
  } finally {
    assert.equal(await server.stop(), 0);
  }
});

test('half a body then silence: dropped at the read timeout, workers freed, others unaffected', async () => {
  // 4 HTTP workers, all taken by stalled clients: a normal request waits for
  // the read timeout to free one, then succeeds.
  const server = await startServer(['--kv-blocks', '64', '--http-read-timeout', '2', '--http-threads', '4']);
  try {
    const stalled = [];
    for (let i = 0; i < 4; i++) {
      const s = await connect(server.url);
      const closed = untilClosed(s);
      const body = '{"prompt": "half a bo';
      s.write(i % 2 === 0 ? postHead('/v1/completions', 1000) + body : 'POST /v1/completions HTTP/1.1\r\nHost: x\r\n');
      stalled.push(closed);
    }
    const t0 = Date.now();
    const ok = await postJson(server.url + '/v1/completions', { prompt: 'normal request', max_tokens: 4 });
    assert.equal(ok.status, 200, ok.text);
    assert.equal(ok.json.usage.completion_tokens, 4);
    for (const p of stalled) {
      const { data, ms } = await p;
      assert.ok(ms >= 1500 && ms < 15000, `closed after ${ms} ms`);
      assert.ok(data === '' || data.startsWith('HTTP/1.1 400'), 'a 400 or nothing: ' + data.slice(0, 100));
    }
    assert.ok(Date.now() - t0 < 20000);
    await expectIdle(server.url);
  } finally {
    assert.equal(await server.stop(), 0);
  }
});

test('a stream reader that stops reading: cancelled at the write timeout, others stream on', async () => {
  const server = await startServer(['--kv-blocks', '2048', '--http-write-timeout', '2', '--max-num-seqs', '20']);
  try {
    const model = await modelId(server.url);
    const before = await metric(server.url, 'kvfork_client_disconnects_total');
    // Big chunks (20 top logprobs each) for 16 choices, so the socket buffers
    // (a few MB on loopback) fill within seconds.
    const body = JSON.stringify({
      model, messages: [{ role: 'user', content: 'fill the pipe' }], stream: true, n: 16, max_tokens: 1500,
      logprobs: true, top_logprobs: 20, ignore_eos: true,
    });
    const s = await connect(server.url);
    s.setNoDelay(true);
    const closed = untilClosed(s);
    s.write(postHead('/v1/chat/completions', Buffer.byteLength(body)) + body);
    await new Promise((r) => s.once('data', r));
    s.pause();  // stop reading: the kernel buffers fill, the server's write blocks
    // Meanwhile other streams run to completion.
    for (let i = 0; i < 3; i++) {
      const r = await fetch(server.url + '/v1/completions', {
        method: 'POST', headers: { 'Content-Type': 'application/json' },
        body: JSON.stringify({ model, prompt: 'other client ' + i, stream: true, max_tokens: 8, ignore_eos: true, stream_options: { include_usage: true } }),
      });
      checkStream(await r.text(), { chat: false, n: 1, maxTokens: 8, includeUsage: true, model });
    }
    // The server gives up on the stalled stream: its request is cancelled.
    let disconnects = before;
    for (let t = 0; t < 900 && disconnects === before; t++) {
      await sleep(100);
      disconnects = await metric(server.url, 'kvfork_client_disconnects_total');
    }
    assert.equal(disconnects, before + 1, 'the stalled stream counts as a disconnect');
    s.resume();
    const { data } = await closed;
    assert.ok(data.startsWith('HTTP/1.1 200'), data.slice(0, 100));
    assert.ok(!data.includes('data: [DONE]'), 'the stalled stream was cut, not completed');
    await expectIdle(server.url);
  } finally {
    assert.equal(await server.stop(), 0);
  }
});

test('a client that drops a non-streaming request: cancelled within about a second', async () => {
  const server = await startServer(['--kv-blocks', '512']);
  try {
    const before = await metric(server.url, 'kvfork_client_disconnects_total');
    // 4,000 tokens take the tiny model several seconds on two threads.
    const body = JSON.stringify({ prompt: 'a long answer nobody waits for', max_tokens: 4000, ignore_eos: true });
    const s = await connect(server.url);
    s.on('error', () => {});
    s.write(postHead('/v1/completions', Buffer.byteLength(body)) + body);
    let stats;
    for (let t = 0; t < 100; t++) {
      stats = await cacheStats(server.url);
      if (stats.requests_running === 1) break;
      await sleep(20);
    }
    assert.equal(stats.requests_running, 1, JSON.stringify(stats));
    const t0 = Date.now();
    s.destroy();
    while (Date.now() - t0 < 5000) {
      stats = await cacheStats(server.url);
      if (stats.requests_running === 0) break;
      await sleep(50);
    }
    const ms = Date.now() - t0;
    assert.equal(stats.requests_running, 0, `still running ${ms} ms after the client left`);
    assert.ok(ms < 2500, `cancelled ${ms} ms after the client left`);
    assert.equal(await metric(server.url, 'kvfork_client_disconnects_total'), before + 1);
    // A client that stays gets its whole answer.
    const ok = await postJson(server.url + '/v1/completions', { prompt: 'still here', max_tokens: 300, ignore_eos: true });
    assert.equal(ok.status, 200, ok.text);
    assert.equal(ok.json.usage.completion_tokens, 300);
    await expectIdle(server.url);
  } finally {
    assert.equal(await server.stop(), 0);
  }
});

test('a slow but steady reader gets its whole stream', async () => {
  const server = await startServer(['--kv-blocks', '256', '--http-write-timeout', '2']);
  try {
    const model = await modelId(server.url);
    const r = await fetch(server.url + '/v1/chat/completions', {
      method: 'POST', headers: { 'Content-Type': 'application/json' },
      body: JSON.stringify({ model, messages: [{ role: 'user', content: 'slowly' }], stream: true, max_tokens: 300,
        logprobs: true, top_logprobs: 20, ignore_eos: true, stream_options: { include_usage: true } }),
    });
    const reader = r.body.getReader();
    const dec = new TextDecoder();
    let text = '', reads = 0;
    for (;;) {
      const { value, done } = await reader.read();
      if (done) break;
      text += dec.decode(value, { stream: true });
      if (++reads % 4 === 0) await sleep(50);  // well under the write timeout
    }
    checkStream(text, { chat: true, n: 1, maxTokens: 300, includeUsage: true, logprobs: true, model });
    await expectIdle(server.url);
  } finally {
    assert.equal(await server.stop(), 0);
  }
});

test('SIGTERM during a burst: every stream ends well-formed, new requests get 503, exit 0', async () => {
  const server = await startServer(['--kv-blocks', '512', '--max-num-seqs', '16', '--drain-seconds', '2']);
  const model = await modelId(server.url);
  const N = 10;
  // SIGTERM goes out once every request has its response head (so each was
  // accepted and submitted before the drain began).
  let accepted = 0;
  let signalled;
  const signalledP = new Promise((r) => { signalled = r; });
  const runs = Array.from({ length: N }, async (_, i) => {
    // Even ones are short and finish inside the drain; odd ones are cut.
    const maxTokens = i % 2 === 0 ? 8 : 3000;
    const r = await fetch(server.url + '/v1/completions', {
      method: 'POST', headers: { 'Content-Type': 'application/json' },
      body: JSON.stringify({ model, prompt: `burst ${i}`, stream: true, max_tokens: maxTokens, ignore_eos: true }),
    });
    assert.equal(r.status, 200);
    if (++accepted === N) signalled();
    const text = await r.text();
    const datas = sseEvents(text);  // ends with exactly one [DONE]
    const finishes = datas.map((d) => JSON.parse(d).choices[0]?.finish_reason).filter(Boolean);
    assert.equal(finishes.length, 1, `stream ${i}: one finish_reason`);
    return { i, finish: finishes[0] };
  });
  await signalledP;
  server.proc.kill('SIGTERM');
  await sleep(200);
  const during = await fetch(server.url + '/health').catch(() => null);
  if (during) assert.equal(during.status, 503, 'draining: /health is 503');
  const refused = await postJson(server.url + '/v1/completions', { model, prompt: 'late', max_tokens: 2 }).catch(() => null);
  if (refused) assert.equal(refused.status, 503, refused.text);
  const results = await Promise.all(runs);
  for (const r of results) {
    if (r.i % 2 === 0) assert.equal(r.finish, 'length', `short stream ${r.i} finishes inside the drain`);
    else assert.equal(r.finish, 'abort', `long stream ${r.i} is cut at the drain deadline`);
  }
  assert.equal(await server.exited, 0);
  assert.match(server.log(), /stopped \(5 requests cancelled at the drain deadline\)/);
});
