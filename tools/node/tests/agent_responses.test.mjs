// OpenAI's Responses API (/v1/responses) through the official openai client's
// responses.create and its streaming helper (responses.stream), against the
// real server with the tiny random Qwen3-shaped model: text output, the
// stream rebuilt by the SDK, stored conversations continued with
// previous_response_id (hitting the prefix cache: cached_tokens), a function
// call round trip (the call is a prefill closed by a logit_bias-forced
// <|im_end|>, kvfork's chat extensions pass through), GET/DELETE of a stored
// response, and 400s naming unsupported fields.
import { test, before, after } from 'node:test';
import assert from 'node:assert/strict';
import OpenAI from 'openai';
import { startServer, modelId, postJson } from './server_harness.mjs';

let server, client, model;
const IM_END = 151645;

before(async () => {
  server = await startServer(['--responses-store-max-entries', '4']);
  client = new OpenAI({ baseURL: server.baseURL, apiKey: 'unused', maxRetries: 0 });
  model = await modelId(server.url);
});

after(async () => { if (server) server.proc.kill('SIGKILL'); });

const instructions = 'You are a helpful assistant. Keep answers short and friendly.';

test('responses.create: a text response; a follow-up by previous_response_id reuses the cache', async () => {
  const first = await client.responses.create({
    model, instructions, input: 'Name three colors.', max_output_tokens: 6, temperature: 0,
  });
  assert.equal(first.object, 'response');
  assert.match(first.id, /^resp_/);
  assert.equal(first.status, 'incomplete');
  assert.deepEqual(first.incomplete_details, { reason: 'max_output_tokens' });
  assert.equal(first.output.length, 1);
  assert.equal(first.output[0].type, 'message');
  assert.equal(first.output[0].content[0].type, 'output_text');
  assert.equal(first.output_text, first.output[0].content[0].text);
  assert.equal(first.usage.output_tokens, 6);
  assert.equal(first.instructions, instructions);
  assert.equal(first.max_output_tokens, 6);
  const second = await client.responses.create({
    model, instructions, previous_response_id: first.id, input: 'And three more?',
    max_output_tokens: 4, temperature: 0,
  });
  assert.equal(second.previous_response_id, first.id);
  const cached = second.usage.input_tokens_details.cached_tokens;
  console.log(`responses follow-up: first input ${first.usage.input_tokens}, second input ` +
    `${second.usage.input_tokens}, cached ${cached}`);
  // The whole first prompt is the start of the second one.
  assert.ok(cached >= first.usage.input_tokens - 1, JSON.stringify(second.usage));
  const third = await client.responses.create({
    model, previous_response_id: second.id, input: [{ role: 'user', content: [{ type: 'input_text', text: 'Thanks!' }] }],
    max_output_tokens: 2,
  });
  assert.equal(third.status, 'incomplete');
  // GET gives the stored object; DELETE drops it.
  const got = await client.responses.retrieve(first.id);
  assert.equal(got.id, first.id);
  assert.equal(got.output[0].content[0].text, first.output_text);
  const del = await fetch(`${server.baseURL}/responses/${first.id}`, { method: 'DELETE' });
  assert.equal(del.status, 200);
  const gone = await postJson(server.baseURL + '/responses', { model, previous_response_id: first.id, input: 'x' });
  assert.equal(gone.status, 404);
  assert.equal(gone.json.error.param, 'previous_response_id');
});

test('the store is an LRU of --responses-store-max-entries', async () => {
  const ids = [];
  for (let i = 0; i < 5; ++i) {
    const r = await client.responses.create({ model, input: `item ${i}`, max_output_tokens: 1 });
    ids.push(r.id);
  }
  const oldest = await postJson(server.baseURL + '/responses', { model, previous_response_id: ids[0], input: 'x', max_output_tokens: 1 });
  assert.equal(oldest.status, 404, 'the oldest of five was dropped (bound 4)');
  const newest = await postJson(server.baseURL + '/responses', { model, previous_response_id: ids[4], input: 'x', max_output_tokens: 1 });
  assert.equal(newest.status, 200, newest.text);
  const unstored = await client.responses.create({ model, input: 'x', max_output_tokens: 1, store: false });
  const g = await fetch(`${server.baseURL}/responses/${unstored.id}`);
  assert.equal(g.status, 404);
});

test('the streaming helper rebuilds the same response from the events', async () => {
  const params = { model, instructions, input: 'Count to five.', max_output_tokens: 5, temperature: 0 };
  const whole = await client.responses.create(params);
  const types = [];
  const stream = client.responses.stream(params);
  let deltas = '';
  stream.on('response.output_text.delta', (e) => { deltas += e.delta; });
  for await (const e of stream) types.push(e.type);
  const final = await stream.finalResponse();
  assert.equal(deltas, whole.output_text);
  assert.equal(final.output[0].content[0].text, whole.output_text);
  assert.deepEqual(types.slice(0, 4),
    ['response.created', 'response.in_progress', 'response.output_item.added', 'response.content_part.added']);
  assert.equal(types.at(-1), 'response.incomplete');
  assert.ok(types.includes('response.output_text.done'));
  assert.ok(types.includes('response.output_item.done'));
});

