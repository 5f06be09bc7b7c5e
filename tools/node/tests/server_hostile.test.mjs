// Malformed and hostile requests: each gets the right status and an
// OpenAI-shaped error, and the server keeps serving normal requests.
import { test, before, after } from 'node:test';
import assert from 'node:assert/strict';
import { startServer, modelId, postJson } from './server_harness.mjs';

const KEY = 'sk-test-secret';
const ADMIN_KEY = 'sk-test-admin';
const auth = { Authorization: 'Bearer ' + KEY };
const admin = { Authorization: 'Bearer ' + ADMIN_KEY };
let server, model;

before(async () => {
  server = await startServer(['--api-key', KEY, '--admin-api-key', ADMIN_KEY, '--max-body-mib', '1',
    '--max-num-seqs', '1', '--max-queue', '1']);
  model = await modelId(server.url, auth);
});
after(async () => { if (server) server.proc.kill('SIGKILL'); });

function assertOpenAIError(r, status, what) {
  assert.equal(r.status, status, `${what}: status ${r.status}: ${r.text.slice(0, 300)}`);
  assert.ok(r.json && typeof r.json.error === 'object', `${what}: not an OpenAI error: ${r.text.slice(0, 200)}`);
  const e = r.json.error;
  assert.equal(typeof e.message, 'string');
  assert.ok(e.message.length > 0);
  assert.equal(typeof e.type, 'string');
  assert.ok('param' in e && 'code' in e, what + ': needs param and code');
}

const chatUrl = () => server.url + '/v1/chat/completions';
const compUrl = () => server.url + '/v1/completions';
const msgs = [{ role: 'user', content: 'hi' }];

