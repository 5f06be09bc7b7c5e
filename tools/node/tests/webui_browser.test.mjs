// The web page in a real browser (issue 29): Debian's chromium driven by
// puppeteer-core against the real `kvfork serve` on loopback with the tiny
// random model. A message streams; the same conversation again reuses all
// but its last prompt token; a branch adds one branch to the cache view; a
// wrong API key shows the server's error; a failed turn and a dropped
// stream show a message and keep the conversation. Screenshots of each step
// go to $KVFORK_BUILD_DIR/webui-screenshots/.
//
// Skips, saying why, only when chromium is not installed
// (scripts/install-deps.sh installs it).
import { test, before, after } from 'node:test';
import assert from 'node:assert/strict';
import fs from 'node:fs';
import path from 'node:path';
import { pathToFileURL } from 'node:url';
import { startServer } from './server_harness.mjs';

const CHROMIUM_CANDIDATES = [process.env.KVFORK_CHROMIUM, '/usr/bin/chromium', '/usr/bin/chromium-browser']
  .filter(Boolean);
const chromium = CHROMIUM_CANDIDATES.find((p) => fs.existsSync(p));
const skip = chromium ? false
  : `chromium is not installed (looked for ${CHROMIUM_CANDIDATES.join(', ')}); scripts/install-deps.sh installs it`;

const sourceDir = process.env.KVFORK_SOURCE_DIR || path.resolve(import.meta.dirname, '../../..');
const { buildSegments } = await import(
  pathToFileURL(path.join(sourceDir, 'src/server/webui/tree_layout.js')).href);
const shotDir = path.join(process.env.KVFORK_BUILD_DIR || '.', 'webui-screenshots');

let browser;
const servers = [];

before(async () => {
  if (skip) return;
  const puppeteer = (await import('puppeteer-core')).default;
  fs.mkdirSync(shotDir, { recursive: true });
  browser = await puppeteer.launch({
    executablePath: chromium,
    headless: true,
    // Root in a container has no user namespace for the sandbox.
    args: ['--no-sandbox', '--disable-gpu', '--disable-dev-shm-usage', '--window-size=1280,860'],
    defaultViewport: { width: 1280, height: 860 },
  });
});

after(async () => {
  if (browser) await browser.close();
  for (const s of servers) s.proc.kill('SIGKILL');
});

async function openPage(url) {
  const context = await browser.createBrowserContext();  // fresh storage per test
  const page = await context.newPage();
  const problems = [];
  page.on('pageerror', (e) => problems.push('page error: ' + e.message));
  // HTTP errors the tests cause on purpose show as "Failed to load resource".
  page.on('console', (m) => {
    if (m.type() === 'error' && !/Failed to load resource/.test(m.text())) problems.push('console: ' + m.text());
  });
  await page.goto(url + '/', { waitUntil: 'load' });
  return { page, problems };
}

// DevTools network throttling: 10 KB/s down, no added latency.
const kSlowLink = { offline: false, download: 10 * 1024, upload: 1024 * 1024, latency: 0 };

async function shot(page, name) {
  await page.screenshot({ path: path.join(shotDir, name + '.png') });
}

async function setSetting(page, name, value) {
  await page.$eval('#settings', (d) => { d.open = true; });
  await page.$eval(`#set-${name}`, (e, v) => {
    e.value = v;
    e.dispatchEvent(new Event('change'));
  }, String(value));
}

// Types text, sends it and waits for the turn to end; returns the last
// answer's stats (data attributes) and text.
async function sendAndWait(page, text) {
  await page.type('#prompt', text);
  await page.click('#send');
  return waitTurn(page);
}

async function waitTurn(page) {
  await page.waitForFunction(() => {
    const m = document.querySelector('#messages .message.assistant:last-child');
    return m && !m.classList.contains('pending');
  }, { timeout: 60000 });
  return page.$eval('#messages .message.assistant:last-child', (m) => {
    const s = m.querySelector('.turn-stats');
    return {
      content: m.querySelector('.content').textContent,
      error: m.querySelector('.error')?.textContent ?? null,
      prompt: s ? Number(s.dataset.promptTokens) : null,
      cached: s ? Number(s.dataset.cachedTokens) : null,
      finish: s ? s.dataset.finish : null,
    };
  });
}

