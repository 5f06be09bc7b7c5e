// The official openai client against the real server: chat and completions,
// streaming and not, n > 1, stop, seed reproducibility, include_usage,
// cached_tokens on a repeated prompt, llama.cpp endpoints, metrics, drain.
import { test, before, after } from 'node:test';
import assert from 'node:assert/strict';
import OpenAI from 'openai';
import { startServer, modelId, postJson, parsePrometheus, metricSum } from './server_harness.mjs';

let server, client, model;

before(async () => {
  server = await startServer(['--drain-seconds', '20']);
  client = new OpenAI({ baseURL: server.baseURL, apiKey: 'unused', maxRetries: 0 });
  model = await modelId(server.url);
});

after(async () => { if (server) server.proc.kill('SIGKILL'); });

const userMsg = [{ role: 'user', content: 'Tell me about prefix caching.' }];

async function collectChat(params) {
  const stream = await client.chat.completions.create({ ...params, stream: true });
  const chunks = [];
  for await (const c of stream) chunks.push(c);
  return chunks;
}

test('health, models and startup log', async () => {
  assert.equal((await fetch(server.url + '/health')).status, 200);
  const models = await client.models.list();
  assert.equal(models.data[0].id, model);
  assert.match(server.log(), /blocks .* MiB.*isa \w+, threads 2/);
});

test('chat non-streaming and streaming agree at temperature 0', async () => {
  const params = { model, messages: userMsg, max_tokens: 12, temperature: 0, ignore_eos: true };
  const r = await client.chat.completions.create(params);
  assert.equal(r.object, 'chat.completion');
  assert.equal(r.choices.length, 1);
  assert.equal(r.choices[0].message.role, 'assistant');
  assert.equal(r.choices[0].finish_reason, 'length');
  assert.equal(r.usage.completion_tokens, 12);
  assert.equal(typeof r.usage.prompt_tokens_details.cached_tokens, 'number');
  const chunks = await collectChat(params);
  assert.equal(chunks[0].choices[0].delta.role, 'assistant', 'role delta comes first');
  let text = '';
  let finishes = 0;
  for (const c of chunks) {
    assert.equal(c.object, 'chat.completion.chunk');
    assert.equal(c.id, chunks[0].id);
    for (const ch of c.choices) {
      text += ch.delta.content ?? '';
      if (ch.finish_reason) { finishes++; assert.equal(ch.finish_reason, 'length'); }
    }
  }
  assert.equal(finishes, 1);
  assert.equal(text, r.choices[0].message.content);
});

test('completions: string prompt, token prompt, streaming', async () => {
  const r = await client.completions.create({ model, prompt: 'The cache', max_tokens: 6, temperature: 0, ignore_eos: true });
  assert.equal(r.object, 'text_completion');
  assert.equal(r.usage.completion_tokens, 6);
  assert.equal(r.choices[0].finish_reason, 'length');
  const tok = await postJson(server.url + '/tokenize', { content: 'The cache', add_special: true });
  const r2 = await client.completions.create({ model, prompt: tok.json.tokens, max_tokens: 6, temperature: 0, ignore_eos: true });
  assert.equal(r2.choices[0].text, r.choices[0].text, 'token-id prompt = same text prompt');
  const stream = await client.completions.create({ model, prompt: 'The cache', max_tokens: 6, temperature: 0, ignore_eos: true, stream: true });
  let text = '';
  for await (const c of stream) for (const ch of c.choices) text += ch.text;
  assert.equal(text, r.choices[0].text);
});

test('n > 1 and seed reproducibility', async () => {
  const params = { model, messages: userMsg, max_tokens: 10, temperature: 1.0, seed: 1234, n: 3, ignore_eos: true };
  const a = await client.chat.completions.create(params);
  const b = await client.chat.completions.create(params);
  assert.equal(a.choices.length, 3);
  assert.deepEqual(a.choices.map((c) => c.index), [0, 1, 2]);
  assert.deepEqual(a.choices.map((c) => c.message.content), b.choices.map((c) => c.message.content));
  assert.equal(a.usage.completion_tokens, 30);
  // Streamed with the same seed: the same texts per index.
  const chunks = await collectChat(params);
  const texts = ['', '', ''];
  const roles = new Set();
  for (const c of chunks) for (const ch of c.choices) {
    if (ch.delta.role) roles.add(ch.index);
    texts[ch.index] += ch.delta.content ?? '';
  }
  assert.equal(roles.size, 3, 'each choice gets its role delta');
  assert.deepEqual(texts, a.choices.map((c) => c.message.content));
});

test('stop strings end the text before the stop', async () => {
  const base = await client.completions.create({ model, prompt: 'Once upon a time', max_tokens: 24, temperature: 0, ignore_eos: true });
  const full = base.choices[0].text;
  // A stop string taken from the middle of what the model writes.
  const chars = [...full];
  assert.ok(chars.length >= 8, 'need some text: ' + JSON.stringify(full));
  const stop = chars.slice(4, 7).join('');
  const r = await client.completions.create({ model, prompt: 'Once upon a time', max_tokens: 24, temperature: 0, ignore_eos: true, stop: [stop] });
  assert.equal(r.choices[0].finish_reason, 'stop');
  assert.equal(r.choices[0].text, full.slice(0, full.indexOf(stop)));
});

test('include_usage adds a final usage chunk with cached_tokens', async () => {
  const chunks = await collectChat({ model, messages: userMsg, max_tokens: 5, temperature: 0, ignore_eos: true, stream_options: { include_usage: true } });
  const last = chunks[chunks.length - 1];
  assert.deepEqual(last.choices, []);
  assert.equal(last.usage.completion_tokens, 5);
  assert.equal(last.usage.total_tokens, last.usage.prompt_tokens + 5);
  assert.equal(typeof last.usage.prompt_tokens_details.cached_tokens, 'number');
  for (const c of chunks.slice(0, -1)) assert.equal(c.usage, null);
});