test('30+ malformed or hostile requests', async () => {
  const longPrompt = 'word '.repeat(5000);
  const cases = [
    ['bad JSON', chatUrl(), '{"messages": [', 400],
    ['empty body', chatUrl(), '', 400],
    ['body is an array', chatUrl(), '[1,2,3]', 400],
    ['body is a number', chatUrl(), '42', 400],
    ['temperature string', chatUrl(), { model, messages: msgs, temperature: 'hot' }, 400, 'temperature'],
    ['temperature out of range', chatUrl(), { model, messages: msgs, temperature: 5 }, 400, 'temperature'],
    ['top_p zero', chatUrl(), { model, messages: msgs, top_p: 0 }, 400, 'top_p'],
    ['huge max_tokens', chatUrl(), { model, messages: msgs, max_tokens: 1e9 }, 400, 'max_tokens'],
    ['negative max_tokens', chatUrl(), { model, messages: msgs, max_tokens: -5 }, 400, 'max_tokens'],
    ['max_tokens string', compUrl(), { model, prompt: 'x', max_tokens: '5' }, 400, 'max_tokens'],
    ['empty messages', chatUrl(), { model, messages: [] }, 400, 'messages'],
    ['messages missing', chatUrl(), { model }, 400, 'messages'],
    ['messages a string', chatUrl(), { model, messages: 'hi' }, 400, 'messages'],
    ['unknown role', chatUrl(), { model, messages: [{ role: 'wizard', content: 'x' }] }, 400, 'messages[0].role'],
    ['message without content', chatUrl(), { model, messages: [{ role: 'user' }] }, 400, 'messages[0].content'],
    ['content a number', chatUrl(), { model, messages: [{ role: 'user', content: 7 }] }, 400, 'messages[0].content'],
    ['image content part', chatUrl(), { model, messages: [{ role: 'user', content: [{ type: 'image_url', image_url: { url: 'x' } }] }] }, 400],
    ['n = 1000', chatUrl(), { model, messages: msgs, n: 1000 }, 400, 'n'],
    ['n = 0', chatUrl(), { model, messages: msgs, n: 0 }, 400, 'n'],
    ['stop a number', chatUrl(), { model, messages: msgs, stop: 5 }, 400, 'stop'],
    ['too many stops', chatUrl(), { model, messages: msgs, stop: Array.from({ length: 40 }, (_, i) => 's' + i) }, 400, 'stop'],
    ['a 100 kB stop string', chatUrl(), { model, messages: msgs, stop: 'x'.repeat(100000) }, 400, 'stop'],
    ['a 257-byte stop string in a list', chatUrl(), { model, messages: msgs, stop: ['a', 'y'.repeat(257)] }, 400, 'stop[1]'],
    ['logit_bias of 1,025 entries', chatUrl(), { model, messages: msgs, logit_bias: Object.fromEntries(Array.from({ length: 1025 }, (_, i) => [String(i), 1])) }, 400, 'logit_bias'],
    ['129 stop_token_ids', compUrl(), { model, prompt: 'x', stop_token_ids: Array.from({ length: 129 }, (_, i) => i) }, 400, 'stop_token_ids'],
    ['seed a string', chatUrl(), { model, messages: msgs, seed: 'abc' }, 400, 'seed'],
    ['logit_bias bad key', chatUrl(), { model, messages: msgs, logit_bias: { abc: 1 } }, 400, 'logit_bias'],
    ['logit_bias value too large', chatUrl(), { model, messages: msgs, logit_bias: { 5: 1000 } }, 400],
    ['stream a string', chatUrl(), { model, messages: msgs, stream: 'yes' }, 400, 'stream'],
    ['stream_options without stream', chatUrl(), { model, messages: msgs, stream_options: { include_usage: true } }, 400, 'stream_options'],
    ['top_logprobs without logprobs', chatUrl(), { model, messages: msgs, top_logprobs: 3 }, 400, 'top_logprobs'],
    ['completions logprobs 10', compUrl(), { model, prompt: 'x', logprobs: 10 }, 400, 'logprobs'],
    ['prompt missing', compUrl(), { model }, 400, 'prompt'],
    ['prompt empty list', compUrl(), { model, prompt: [] }, 400, 'prompt'],
    ['prompt an object', compUrl(), { model, prompt: { a: 1 } }, 400, 'prompt'],
    ['token id beyond the vocab', compUrl(), { model, prompt: [1, 2, 99999999] }, 400, 'prompt[2]'],
    ['negative token id', compUrl(), { model, prompt: [-1] }, 400, 'prompt[0]'],
    ['prompt longer than the context', compUrl(), { model, prompt: longPrompt, max_tokens: 1 }, 400, 'prompt'],
    ['unknown model', chatUrl(), { model: 'gpt-9', messages: msgs }, 404, 'model'],
    ['enable_thinking not a bool', chatUrl(), { model, messages: msgs, chat_template_kwargs: { enable_thinking: 'no' } }, 400],
    ['invalid UTF-8', chatUrl(), Buffer.concat([Buffer.from('{"messages":[{"role":"user","content":"'), Buffer.from([0xff, 0xfe, 0xc3]), Buffer.from('"}]}')]), 400],
    ['tokenize content a number', server.url + '/tokenize', { content: 5 }, 400, 'content'],
    ['detokenize bad token', server.url + '/detokenize', { tokens: [1, 'x'] }, 400, 'tokens[1]'],
    ['apply-template no messages', server.url + '/apply-template', {}, 400, 'messages'],
  ];
  assert.ok(cases.length >= 30);
  for (const [what, url, body, status, param] of cases) {
    const b = body instanceof Buffer ? new Uint8Array(body) : body;
    const r = await postJson(url, b, auth);
    assertOpenAIError(r, status, what);
    if (param) assert.equal(r.json.error.param, param, what);
  }
});