async function showTab(page, name) {
  await page.click(`#tab-${name}`);
}

// The page's branch count once it shows the tree the server has now.
async function settledLeaves(page, url) {
  const t = await (await fetch(url + '/v1/cache/tree')).json();
  const expected = buildSegments(t.nodes).leaves;
  await page.waitForFunction((n) => Number(document.getElementById('tree').dataset.leaves) === n,
    { timeout: 10000 }, expected);
  return expected;
}

test('chat streams, the same conversation is all cached, a branch adds one branch', { skip }, async () => {
  const server = await startServer([]);
  servers.push(server);
  const { page, problems } = await openPage(server.url);
  await page.waitForFunction(() => document.getElementById('status').textContent.startsWith('model '));
  await setSetting(page, 'temperature', 0);
  await setSetting(page, 'max_tokens', 24);
  await page.$eval('#system-prompt', (e) => {
    e.value = 'You are a careful assistant who explains prefix caching.';
    e.dispatchEvent(new Event('change'));
  });

  // Every text the answer shows while it streams (each chunk sets it once),
  // and how many separate deliveries brought them: chunks that arrived in
  // one network read would all come in one observer call.
  await page.evaluate(() => {
    window.__streamed = [];
    window.__deliveries = 0;
    new MutationObserver((records) => {
      let grew = false;
      for (const r of records) {
        const box = r.target.closest?.('.message.assistant.pending');
        if (!box) continue;
        for (const n of r.addedNodes) {
          if (n.nodeType === 3) { window.__streamed.push(n.data); grew = true; }
        }
      }
      if (grew) window.__deliveries += 1;
    }).observe(document.getElementById('messages'), { childList: true, subtree: true });
  });
  // The tiny model answers 24 tokens in a few milliseconds, which a loaded
  // machine can hand the page in one network read: a slow link (about 50
  // SSE chunks a second) makes "arrived over time" a property of the page's
  // streaming, not of the machine's timing.
  await page.emulateNetworkConditions(kSlowLink);
  const first = await sendAndWait(page, 'What does a KV cache hold?');
  await page.emulateNetworkConditions(null);
  assert.equal(first.error, null);
  const streamed = await page.evaluate(() => window.__streamed);
  assert.ok(new Set(streamed).size >= 2, 'the answer grew chunk by chunk: ' + JSON.stringify(streamed));
  assert.ok(await page.evaluate(() => window.__deliveries) >= 2, 'the chunks arrived over time, not at once');
  assert.equal(streamed.at(-1), first.content);
  assert.ok(first.prompt > 0);
  assert.ok(['length', 'stop'].includes(first.finish));
  await shot(page, 'chat-first-turn');

  // Regenerate: the same prompt again, so all but its last token is reused.
  await page.click('#messages .message.assistant:last-child button.regenerate');
  const again = await waitTurn(page);
  assert.equal(again.prompt, first.prompt);
  assert.equal(again.cached, again.prompt - 1, 'the cached-token bar: all but the last token');
  const bar = await page.$eval('#messages .message.assistant:last-child .cache-bar .reused',
    (e) => parseFloat(e.style.width));
  assert.ok(Math.abs(bar - (100 * again.cached) / again.prompt) < 0.01, 'bar width ' + bar);
  const second = await sendAndWait(page, 'And why share it between requests?');
  assert.ok(second.cached > 0, 'the second turn reuses the first');
  await shot(page, 'chat-cached');

  await showTab(page, 'cache');
  const before = await settledLeaves(page, server.url);
  assert.ok(before >= 1);

  // Branch from the first answer and ask something else there.
  await showTab(page, 'chat');
  const convs = await page.$$eval('#conversations li', (l) => l.length);
  await page.click('#messages .message.assistant[data-index="1"] button.branch');
  assert.equal(await page.$$eval('#conversations li', (l) => l.length), convs + 1);
  assert.equal(await page.$$eval('#messages .message', (l) => l.length), 2, 'the branch has the first turn');
  const branched = await sendAndWait(page, 'Something else: how is it evicted?');
  assert.ok(branched.cached > 0, 'the branch reuses the shared turn');
  await showTab(page, 'cache');
  const afterLeaves = await settledLeaves(page, server.url);
  assert.equal(afterLeaves, before + 1, 'the branch is one more branch in the tree');
  const info = await page.$eval('#tree-info', (e) => e.textContent);
  assert.match(info, new RegExp(`${afterLeaves} branches`));
  await page.waitForFunction(() => Number(document.getElementById('hit-chart').dataset.points) >= 1);
  assert.ok(await page.$$eval('#tree .segment.shared', (l) => l.length) >= 1, 'a shared prefix is drawn');
  const bars = await page.$eval('#block-bar', (e) => ({ ...e.dataset }));
  assert.equal(Number(bars.used) + Number(bars.cached) + Number(bars.free), Number(bars.total));
  await page.hover('#tree .segment.shared rect');
  await shot(page, 'cache-view');

  // A few thousand blocks (the route's default cap is 4,096): 250
  // conversations of 15 blocks behind a 10-block system prompt. The chart
  // merges single-child chains, so it draws one shape per branch and one for
  // the shared prefix. (Its time is printed, never asserted.)
  await showTab(page, 'chat');  // stops the live polling that would redraw
  const big = await page.evaluate(async () => {
    const { CacheView } = await import('/cache_view.js');
    const nodes = [];
    let id = 0;
    for (let i = 0; i < 10; i++) { nodes.push([id, id - 1, 16, 1, id]); id++; }
    for (let c = 0; c < 250; c++) {
      let parent = 9;
      for (let k = 0; k < 15; k++) { nodes.push([id, parent, 16, k < 3 ? 1 : 0, id]); parent = id++; }
    }
    const view = new CacheView();
    const t0 = performance.now();
    view.drawTree({ nodes, has_tree: true, block_size: 16, nodes_total: nodes.length, truncated: false, tenant_salts: 0 });
    return {
      ms: performance.now() - t0, blocks: nodes.length,
      shapes: document.querySelectorAll('#tree .segment').length,
      leaves: Number(document.getElementById('tree').dataset.leaves),
    };
  });
  console.log(`drawing ${big.blocks} blocks as ${big.shapes} shapes took ${big.ms.toFixed(1)} ms`);
  assert.equal(big.blocks, 3760);
  assert.equal(big.shapes, 251);
  assert.equal(big.leaves, 250);

  // Edit-and-resend the branch's question: the turns before it are reused.
  await showTab(page, 'chat');
  await page.click('#messages .message.user[data-index="2"] button.edit');
  await page.$eval('#messages .edit-area', (e) => { e.value = 'Edited: what is evicted first?'; });
  await page.click('#messages .editor .resend');
  const edited = await waitTurn(page);
  assert.equal(edited.error, null);
  assert.ok(edited.cached >= branched.cached - 16, 'the edit reuses what came before it');
  assert.equal(await page.$$eval('#messages .message', (l) => l.length), 4, 'the turns after the edit are replaced');
  assert.equal(await page.$eval('#messages .message.user[data-index="2"] .content', (e) => e.textContent),
    'Edited: what is evicted first?');

  // Conversations survive a reload (localStorage).
  await showTab(page, 'chat');
  await page.reload({ waitUntil: 'load' });
  assert.equal(await page.$$eval('#conversations li', (l) => l.length), convs + 1);
  assert.equal(await page.$$eval('#messages .message', (l) => l.length), 4);

  // A request the server refuses: the message says why; the turn stays.
  await setSetting(page, 'max_tokens', 0);
  const refused = await sendAndWait(page, 'This one is refused.');
  assert.match(refused.error, /max_tokens/);
  assert.equal(await page.$$eval('#messages .message.user', (l) => l.length), 3);
  await shot(page, 'chat-error');

  // Stop: the partial answer stays, its finish reason says so. On the slow
  // link the 3,000 tokens take about a minute to arrive, so the click always
  // lands mid-answer (the tiny model generates them in a few seconds, which
  // a loaded machine's click could miss).
  await setSetting(page, 'max_tokens', 3000);
  await page.emulateNetworkConditions(kSlowLink);
  await page.type('#prompt', 'Go on for a while.');
  await page.click('#send');
  await page.waitForFunction(() =>
    document.querySelector('#messages .message.pending .content')?.textContent.length > 0, { timeout: 30000 });
  await page.click('#stop');
  const stopped = await waitTurn(page);
  await page.emulateNetworkConditions(null);
  assert.equal(stopped.error, null);
  assert.equal(stopped.finish, 'stopped');
  assert.ok(stopped.content.length > 0);

  // Drop cached blocks: the tree empties, every block is free. (First the
  // stopped request must be gone: its blocks would be cached after the reset.)
  for (;;) {
    const s = await (await fetch(server.url + '/v1/cache/stats')).json();
    if (!s.requests_running && !s.requests_waiting && !s.blocks_used) break;
    await new Promise((r) => setTimeout(r, 100));
  }
  await showTab(page, 'cache');
  await page.click('#reset-cache');
  await page.waitForFunction(() => Number(document.getElementById('tree').dataset.leaves) === 0, { timeout: 10000 });
  const emptied = await page.$eval('#block-bar', (e) => ({ ...e.dataset }));
  assert.equal(Number(emptied.cached), 0);
  assert.equal(Number(emptied.free), Number(emptied.total));
  await showTab(page, 'chat');

  // A stream cut off by the server's death: the partial answer and the
  // conversation stay, the message says what happened. On the slow link, as
  // for Stop: the tiny model can generate all 3,000 tokens before a loaded
  // machine's page shows the first, and a finished stream has nothing to cut.
  await page.emulateNetworkConditions(kSlowLink);
  await page.type('#prompt', 'A long answer, please.');
  await page.click('#send');
  await page.waitForFunction(() =>
    document.querySelector('#messages .message.pending .content')?.textContent.length > 0, { timeout: 30000 });
  server.proc.kill('SIGKILL');
  const dropped = await waitTurn(page);
  await page.emulateNetworkConditions(null);
  assert.match(dropped.error, /stream|reach/i);
  assert.ok(dropped.content.length > 0, 'the partial answer is kept');
  assert.equal(await page.$$eval('#messages .message.user', (l) => l.length), 5);
  assert.deepEqual(problems, []);
  await page.close();
});

