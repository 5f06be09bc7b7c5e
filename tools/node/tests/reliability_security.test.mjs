// Security properties of `kvfork serve`: request input never makes the
// server open a path (outside the model directory or at all), --api-key
// guards every /v1 route, cache salts isolate tenants, size and count limits
// hold, and prompt text reaches the log only with --log-prompts.
import { test } from 'node:test';
import assert from 'node:assert/strict';
import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { startServer, tinyModelDir, modelId, postJson } from './server_harness.mjs';
import { expectIdle, connect, untilClosed } from './reliability_util.mjs';

function memMiB(pid, key) {
  const m = fs.readFileSync(`/proc/${pid}/status`, 'utf8').match(new RegExp(key + ':\\s+(\\d+) kB'));
  return Number(m[1]) / 1024;
}

const preload = process.env.KVFORK_OPEN_LOG_LIB;

test('no request input makes the server open a path', { skip: !preload && 'KVFORK_OPEN_LOG_LIB not set' }, async () => {
  const tmp = fs.mkdtempSync(path.join(os.tmpdir(), 'kvfork-open-'));
  const log = path.join(tmp, 'opens.log');
  // A file beside the model directory that requests will try to reach.
  const secret = path.join(tmp, 'secret.txt');
  fs.writeFileSync(secret, 'top secret canary 7f3a');
  const modelDir = path.resolve(tinyModelDir());
  // In an ASan build the preloaded library comes before the ASan runtime in
  // the library list; that is harmless here (it is not instrumented).
  const asan = [process.env.ASAN_OPTIONS, 'verify_asan_link_order=0'].filter(Boolean).join(':');
  const server = await startServer(['--kv-blocks', '256'], { LD_PRELOAD: preload, KVFORK_OPEN_LOG: log, ASAN_OPTIONS: asan });
  try {
    const startup = fs.readFileSync(log, 'utf8');
    // The logger works: the model's own files were opened through it.
    assert.ok(startup.includes(path.join(modelDir, 'config.json')) || startup.includes('config.json'), startup);
    const startupLen = Buffer.byteLength(startup);
    const rel = path.relative(modelDir, secret);
    const paths = [secret, rel, '../../../../../../' + secret, 'file://' + secret, '/etc/passwd',
      '../../../../etc/passwd', '..%2F..%2Fetc%2Fpasswd', modelDir + '/../secret.txt', '~/.ssh/id_rsa'];
    const model = await modelId(server.url);
    const bodies = [];
    for (const p of paths) {
      bodies.push(['/v1/chat/completions', { model: p, messages: [{ role: 'user', content: 'x' }], max_tokens: 1 }]);
      bodies.push(['/v1/chat/completions', {
        model, max_tokens: 1, user: p, cache_salt: p, stop: [p],
        messages: [{ role: 'system', content: `{% include '${p}' %}` }, { role: 'user', content: p, name: p }],
        tools: [{ type: 'function', function: { name: p, description: p, parameters: { $ref: p } } }],
        chat_template_kwargs: { enable_thinking: false, template: p, chat_template: `{% include '${p}' %}`, path: p },
      }]);
      bodies.push(['/v1/completions', { model, prompt: [p, `{% include "${p}" %}`], max_tokens: 1, echo: true, suffix: p }]);
      bodies.push(['/tokenize', { content: p, with_pieces: true }]);
      bodies.push(['/apply-template', { messages: [{ role: 'user', content: p }], chat_template_kwargs: { template: p } }]);
    }
    let statuses = new Set();
    for (const [route, body] of bodies) {
      const r = await postJson(server.url + route, body);
      statuses.add(r.status);
      assert.ok(r.status < 500, `${route}: ${r.status} ${r.text.slice(0, 200)}`);
      assert.ok(!r.text.includes('canary 7f3a') && !r.text.includes('root:x:0:0'), `${route} leaked a file`);
    }
    const gets = ['/v1/models/' + encodeURIComponent(secret), '/v1/models/..%2F..%2Fetc%2Fpasswd',
      '/../../etc/passwd', '/%2e%2e/%2e%2e/etc/passwd', '/v1/../../etc/passwd', '/static/..%2f..%2fetc%2fpasswd',
      '/' + secret, '/v1/models/' + '../'.repeat(8) + 'etc/passwd'];
    for (const g of gets) {
      const s = await connect(server.url);
      const closed = untilClosed(s);
      s.write(`GET ${g} HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n`);
      const { data } = await closed;
      assert.ok(!data.includes('canary 7f3a') && !data.includes('root:x:0:0'), `GET ${g} leaked a file`);
      assert.match(data, /^HTTP\/1\.1 (400|404) /, `GET ${g}: ${data.slice(0, 80)}`);
    }
    assert.ok(statuses.has(200) && statuses.has(404), 'both served and refused requests ran: ' + [...statuses]);
    await expectIdle(server.url);
    const after = fs.readFileSync(log).subarray(startupLen).toString('utf8');
    const opened = after.split('\n').filter(Boolean).map((l) => l.slice(l.indexOf(' ') + 1));
    const outside = opened.filter((p) => !path.resolve(p).startsWith(modelDir + path.sep));
    assert.deepEqual(outside, [], 'paths opened while serving requests');
  } finally {
    server.proc.kill('SIGKILL');
    fs.rmSync(tmp, { recursive: true, force: true });
  }
});

