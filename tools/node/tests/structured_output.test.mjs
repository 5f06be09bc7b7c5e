// Structured output end to end: hundreds of random JSON Schemas, each sent
// with its own seed at temperature 1 to the tiny random-weight model (the
// worst case for a grammar: unconstrained, it writes anything), through
// /v1/chat/completions and /v1/completions, batched, streaming and n > 1.
// Every output is then checked outside kvfork by Python's json and
// jsonschema (validate_structured.py), along with regex and choice outputs.
import { test, before, after } from 'node:test';
import assert from 'node:assert/strict';
import { spawnSync } from 'node:child_process';
import path from 'node:path';
import { fileURLToPath } from 'node:url';
import OpenAI from 'openai';
import { startServer, modelId, postJson } from './server_harness.mjs';

const here = path.dirname(fileURLToPath(import.meta.url));
const python = process.env.KVFORK_PYTHON || 'python3';
const NUM_SCHEMAS = Number(process.env.KVFORK_STRUCTURED_SCHEMAS || 240);

let server, client, model;

before(async () => {
  server = await startServer(['--max-num-seqs', '16']);
  client = new OpenAI({ baseURL: server.baseURL, apiKey: 'unused', maxRetries: 0 });
  model = await modelId(server.url);
});

after(async () => { if (server) server.proc.kill('SIGKILL'); });

// mulberry32: a seeded PRNG, so a failure names a reproducible schema.
function rng(seed) {
  let a = seed >>> 0;
  const next = () => {
    a = (a + 0x6D2B79F5) >>> 0;
    let t = a;
    t = Math.imul(t ^ (t >>> 15), t | 1);
    t ^= t + Math.imul(t ^ (t >>> 7), t | 61);
    return ((t ^ (t >>> 14)) >>> 0) / 4294967296;
  };
  const int = (lo, hi) => lo + Math.floor(next() * (hi - lo + 1));
  const pick = (xs) => xs[int(0, xs.length - 1)];
  return { next, int, pick };
}

// Bounded patterns only: an unbounded one ([a-z]*) on a random model at
// temperature 1 rarely draws the closing quote (a few tokens of 150k).
const PATTERNS = ['^[a-z]{1,6}$', '^\\d{3}-\\d{4}$', '^(yes|no|maybe)$', '^[A-Z]{2}[0-9]{1,3}$',
  '^#[0-9a-f]{6}$', '^(\\+|-)?[0-9]{1,4}(\\.[0-9]{1,2})?$', '^é[à-ö]{0,3}$'];
const WORDS = ['alpha', 'beta', 'gamma', 'delta', 'x', 'y_z', 'name', 'value', 'is ok', 'ünï'];

function randomSchema(r, depth, defs) {
  const leaf = depth >= 3;
  const kinds = ['string', 'string', 'integer', 'number', 'boolean', 'null', 'enum', 'const',
    'pattern', 'nullable'];
  if (!leaf) kinds.push('object', 'object', 'array', 'array', 'anyOf', 'ref');
  const kind = r.pick(kinds);
  switch (kind) {
    case 'string': {
      const min = r.int(0, 2);
      return { type: 'string', minLength: min, maxLength: min + r.int(0, 6) };
    }
    case 'integer': return { type: 'integer' };
    case 'number': return { type: 'number', description: 'annotations are allowed' };
    case 'boolean': return { type: 'boolean' };
    case 'null': return { type: 'null' };
    case 'enum': return { enum: [r.pick(WORDS), r.int(-5, 5), null, r.pick(WORDS) + '"'] };
    case 'const': return { const: r.pick([r.pick(WORDS), r.int(0, 100), true, { k: [1, 'two'] }]) };
    case 'pattern': return { type: 'string', pattern: r.pick(PATTERNS) };
    case 'nullable': return { type: ['string', 'null'], maxLength: r.int(0, 4) };
    case 'anyOf': return { anyOf: [randomSchema(r, depth + 1, defs), randomSchema(r, depth + 1, defs)] };
    case 'ref': {
      const name = `d${Object.keys(defs).length}`;
      defs[name] = true;  // reserved: refs made while building it get other names
      defs[name] = randomSchema(r, depth + 1, defs);
      return { $ref: `#/$defs/${name}` };
    }
    case 'array': {
      const min = r.int(0, 2);
      return { type: 'array', items: randomSchema(r, depth + 1, defs), minItems: min,
        maxItems: min + r.int(0, 3) };
    }
    default: {
      const properties = {};
      const required = [];
      const n = r.int(1, 4);
      for (let i = 0; i < n; i++) {
        const key = r.pick(WORDS) + i;
        properties[key] = randomSchema(r, depth + 1, defs);
        if (r.next() < 0.6) required.push(key);
      }
      return { type: 'object', properties, required, additionalProperties: false };
    }
  }
}

