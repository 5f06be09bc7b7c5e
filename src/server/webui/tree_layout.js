// The prefix tree of GET /v1/cache/tree turned into an icicle chart's
// layout. Pure functions (no DOM): node's tests import this file as is.
//
// Chains of blocks with a single child are merged into one segment, so the
// chart has about two segments per branch however long the conversations
// are: a few thousand blocks stay a few hundred rectangles.
//
// Layout: x is the token position (a segment spans [start, start + tokens)),
// y gives each leaf (branch end) one row, so a shared prefix is one
// rectangle as tall as all the branches that continue it.

// rows: [[id, parent, tokens, refcount, last_use, location], ...], parents
// before children (the route's breadth-first order). Returns {segments, roots,
// leaves, maxTokens, branchPoints}; segments in pre-order, each {first,
// last (node ids), blocks, tokens, usedBlocks, usedTokens, diskBlocks,
// diskTokens (blocks on disk only: location 'disk'), maxRefcount, lastUse,
// start, depth, children, leaves, y (first leaf row)}. A node with a pool
// block never hangs under one without (docs/kv_cache.md), so a segment's
// disk-only blocks are its last ones.
export function buildSegments(rows) {
  const nodes = new Map();
  for (const [id, parent, tokens, refcount, lastUse, location] of rows) {
    nodes.set(id, { id, parent, tokens, refcount, lastUse, diskOnly: location === 'disk', children: [] });
  }
  const rootNodes = [];
  for (const n of nodes.values()) {
    const p = nodes.get(n.parent);
    if (p) p.children.push(n);
    else rootNodes.push(n);
  }
  const segments = [];
  const roots = [];
  // Iterative pre-order: a tree that forks at every block must not overflow
  // the call stack.
  const stack = rootNodes.reverse().map((n) => ({ node: n, start: 0, depth: 0, parent: null }));
  while (stack.length) {
    const { node, start, depth, parent } = stack.pop();
    const seg = {
      first: node.id, last: node.id, blocks: 0, tokens: 0, usedBlocks: 0, usedTokens: 0,
      diskBlocks: 0, diskTokens: 0, maxRefcount: 0, lastUse: 0, start, depth, children: [], leaves: 0, y: 0,
    };
    for (let cur = node; ; cur = cur.children[0]) {
      seg.last = cur.id;
      seg.blocks += 1;
      seg.tokens += cur.tokens;
      if (cur.refcount > 0) {
        seg.usedBlocks += 1;
        seg.usedTokens += cur.tokens;
      }
      if (cur.diskOnly) {
        seg.diskBlocks += 1;
        seg.diskTokens += cur.tokens;
      }
      seg.maxRefcount = Math.max(seg.maxRefcount, cur.refcount);
      seg.lastUse = Math.max(seg.lastUse, cur.lastUse);
      if (cur.children.length !== 1) {
        for (let i = cur.children.length - 1; i >= 0; i--) {
          stack.push({ node: cur.children[i], start: start + seg.tokens, depth: depth + 1, parent: seg });
        }
        break;
      }
    }
    segments.push(seg);
    if (parent) parent.children.push(seg);
    else roots.push(seg);
  }
  // Leaves bottom-up (reverse pre-order sees children first), rows top-down.
  for (let i = segments.length - 1; i >= 0; i--) {
    const s = segments[i];
    s.leaves = s.children.length ? s.children.reduce((a, c) => a + c.leaves, 0) : 1;
  }
  let row = 0;
  for (const r of roots) {
    r.y = row;
    row += r.leaves;
  }
  for (const s of segments) {
    let y = s.y;
    for (const c of s.children) {
      c.y = y;
      y += c.leaves;
    }
  }
  let maxTokens = 0;
  let branchPoints = 0;
  for (const s of segments) {
    maxTokens = Math.max(maxTokens, s.start + s.tokens);
    if (s.children.length > 1) branchPoints += 1;
  }
  return { segments, roots, leaves: row, maxTokens, branchPoints };
}
