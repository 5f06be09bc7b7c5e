// The page's calls to this server: the API key (kept in sessionStorage, so it
// leaves with the tab), JSON requests, and the chat completion stream (SSE).
// Every error becomes an ApiError whose message is what a user should read.

const KEY_ITEM = 'kvfork.apiKey';

export class ApiError extends Error {
  // status: the HTTP status (0 = no answer: network error or dropped stream).
  constructor(message, status = 0, code = '') {
    super(message);
    this.status = status;
    this.code = code;
  }
  get needsKey() { return this.status === 401; }
}

export function apiKey() { return sessionStorage.getItem(KEY_ITEM) || ''; }
export function setApiKey(key) {
  if (key) sessionStorage.setItem(KEY_ITEM, key);
  else sessionStorage.removeItem(KEY_ITEM);
}

function headers(extra = {}) {
  const h = { ...extra };
  const key = apiKey();
  if (key) h.Authorization = 'Bearer ' + key;
  return h;
}

// The server's error body ({"error": {"message", "code"}}) as an ApiError.
async function errorOf(res) {
  let message = `${res.status} ${res.statusText}`;
  let code = '';
  try {
    const body = await res.json();
    if (body && body.error) {
      message = body.error.message || message;
      code = body.error.code || '';
    }
  } catch { /* not JSON: keep the status line */ }
  return new ApiError(message, res.status, code);
}

// GET path as JSON; throws ApiError.
export async function getJson(path) {
  let res;
  try {
    res = await fetch(path, { headers: headers(), cache: 'no-store' });
  } catch (e) {
    throw new ApiError('cannot reach the server: ' + e.message);
  }
  if (!res.ok) throw await errorOf(res);
  return res.json();
}

// POST path with a JSON body; the answer as JSON. Throws ApiError.
export async function postJson(path, body = {}) {
  let res;
  try {
    res = await fetch(path, {
      method: 'POST', headers: headers({ 'Content-Type': 'application/json' }), body: JSON.stringify(body),
    });
  } catch (e) {
    throw new ApiError('cannot reach the server: ' + e.message);
  }
  if (!res.ok) throw await errorOf(res);
  return res.json();
}

// POST /v1/chat/completions with stream: true. Calls onChunk(chunk) for every
// SSE chunk in order and resolves when [DONE] arrives. Throws ApiError on an
// HTTP error, an error event in the stream, or a stream that ends without
// [DONE] (the server went away); an abort through signal rethrows the
// AbortError so the caller can tell "stopped" from "failed".
export async function streamChat(body, { signal, onChunk }) {
  let res;
  try {
    res = await fetch('/v1/chat/completions', {
      method: 'POST',
      headers: headers({ 'Content-Type': 'application/json' }),
      body: JSON.stringify({ ...body, stream: true, stream_options: { include_usage: true } }),
      signal,
    });
  } catch (e) {
    if (e.name === 'AbortError') throw e;
    throw new ApiError('cannot reach the server: ' + e.message);
  }
  if (!res.ok) throw await errorOf(res);
  const reader = res.body.getReader();
  const decoder = new TextDecoder();
  let buffer = '';
  for (;;) {
    let part;
    try {
      part = await reader.read();
    } catch (e) {
      if (e.name === 'AbortError') throw e;
      throw new ApiError('the stream broke off before the answer was complete (' + e.message + ')');
    }
    if (part.done) break;
    buffer += decoder.decode(part.value, { stream: true });
    let cut;
    while ((cut = buffer.indexOf('\n\n')) >= 0) {
      const event = buffer.slice(0, cut);
      buffer = buffer.slice(cut + 2);
      for (const line of event.split('\n')) {
        if (!line.startsWith('data:')) continue;
        const data = line.slice(5).trim();
        if (data === '[DONE]') return;
        let chunk;
        try {
          chunk = JSON.parse(data);
        } catch {
          throw new ApiError('the server sent a chunk that is not JSON: ' + data.slice(0, 80));
        }
        if (chunk.error) throw new ApiError(chunk.error.message || 'server error', 500, chunk.error.code || '');
        onChunk(chunk);
      }
    }
  }
  throw new ApiError('the stream ended before the answer was complete (no [DONE]): the server closed the connection');
}