test('auth, routes, body size', async () => {
  assertOpenAIError(await postJson(chatUrl(), { model, messages: msgs }), 401, 'missing auth');
  assertOpenAIError(await postJson(chatUrl(), { model, messages: msgs }, { Authorization: 'Bearer wrong' }), 401, 'wrong key');
  assertOpenAIError(await postJson(chatUrl(), { model, messages: msgs }, { Authorization: 'Basic ' + KEY }), 401, 'wrong scheme');
  assertOpenAIError(await postJson(chatUrl(), { model, messages: msgs }, { Authorization: 'Bearer ' + KEY + 'x' }), 401, 'key prefix');
  const models = await fetch(server.url + '/v1/models');
  assert.equal(models.status, 401);
  // Outside /v1 no key is needed: health and metrics for load balancers.
  assert.equal((await fetch(server.url + '/health')).status, 200);
  assert.equal((await fetch(server.url + '/metrics')).status, 200);
  const unknown = await fetch(server.url + '/v1/nope', { headers: auth });
  assertOpenAIError({ status: unknown.status, text: '', json: await unknown.json() }, 404, 'unknown route');
  const unknown2 = await fetch(server.url + '/definitely/not/here');
  assertOpenAIError({ status: unknown2.status, text: '', json: await unknown2.json() }, 404, 'unknown route 2');
  // 100 MB body against a 1 MiB limit.
  const huge = new Uint8Array(100 * 1024 * 1024).fill(0x20);
  let r;
  try {
    r = await postJson(chatUrl(), huge, auth);
  } catch (e) {
    assert.fail('100 MB body: connection failed instead of 413: ' + e);
  }
  assertOpenAIError(r, 413, '100 MB body');
});

test('a full queue answers 429 with Retry-After', async () => {
  // max-num-seqs 1 and max-queue 1: of 6 long requests at once, some are refused.
  const body = { model, prompt: 'queue', max_tokens: 200, temperature: 0, ignore_eos: true };
  const rs = await Promise.all(Array.from({ length: 6 }, () => postJson(compUrl(), body, auth)));
  const refused = rs.filter((r) => r.status === 429);
  const ok = rs.filter((r) => r.status === 200);
  assert.ok(refused.length >= 1, 'statuses: ' + rs.map((r) => r.status));
  assert.ok(ok.length >= 1);
  for (const r of refused) {
    assertOpenAIError(r, 429, 'queue full');
    assert.ok(Number(r.headers.get('retry-after')) >= 1);
  }
  assert.equal(ok.length + refused.length, 6);
});

test('a normal request still succeeds afterwards', async () => {
  const r = await postJson(chatUrl(), { model, messages: msgs, max_tokens: 4, temperature: 0 }, auth);
  assert.equal(r.status, 200, r.text);
  assert.equal(r.json.object, 'chat.completion');
  const stats = await (await fetch(server.url + '/v1/cache/stats', { headers: admin })).json();
  assert.equal(stats.blocks_used, 0);
  // The cache routes are admin actions: a tenant's key gets 403, the admin
  // key may also generate.
  for (const [method, path] of [['GET', '/v1/cache/stats'], ['POST', '/v1/cache/reset']]) {
    const denied = await fetch(server.url + path, { method, headers: auth });
    assertOpenAIError({ status: denied.status, text: '', json: await denied.json() }, 403, 'tenant key on ' + path);
  }
  const reset = await fetch(server.url + '/v1/cache/reset', { method: 'POST', headers: admin });
  assert.equal(reset.status, 200);
  const byAdmin = await postJson(compUrl(), { model, prompt: 'admin', max_tokens: 2 }, admin);
  assert.equal(byAdmin.status, 200, byAdmin.text);
});

test('tenants with different keys never share prefixes', async () => {
  await server.stop();
  server = await startServer(['--api-key', 'ka,kb']);
  const m = await modelId(server.url, { Authorization: 'Bearer ka' });
  const body = { model: m, prompt: 'tenant prefix '.repeat(10), max_tokens: 2, temperature: 0 };
  const a1 = await postJson(compUrl(), body, { Authorization: 'Bearer ka' });
  const b1 = await postJson(compUrl(), body, { Authorization: 'Bearer kb' });
  const a2 = await postJson(compUrl(), body, { Authorization: 'Bearer ka' });
  assert.equal(a1.json.usage.prompt_tokens_details.cached_tokens, 0);
  assert.equal(b1.json.usage.prompt_tokens_details.cached_tokens, 0, 'key b must not see key a\'s prefix');
  assert.equal(a2.json.usage.prompt_tokens_details.cached_tokens, a1.json.usage.prompt_tokens - 1);
});
