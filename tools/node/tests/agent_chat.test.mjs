// Tool calls and reasoning on /v1/chat/completions through the official
// openai client, against the real server with the tiny random Qwen3-shaped
// model (its chat template is Qwen3's: hermes <tool_call>, <think>).
// Random weights never write a tool call on their own, so the replies are
// steered with real request features, not faked: an assistant prefill
// (continue_final_message; the parsers read the final message's text first)
// and logit_bias forcing the next token (</tool_call>, <|im_end|>).
import { test, before, after } from 'node:test';
import assert from 'node:assert/strict';
import OpenAI from 'openai';
import { startServer, modelId, postJson } from './server_harness.mjs';

let server, client, model;
const IM_END = 151645;
const TOOL_CALL_CLOSE = 151658;

before(async () => {
  server = await startServer();
  client = new OpenAI({ baseURL: server.baseURL, apiKey: 'unused', maxRetries: 0 });
  model = await modelId(server.url);
  const t = await postJson(server.url + '/tokenize', { content: '<|im_end|></tool_call>' });
  assert.deepEqual(t.json.tokens, [IM_END, TOOL_CALL_CLOSE]);
});

after(async () => { if (server) server.proc.kill('SIGKILL'); });

const tools = [{
  type: 'function',
  function: {
    name: 'get_weather', description: 'Current weather of a city',
    // Keys deliberately not sorted: the template must see this order.
    parameters: { type: 'object', properties: { unit: { type: 'string' }, city: { type: 'string' } }, required: ['city'] },
  },
}];
const system = { role: 'system', content: 'You are a weather assistant. Answer briefly.' };
const user = { role: 'user', content: 'What is the weather in Paris?' };
const callText = '<tool_call>\n{"name": "get_weather", "arguments": {"city": "Paris", "unit": "celsius"}}\n</tool_call>';

// Streams a chat request and rebuilds the message from the deltas, checking
// the tool_calls chunks follow OpenAI's shape.
async function streamChat(params) {
  const stream = await client.chat.completions.create({ ...params, stream: true });
  const msg = { content: '', reasoning_content: '', tool_calls: [] };
  let finish = null;
  for await (const chunk of stream) {
    for (const ch of chunk.choices) {
      const d = ch.delta;
      if (d.content) msg.content += d.content;
      if (d.reasoning_content) msg.reasoning_content += d.reasoning_content;
      for (const tc of d.tool_calls ?? []) {
        if (tc.id) {
          assert.equal(tc.index, msg.tool_calls.length, 'a new call comes with the next index');
          assert.equal(tc.type, 'function');
          assert.equal(typeof tc.function.name, 'string');
          msg.tool_calls.push({ id: tc.id, name: tc.function.name, arguments: tc.function.arguments ?? '' });
        } else {
          assert.ok(tc.index < msg.tool_calls.length, 'arguments follow their call head');
          msg.tool_calls[tc.index].arguments += tc.function.arguments ?? '';
        }
      }
      if (ch.finish_reason) finish = ch.finish_reason;
    }
  }
  return { msg, finish };
}

test('a prefilled tool call closed by a generated token is a tool_calls message, streaming and not', async () => {
  const open = callText.replace('</tool_call>', '');
  const params = {
    model, tools, messages: [system, user, { role: 'assistant', content: open }],
    continue_final_message: true, add_generation_prompt: false,
    max_tokens: 1, temperature: 0, logit_bias: { [TOOL_CALL_CLOSE]: 100 },
  };
  const r = await client.chat.completions.create(params);
  const m = r.choices[0].message;
  assert.equal(r.choices[0].finish_reason, 'tool_calls');
  assert.equal(m.content, null);
  assert.equal(m.tool_calls.length, 1);
  assert.match(m.tool_calls[0].id, /^call_[0-9a-f]{24}$/);
  assert.equal(m.tool_calls[0].type, 'function');
  assert.equal(m.tool_calls[0].function.name, 'get_weather');
  assert.equal(m.tool_calls[0].function.arguments, '{"city": "Paris", "unit": "celsius"}');
  const s = await streamChat(params);
  assert.equal(s.finish, 'tool_calls');
  assert.equal(s.msg.content, '');
  assert.equal(s.msg.tool_calls.length, 1);
  assert.equal(s.msg.tool_calls[0].name, 'get_weather');
  assert.deepEqual(JSON.parse(s.msg.tool_calls[0].arguments), { city: 'Paris', unit: 'celsius' });
});

