// The page's start: tabs, the API key dialog, the model id; chat.js and
// cache_view.js do the rest.
import { apiKey, getJson, setApiKey } from './api.js';
import { CacheView } from './cache_view.js';
import { ChatView } from './chat.js';
import { Store } from './store.js';

let modelId = '';
const status = document.getElementById('status');
const dialog = document.getElementById('key-dialog');
const keyInput = document.getElementById('key-input');
const keyError = document.getElementById('key-error');

function askForKey(message) {
  document.getElementById('key-message').textContent = message;
  keyInput.value = '';
  if (!dialog.open) dialog.showModal();
  keyInput.focus();
}

// Reads the model id; a 401 opens the key dialog. Returns true when connected.
async function connect() {
  try {
    const models = await getJson('/v1/models');
    modelId = models.data[0]?.id ?? '';
    status.textContent = `model ${modelId}` + (apiKey() ? ' · key set' : '');
    status.className = 'ok';
    return true;
  } catch (e) {
    status.textContent = e.message;
    status.className = 'bad';
    if (e.needsKey) askForKey('This server needs an API key (kvfork serve --api-key). It is kept for this tab only (sessionStorage).');
    // Still loading the model (503) or not reachable: try again shortly.
    if (e.status === 503 || e.status === 0) setTimeout(connect, 2000);
    return false;
  }
}

document.getElementById('key-form').addEventListener('submit', async (e) => {
  e.preventDefault();
  setApiKey(keyInput.value.trim());
  keyError.textContent = '';
  try {
    await getJson('/v1/models');
    dialog.close();
    connect();
  } catch (err) {
    setApiKey('');
    keyError.textContent = err.needsKey ? `The server refused this key: ${err.message}` : err.message;
  }
});
document.getElementById('key-button').addEventListener('click', () => askForKey(
  'Enter the API key for this server (blank: none). It is kept for this tab only (sessionStorage).'));

const store = new Store();
const chat = new ChatView(store, {
  model: () => modelId,
  onNeedKey: (e) => askForKey(`The server refused the request: ${e.message}. Enter a valid API key.`),
});
const cache = new CacheView();

function showTab(name) {
  for (const t of ['chat', 'cache']) {
    document.getElementById(`tab-${t}`).setAttribute('aria-selected', String(t === name));
    document.getElementById(`${t}-view`).hidden = t !== name;
  }
  if (name === 'cache') cache.show();
  else cache.hide();
}
document.getElementById('tab-chat').addEventListener('click', () => showTab('chat'));
document.getElementById('tab-cache').addEventListener('click', () => showTab('cache'));

chat.render();
showTab('chat');
connect();