test('--api-key guards every /v1 route, and path tricks do not get around it', async () => {
  const KEY = 'sk-guard-1', KEY2 = 'sk-guard-2';
  const ADMIN = 'sk-guard-admin';
  const server = await startServer(['--kv-blocks', '256', '--api-key', `${KEY},${KEY2}`, '--admin-api-key', ADMIN]);
  try {
    const model = await modelId(server.url, { Authorization: 'Bearer ' + KEY });
    const chat = { model, messages: [{ role: 'user', content: 'hi' }], max_tokens: 1 };
    const routes = [
      ['GET', '/v1/models'], ['GET', '/v1/models/' + model], ['GET', '/v1/models/nope'],
      ['GET', '/v1/cache/stats'], ['GET', '/v1/cache/stats?check=1'], ['POST', '/v1/cache/reset'],
      ['POST', '/v1/chat/completions', chat], ['POST', '/v1/completions', { model, prompt: 'hi', max_tokens: 1 }],
      ['POST', '/v1/chat/completions', { ...chat, stream: true }],
      ['GET', '/v1/chat/completions'], ['POST', '/v1/models'], ['DELETE', '/v1/models'], ['PUT', '/v1/completions'],
      ['GET', '/v1/nonexistent'], ['POST', '/v1/embeddings', { input: 'x' }], ['GET', '/v1/'],
    ];
    const bad = [undefined, 'Bearer', 'Bearer ', 'Bearer wrong', 'bearer ' + KEY, 'Basic ' + KEY, KEY,
      'Bearer ' + KEY.slice(0, -1), 'Bearer ' + KEY + ',' + KEY2, 'Bearer  ' + KEY];
    for (const [method, route, body] of routes) {
      for (const authz of bad) {
        const headers = { 'Content-Type': 'application/json' };
        if (authz !== undefined) headers.Authorization = authz;
        const r = await fetch(server.url + route, { method, headers, body: body && JSON.stringify(body) });
        const text = await r.text();
        assert.equal(r.status, 401, `${method} ${route} with ${JSON.stringify(authz)}: ${r.status} ${text.slice(0, 100)}`);
        assert.match(JSON.parse(text).error.message, /API key/, `${method} ${route}: OpenAI error body`);
      }
      for (const key of [KEY, KEY2]) {
        const r = await fetch(server.url + route, {
          method, headers: { 'Content-Type': 'application/json', Authorization: 'Bearer ' + key },
          body: body && JSON.stringify(body),
        });
        await r.text();
        assert.notEqual(r.status, 401, `${method} ${route} with a valid key`);
      }
    }
    // Spellings of /v1 paths without a key: never served (401, or 404 when
    // the path is no route at all).
    for (const p of ['//v1/models', '/v1//models', '/%76%31/models', '/v1/models/../models', '/v1/./models',
      '/V1/models', '/v1%2Fmodels', '/v1/models%00', '/v1/models?x=/health', '/health/../v1/models']) {
      const s = await connect(server.url);
      const closed = untilClosed(s);
      s.write(`GET ${p} HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n`);
      const { data } = await closed;
      assert.match(data, /^HTTP\/1\.1 (400|401|404) /, `${p}: ${data.slice(0, 60)}`);
      assert.ok(!data.includes('"object":"list"'), `${p} listed the models without a key`);
    }
    // Outside /v1: health and metrics stay open for probes.
    assert.equal((await fetch(server.url + '/health')).status, 200);
    assert.equal((await fetch(server.url + '/metrics')).status, 200);
    await expectIdle(server.url, { headers: { Authorization: 'Bearer ' + ADMIN } });
  } finally {
    assert.equal(await server.stop(), 0);
  }
});

