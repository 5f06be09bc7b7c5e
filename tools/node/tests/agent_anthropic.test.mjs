// Anthropic's Messages API (/v1/messages, /v1/messages/count_tokens) through
// the official @anthropic-ai/sdk against the real server with the tiny random
// Qwen3-shaped model: messages, streaming (the SDK's own event accumulator),
// thinking blocks, a tool round trip (the call is an assistant prefill, as
// Anthropic's API continues a final assistant message), the prefix cache in
// usage (cache_creation_input_tokens, cache_read_input_tokens), errors in Anthropic's shape and x-api-key auth.
import { test, before, after } from 'node:test';
import assert from 'node:assert/strict';
import Anthropic from '@anthropic-ai/sdk';
import { startServer, modelId, postJson } from './server_harness.mjs';

let server, client, model;

before(async () => {
  server = await startServer(['--api-key', 'sk-test-1']);
  client = new Anthropic({ baseURL: server.url, apiKey: 'sk-test-1', maxRetries: 0 });
  model = await modelId(server.url, { Authorization: 'Bearer sk-test-1' });
});

after(async () => { if (server) server.proc.kill('SIGKILL'); });

const system = [{ type: 'text', text: 'You are a terse weather assistant.', cache_control: { type: 'ephemeral' } }];
const tools = [{
  name: 'get_weather', description: 'Current weather of a city',
  input_schema: { type: 'object', properties: { city: { type: 'string' } }, required: ['city'] },
}];

test('messages.create: text reply, usage, and the prefix cache on a repeat', async () => {
  const params = {
    model, max_tokens: 4, temperature: 0, system, metadata: { user_id: 'u-1' },
    messages: [{ role: 'user', content: [{ type: 'text', text: 'Hello there, how are you today?' }] }],
  };
  const a = await client.messages.create(params);
  assert.equal(a.type, 'message');
  assert.equal(a.role, 'assistant');
  assert.match(a.id, /^msg_/);
  assert.equal(a.model, model);
  assert.equal(a.content[0].type, 'text');
  assert.equal(a.stop_reason, 'max_tokens');
  assert.equal(a.usage.output_tokens, 4);
  const b = await client.messages.create(params);
  assert.equal(b.content[0].text, a.content[0].text, 'temperature 0 repeats');
  // The three input counts add up to the prompt; the system block's
  // cache_control pins the prompt through it, so the first run reports that
  // prefix as written to the cache (cache_creation_input_tokens).
  const inputs = (u) => u.input_tokens + u.cache_creation_input_tokens + u.cache_read_input_tokens;
  const total = inputs(a.usage);
  assert.equal(inputs(b.usage), total);
  assert.ok(b.usage.cache_read_input_tokens >= total - 16, JSON.stringify(b.usage));
  // count_tokens gives the same prompt length.
  const c = await postJson(server.url + '/v1/messages/count_tokens',
    { model, system, messages: params.messages }, { 'x-api-key': 'sk-test-1' });
  assert.equal(c.status, 200, c.text);
  assert.equal(c.json.input_tokens, total);
});

test('streaming: the SDK rebuilds the same message from the SSE events', async () => {
  const params = {
    model, max_tokens: 5, temperature: 0, stop_sequences: ['zzzz-never'],
    messages: [{ role: 'user', content: 'Tell me a story.' }],
  };
  const whole = await client.messages.create(params);
  const stream = client.messages.stream(params);
  const types = [];
  stream.on('streamEvent', (e) => types.push(e.type));
  const final = await stream.finalMessage();
  assert.equal(final.content[0].text, whole.content[0].text);
  assert.equal(final.stop_reason, 'max_tokens');
  assert.equal(final.usage.output_tokens, 5);
  assert.equal(types[0], 'message_start');
  assert.equal(types[1], 'content_block_start');
  assert.equal(types.at(-3), 'content_block_stop');
  assert.equal(types.at(-2), 'message_delta');
  assert.equal(types.at(-1), 'message_stop');
});

test('thinking blocks for reasoning, streaming and not', async () => {
  const params = {
    model, max_tokens: 3, temperature: 0,
    messages: [{ role: 'user', content: 'Think first.' }, { role: 'assistant', content: '<think>\nLet me think.' }],
  };
  const whole = await client.messages.create(params);
  assert.equal(whole.content[0].type, 'thinking');
  assert.ok(whole.content[0].thinking.length > 0);
  const final = await client.messages.stream(params).finalMessage();
  assert.equal(final.content[0].type, 'thinking');
  assert.equal(final.content[0].thinking, whole.content[0].thinking);
});