test('second request sharing the prompt reports the reusable tokens as cached', async () => {
  assert.equal((await postJson(server.url + '/v1/cache/reset', {})).status, 200);
  const prompt = 'Shared prefix: ' + 'the quick brown fox jumps over the lazy dog. '.repeat(6);
  const a = await client.completions.create({ model, prompt, max_tokens: 3, temperature: 0 });
  assert.equal(a.usage.prompt_tokens_details.cached_tokens, 0);
  const b = await client.completions.create({ model, prompt, max_tokens: 3, temperature: 0 });
  // Token-granular reuse (tail copy on): every prompt token but the last,
  // which is recomputed for its logits.
  assert.equal(b.usage.prompt_tokens, a.usage.prompt_tokens);
  assert.ok(b.usage.prompt_tokens_details.cached_tokens > 0);
  assert.equal(b.usage.prompt_tokens_details.cached_tokens, a.usage.prompt_tokens - 1);
  assert.equal(b.choices[0].text, a.choices[0].text, 'a cached answer is the same answer');
  // Chat: the next turn shares the first turn's rendered prompt.
  const c1 = await client.chat.completions.create({ model, messages: userMsg, max_tokens: 2, temperature: 0 });
  const c2 = await client.chat.completions.create({ model, messages: userMsg, max_tokens: 2, temperature: 0 });
  assert.equal(c2.usage.prompt_tokens_details.cached_tokens, c1.usage.prompt_tokens - 1);
  const stats = await (await fetch(server.url + '/v1/cache/stats')).json();
  assert.ok(stats.prefix_hits_tokens >= b.usage.prompt_tokens_details.cached_tokens);
});

test('logprobs in chat and completions', async () => {
  const r = await client.chat.completions.create({ model, messages: userMsg, max_tokens: 3, temperature: 0, logprobs: true, top_logprobs: 2, ignore_eos: true });
  const content = r.choices[0].logprobs.content;
  assert.equal(content.length, 3);
  for (const t of content) {
    assert.ok(t.logprob <= 0);
    assert.equal(t.top_logprobs.length, 2);
    assert.ok(Array.isArray(t.bytes));
  }
  const c = await client.completions.create({ model, prompt: 'abc', max_tokens: 3, temperature: 0, logprobs: 2, ignore_eos: true });
  assert.equal(c.choices[0].logprobs.tokens.length, 3);
  assert.equal(c.choices[0].logprobs.token_logprobs.length, 3);
});

test('llama.cpp endpoints: tokenize, detokenize, apply-template', async () => {
  const t = await postJson(server.url + '/tokenize', { content: 'Hello world', with_pieces: true });
  assert.equal(t.status, 200);
  assert.ok(t.json.tokens.length >= 2 && typeof t.json.tokens[0].piece === 'string');
  const ids = t.json.tokens.map((p) => p.id);
  const d = await postJson(server.url + '/detokenize', { tokens: ids });
  assert.equal(d.json.content, 'Hello world');
  const a = await postJson(server.url + '/apply-template', { messages: userMsg });
  assert.equal(a.status, 200);
  assert.ok(a.json.prompt.includes('Tell me about prefix caching.'));
  assert.ok(a.json.prompt.includes('<|im_start|>assistant'));
});

test('metrics parse as Prometheus text and counters move', async () => {
  const before = parsePrometheus(await (await fetch(server.url + '/metrics')).text());
  await client.completions.create({ model, prompt: 'metrics', max_tokens: 4, temperature: 0, ignore_eos: true });
  const after = parsePrometheus(await (await fetch(server.url + '/metrics')).text());
  for (const name of ['vllm:num_requests_running', 'vllm:num_requests_waiting', 'vllm:kv_cache_usage_perc',
    'vllm:prefix_cache_queries_total', 'vllm:prefix_cache_hits_total', 'vllm:num_preemptions_total',
    'kvfork_kv_blocks_free', 'kvfork_kv_blocks_used', 'kvfork_kv_blocks_cached',
    'kvfork_prefix_tail_copied_tokens_total', 'kvfork_prefix_evictions_total'])
    assert.ok(after.families.has(name), name);
  assert.equal(metricSum(after, 'vllm:generation_tokens_total') - metricSum(before, 'vllm:generation_tokens_total'), 4);
  assert.ok(metricSum(after, 'vllm:prompt_tokens_total') > metricSum(before, 'vllm:prompt_tokens_total'));
  assert.ok(metricSum(after, 'vllm:prefix_cache_queries_total') > metricSum(before, 'vllm:prefix_cache_queries_total'));
  assert.equal(metricSum(after, 'vllm:time_to_first_token_seconds_count') - metricSum(before, 'vllm:time_to_first_token_seconds_count'), 1);
  assert.equal(metricSum(after, 'vllm:inter_token_latency_seconds_count') - metricSum(before, 'vllm:inter_token_latency_seconds_count'), 3);
});

test('SIGTERM drains a running stream, then exits 0', async () => {
  const stream = await client.completions.create({ model, prompt: 'drain', max_tokens: 64, temperature: 0, ignore_eos: true, stream: true });
  let text = '', finish = null, n = 0;
  for await (const c of stream) {
    if (n++ === 1) server.proc.kill('SIGTERM');
    for (const ch of c.choices) { text += ch.text; finish = ch.finish_reason ?? finish; }
  }
  assert.equal(finish, 'length', 'the running request finished during the drain');
  assert.equal(await server.exited, 0);
  server = null;
});