function schemaFor(seed) {
  const r = rng(seed);
  const defs = {};
  const schema = randomSchema(r, r.int(0, 1), defs);
  if (Object.keys(defs).length) schema.$defs = defs;
  return schema;
}

// Runs `jobs` (async functions) `width` at a time: the server batches them.
async function pool(jobs, width) {
  const out = new Array(jobs.length);
  let next = 0;
  await Promise.all(Array.from({ length: width }, async () => {
    while (next < jobs.length) {
      const i = next++;
      out[i] = await jobs[i]();
    }
  }));
  return out;
}

function validate(cases) {
  const input = cases.map((c) => JSON.stringify(c)).join('\n') + '\n';
  const p = spawnSync(python, [path.join(here, 'validate_structured.py')], { input, encoding: 'utf8' });
  assert.equal(p.error, undefined, `cannot run ${python}: ${p.error}`);
  return { status: p.status, out: p.stdout + p.stderr };
}

test('random JSON Schemas at temperature 1: every output validates', async () => {
  const started = Date.now();
  const jobs = [];
  for (let i = 0; i < NUM_SCHEMAS; i++) {
    const schema = schemaFor(1000 + i);
    const chat = i % 2 === 0;
    const stream = i % 5 === 0;
    const n = i % 7 === 0 ? 2 : 1;
    const fmt = { type: 'json_schema', json_schema: { name: `s${i}`, schema, strict: true } };
    const common = { model, temperature: 1, seed: i, max_tokens: 600, n };
    jobs.push(async () => {
      const texts = new Array(n).fill('');
      const finish = new Array(n).fill(null);
      if (chat) {
        const params = { ...common, messages: [{ role: 'user', content: `case ${i}` }],
          response_format: fmt };
        if (stream) {
          for await (const chunk of await client.chat.completions.create({ ...params, stream: true })) {
            for (const c of chunk.choices) {
              texts[c.index] += c.delta?.content ?? '';
              if (c.finish_reason) finish[c.index] = c.finish_reason;
            }
          }
        } else {
          const r = await client.chat.completions.create(params);
          for (const c of r.choices) { texts[c.index] = c.message.content; finish[c.index] = c.finish_reason; }
        }
      } else {
        // vLLM's field on the legacy route.
        const params = { ...common, prompt: `case ${i}:`, guided_json: schema };
        if (stream) {
          for await (const chunk of await client.completions.create({ ...params, stream: true })) {
            for (const c of chunk.choices) {
              texts[c.index] += c.text;
              if (c.finish_reason) finish[c.index] = c.finish_reason;
            }
          }
        } else {
          const r = await client.completions.create(params);
          for (const c of r.choices) { texts[c.index] = c.text; finish[c.index] = c.finish_reason; }
        }
      }
      return texts.map((text, k) => ({ kind: 'schema', schema, text, finish: finish[k], seed: i }));
    });
  }
  const cases = (await pool(jobs, 8)).flat();
  const unfinished = cases.filter((c) => c.finish !== 'stop');
  assert.deepEqual(unfinished, [], 'every output ends by the grammar, not by max_tokens');
  const v = validate(cases);
  assert.equal(v.status, 0, v.out);
  assert.ok(cases.length >= NUM_SCHEMAS, `${cases.length} outputs`);
  console.log(`# ${cases.length} outputs of ${NUM_SCHEMAS} schemas validated in ${Date.now() - started} ms`);
});

