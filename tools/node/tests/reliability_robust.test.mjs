// One request must never take the server down (issue 21): values at the
// edges of the documented ranges, a model whose weights give NaN logits, and
// the signals an operator or a terminal may send (SIGHUP drains like
// SIGTERM, SIGUSR1 is ignored).
import { test } from 'node:test';
import assert from 'node:assert/strict';
import { execFileSync, spawnSync } from 'node:child_process';
import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { startServer, tinyModelDir, modelId, postJson } from './server_harness.mjs';
import { sleep, expectIdle, sseEvents, checkStream } from './reliability_util.mjs';

const bin = process.env.KVFORK_BIN || 'kvfork';
const cacheDir = process.env.KVFORK_CACHE_DIR || '.cache';

test('tiny temperatures and penalties give 200s, not an abort', async () => {
  const server = await startServer(['--kv-blocks', '256']);
  try {
    const url = server.url + '/v1/completions';
    const bodies = [];
    for (const temperature of [1e-38, 3e-39, 1e-45, 1e-300, 5e-324, 9e-6, 2])
      bodies.push({ prompt: 'hello hello hello', max_tokens: 4, temperature });
    for (const repetition_penalty of [1e-40, 5e-324, 10])
      bodies.push({ prompt: 'hello hello hello', max_tokens: 4, temperature: 0.7, repetition_penalty });
    bodies.push({ prompt: 'hello hello hello', max_tokens: 4, temperature: 1e-38, repetition_penalty: 5e-324,
      presence_penalty: 2, frequency_penalty: -2, top_p: 1e-300, min_p: 1, logprobs: 5 });
    for (const body of bodies) {
      const r = await postJson(url, body);
      assert.equal(r.status, 200, JSON.stringify(body) + ' -> ' + r.text);
      assert.equal(r.json.usage.completion_tokens, 4, JSON.stringify(body));
    }
    // Below 1e-5 sampling is greedy: the same text as temperature 0.
    const greedy = await postJson(url, { prompt: 'hello hello hello', max_tokens: 8, temperature: 0, ignore_eos: true });
    const tiny = await postJson(url, { prompt: 'hello hello hello', max_tokens: 8, temperature: 1e-38, ignore_eos: true, seed: 3 });
    assert.equal(tiny.json.choices[0].text, greedy.json.choices[0].text);
    // The chat stream at 1e-40.
    const model = await modelId(server.url);
    const r = await fetch(server.url + '/v1/chat/completions', {
      method: 'POST', headers: { 'Content-Type': 'application/json' },
      body: JSON.stringify({ model, messages: [{ role: 'user', content: 'hi' }], stream: true, max_tokens: 4, temperature: 1e-40 }),
    });
    assert.equal(r.status, 200);
    checkStream(await r.text(), { chat: true, n: 1, maxTokens: 4, model });
    assert.equal((await fetch(server.url + '/health')).status, 200);
    await expectIdle(server.url);
  } finally {
    assert.equal(await server.stop(), 0);
  }
});

// An untied tiny model whose input embedding of `token` is NaN (bf16): a
// prompt holding the token gets NaN logits, any other prompt is untouched.
function poisonedModel(token) {
  const dir = fs.mkdtempSync(path.join(os.tmpdir(), 'kvfork-nan-'));
  execFileSync(bin, ['make-model', '--shape', 'tiny', '--seed', '1', '--tie', '0', '--tokenizer',
    path.join(cacheDir, 'npm/tokenizer-qwen3/package/models'), '--out', dir], { stdio: 'ignore' });
  const file = path.join(dir, 'model.safetensors');
  const buf = fs.readFileSync(file);
  const len = Number(buf.readBigUInt64LE(0));
  const t = JSON.parse(buf.subarray(8, 8 + len).toString('utf8'))['model.embed_tokens.weight'];
  assert.equal(t.dtype, 'BF16');
  const hidden = t.shape[1];
  const start = 8 + len + t.data_offsets[0] + token * hidden * 2;
  for (let i = 0; i < hidden; i++) buf.writeUInt16LE(0x7fc0, start + 2 * i);
  fs.writeFileSync(file, buf);
  return dir;
}

