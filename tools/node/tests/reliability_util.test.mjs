// The stream checker the soak and fault tests rely on must reject what is
// malformed, or their "every stream well-formed" means nothing.
import { test } from 'node:test';
import assert from 'node:assert/strict';
import { checkStream, sseEvents } from './reliability_util.mjs';

const meta = { id: 'cmpl-1', created: 5, model: 'm', object: 'text_completion' };
const chunk = (o) => 'data: ' + JSON.stringify({ ...meta, ...o }) + '\n\n';
const text = (t, finish = null, index = 0) => chunk({ choices: [{ index, text: t, logprobs: null, finish_reason: finish }], usage: null });
const usage = (p, c, cached = 0) => chunk({ choices: [], usage: { prompt_tokens: p, completion_tokens: c, total_tokens: p + c, prompt_tokens_details: { cached_tokens: cached } } });
const done = 'data: [DONE]\n\n';
const want = { chat: false, n: 1, maxTokens: 2, includeUsage: true, model: 'm' };

test('a well-formed completion stream passes', () => {
  const r = checkStream(text('a') + text('b', 'length') + usage(3, 2) + done, want);
  assert.equal(r.choices[0].text, 'ab');
  assert.equal(r.usage.completion_tokens, 2);
});

test('malformed streams are rejected', () => {
  const cases = [
    ['no [DONE]', text('a') + text('b', 'length') + usage(3, 2), /\[DONE\]/],
    ['two [DONE]', text('a') + text('b', 'length') + usage(3, 2) + done + done, /\[DONE\]/],
    ['no finish', text('a') + text('b') + usage(3, 2) + done, /never finished/],
    ['chunk after finish', text('a', 'length') + text('b') + usage(3, 2) + done, /after its finish_reason/],
    ['abort finish', text('a') + text('b', 'abort') + usage(3, 2) + done, /finish_reason abort/],
    ['no usage', text('a') + text('b', 'length') + done, /no usage/],
    ['usage not last', text('a') + usage(3, 2) + text('b', 'length') + done, /after the usage/],
    ['tokens != max_tokens at length', text('a') + text('b', 'length') + usage(3, 1) + done, /completion_tokens 1 != 2/],
    ['cached = prompt', text('a') + text('b', 'length') + usage(3, 2, 3) + done, /cached_tokens/],
    ['id changes', text('a') + chunk({ id: 'other', choices: [{ index: 0, text: 'b', finish_reason: 'length' }], usage: null }) + usage(3, 2) + done, /id/],
    ['index out of range', text('a', 'length', 1) + usage(3, 2) + done, /choice index/],
    ['error event', 'data: {"error":{"message":"x"}}\n\n' + done, /error event/],
    ['not a data line', 'event: x\n\n' + done, /not an SSE data event/],
    ['missing blank line', text('a', 'length') + usage(3, 2) + 'data: [DONE]\n', /blank line/],
  ];
  for (const [what, body, re] of cases) assert.throws(() => checkStream(body, want), re, what);
});

test('chat streams need the role delta first', () => {
  const c = (delta, finish = null) => 'data: ' + JSON.stringify({ id: 'c', created: 1, model: 'm', object: 'chat.completion.chunk', choices: [{ index: 0, delta, finish_reason: finish }] }) + '\n\n';
  const w = { chat: true, n: 1, maxTokens: 1, includeUsage: false, model: 'm' };
  checkStream(c({ role: 'assistant', content: '' }) + c({ content: 'x' }) + c({}, 'length') + done, w);
  assert.throws(() => checkStream(c({ content: 'x' }) + c({}, 'length') + done, w), /assistant role/);
  assert.deepEqual(sseEvents('data: 1\n\ndata: [DONE]\n\n'), ['1']);
});
