// The cache tab: polls GET /v1/cache/tree and /v1/cache/stats every
// POLL_MS while the tab is shown, and draws the block bar, the prefix tree
// as an icicle chart (tree_layout.js) and the prefix hit rate over time.
import { getJson, postJson } from './api.js';
import { el, svg } from './dom.js';
import { buildSegments } from './tree_layout.js';

const POLL_MS = 1500;
const HISTORY = 120;      // points of the hit-rate chart (3 minutes)

export class CacheView {
  constructor() {
    this.timer = null;
    this.history = [];  // {queries, hits} deltas per poll
    this.last = null;   // the previous /v1/cache/stats
    this.error = document.getElementById('cache-error');
    this.bar = document.getElementById('block-bar');
    this.legend = document.getElementById('block-legend');
    this.tree = document.getElementById('tree');
    this.treeInfo = document.getElementById('tree-info');
    this.hitChart = document.getElementById('hit-chart');
    this.hitInfo = document.getElementById('hit-info');
    document.getElementById('reset-cache').addEventListener('click', () => this.reset());
  }

  // POST /v1/cache/reset: drops every cached block (running requests keep theirs).
  async reset() {
    try {
      await postJson('/v1/cache/reset');
      this.poll();
    } catch (e) {
      this.error.hidden = false;
      this.error.textContent = 'Cannot reset the cache: ' + e.message;
    }
  }

  show() {
    if (this.timer) return;
    this.poll();
    this.timer = setInterval(() => this.poll(), POLL_MS);
  }

  hide() {
    clearInterval(this.timer);
    this.timer = null;
  }

  async poll() {
    if (this.polling) return;  // a slow answer: skip a tick rather than pile up
    this.polling = true;
    try {
      const [tree, stats] = await Promise.all([getJson('/v1/cache/tree'), getJson('/v1/cache/stats')]);
      this.error.textContent = '';
      this.error.hidden = true;
      this.drawBlocks(tree.blocks);
      this.drawTree(tree);
      this.drawHitRate(stats);
    } catch (e) {
      this.error.hidden = false;
      this.error.textContent = e.status === 403
        ? 'The cache view needs an admin key (kvfork serve --admin-api-key): this key may chat but not see the cache. ' + e.message
        : 'Cannot read the cache: ' + e.message;
    } finally {
      this.polling = false;
    }
  }

  drawBlocks(b) {
    this.bar.replaceChildren();
    for (const kind of ['used', 'cached', 'free']) {
      const part = el('span', { class: kind, title: `${b[kind]} blocks ${kind}` });
      part.style.width = (b.total ? (100 * b[kind]) / b.total : 0).toFixed(3) + '%';
      this.bar.append(part);
    }
    Object.assign(this.bar.dataset, { used: b.used, cached: b.cached, free: b.free, total: b.total });
    this.legend.textContent =
      `${b.used} used (held by running requests) · ${b.cached} cached (reusable, evictable) · ` +
      `${b.free} free · ${b.total} blocks`;
  }

