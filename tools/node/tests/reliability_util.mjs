// Helpers shared by the fault, security and soak tests: raw sockets, stream
// parsing, the server's leak check and its resident memory.
import net from 'node:net';
import fs from 'node:fs';

export const sleep = (ms) => new Promise((r) => setTimeout(r, ms));

// GET /v1/cache/stats, with the engine's KV integrity check when check is set.
export async function cacheStats(url, { check = false, headers = {} } = {}) {
  const r = await fetch(url + '/v1/cache/stats' + (check ? '?check=1' : ''), { headers });
  if (r.status !== 200) throw new Error('/v1/cache/stats answered ' + r.status);
  return r.json();
}

// Waits until nothing runs or waits and no block is referenced, then runs the
// KV check. Returns the stats; throws with them if the server never gets idle
// (a stuck request or a leaked block).
export async function expectIdle(url, { headers = {}, timeoutMs = 20000 } = {}) {
  const deadline = Date.now() + timeoutMs;
  let s;
  for (;;) {
    s = await cacheStats(url, { headers });
    if (s.blocks_used === 0 && s.requests_running === 0 && s.requests_waiting === 0) break;
    if (Date.now() > deadline) throw new Error('server not idle (stuck request or leaked blocks): ' + JSON.stringify(s));
    await sleep(100);
  }
  s = await cacheStats(url, { headers, check: true });
  if (s.kv_check !== 'ok') throw new Error('KV check failed: ' + s.kv_check);
  if (s.blocks_free + s.blocks_cached !== s.blocks_total) throw new Error('blocks lost: ' + JSON.stringify(s));
  return s;
}

// Resident set size of a process in KiB (Linux /proc).
export function rssKiB(pid) {
  const m = fs.readFileSync(`/proc/${pid}/status`, 'utf8').match(/VmRSS:\s+(\d+) kB/);
  return m ? Number(m[1]) : NaN;
}

// Opens a raw TCP connection to an http://host:port URL.
export function connect(url) {
  const u = new URL(url);
  return new Promise((resolve, reject) => {
    const s = net.connect({ host: u.hostname, port: Number(u.port) }, () => resolve(s));
    s.once('error', reject);
  });
}

// The request head of a JSON POST; body bytes are sent by the caller.
export function postHead(path, contentLength, headers = {}) {
  let h = `POST ${path} HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\n` +
    `Content-Length: ${contentLength}\r\n`;
  for (const [k, v] of Object.entries(headers)) h += `${k}: ${v}\r\n`;
  return h + '\r\n';
}

// Resolves with {data, ms} when the peer closes the socket (or errors).
export function untilClosed(socket) {
  const t0 = Date.now();
  const chunks = [];
  return new Promise((resolve) => {
    socket.on('data', (d) => chunks.push(d));
    const done = () => resolve({ data: Buffer.concat(chunks).toString('latin1'), ms: Date.now() - t0 });
    socket.once('close', done);
    socket.once('error', () => {});
  });
}

// Splits an SSE body into its data payloads; throws if any event is not a
// single "data: " line or if the body does not end with exactly one [DONE].
export function sseEvents(body) {
  if (!body.endsWith('\n\n')) throw new Error('stream does not end with a blank line');
  const events = body.slice(0, -2).split('\n\n');
  const out = [];
  for (const e of events) {
    if (!e.startsWith('data: ') || e.includes('\n')) throw new Error('not an SSE data event: ' + JSON.stringify(e.slice(0, 200)));
    out.push(e.slice(6));
  }
  if (out.length === 0 || out[out.length - 1] !== '[DONE]') throw new Error('stream does not end with [DONE]');
  if (out.indexOf('[DONE]') !== out.length - 1) throw new Error('[DONE] before the end of the stream');
  return out.slice(0, -1);
}

// Checks one finished OpenAI stream (chat or completions). want: {chat, n,
// maxTokens, includeUsage, logprobs, stops (bool), model}. Returns
// {choices: [{text, finish}], usage, id}. Throws naming what is malformed.
export function checkStream(body, want) {
  const datas = sseEvents(body);
  const objectName = want.chat ? 'chat.completion.chunk' : 'text_completion';
  const choices = Array.from({ length: want.n }, () => ({ text: '', finish: null, role: false, lp: 0 }));
  let id = null, usage = null, created = null;
  for (const d of datas) {
    const c = JSON.parse(d);
    if (c.error) throw new Error('error event in stream: ' + d);
    if (c.object !== objectName) throw new Error('object ' + c.object);
    if (id === null) { id = c.id; created = c.created; }
    if (c.id !== id || c.created !== created) throw new Error('id/created changed within a stream');
    if (want.model && c.model !== want.model) throw new Error('model ' + c.model);
    if (want.includeUsage && !('usage' in c)) throw new Error('include_usage: chunk without usage field');
    if (usage) throw new Error('chunk after the usage chunk');
    if (c.choices.length === 0) {
      if (!want.includeUsage || !c.usage) throw new Error('empty choices without usage');
      usage = c.usage;
      continue;
    }
    if (want.includeUsage && c.usage !== null) throw new Error('usage on a content chunk');
    for (const ch of c.choices) {
      if (!(ch.index >= 0 && ch.index < want.n)) throw new Error('choice index ' + ch.index);
      const st = choices[ch.index];
      if (st.finish) throw new Error(`choice ${ch.index}: chunk after its finish_reason`);
      if (want.chat) {
        if (!st.role) {
          if (ch.delta.role !== 'assistant') throw new Error(`choice ${ch.index}: first delta has no assistant role`);
          st.role = true;
        }
        if (typeof ch.delta.content === 'string') st.text += ch.delta.content;
        if (want.logprobs && ch.logprobs) st.lp += ch.logprobs.content.length;
      } else {
        if (typeof ch.text !== 'string') throw new Error('completion chunk without text');
        st.text += ch.text;
        if (want.logprobs && ch.logprobs) st.lp += ch.logprobs.tokens.length;
      }
      if (ch.finish_reason !== null && ch.finish_reason !== undefined) {
        if (!['stop', 'length'].includes(ch.finish_reason)) throw new Error('finish_reason ' + ch.finish_reason);
        st.finish = ch.finish_reason;
      }
    }
  }
  choices.forEach((c, i) => { if (!c.finish) throw new Error(`choice ${i} never finished`); });
  if (want.includeUsage) {
    if (!usage) throw new Error('no usage chunk');
    const u = usage;
    if (!(u.prompt_tokens > 0) || u.total_tokens !== u.prompt_tokens + u.completion_tokens)
      throw new Error('inconsistent usage ' + JSON.stringify(u));
    const cached = u.prompt_tokens_details?.cached_tokens;
    if (!(cached >= 0 && cached < u.prompt_tokens)) throw new Error('cached_tokens ' + cached);
    if (u.completion_tokens > want.n * want.maxTokens) throw new Error('more tokens than max_tokens');
    if (!want.stops && choices.every((c) => c.finish === 'length') && u.completion_tokens !== want.n * want.maxTokens)
      throw new Error(`all choices hit length but completion_tokens ${u.completion_tokens} != ${want.n * want.maxTokens}`);
  }
  if (want.logprobs && !want.stops) {
    choices.forEach((c, i) => {
      if (c.finish === 'length' && c.lp !== want.maxTokens)
        throw new Error(`choice ${i}: ${c.lp} logprob entries for ${want.maxTokens} tokens`);
    });
  }
  return { choices, usage, id };
}