test('NaN logits: that request is a 500 naming the cause, the server serves on', async () => {
  const poisoned = 4242;
  const dir = poisonedModel(poisoned);
  const server = await startServer(['--model', dir, '--kv-blocks', '256']);
  try {
    const url = server.url + '/v1/completions';
    for (const temperature of [0, 0.8]) {
      const bad = await postJson(url, { prompt: [100, poisoned, 200], max_tokens: 4, temperature });
      assert.equal(bad.status, 500, bad.text);
      assert.equal(bad.json.error.type, 'server_error');
      assert.match(bad.json.error.message, /non-finite logit \(NaN\) for token \d+/);
      const good = await postJson(url, { prompt: [100, 300, 200], max_tokens: 4, temperature, ignore_eos: true });
      assert.equal(good.status, 200, good.text);
      assert.equal(good.json.usage.completion_tokens, 4);
    }
    // Streaming: the error is an event, then the stream ends.
    const r = await fetch(url, {
      method: 'POST', headers: { 'Content-Type': 'application/json' },
      body: JSON.stringify({ prompt: [poisoned, 5], max_tokens: 4, stream: true }),
    });
    const text = await r.text();
    assert.match(text, /non-finite logit/);
    assert.equal((await fetch(server.url + '/health')).status, 200);
    await expectIdle(server.url);
  } finally {
    assert.equal(await server.stop(), 0);
    fs.rmSync(dir, { recursive: true, force: true });
  }
});

// Starts a 1,000-token stream and resolves {text} when it ends; `started`
// resolves once the first chunk is in.
function longStream(server, model) {
  let started;
  const startedP = new Promise((r) => { started = r; });
  const done = (async () => {
    const r = await fetch(server.url + '/v1/completions', {
      method: 'POST', headers: { 'Content-Type': 'application/json' },
      body: JSON.stringify({ model, prompt: 'a long story', stream: true, max_tokens: 1000, ignore_eos: true }),
    });
    const reader = r.body.getReader();
    const dec = new TextDecoder();
    let text = '';
    for (;;) {
      const { value, done: end } = await reader.read();
      if (end) break;
      text += dec.decode(value, { stream: true });
      started();
    }
    return text;
  })();
  return { startedP, done };
}

test('SIGHUP mid-stream drains like SIGTERM: the stream ends with [DONE], exit 0', async () => {
  const server = await startServer(['--kv-blocks', '256', '--drain-seconds', '30']);
  const model = await modelId(server.url);
  const s = longStream(server, model);
  await s.startedP;
  server.proc.kill('SIGHUP');
  const text = await s.done;
  const datas = sseEvents(text);  // throws unless it ends with exactly one [DONE]
  const finishes = datas.map((d) => JSON.parse(d).choices[0]?.finish_reason).filter(Boolean);
  assert.deepEqual(finishes, ['length'], 'the running stream finishes inside the drain');
  assert.equal(await server.exited, 0);
  assert.match(server.log(), /signal 1: draining/);
});

test('SIGUSR1 and SIGUSR2 are ignored: streams and the server carry on', async () => {
  const server = await startServer(['--kv-blocks', '256']);
  try {
    const model = await modelId(server.url);
    const s = longStream(server, model);
    await s.startedP;
    server.proc.kill('SIGUSR1');
    server.proc.kill('SIGUSR2');
    checkStream(await s.done, { chat: false, n: 1, maxTokens: 1000, model });
    await sleep(100);
    assert.equal(server.proc.exitCode, null, 'still running');
    const ok = await postJson(server.url + '/v1/completions', { model, prompt: 'after usr1', max_tokens: 2 });
    assert.equal(ok.status, 200, ok.text);
    assert.match(server.log(), /signal 10 \(User defined signal 1\) ignored/);
  } finally {
    assert.equal(await server.stop(), 0);
  }
});

test('a KV block over the attention limit is refused at start, naming the limit', () => {
  const r = spawnSync(bin, ['serve', '--model', tinyModelDir(), '--port', '0', '--kv-block-size', '2048'],
    { encoding: 'utf8', timeout: 60000 });
  assert.equal(r.status, 1, r.stderr);
  assert.match(r.stderr, /--kv-block-size must be in \[1, 1024\] \(the attention kernels' limit\), got 2048/);
});
