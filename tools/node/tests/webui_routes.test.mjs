// The web page's routes on the real `kvfork serve` (issue 29), without a
// browser: GET / and the embedded files, --no-webui, GET /v1/cache/tree (its
// JSON, cap, errors and who may read it), and the page's tree layout code
// (src/server/webui/tree_layout.js, imported as the browser runs it).
import { test, after } from 'node:test';
import assert from 'node:assert/strict';
import path from 'node:path';
import { pathToFileURL } from 'node:url';
import { startServer, postJson } from './server_harness.mjs';

const sourceDir = process.env.KVFORK_SOURCE_DIR || path.resolve(import.meta.dirname, '../../..');
const { buildSegments } = await import(
  pathToFileURL(path.join(sourceDir, 'src/server/webui/tree_layout.js')).href);

const servers = [];
after(() => { for (const s of servers) s.proc.kill('SIGKILL'); });
async function start(args) {
  const s = await startServer(args);
  servers.push(s);
  return s;
}

async function chat(url, messages, headers = {}) {
  const r = await postJson(url + '/v1/chat/completions',
    { messages, max_tokens: 4, temperature: 0, ignore_eos: true }, headers);
  assert.equal(r.status, 200, r.text);
  return r.json;
}

async function tree(url, query = '', headers = {}) {
  const r = await fetch(url + '/v1/cache/tree' + query, { headers });
  return { status: r.status, json: await r.json() };
}

test('GET / serves the page and its files, without auth, with a CSP', async () => {
  const s = await start(['--api-key', 'user-key', '--admin-api-key', 'admin-key']);
  const r = await fetch(s.url + '/');
  assert.equal(r.status, 200);
  assert.match(r.headers.get('content-type'), /^text\/html/);
  assert.match(r.headers.get('content-security-policy'), /default-src 'self'/);
  assert.equal(r.headers.get('x-content-type-options'), 'nosniff');
  const html = await r.text();
  const refs = [...html.matchAll(/(?:src|href)="(\/[^"]*)"/g)].map((m) => m[1]);
  assert.ok(refs.includes('/main.js') && refs.includes('/style.css'), refs.join());
  for (const ref of refs) {
    const a = await fetch(s.url + ref);
    assert.equal(a.status, 200, ref);
  }
  for (const js of ['/main.js', '/api.js', '/chat.js', '/cache_view.js', '/tree_layout.js', '/store.js', '/dom.js']) {
    const a = await fetch(s.url + js);
    assert.equal(a.status, 200, js);
    assert.match(a.headers.get('content-type'), /^text\/javascript/, js);
  }
  assert.equal((await fetch(s.url + '/', { method: 'HEAD' })).status, 200);
  assert.equal((await fetch(s.url + '/nope.js')).status, 404);
  assert.equal((await fetch(s.url + '/embed.cmake')).status, 404);
  // The API behind the page still wants the key.
  assert.equal((await fetch(s.url + '/v1/models')).status, 401);
  // Metrics name the page's routes by their paths.
  const metrics = await (await fetch(s.url + '/metrics')).text();
  assert.match(metrics, /kvfork_http_responses_total\{route="\/",code="200"\} [1-9]/);
  assert.match(metrics, /kvfork_http_responses_total\{route="\/main.js",code="200"\} [1-9]/);
});

test('/v1/cache/tree: admin only with keys; salts only as a count', async () => {
  const s = await start(['--api-key', 'user-key', '--admin-api-key', 'admin-key']);
  const user = { Authorization: 'Bearer user-key' };
  const admin = { Authorization: 'Bearer admin-key' };
  assert.equal((await tree(s.url)).status, 401);
  const forbidden = await tree(s.url, '', user);
  assert.equal(forbidden.status, 403);
  assert.match(forbidden.json.error.message, /admin key/);
  await chat(s.url, [{ role: 'user', content: 'a tenant with a salt' }], user);
  const t = await tree(s.url, '', admin);
  assert.equal(t.status, 200);
  assert.equal(t.json.tenant_salts, 1, 'the user key salts its prefixes: one salt');
  const text = JSON.stringify(t.json);
  assert.ok(!text.includes('user-key') && !text.includes('salt"'), 'no salt or key in the answer');
});