  drawTree(t) {
    const rows = t.nodes;
    const layout = buildSegments(rows);
    Object.assign(this.tree.dataset, {
      nodes: rows.length, leaves: layout.leaves, segments: layout.segments.length,
      branchPoints: layout.branchPoints, truncated: t.truncated,
    });
    const parts = [];
    if (!t.has_tree) parts.push('the dense KV backend keeps no prefix tree');
    parts.push(`${t.nodes_total} blocks in the prefix tree (${t.block_size} tokens each)`);
    // The disk tier's blocks: in the tree once placed (disk only: not in the
    // pool now); a restart's files are placed when first read.
    const diskOnly = rows.reduce((a, n) => a + (n[5] === 'disk' ? 1 : 0), 0);
    if (diskOnly) parts.push(`${diskOnly} of them on disk only`);
    if (t.disk_unplaced) parts.push(`${t.disk_unplaced} more on disk, placed when first read`);
    const count = (n, one, many) => `${n} ${n === 1 ? one : many}`;
    parts.push(`${count(layout.leaves, 'branch', 'branches')}, ${count(layout.branchPoints, 'fork', 'forks')}`);
    if (t.truncated) parts.push(`showing the first ${rows.length} (the route's cap, breadth-first)`);
    parts.push(`tenant salts: ${t.tenant_salts}`);
    this.treeInfo.textContent = parts.join(' · ');
    const rowHeight = layout.leaves ? Math.max(3, Math.min(28, 420 / layout.leaves)) : 28;
    const height = Math.max(60, layout.leaves * rowHeight);
    // User units = pixels at the SVG's width now, so labels keep their shape.
    const width = Math.max(200, this.tree.clientWidth || 1000);
    const scale = layout.maxTokens ? width / layout.maxTokens : 1;
    // Cached blocks fade with age (last use, LRU ticks): the palest leaves
    // are the first evicted when the pool runs short.
    let oldest = t.clock ?? 0;
    for (const n of rows) if (n[5] !== 'disk') oldest = Math.min(oldest, n[4]);  // off the pool: no tick
    const span = (t.clock ?? 0) - oldest;
    const g = svg('g');
    for (const s of layout.segments) {
      const x = s.start * scale;
      const w = Math.max(1, s.tokens * scale);
      const y = s.y * rowHeight;
      const h = Math.max(1, s.leaves * rowHeight - 1);
      const usedW = s.usedTokens * scale;
      const shared = s.leaves > 1;
      const title = svg('title');
      title.textContent =
        `${s.blocks} block${s.blocks > 1 ? 's' : ''}, tokens ${s.start}-${s.start + s.tokens}` +
        (shared ? `, shared by ${s.leaves} branches` : '') +
        (s.usedBlocks ? `, ${s.usedBlocks} in use (up to ${s.maxRefcount} sequences)` : ', cached') +
        (s.diskBlocks ? `, ${s.diskBlocks} on disk only` : '') +
        `, last used ${(t.clock ?? 0) - s.lastUse} block uses ago`;
      const group = svg('g', { class: 'segment' + (shared ? ' shared' : '') }, title);
      // A referenced block pins its whole chain, so a segment's in-use blocks
      // come first, its disk-only ones last: one rectangle each, the cached
      // pool blocks between.
      const diskW = s.diskTokens * scale;
      if (usedW > 0) group.append(svg('rect', { class: 'used', x, y, width: Math.max(1, usedW), height: h }));
      if (diskW > 0) group.append(svg('rect', { class: 'disk', x: x + w - diskW, y, width: Math.max(1, diskW), height: h }));
      if (s.tokens > s.usedTokens + s.diskTokens) {
        const rect = svg('rect', { class: 'cached', x: x + usedW, y, width: Math.max(1, w - usedW - diskW), height: h });
        const fresh = span > 0 ? (s.lastUse - oldest) / span : 1;
        rect.style.fillOpacity = (0.3 + 0.7 * fresh).toFixed(2);
        group.append(rect);
      }
      if (h >= 12 && w >= 60) {
        const label = svg('text', { x: x + 4, y: y + Math.min(h / 2 + 4, 16) });
        label.textContent = `${s.tokens} tok` + (shared ? ` ×${s.leaves}` : '');
        group.append(label);
      }
      g.append(group);
    }
    this.tree.setAttribute('viewBox', `0 0 ${width} ${height}`);
    this.tree.setAttribute('height', height);
    this.tree.replaceChildren(g);
  }

  drawHitRate(s) {
    if (this.last) {
      const queries = s.prefix_queries_tokens - this.last.prefix_queries_tokens;
      const hits = s.prefix_hits_tokens - this.last.prefix_hits_tokens;
      this.history.push({ queries, hits });
      if (this.history.length > HISTORY) this.history.shift();
    }
    this.last = s;
    // User units = pixels at the chart's width now, so dots stay round.
    const w = Math.max(200, this.hitChart.clientWidth || 600), h = 120;
    this.hitChart.setAttribute('viewBox', `0 0 ${w} ${h}`);
    const step = (w - 8) / (HISTORY - 1);
    const points = [];
    let active = 0;
    this.history.forEach((p, i) => {
      if (p.queries <= 0) return;  // no prompt in that interval: no point
      active += 1;
      const x = w - 4 - (this.history.length - 1 - i) * step;  // the newest point stays in view
      points.push(`${x.toFixed(1)},${(h - (h * p.hits) / p.queries).toFixed(1)}`);
    });
    const grid = [0, 0.5, 1].map((f) => svg('line', { class: 'grid', x1: 0, x2: w, y1: h * f, y2: h * f }));
    const line = svg('polyline', { class: 'hit-line', points: points.join(' ') });
    const dots = points.map((p) => {
      const [cx, cy] = p.split(',');
      return svg('circle', { class: 'hit-dot', cx, cy, r: 2.5 });
    });
    this.hitChart.replaceChildren(...grid, line, ...dots);
    this.hitChart.dataset.points = active;
    this.hitInfo.textContent =
      `prefix hit rate since start: ${(100 * s.prefix_hit_rate).toFixed(1)}% of ` +
      `${s.prefix_queries_tokens} prompt tokens · each point: the share of prompt tokens reused ` +
      `in one ${POLL_MS / 1000} s interval (top = 100%)`;
  }
}