test('cache salts isolate tenants: cached_tokens only within one salt and key', async () => {
  const server = await startServer(['--kv-blocks', '1024', '--api-key', 'ka,kb', '--admin-api-key', 'kadmin']);
  try {
    const A = { Authorization: 'Bearer ka' }, B = { Authorization: 'Bearer kb' };
    const model = await modelId(server.url, A);
    const prompt = 'a shared system prompt for the salt test, long enough for several blocks. '.repeat(4);
    const run = async (headers, salt) => {
      const body = { model, prompt, max_tokens: 1, temperature: 0 };
      if (salt !== undefined) body.cache_salt = salt;
      const r = await postJson(server.url + '/v1/completions', body, headers);
      assert.equal(r.status, 200, r.text);
      return r.json.usage;
    };
    const first = await run(A, undefined);
    const full = first.prompt_tokens - 1;  // the last prompt token is always recomputed
    assert.equal(first.prompt_tokens_details.cached_tokens, 0);
    // Same key, same (absent) salt: shared.
    assert.equal((await run(A, undefined)).prompt_tokens_details.cached_tokens, full);
    // Another key never sees key A's blocks, with or without a salt, even
    // one that spells key A's salt or an empty one.
    assert.equal((await run(B, undefined)).prompt_tokens_details.cached_tokens, 0);
    assert.equal((await run(B, '')).prompt_tokens_details.cached_tokens, full, 'empty salt = no salt (B now cached)');
    for (const s of ['ka', 'ka/', '/', 'kb', 'x']) {
      const u = await run(A, 'tenant-' + s);
      assert.equal(u.prompt_tokens_details.cached_tokens, 0, `A with salt tenant-${s} is its own tenant`);
    }
    // A salt is shared by the same key only.
    await run(A, 'team');
    assert.equal((await run(A, 'team')).prompt_tokens_details.cached_tokens, full);
    assert.equal((await run(B, 'team')).prompt_tokens_details.cached_tokens, 0, 'B with salt team is not A with salt team');
    assert.equal((await run(B, 'team')).prompt_tokens_details.cached_tokens, full);
    const stats = await expectIdle(server.url, { headers: { Authorization: 'Bearer kadmin' } });
    assert.ok(stats.blocks_cached > 0);
  } finally {
    assert.equal(await server.stop(), 0);
  }
});

test('without keys, cache_salt alone isolates requests', async () => {
  const server = await startServer(['--kv-blocks', '1024']);
  try {
    const prompt = 'salted prefix without any api key, spanning a few blocks of tokens. '.repeat(4);
    const cached = async (salt) => {
      const body = { prompt, max_tokens: 1 };
      if (salt !== undefined) body.cache_salt = salt;
      const r = await postJson(server.url + '/v1/completions', body);
      assert.equal(r.status, 200, r.text);
      return [r.json.usage.prompt_tokens_details.cached_tokens, r.json.usage.prompt_tokens - 1];
    };
    assert.deepEqual((await cached('s1'))[0], 0);
    assert.equal((await cached('s2'))[0], 0);
    assert.equal((await cached(undefined))[0], 0);
    const [hit, full] = await cached('s1');
    assert.equal(hit, full);
    const r = await postJson(server.url + '/v1/completions', { prompt, max_tokens: 1, cache_salt: 5 });
    assert.equal(r.status, 400);
    assert.equal(r.json.error.param, 'cache_salt');
  } finally {
    assert.equal(await server.stop(), 0);
  }
});