test('a wrong API key shows the server error; the right one connects', { skip }, async () => {
  const server = await startServer(['--api-key', 'right-key']);
  servers.push(server);
  const { page, problems } = await openPage(server.url);
  await page.waitForSelector('#key-dialog[open]');
  await page.type('#key-input', 'wrong-key');
  await page.click('#key-save');
  await page.waitForFunction(() => document.getElementById('key-error').textContent.length > 0);
  const message = await page.$eval('#key-error', (e) => e.textContent);
  assert.match(message, /invalid API key/);
  assert.equal(await page.evaluate(() => sessionStorage.getItem('kvfork.apiKey')), null,
    'a refused key is not kept');
  await shot(page, 'api-key-error');
  await page.$eval('#key-input', (e) => { e.value = ''; });
  await page.type('#key-input', 'right-key');
  await page.click('#key-save');
  await page.waitForFunction(() => !document.getElementById('key-dialog').open);
  await page.waitForFunction(() => document.getElementById('status').textContent.startsWith('model '));
  assert.equal(await page.evaluate(() => sessionStorage.getItem('kvfork.apiKey')), 'right-key');
  await setSetting(page, 'max_tokens', 4);
  const turn = await sendAndWait(page, 'Hello with a key');
  assert.equal(turn.error, null);
  // This key is not an admin key: the cache tab says so instead of failing.
  await showTab(page, 'cache');
  await page.waitForFunction(() => !document.getElementById('cache-error').hidden);
  assert.match(await page.$eval('#cache-error', (e) => e.textContent), /admin key/);
  assert.deepEqual(problems, []);
  await page.close();
});
