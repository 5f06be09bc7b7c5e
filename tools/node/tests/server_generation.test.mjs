// min_tokens, include_stop_str_in_output and prompt logprobs (echo with
// logprobs, the lm-evaluation-harness loglikelihood path) through the
// official openai client against the real server, streaming and not.
import { test, before, after } from 'node:test';
import assert from 'node:assert/strict';
import OpenAI from 'openai';
import { startServer, modelId, postJson } from './server_harness.mjs';

let server, client, model, hello;

before(async () => {
  // Small steps: a prompt is prefilled in several chunks.
  server = await startServer(['--max-num-batched-tokens', '16']);
  client = new OpenAI({ baseURL: server.baseURL, apiKey: 'unused', maxRetries: 0 });
  model = await modelId(server.url);
  const t = await postJson(server.url + '/tokenize', { content: 'Hello' });
  assert.equal(t.json.tokens.length, 1);
  hello = t.json.tokens[0];
});

after(async () => { if (server) server.proc.kill('SIGKILL'); });

// Greedy with the "Hello" token forced: the output is HelloHelloHello...
function forced(extra) {
  return { model, temperature: 0, max_tokens: 6, logit_bias: { [hello]: 100 }, ...extra };
}

async function completionText(params) {
  const r = await client.completions.create(params);
  const chunks = [];
  for await (const c of await client.completions.create({ ...params, stream: true })) chunks.push(c);
  const streamed = chunks.map((c) => c.choices.map((ch) => ch.text).join('')).join('');
  const finish = chunks.flatMap((c) => c.choices).find((ch) => ch.finish_reason)?.finish_reason;
  assert.equal(streamed, r.choices[0].text, 'streaming and not agree');
  assert.equal(finish, r.choices[0].finish_reason);
  return { text: r.choices[0].text, finish: r.choices[0].finish_reason, usage: r.usage };
}

async function chatText(params) {
  const r = await client.chat.completions.create(params);
  let streamed = '';
  for await (const c of await client.chat.completions.create({ ...params, stream: true }))
    for (const ch of c.choices) streamed += ch.delta.content ?? '';
  assert.equal(streamed, r.choices[0].message.content, 'streaming and not agree');
  return { text: r.choices[0].message.content, finish: r.choices[0].finish_reason, usage: r.usage };
}

test('min_tokens: a stop string before it does not end the output', async () => {
  const prompt = 'Say hello.';
  let r = await completionText(forced({ prompt, stop: ['Hello'] }));
  assert.deepEqual([r.text, r.finish, r.usage.completion_tokens], ['', 'stop', 1]);
  // The first min_tokens tokens are kept; the next one may stop (vLLM v1).
  r = await completionText(forced({ prompt, stop: ['Hello'], min_tokens: 3 }));
  assert.deepEqual([r.text, r.finish, r.usage.completion_tokens], ['HelloHelloHello', 'stop', 4]);
  const messages = [{ role: 'user', content: prompt }];
  r = await chatText(forced({ messages, stop: ['Hello'], min_tokens: 2 }));
  assert.deepEqual([r.text, r.finish, r.usage.completion_tokens], ['HelloHello', 'stop', 3]);
});

test('min_tokens: EOS and stop_token_ids wait for it', async () => {
  const params = forced({ prompt: 'x', stop_token_ids: [hello], ignore_eos: false });
  let r = await completionText(params);
  assert.deepEqual([r.text, r.finish, r.usage.completion_tokens], ['', 'stop', 1]);
  r = await completionText({ ...params, min_tokens: 2 });
  assert.equal(r.finish, 'stop');
  assert.equal(r.usage.completion_tokens, 3, 'two other tokens, then the stop token');
  assert.ok(!r.text.includes('Hello'), r.text);
  const kept = await completionText({ ...params, min_tokens: 2, include_stop_str_in_output: true });
  assert.equal(kept.text, r.text + 'Hello', 'the stop token text is kept');
});

test('include_stop_str_in_output keeps the matched stop string', async () => {
  const r = await completionText(forced({ prompt: 'x', stop: ['lloHe'], include_stop_str_in_output: true }));
  assert.deepEqual([r.text, r.finish], ['HelloHe', 'stop']);
  const c = await chatText(forced({ messages: [{ role: 'user', content: 'x' }], stop: ['Hello'],
    include_stop_str_in_output: true }));
  assert.deepEqual([c.text, c.finish], ['Hello', 'stop']);
});

test('min_tokens and include_stop_str_in_output are checked', async () => {
  for (const [body, param] of [
    [{ model, prompt: 'x', max_tokens: 2, min_tokens: 3 }, 'min_tokens'],
    [{ model, prompt: 'x', min_tokens: -1 }, 'min_tokens'],
    [{ model, prompt: 'x', min_tokens: 'a' }, 'min_tokens'],
    [{ model, prompt: 'x', include_stop_str_in_output: 1 }, 'include_stop_str_in_output'],
  ]) {
    const r = await postJson(server.baseURL + '/completions', body);
    assert.equal(r.status, 400, JSON.stringify(body));
    assert.equal(r.json.error.param, param);
  }
});

