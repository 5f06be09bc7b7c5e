// 32 streaming clients at once, 8 of them disconnecting mid-stream: every
// other stream is complete and matches the same request run alone; after,
// every block is free or cached.
import { test, before, after } from 'node:test';
import assert from 'node:assert/strict';
import OpenAI from 'openai';
import { startServer, modelId, parsePrometheus, metricSum } from './server_harness.mjs';

let server, client, model;
before(async () => {
  server = await startServer(['--max-num-seqs', '8', '--max-queue', '64']);
  client = new OpenAI({ baseURL: server.baseURL, apiKey: 'unused', maxRetries: 0, timeout: 120000 });
  model = await modelId(server.url);
});
after(async () => { if (server) server.proc.kill('SIGKILL'); });

const promptOf = (i) => `Client ${i} asks about shared KV blocks number ${i * 7}.`;

test('32 concurrent streams, 8 disconnect mid-stream', async () => {
  const N = 32, MAX = 16;
  const dropping = new Set([1, 5, 9, 13, 17, 21, 25, 29]);
  const disconnectsBefore = metricSum(parsePrometheus(await (await fetch(server.url + '/metrics')).text()),
    'kvfork_client_disconnects_total');
  const runs = Array.from({ length: N }, async (_, i) => {
    const controller = new AbortController();
    const drop = dropping.has(i);
    const stream = await client.completions.create({
      model, prompt: promptOf(i), temperature: 0, ignore_eos: true, stream: true,
      max_tokens: drop ? 400 : MAX, stream_options: { include_usage: true },
    }, { signal: controller.signal });
    let text = '', finish = null, usage = null, chunks = 0;
    try {
      for await (const c of stream) {
        chunks++;
        for (const ch of c.choices) { text += ch.text; if (ch.finish_reason) finish = ch.finish_reason; }
        if (c.usage) usage = c.usage;
        if (drop && chunks === 3) controller.abort();
      }
    } catch (e) {
      if (!drop) throw e;
    }
    return { i, drop, text, finish, usage };
  });
  const results = await Promise.all(runs);
  for (const r of results.filter((x) => !x.drop)) {
    assert.equal(r.finish, 'length', `client ${r.i}`);
    assert.equal(r.usage.completion_tokens, MAX, `client ${r.i}`);
    // The same request alone gives the same text (batch invariance).
    const alone = await client.completions.create({ model, prompt: promptOf(r.i), temperature: 0, ignore_eos: true, max_tokens: MAX });
    assert.equal(r.text, alone.choices[0].text, `client ${r.i} stream differs from running alone`);
  }
  // Cancelled at once: the dropped requests' blocks come back.
  let stats;
  for (let t = 0; t < 100; t++) {
    stats = await (await fetch(server.url + '/v1/cache/stats')).json();
    if (stats.blocks_used === 0 && stats.requests_running === 0 && stats.requests_waiting === 0) break;
    await new Promise((r) => setTimeout(r, 100));
  }
  assert.equal(stats.blocks_used, 0, JSON.stringify(stats));
  assert.equal(stats.blocks_free + stats.blocks_cached, stats.blocks_total);
  const m = parsePrometheus(await (await fetch(server.url + '/metrics')).text());
  assert.equal(metricSum(m, 'kvfork_client_disconnects_total') - disconnectsBefore, dropping.size);
});