test('request size and count limits hold', async () => {
  const server = await startServer(['--kv-blocks', '256', '--max-body-mib', '0.25', '--max-prompt-tokens', '64',
    '--max-num-seqs', '1', '--max-queue', '2']);
  try {
    const url = server.url + '/v1/completions';
    const big = await postJson(url, { prompt: 'x'.repeat(300 * 1024) });
    assert.equal(big.status, 413, big.text);
    const justUnder = await postJson(url, { prompt: 'hello ', max_tokens: 1, user: 'u'.repeat(200 * 1024) });
    assert.equal(justUnder.status, 200, 'a body under the limit is fine: ' + justUnder.text.slice(0, 200));
    const longPrompt = await postJson(url, { prompt: 'token '.repeat(100), max_tokens: 1 });
    assert.equal(longPrompt.status, 400);
    assert.equal(longPrompt.json.error.code, 'context_length_exceeded');
    assert.match(longPrompt.json.error.message, /at most 64/);
    const ids = await postJson(url, { prompt: Array.from({ length: 65 }, () => 100), max_tokens: 1 });
    assert.equal(ids.status, 400, 'token-id prompts obey --max-prompt-tokens too');
    const prompts = await postJson(url, { prompt: Array.from({ length: 33 }, () => 'p'), max_tokens: 1 });
    assert.equal(prompts.status, 400);
    assert.equal(prompts.json.error.param, 'prompt');
    const n = await postJson(url, { prompt: 'p', n: 17, max_tokens: 1 });
    assert.equal(n.status, 400);
    assert.equal(n.json.error.param, 'n');
    // Oversized request line and header lines are refused, not buffered.
    for (const raw of [`GET /health?${'q'.repeat(20000)} HTTP/1.1\r\nHost: x\r\n\r\n`,
      `GET /health HTTP/1.1\r\nHost: x\r\nX-Big: ${'h'.repeat(20000)}\r\n\r\n`]) {
      const s = await connect(server.url);
      const closed = untilClosed(s);
      s.write(raw);
      const { data } = await closed;
      assert.match(data, /^(HTTP\/1\.1 4\d\d |$)/, data.slice(0, 60));
    }
    // The queue bound: one running, two waiting, the rest 429.
    // Long enough (most of a second on the tiny model) that all 8 arrive while the
    // first still runs, even on a loaded machine.
    const body = { prompt: 'queue bound', max_tokens: 400, ignore_eos: true };
    const rs = await Promise.all(Array.from({ length: 8 }, () => postJson(url, body)));
    const codes = rs.map((r) => r.status);
    assert.ok(codes.filter((c) => c === 429).length >= 1, 'statuses ' + codes);
    assert.ok(codes.filter((c) => c === 200).length >= 3, 'statuses ' + codes);
    assert.ok(codes.every((c) => c === 200 || c === 429), 'statuses ' + codes);
    await expectIdle(server.url);
  } finally {
    assert.equal(await server.stop(), 0);
  }
});