test('parallel_tool_calls false returns one call; tool_choice none parses none', async () => {
  const two = callText + '\n' + callText.replace('Paris', 'Lyon');
  const base = {
    model, tools, messages: [system, user, { role: 'assistant', content: two }],
    continue_final_message: true, add_generation_prompt: false,
    max_tokens: 1, temperature: 0, logit_bias: { [IM_END]: 100 },
  };
  let r = await client.chat.completions.create(base);
  assert.equal(r.choices[0].message.tool_calls.length, 2);
  assert.equal(JSON.parse(r.choices[0].message.tool_calls[1].function.arguments).city, 'Lyon');
  r = await client.chat.completions.create({ ...base, parallel_tool_calls: false });
  assert.equal(r.choices[0].message.tool_calls.length, 1);
  assert.equal(r.choices[0].finish_reason, 'tool_calls');
  r = await client.chat.completions.create({ ...base, tool_choice: 'none' });
  assert.equal(r.choices[0].message.tool_calls, undefined);
  assert.equal(r.choices[0].finish_reason, 'stop');
  // Without tools nothing is parsed either.
  r = await client.chat.completions.create({ ...base, tools: undefined });
  assert.equal(r.choices[0].message.tool_calls, undefined);
});

// Tools whose arguments a grammar can always finish (bounded strings).
const boundedTools = [
  { type: 'function', function: { name: 'get_weather', description: 'Weather of a city',
    parameters: { type: 'object', properties: { city: { type: 'string', maxLength: 12 }, unit: { enum: ['c', 'f'] } },
      required: ['city', 'unit'], additionalProperties: false } } },
  { type: 'function', function: { name: 'get_time', description: 'Local time of a city',
    parameters: { type: 'object', properties: { tz: { type: 'string', maxLength: 8 } }, required: ['tz'], additionalProperties: false } } },
];

function checkForcedCall(call, names) {
  assert.ok(names.includes(call.name), call.name);
  const args = JSON.parse(call.arguments);
  if (call.name === 'get_weather') {
    assert.deepEqual(Object.keys(args).sort(), ['city', 'unit']);
    assert.ok(typeof args.city === 'string' && [...args.city].length <= 12, call.arguments);
    assert.ok(['c', 'f'].includes(args.unit), call.arguments);
  } else {
    assert.deepEqual(Object.keys(args), ['tz']);
    assert.ok(typeof args.tz === 'string' && [...args.tz].length <= 8, call.arguments);
  }
}

test('tool_choice named and required force a parseable call (grammar), streaming and not, any seed', async () => {
  for (const seed of [1, 2, 3]) {
    const named = { model, tools: boundedTools, messages: [system, user], max_tokens: 400, temperature: 1, seed,
      tool_choice: { type: 'function', function: { name: 'get_weather' } } };
    const r = await client.chat.completions.create(named);
    assert.equal(r.choices[0].finish_reason, 'tool_calls', JSON.stringify(r.choices[0]));
    const calls = r.choices[0].message.tool_calls;
    assert.equal(calls.length, 1);
    checkForcedCall(calls[0].function, ['get_weather']);
    const s = await streamChat(named);
    assert.equal(s.finish, 'tool_calls');
    assert.equal(s.msg.tool_calls.length, 1);
    checkForcedCall(s.msg.tool_calls[0], ['get_weather']);
    const req = await client.chat.completions.create({ ...named, tool_choice: 'required' });
    assert.equal(req.choices[0].finish_reason, 'tool_calls');
    checkForcedCall(req.choices[0].message.tool_calls[0].function, ['get_weather', 'get_time']);
  }
});

test('bad tool_choice values are 400s naming the field', async () => {
  const cases = [
    [{ tools, tool_choice: 'sometimes' }, 'tool_choice'],
    [{ tools, tool_choice: { type: 'function', function: { name: 'nope' } } }, 'tool_choice'],
    [{ tool_choice: 'required' }, 'tool_choice'],
    [{ tools, tool_choice: 'required', response_format: { type: 'json_object' } }, 'tool_choice'],
    [{ tools: [{ type: 'function', function: { name: 'f', parameters: { type: 'object', not: {} } } }], tool_choice: 'required' }, 'tools'],
  ];
  for (const [extra, param] of cases) {
    const r = await postJson(server.url + '/v1/chat/completions', { model, messages: [user], max_tokens: 1, ...extra });
    assert.equal(r.status, 400, `${JSON.stringify(extra)}: ${r.text}`);
    assert.equal(r.json.error.param, param, r.text);
  }
});