test('echo + logprobs + max_tokens 0: a logprob for every prompt token', async () => {
  const prompt = 'The quick brown fox jumps over the lazy dog, again and again.';
  const r = await client.completions.create({ model, prompt, echo: true, logprobs: 3, max_tokens: 0 });
  const c = r.choices[0];
  assert.equal(c.text, prompt);
  assert.equal(c.finish_reason, 'length');
  assert.equal(r.usage.completion_tokens, 0);
  const lp = c.logprobs;
  assert.equal(lp.tokens.length, r.usage.prompt_tokens);
  assert.equal(lp.tokens.join(''), prompt);
  assert.equal(lp.token_logprobs[0], null);
  assert.equal(lp.top_logprobs[0], null);
  assert.equal(lp.text_offset[0], 0);
  for (let i = 1; i < lp.tokens.length; i++) {
    assert.equal(typeof lp.token_logprobs[i], 'number');
    assert.ok(lp.token_logprobs[i] <= 0);
    const alts = Object.values(lp.top_logprobs[i]);
    assert.ok(alts.length >= 1 && alts.length <= 3);
    // The top alternatives are the best: none is below the chosen one unless
    // the chosen one is among them.
    assert.ok(Math.max(...alts) >= lp.token_logprobs[i]);
    assert.equal(lp.text_offset[i], lp.text_offset[i - 1] + lp.tokens[i - 1].length);
  }
  // The same again: the prompt is cached now, the logprobs are recomputed.
  const again = await client.completions.create({ model, prompt, echo: true, logprobs: 3, max_tokens: 0 });
  assert.deepEqual(again.choices[0].logprobs, lp);
});

test('prompt logprobs equal the logprobs of the same tokens generated (teacher forcing)', async () => {
  const t = await postJson(server.url + '/tokenize', { content: 'Teacher forcing, checked end to end.' });
  const prompt = t.json.tokens;
  // Raw logprobs do not see logit_bias: the forced tokens get the model's own.
  const gen = await client.completions.create(forced({ prompt, logprobs: 2, max_tokens: 5 }));
  const g = gen.choices[0].logprobs;
  assert.equal(g.tokens.length, 5);
  const forcedPrompt = [...prompt, ...Array(5).fill(hello)];
  const params = { model, prompt: forcedPrompt, echo: true, logprobs: 2, max_tokens: 0 };
  const tf = (await client.completions.create(params)).choices[0].logprobs;
  assert.equal(tf.tokens.length, forcedPrompt.length);
  assert.deepEqual(tf.token_logprobs.slice(prompt.length), g.token_logprobs);
  assert.deepEqual(tf.top_logprobs.slice(prompt.length), g.top_logprobs);
  // Streaming: the echo chunk carries the prompt's logprobs.
  const chunks = [];
  for await (const c of await client.completions.create({ ...params, stream: true })) chunks.push(c);
  const echo = chunks.find((c) => c.choices.length > 0 && c.choices[0].logprobs);
  assert.ok(echo, 'an echo chunk with logprobs');
  assert.deepEqual(echo.choices[0].logprobs.token_logprobs, tf.token_logprobs);
  assert.deepEqual(echo.choices[0].logprobs.top_logprobs, tf.top_logprobs);
});

test('return_tokens_as_token_ids names logprob tokens by id, the values unchanged', async () => {
  const t = await postJson(server.url + '/tokenize', { content: 'Ids, not bytes.' });
  const prompt = t.json.tokens;
  const base = { model, prompt, echo: true, logprobs: 2, max_tokens: 3, temperature: 0 };
  const bytes = (await client.completions.create(base)).choices[0].logprobs;
  const ids = (await client.completions.create({ ...base, return_tokens_as_token_ids: true }))
    .choices[0].logprobs;
  assert.deepEqual(ids.tokens.slice(0, prompt.length), prompt.map((id) => `token_id:${id}`));
  assert.deepEqual(ids.token_logprobs, bytes.token_logprobs);
  for (let i = 1; i < ids.tokens.length; i++) {
    assert.match(ids.tokens[i], /^token_id:\d+$/);
    assert.deepEqual(Object.values(ids.top_logprobs[i]).sort(), Object.values(bytes.top_logprobs[i]).sort());
    for (const k of Object.keys(ids.top_logprobs[i])) assert.match(k, /^token_id:\d+$/);
  }
});

test('echo + logprobs with generated tokens: prompt entries first, then the generated', async () => {
  const prompt = 'Count: one two three';
  const r = await client.completions.create({ model, prompt, echo: true, logprobs: 1, max_tokens: 4,
    temperature: 0, ignore_eos: true, n: 2 });
  assert.equal(r.choices.length, 2);
  for (const c of r.choices) {
    assert.equal(c.logprobs.tokens.length, r.usage.prompt_tokens + 4);
    assert.equal(c.logprobs.token_logprobs[0], null);
    assert.ok(c.text.startsWith(prompt));
  }
  assert.deepEqual(r.choices[0].logprobs, r.choices[1].logprobs, 'greedy choices agree');
  // Streamed: the echo chunk, then one chunk per token; together they are
  // the same object, text_offset continuing past the prompt.
  const params = { model, prompt, echo: true, logprobs: 1, max_tokens: 4, temperature: 0, ignore_eos: true };
  const whole = (await client.completions.create(params)).choices[0].logprobs;
  const joined = { tokens: [], token_logprobs: [], top_logprobs: [], text_offset: [] };
  for await (const c of await client.completions.create({ ...params, stream: true }))
    for (const ch of c.choices)
      if (ch.logprobs) for (const k of Object.keys(joined)) joined[k].push(...ch.logprobs[k]);
  assert.deepEqual(joined, whole);
});