test('a tool round trip: tool_use out, tool_result back, the next turn reuses the cache', async () => {
  const user = { role: 'user', content: 'Weather in Paris?' };
  const prefill = '<tool_call>\n{"name": "get_weather", "arguments": {"city": "Paris"}}\n</tool_call>';
  const first = await client.messages.create({
    model, max_tokens: 1, temperature: 0, system, tools, tool_choice: { type: 'auto' },
    messages: [user, { role: 'assistant', content: prefill }],
  });
  assert.equal(first.stop_reason, 'tool_use');
  const use = first.content.find((b) => b.type === 'tool_use');
  assert.ok(use, JSON.stringify(first.content));
  assert.equal(use.name, 'get_weather');
  assert.deepEqual(use.input, { city: 'Paris' });
  // Streaming gives the same tool_use block (input_json_delta).
  const streamed = await client.messages.stream({
    model, max_tokens: 1, temperature: 0, system, tools,
    messages: [user, { role: 'assistant', content: prefill }],
  }).finalMessage();
  const suse = streamed.content.find((b) => b.type === 'tool_use');
  assert.deepEqual(suse.input, { city: 'Paris' });
  assert.equal(streamed.stop_reason, 'tool_use');
  // The result goes back.
  const second = await client.messages.create({
    model, max_tokens: 4, temperature: 0, system, tools,
    messages: [user, { role: 'assistant', content: [use] },
      { role: 'user', content: [{ type: 'tool_result', tool_use_id: use.id, content: '18C and sunny' }] }],
  });
  assert.equal(second.content[0].type, 'text');
  assert.ok(second.usage.cache_read_input_tokens > 0, JSON.stringify(second.usage));
  console.log('anthropic tool round trip usage: ' + JSON.stringify([first.usage, second.usage]));
});

test('tool_choice any and tool force a tool_use block (grammar)', async () => {
  const bounded = [{ name: 'get_weather', description: 'Weather of a city',
    input_schema: { type: 'object', properties: { city: { type: 'string', maxLength: 10 } }, required: ['city'], additionalProperties: false } }];
  for (const tool_choice of [{ type: 'any' }, { type: 'tool', name: 'get_weather' }]) {
    const r = await client.messages.create({ model, max_tokens: 300, temperature: 1, tools: bounded, tool_choice,
      messages: [{ role: 'user', content: 'Weather in Paris?' }] });
    assert.equal(r.stop_reason, 'tool_use', JSON.stringify(r.content));
    const use = r.content.find((b) => b.type === 'tool_use');
    assert.equal(use.name, 'get_weather');
    assert.equal(typeof use.input.city, 'string');
  }
});

test('errors have Anthropic shape; x-api-key and Bearer both authenticate', async () => {
  await assert.rejects(client.messages.create({ model, messages: [{ role: 'user', content: 'x' }] }),
    (e) => e.status === 400 && e.error.type === 'error' && e.error.error.type === 'invalid_request_error' &&
      /max_tokens/.test(e.error.error.message));
  const bad = await postJson(server.url + '/v1/messages',
    { model, max_tokens: 2, messages: [{ role: 'user', content: [{ type: 'image', source: {} }] }] },
    { 'x-api-key': 'sk-test-1' });
  assert.equal(bad.status, 400);
  assert.equal(bad.json.type, 'error');
  assert.match(bad.json.error.message, /messages\[0\]\.content\[0\]\.type/);
  const forced = await postJson(server.url + '/v1/messages',
    { model, max_tokens: 2, tools, tool_choice: { type: 'tool', name: 'nope' }, messages: [{ role: 'user', content: 'x' }] },
    { 'x-api-key': 'sk-test-1' });
  assert.equal(forced.status, 400);
  assert.match(forced.json.error.message, /nope/);
  const wrong = await postJson(server.url + '/v1/messages', { model, max_tokens: 2, messages: [{ role: 'user', content: 'x' }] },
    { 'x-api-key': 'nope' });
  assert.equal(wrong.status, 401);
  assert.deepEqual(Object.keys(wrong.json).sort(), ['error', 'type']);
  assert.equal(wrong.json.error.type, 'authentication_error');
  const bearer = await postJson(server.url + '/v1/messages', { model, max_tokens: 1, messages: [{ role: 'user', content: 'x' }] },
    { Authorization: 'Bearer sk-test-1' });
  assert.equal(bearer.status, 200, bearer.text);
});