test('regex, choice and json_object outputs, and greedy ones', async () => {
  const cases = [];
  const jobs = [];
  for (let i = 0; i < 24; i++) {
    const pattern = PATTERNS[i % PATTERNS.length].replace(/^\^|\$$/g, '');
    jobs.push(async () => {
      const r = await client.completions.create({ model, prompt: `r${i}`, max_tokens: 64,
        temperature: i % 3 === 0 ? 0 : 1, seed: i, structured_outputs: { regex: pattern } });
      return { kind: 'regex', pattern, text: r.choices[0].text };
    });
    const choices = ['red', 'green', 'blue', 'dark blue', 'ünïcode "quoted"'];
    jobs.push(async () => {
      const r = await client.chat.completions.create({ model, messages: [{ role: 'user', content: `c${i}` }],
        max_tokens: 32, temperature: 1, seed: i, guided_choice: choices });
      return { kind: 'choice', choices, text: r.choices[0].message.content };
    });
    jobs.push(async () => {
      // Greedy: the random model's favourite tokens, masked.
      const r = await client.chat.completions.create({ model, messages: [{ role: 'user', content: `o${i}` }],
        max_tokens: 600, temperature: 0, response_format: { type: 'json_object' },
        logit_bias: { [i * 997 % 150000]: 5 } });
      return { kind: 'json_object', text: r.choices[0].message.content, finish: r.choices[0].finish_reason };
    });
  }
  for (const c of await pool(jobs, 8)) cases.push(c);
  // A greedy json_object may loop inside a string until max_tokens (any key
  // is allowed): those that end must be objects.
  const finished = cases.filter((c) => c.kind !== 'json_object' || c.finish === 'stop');
  assert.ok(finished.length >= 48, `${finished.length} finished`);
  const v = validate(finished);
  assert.equal(v.status, 0, v.out);
});

test('llama.cpp grammar (GBNF) and json_schema fields', async () => {
  const g = await postJson(server.url + '/v1/completions', { model, prompt: 'g', max_tokens: 40,
    temperature: 1, seed: 3, grammar: 'root ::= "(" [0-9]+ ("," [0-9]+){0,2} ")"' });
  assert.equal(g.status, 200, g.text);
  assert.match(g.json.choices[0].text, /^\(\d+(,\d+){0,2}\)$/);
  const schema = { type: 'object', properties: { ok: { type: 'boolean' } }, required: ['ok'],
    additionalProperties: false };
  const j = await postJson(server.url + '/v1/chat/completions', { model, max_tokens: 40,
    messages: [{ role: 'user', content: 'j' }], temperature: 1, seed: 4, json_schema: schema });
  assert.equal(j.status, 200, j.text);
  assert.equal(typeof JSON.parse(j.json.choices[0].message.content).ok, 'boolean');
});

test('bad structured-output fields are a 400 naming them', async () => {
  const messages = [{ role: 'user', content: 'x' }];
  const cases = [
    [{ response_format: { type: 'bogus' } }, 'response_format.type', 'bogus'],
    [{ response_format: { type: 'json_schema', json_schema: { name: 'n',
      schema: { type: 'integer', minimum: 3 } } } }, 'response_format.json_schema.schema', 'minimum'],
    [{ guided_json: { type: 'object', properties: { a: { type: 'string', format: 'email' } } } },
      'guided_json', 'format'],
    [{ guided_regex: '(a)\\1' }, 'guided_regex', 'backreference'],
    [{ grammar: 'root ::= nothing' }, 'grammar', 'nothing'],
    [{ guided_choice: ['a'], guided_regex: 'a' }, 'guided_choice', 'guided_regex'],
  ];
  for (const [fields, param, mentions] of cases) {
    const r = await postJson(server.url + '/v1/chat/completions', { model, messages, ...fields });
    assert.equal(r.status, 400, `${JSON.stringify(fields)}: ${r.text}`);
    assert.equal(r.json.error.param, param, r.text);
    assert.ok(r.json.error.message.includes(mentions), r.json.error.message);
  }
});