test('tool schemas reach the template in the client key order', async () => {
  const r = await postJson(server.url + '/apply-template', { messages: [user], tools });
  assert.equal(r.status, 200, r.text);
  assert.ok(r.json.prompt.includes('"properties": {"unit": {"type": "string"}, "city": {"type": "string"}}'), r.json.prompt);
});

test('reasoning_content is split from <think>, streaming and not', async () => {
  const t = await postJson(server.url + '/tokenize', { content: 'Hello' });
  const hello = t.json.tokens[0];
  // Inside <think>: everything generated is reasoning.
  const inside = {
    model, messages: [user, { role: 'assistant', content: '<think>\nLet me see.' }],
    continue_final_message: true, max_tokens: 3, temperature: 0, logit_bias: { [hello]: 100 },
  };
  let r = await client.chat.completions.create(inside);
  assert.equal(r.choices[0].message.reasoning_content, 'HelloHelloHello');
  assert.equal(r.choices[0].message.content, '');
  let s = await streamChat(inside);
  assert.equal(s.msg.reasoning_content, 'HelloHelloHello');
  assert.equal(s.msg.content, '');
  // After </think>: the answer is content.
  const after = { ...inside, messages: [user, { role: 'assistant', content: '<think>\nok\n</think>\n\n' }] };
  r = await client.chat.completions.create(after);
  assert.equal(r.choices[0].message.content, 'HelloHelloHello');
  assert.equal(r.choices[0].message.reasoning_content, undefined);
  s = await streamChat(after);
  assert.equal(s.msg.content, 'HelloHelloHello');
  assert.equal(s.msg.reasoning_content, '');
});

test('reasoning_effort is accepted; a bad value is a 400', async () => {
  let r = await client.chat.completions.create({ model, messages: [user], max_tokens: 2, reasoning_effort: 'low' });
  assert.equal(r.choices.length, 1);
  const bad = await postJson(server.url + '/v1/chat/completions', { model, messages: [user], reasoning_effort: 'extreme' });
  assert.equal(bad.status, 400);
  assert.equal(bad.json.error.param, 'reasoning_effort');
});

test('agent loop: a forced tool call, the tool result, next turns reuse the previous turn (cached_tokens)', async () => {
  const turns = [];
  // Turn 1: the model is forced to call the tool (named tool_choice).
  const messages = [system, user];
  const r1 = await client.chat.completions.create({
    model, tools: boundedTools, messages, max_tokens: 400, temperature: 0,
    tool_choice: { type: 'function', function: { name: 'get_weather' } },
  });
  assert.equal(r1.choices[0].finish_reason, 'tool_calls');
  const call = r1.choices[0].message.tool_calls[0];
  assert.equal(call.function.name, 'get_weather');
  turns.push(r1.usage);
  // Turn 2: the tool's result goes back; the model answers.
  const args = JSON.parse(call.function.arguments);
  messages.push({ role: 'assistant', content: null, tool_calls: [call] });
  messages.push({ role: 'tool', tool_call_id: call.id, content: JSON.stringify({ city: args.city, temp_c: 18 }) });
  const r2 = await client.chat.completions.create({ model, tools: boundedTools, messages, max_tokens: 8, temperature: 0 });
  turns.push(r2.usage);
  // Turn 3: the user follows up.
  messages.push({ role: 'assistant', content: r2.choices[0].message.content });
  messages.push({ role: 'user', content: 'And tomorrow?' });
  const r3 = await client.chat.completions.create({ model, tools: boundedTools, messages, max_tokens: 8, temperature: 0 });
  turns.push(r3.usage);
  console.log('agent loop usage per turn: ' + JSON.stringify(turns.map((u) => ({
    prompt: u.prompt_tokens, cached: u.prompt_tokens_details.cached_tokens, completion: u.completion_tokens }))));
  // Turn 2 starts with turn 1's whole prompt (system, tools, user, the
  // assistant's opening); the call itself comes back as text the tokenizer
  // may split otherwise than the sampled tokens.
  // Turn 2 starts with turn 1's whole prompt (system, tools, user, the
  // assistant's opening); the call itself comes back as text the tokenizer
  // may split otherwise than the sampled tokens.
  assert.ok(turns[1].prompt_tokens_details.cached_tokens >= turns[0].prompt_tokens - 1,
    `turn 2 cached ${turns[1].prompt_tokens_details.cached_tokens} of turn 1's ${turns[0].prompt_tokens} prompt tokens`);
  // Turn 3 starts with turn 2's whole prompt.
  assert.ok(turns[2].prompt_tokens_details.cached_tokens >= turns[1].prompt_tokens - 1,
    `turn 3 cached ${turns[2].prompt_tokens_details.cached_tokens} of turn 2's ${turns[1].prompt_tokens} prompt tokens`);
});