test('/v1/cache/tree: shared prefixes fork, counts, cap and bad parameters', async () => {
  const s = await start([]);
  const system = { role: 'system', content: 'You are a helpful assistant. '.repeat(8) };
  await chat(s.url, [system, { role: 'user', content: 'first question about caches' }]);
  await chat(s.url, [system, { role: 'user', content: 'a second, different question' }]);
  const t = await tree(s.url);
  assert.equal(t.status, 200);
  const j = t.json;
  assert.equal(j.object, 'kv_cache.tree');
  assert.equal(j.has_tree, true);
  assert.equal(j.block_size, 16);
  assert.deepEqual(j.columns, ['id', 'parent', 'tokens', 'refcount', 'last_use', 'location']);
  assert.equal(j.max_nodes, 4096);
  assert.equal(j.truncated, false);
  assert.equal(j.nodes_total, j.nodes.length);
  assert.equal(j.tenant_salts, 0);
  const b = j.blocks;
  assert.equal(b.used + b.cached + b.free, b.total);
  const stats = await (await fetch(s.url + '/v1/cache/stats')).json();
  assert.equal(b.cached, stats.blocks_cached);
  const seen = new Set([-1]);
  for (const [id, parent, tokens, refcount, lastUse, location] of j.nodes) {
    assert.ok(seen.has(parent), `block ${id} listed before its parent ${parent}`);
    assert.equal(location, 'pool', 'no disk tier: every node is a pool block');
    seen.add(id);
    assert.ok(tokens >= 1 && tokens <= 16);
    assert.equal(refcount, 0, 'nothing runs now');
    assert.ok(lastUse <= j.clock);
  }
  const layout = buildSegments(j.nodes);
  assert.equal(layout.roots.length, 1, 'both prompts start with the same system prompt');
  assert.ok(layout.branchPoints >= 1, 'and part at the question');
  assert.ok(layout.leaves >= 2);

  const capped = await tree(s.url, '?max_nodes=1');
  assert.equal(capped.json.nodes.length, 1);
  assert.equal(capped.json.truncated, true);
  assert.equal(capped.json.nodes_total, j.nodes_total);
  for (const bad of ['-1', 'abc', '16385']) {
    const r = await tree(s.url, '?max_nodes=' + bad);
    assert.equal(r.status, 400, bad);
    assert.equal(r.json.error.param, 'max_nodes');
  }
});

test('--no-webui: GET / is a 404 again, the API stays', async () => {
  const s = await start(['--no-webui']);
  assert.equal((await fetch(s.url + '/')).status, 404);
  assert.equal((await fetch(s.url + '/main.js')).status, 404);
  assert.equal((await tree(s.url)).status, 200);
});

test('tree layout: chains merge, forks split, rows per branch', () => {
  // 0-1-2 then 2 forks into 3-4 and 5; 6 is a second root.
  const rows = [[0, -1, 16, 1, 9], [6, -1, 3, 0, 1], [1, 0, 16, 1, 9], [2, 1, 16, 0, 5],
    [3, 2, 16, 0, 5], [5, 2, 7, 0, 4], [4, 3, 5, 0, 5]];
  const l = buildSegments(rows);
  assert.equal(l.roots.length, 2);
  assert.equal(l.segments.length, 4, '0-1-2, 3-4, 5, 6');
  assert.equal(l.leaves, 3);
  assert.equal(l.branchPoints, 1);
  const first = l.roots[0];
  assert.deepEqual([first.first, first.last, first.blocks, first.tokens], [0, 2, 3, 48]);
  assert.deepEqual([first.usedBlocks, first.usedTokens, first.maxRefcount], [2, 32, 1]);
  assert.equal(first.leaves, 2);
  assert.deepEqual(first.children.map((c) => [c.first, c.start, c.tokens, c.y]), [[3, 48, 21, 0], [5, 48, 7, 1]]);
  assert.equal(l.roots[1].y, 2);
  assert.equal(l.maxTokens, 69);
});

test('tree layout: blocks on disk only are counted per segment, after its pool blocks', () => {
  // 0-1-2-3: 0 in use, 1 cached in the pool and on disk, 2 and 3 on disk only;
  // 1 also forks into 4 (cached).
  const rows = [[0, -1, 16, 1, 9, 'pool'], [1, 0, 16, 0, 8, 'both'], [2, 1, 16, 0, 0, 'disk'],
    [4, 1, 5, 0, 7, 'pool'], [3, 2, 16, 0, 0, 'disk']];
  const l = buildSegments(rows);
  assert.equal(l.segments.length, 3, '0-1, 2-3, 4');
  const [head] = l.roots;
  assert.deepEqual([head.blocks, head.usedBlocks, head.diskBlocks], [2, 1, 0]);
  const [disk, pool] = head.children;
  assert.deepEqual([disk.first, disk.last, disk.diskBlocks, disk.diskTokens, disk.tokens], [2, 3, 2, 32, 32]);
  assert.deepEqual([pool.first, pool.diskBlocks, pool.tokens], [4, 0, 5]);
  // Rows without a location (an older server) draw as pool blocks.
  assert.equal(buildSegments([[0, -1, 16, 0, 1]]).segments[0].diskBlocks, 0);
});

test('tree layout: thousands of blocks stay few segments, a deep comb does not overflow', () => {
  // 200 conversations of 15 blocks behind one 10-block system prompt: 3,010 blocks.
  const rows = [];
  let id = 0;
  for (let i = 0; i < 10; i++) rows.push([id, id - 1, 16, 0, id++]);
  for (let c = 0; c < 200; c++) {
    let parent = 9;
    for (let k = 0; k < 15; k++) { rows.push([id, parent, 16, 0, id]); parent = id++; }
  }
  const t0 = performance.now();
  const l = buildSegments(rows);
  assert.ok(performance.now() - t0 < 500);
  assert.equal(l.segments.length, 201);
  assert.equal(l.leaves, 200);
  // A fork at every block, 20,000 deep.
  const comb = [];
  for (let i = 0; i < 20000; i++) {
    comb.push([2 * i, i === 0 ? -1 : 2 * (i - 1), 16, 0, 0]);
    comb.push([2 * i + 1, i === 0 ? -1 : 2 * (i - 1), 4, 0, 0]);
  }
  const deep = buildSegments(comb);
  assert.equal(deep.leaves, 20001, "every short block and the last long one");
});