test('a function call round trip by previous_response_id', async () => {
  const tools = [{ type: 'function', name: 'get_weather', description: 'Weather of a city',
    parameters: { type: 'object', properties: { city: { type: 'string' } }, required: ['city'] } }];
  const prefill = '<tool_call>\n{"name": "get_weather", "arguments": {"city": "Paris"}}\n</tool_call>';
  const params = {
    model, instructions, tools, max_output_tokens: 1, temperature: 0,
    input: [{ role: 'user', content: 'Weather in Paris?' }, { role: 'assistant', content: prefill }],
    continue_final_message: true, logit_bias: { [IM_END]: 100 },
  };
  const first = await client.responses.create(params);
  assert.equal(first.status, 'completed');
  const call = first.output.find((o) => o.type === 'function_call');
  assert.ok(call, JSON.stringify(first.output));
  assert.equal(call.name, 'get_weather');
  assert.deepEqual(JSON.parse(call.arguments), { city: 'Paris' });
  assert.match(call.call_id, /^call_/);
  // Streaming: the function_call item arrives through the helper.
  const stream = client.responses.stream(params);
  const argDeltas = [];
  stream.on('response.function_call_arguments.delta', (e) => argDeltas.push(e.delta));
  const final = await stream.finalResponse();
  assert.equal(argDeltas.join(''), call.arguments);
  assert.equal(final.output.find((o) => o.type === 'function_call').name, 'get_weather');
  // The result goes back.
  const second = await client.responses.create({
    model, instructions, tools, previous_response_id: first.id, max_output_tokens: 3, temperature: 0,
    input: [{ type: 'function_call_output', call_id: call.call_id, output: '{"temp_c": 18}' }],
  });
  assert.equal(second.output[0].type, 'message');
  const cached = second.usage.input_tokens_details.cached_tokens;
  console.log(`responses tool round trip: first input ${first.usage.input_tokens}, second input ` +
    `${second.usage.input_tokens}, cached ${cached}`);
  assert.ok(cached > 0);
});

test('text.format json_schema constrains the output (grammar)', async () => {
  const schema = { type: 'object', properties: { answer: { type: 'string', maxLength: 10 }, sure: { type: 'boolean' } },
    required: ['answer', 'sure'], additionalProperties: false };
  for (const seed of [1, 2]) {
    const r = await client.responses.create({ model, input: 'Answer in JSON.', max_output_tokens: 300, temperature: 1, seed,
      text: { format: { type: 'json_schema', name: 'answer', schema, strict: true } } });
    assert.equal(r.status, 'completed', JSON.stringify(r.output));
    const value = JSON.parse(r.output_text);
    assert.deepEqual(Object.keys(value).sort(), ['answer', 'sure']);
    assert.equal(typeof value.sure, 'boolean');
    assert.equal(r.text.format.type, 'json_schema');
  }
});

test('unsupported fields are 400s naming them', async () => {
  const cases = [
    [{ text: { format: { type: 'bogus' } } }, 'text.format'],
    [{ text: { format: { type: 'json_schema', name: 'x', schema: { type: 'object', not: {} } } } }, 'text.format.json_schema.schema'],
    [{ tools: [{ type: 'web_search' }] }, 'tools[0].type'],
    [{ background: true }, 'background'],
    [{ truncation: 'auto' }, 'truncation'],
    [{ top_logprobs: 3 }, 'top_logprobs'],
    [{ include: ['message.output_text.logprobs'] }, 'include'],
    [{ tool_choice: { type: 'function', name: 'nope' }, tools: [{ type: 'function', name: 'f', parameters: { type: 'object' } }] }, 'tool_choice'],
    [{ reasoning: { effort: 'extreme' } }, 'reasoning.effort'],
    [{ max_output_tokens: 0 }, 'max_output_tokens'],
    [{ input: [{ type: 'input_image' }] }, 'input[0].type'],
  ];
  for (const [extra, param] of cases) {
    const r = await postJson(server.baseURL + '/responses', { model, input: 'x', ...extra });
    assert.equal(r.status, 400, `${JSON.stringify(extra)}: ${r.text}`);
    assert.equal(r.json.error.param, param, r.text);
  }
  const ok = await client.responses.create({ model, input: 'x', max_output_tokens: 1, reasoning: { effort: 'low' }, text: { format: { type: 'text' } } });
  assert.equal(ok.reasoning.effort, 'low');
});