test('fields the server does not implement are 400s naming them, never ignored', async () => {
  const chat = server.url + '/v1/chat/completions';
  const cases = [
    [chat, { model, messages: [user], echo: true }, 'echo'],
    [chat, { model, messages: [user], response_format: { type: 'bogus' } }, 'response_format.type'],
    [server.url + '/v1/completions', { model, prompt: 'x', suffix: 'y' }, 'suffix'],
    [server.url + '/v1/completions', { model, prompt: 'x', best_of: 3, n: 1 }, 'best_of'],
    [server.url + '/v1/responses', { model, input: 'x', logprobs: true }, 'logprobs'],
    [server.url + '/v1/responses', { model, input: 'x', top_logprobs: 2 }, 'top_logprobs'],
  ];
  for (const [url, body, param] of cases) {
    const r = await postJson(url, body);
    assert.equal(r.status, 400, `${url} ${JSON.stringify(body)}: ${r.text}`);
    assert.equal(r.json.error.param, param, r.text);
  }
  const m = await postJson(server.url + '/v1/messages',
    { model, max_tokens: 2, messages: [user], top_logprobs: 3 });
  assert.equal(m.status, 400, m.text);
  assert.equal(m.json.type, 'error');
  assert.match(m.json.error.message, /'top_logprobs'/);
});

// Every field of the agent routes' bodies, and of their items, replaced by a
// value of each JSON type: always an answer (200 or a 4xx naming what is
// wrong), never a 500 or a dead server.
test('wrongly typed fields on the agent routes are never a 500', async () => {
  const kinds = [null, -1, 'x', [], { a: 1 }, true];
  const bodies = [
    ['/v1/chat/completions', { model, max_tokens: 1, tools: boundedTools, tool_choice: 'auto',
      parallel_tool_calls: true, reasoning_effort: 'low',
      messages: [system, { role: 'assistant', content: null, tool_calls: [{ id: 'c', type: 'function', function: { name: 'f', arguments: '{}' } }] },
        { role: 'tool', tool_call_id: 'c', content: 'r' }, user] }],
    ['/v1/messages', { model, max_tokens: 1, system: [{ type: 'text', text: 's' }], tools: [{ name: 'f', input_schema: { type: 'object' } }],
      tool_choice: { type: 'auto' }, stop_sequences: ['z'], thinking: { type: 'disabled' }, metadata: { user_id: 'u' },
      messages: [{ role: 'user', content: [{ type: 'text', text: 'hi' }] },
        { role: 'assistant', content: [{ type: 'tool_use', id: 't', name: 'f', input: {} }] },
        { role: 'user', content: [{ type: 'tool_result', tool_use_id: 't', content: 'r' }] }] }],
    ['/v1/responses', { model, max_output_tokens: 1, instructions: 'i', store: false,
      tools: [{ type: 'function', name: 'f', parameters: { type: 'object' } }], tool_choice: 'auto',
      reasoning: { effort: 'low' }, text: { format: { type: 'text' } }, metadata: {},
      input: [{ role: 'user', content: [{ type: 'input_text', text: 'hi' }] },
        { type: 'function_call', call_id: 'c', name: 'f', arguments: '{}' },
        { type: 'function_call_output', call_id: 'c', output: 'r' }] }],
  ];
  let checked = 0;
  for (const [route, base] of bodies) {
    const ok = await postJson(server.url + route, base);
    assert.equal(ok.status, 200, `${route} base body: ${ok.text}`);
    // Paths to every value in the body (objects and arrays, two levels into items).
    const paths = [];
    const walk = (v, path, depth) => {
      if (path.length) paths.push(path);
      if (depth === 0 || v === null || typeof v !== 'object') return;
      for (const k of Object.keys(v)) walk(v[k], [...path, k], depth - 1);
    };
    walk(base, [], 4);
    for (const path of paths) {
      for (const kind of kinds) {
        const body = structuredClone(base);
        let o = body;
        for (const k of path.slice(0, -1)) o = o[k];
        o[path.at(-1)] = kind;
        const r = await postJson(server.url + route, body);
        assert.ok(r.status === 200 || (r.status >= 400 && r.status < 500),
          `${route} ${path.join('.')} = ${JSON.stringify(kind)}: ${r.status} ${r.text}`);
        ++checked;
      }
    }
  }
  const health = await fetch(server.url + '/health');
  assert.equal(health.status, 200);
  console.log(`hostile field values checked: ${checked}`);
});