test('an over-long prompt is refused by its size before tokenizing, and tokenizing gives its memory back', async () => {
  // Context 4096: at most 4095 prompt tokens, so at most 4095 * 512 bytes
  // (the Qwen3 tokenizer's bound: 128-byte tokens, NFC).
  const server = await startServer(['--kv-blocks', '512', '--max-body-mib', '12']);
  const pid = server.proc.pid;
  const words = (bytes) => 'the quick brown fox jumps over a lazy dog '.repeat(Math.ceil(bytes / 42)).slice(0, bytes);
  try {
    await postJson(server.url + '/v1/completions', { prompt: 'warm up', max_tokens: 1 });
    const peak0 = memMiB(pid, 'VmHWM');
    const ten = words(10e6);
    const comp = await postJson(server.url + '/v1/completions', { prompt: ten, max_tokens: 1 });
    assert.equal(comp.status, 400, comp.text.slice(0, 200));
    assert.equal(comp.json.error.param, 'prompt');
    assert.equal(comp.json.error.code, 'context_length_exceeded');
    assert.match(comp.json.error.message, /10000000 bytes.*at most 2096640 bytes/);
    const chat = await postJson(server.url + '/v1/chat/completions', { messages: [{ role: 'user', content: ten }], max_tokens: 1 });
    assert.equal(chat.status, 400, chat.text.slice(0, 200));
    assert.equal(chat.json.error.param, 'messages');
    assert.match(chat.json.error.message, /bytes/);
    // Tokenizing 10 MB peaked about 200 MB above this; refused by size it is
    // the body, its parse and (chat) the rendered template.
    const peakRise = memMiB(pid, 'VmHWM') - peak0;
    assert.ok(peakRise < 110, `peak RSS rose ${peakRise.toFixed(1)} MiB for two 10 MB prompts`);

    // Under the byte bound, over the token bound: tokenized, then refused by
    // its token count; the tokenizer's scratch (about 36 bytes per byte at the
    // peak) must not stay on the HTTP thread afterwards.
    const rss0 = memMiB(pid, 'VmRSS');
    const tokenized = await postJson(server.url + '/v1/completions', { prompt: words(1.5e6), max_tokens: 1 });
    assert.equal(tokenized.status, 400);
    assert.match(tokenized.json.error.message, /the prompt has \d+ tokens/);
    const rssRise = memMiB(pid, 'VmRSS') - rss0;
    assert.ok(rssRise < 10, `RSS stayed ${rssRise.toFixed(1)} MiB higher after tokenizing 1.5 MB`);
    const ok = await postJson(server.url + '/v1/completions', { prompt: 'still serving', max_tokens: 2 });
    assert.equal(ok.status, 200);
  } finally {
    assert.equal(await server.stop(), 0);
  }
});

test('prompt text is logged only with --log-prompts', async () => {
  const marker = 'PRIVATE-PROMPT-MARKER-91c2';
  const traffic = async (url) => {
    const msgs = [{ role: 'system', content: 'sys ' + marker }, { role: 'user', content: 'user ' + marker }];
    const rs = [
      await postJson(url + '/v1/chat/completions', { messages: msgs, max_tokens: 2 }),
      await postJson(url + '/v1/chat/completions', { messages: msgs, max_tokens: 2, stream: true }),
      await postJson(url + '/v1/completions', { prompt: ['one ' + marker, 'two ' + marker], max_tokens: 2, echo: true }),
      await postJson(url + '/v1/completions', { prompt: marker, max_tokens: 2, stream: true, stop: [marker] }),
      // Refusals: a bad field, a too-long prompt, an unknown model.
      await postJson(url + '/v1/chat/completions', { messages: msgs, temperature: 9 }),
      await postJson(url + '/v1/completions', { prompt: (marker + ' ').repeat(2000), max_tokens: 1 }),
      await postJson(url + '/v1/completions', { model: 'm-' + marker, prompt: marker }),
      await postJson(url + '/tokenize', { content: marker }),
      await postJson(url + '/apply-template', { messages: msgs }),
    ];
    // A client that disconnects mid-stream is logged (by request id only).
    const s = await connect(url);
    const body = JSON.stringify({ prompt: 'gone ' + marker, stream: true, max_tokens: 500, ignore_eos: true });
    s.write(`POST /v1/completions HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\nContent-Length: ${Buffer.byteLength(body)}\r\n\r\n${body}`);
    await new Promise((r) => s.once('data', r));
    s.destroy();
    return rs.map((r) => r.status);
  };
  const quiet = await startServer(['--kv-blocks', '512']);
  let codes;
  try {
    codes = await traffic(quiet.url);
    await expectIdle(quiet.url);
  } finally {
    assert.equal(await quiet.stop(), 0);
  }
  assert.deepEqual(codes, [200, 200, 200, 200, 400, 400, 404, 200, 200]);
  assert.match(quiet.log(), /client disconnected/, 'the disconnect was logged');
  assert.ok(!quiet.log().includes(marker), 'prompt text in the log without --log-prompts:\n' + quiet.log());
  const loud = await startServer(['--kv-blocks', '512', '--log-prompts']);
  try {
    await traffic(loud.url);
  } finally {
    assert.equal(await loud.stop(), 0);
  }
  assert.ok(loud.log().includes('user ' + marker), 'with --log-prompts the prompt is logged');
});
