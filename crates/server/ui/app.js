// Switchboard's web UI. Plain ES modules, no build step; it uses only the daemon's public API
// (docs/api.md) with the cookie the sign-in URL set, and draws the daemon's projection of each
// session (`…/view`, `…/usage`): it reads no protocol line itself.
import { marked } from './vendor/marked.esm.js';
import DOMPurify from './vendor/purify.es.mjs';
import hljs from './vendor/highlight.min.js';
import uPlot from './vendor/uPlot.esm.js';

const PAGE = 300; // events per page when opening a session or paging back
const $ = (selector, root = document) => root.querySelector(selector);
const $$ = (selector, root = document) => [...root.querySelectorAll(selector)];

// ---------------------------------------------------------------------------------------------
// Small helpers

function el(tag, attrs = {}, ...children) {
  const node = document.createElement(tag);
  for (const [key, value] of Object.entries(attrs)) {
    if (value === undefined || value === null || value === false) continue;
    if (key === 'class') node.className = value;
    else if (key === 'text') node.textContent = value;
    else if (key.startsWith('on')) node.addEventListener(key.slice(2), value);
    else if (key === 'dataset') Object.assign(node.dataset, value);
    else node.setAttribute(key, value === true ? '' : value);
  }
  for (const child of children.flat()) {
    if (child === null || child === undefined || child === false) continue;
    node.append(child instanceof Node ? child : document.createTextNode(String(child)));
  }
  return node;
}

// Icons: 24×24 strokes, drawn in the current colour.
const ICONS = {
  terminal: 'M4 17l6-5-6-5M12 19h8',
  file: 'M14 3H6a2 2 0 0 0-2 2v14a2 2 0 0 0 2 2h12a2 2 0 0 0 2-2V9zM14 3v6h6',
  pencil: 'M12 20h9M16.5 3.5a2.1 2.1 0 0 1 3 3L7 19l-4 1 1-4z',
  search: 'M11 4a7 7 0 1 0 0 14a7 7 0 1 0 0-14M21 21l-4.3-4.3',
  globe: 'M12 3a9 9 0 1 0 0 18a9 9 0 1 0 0-18M3 12h18M12 3c2.5 2.5 2.5 15.5 0 18M12 3c-2.5 2.5-2.5 15.5 0 18',
  agent: 'M5 8h14v11H5zM12 4v4M9 13h.01M15 13h.01M9.5 16.5h5',
  question: 'M12 3a9 9 0 1 0 0 18a9 9 0 1 0 0-18M9.1 9a3 3 0 0 1 5.8 1c0 2-3 2.5-3 4M12 17.5h.01',
  plug: 'M9 2v6M15 2v6M6 8h12v3a6 6 0 0 1-12 0zM12 17v5',
  list: 'M9 6h11M9 12h11M9 18h11M4 6h.01M4 12h.01M4 18h.01',
  tool: 'M12 8a4 4 0 1 0 0 8a4 4 0 1 0 0-8M12 2v3M12 19v3M2 12h3M19 12h3M5 5l2 2M17 17l2 2M5 19l2-2M17 7l2-2',
  chevron: 'M9 6l6 6-6 6',
  check: 'M5 12.5l4.5 4.5L19 7.5',
  x: 'M6 6l12 12M18 6L6 18',
  copy: 'M9 9h11v11H9zM5 15H4V4h11v1',
  bell: 'M6 16v-5a6 6 0 0 1 12 0v5l2 2H4zM10 21a2 2 0 0 0 4 0',
  spinner: 'M12 3a9 9 0 1 0 9 9',
  stop: 'M7 7h10v10H7z',
  more: 'M5 12h.01M12 12h.01M19 12h.01',
  plan: 'M9 4h6M8 4H6v17h12V4h-2M9 11h6M9 15h4',
};

function icon(name, extra = '') {
  const svg = document.createElementNS('http://www.w3.org/2000/svg', 'svg');
  svg.setAttribute('viewBox', '0 0 24 24');
  svg.setAttribute('class', `icon ${extra}`.trim());
  svg.setAttribute('aria-hidden', 'true');
  svg.setAttribute('fill', 'none');
  svg.setAttribute('stroke', 'currentColor');
  svg.setAttribute('stroke-width', name === 'more' ? '3' : '2');
  svg.setAttribute('stroke-linecap', 'round');
  svg.setAttribute('stroke-linejoin', 'round');
  const path = document.createElementNS('http://www.w3.org/2000/svg', 'path');
  path.setAttribute('d', ICONS[name] ?? ICONS.tool);
  svg.append(path);
  return svg;
}

/// A state's icon: a spinner while working, a bell while waiting, a dot at rest.
function stateIcon(state) {
  if (['working', 'starting', 'compacting'].includes(state)) return icon('spinner', `state-icon state-${state}`);
  if (state === 'waiting') return icon('bell', 'state-icon state-waiting');
  if (state === 'crashed' || state === 'lost') return icon('x', `state-icon state-${state}`);
  if (state === 'exited') return icon('stop', 'state-icon state-exited');
  const dot = document.createElementNS('http://www.w3.org/2000/svg', 'svg');
  dot.setAttribute('viewBox', '0 0 24 24');
  dot.setAttribute('class', `icon state-icon state-${state}`);
  dot.setAttribute('aria-hidden', 'true');
  const circle = document.createElementNS('http://www.w3.org/2000/svg', 'circle');
  Object.entries({ cx: 12, cy: 12, r: 6, fill: 'currentColor' }).forEach(([k, v]) => circle.setAttribute(k, v));
  dot.append(circle);
  return dot;
}

const TOOL_ICONS = { Bash: 'terminal', BashOutput: 'terminal', KillShell: 'terminal', Read: 'file', Write: 'pencil',
  Edit: 'pencil', MultiEdit: 'pencil', NotebookEdit: 'pencil', Grep: 'search', Glob: 'search', WebFetch: 'globe',
  WebSearch: 'globe', Task: 'agent', Agent: 'agent', AskUserQuestion: 'question', TodoWrite: 'list', ExitPlanMode: 'plan' };
const toolIcon = (name) => icon(name?.startsWith('mcp__') ? 'plug' : TOOL_ICONS[name] ?? 'tool', 'tool-icon');

/// Copies text; the button says so for a moment.
async function copyText(text, button) {
  try {
    await navigator.clipboard.writeText(text);
  } catch (_) {
    // Without the async clipboard (an insecure origin): the old way.
    const area = el('textarea', { style: 'position:fixed;top:0;left:0;opacity:0' }, text);
    document.body.append(area);
    area.select();
    document.execCommand('copy');
    area.remove();
  }
  if (button) {
    const label = button.dataset.label ?? button.textContent;
    button.dataset.label = label;
    button.lastChild.textContent = 'Copied';
    setTimeout(() => { button.lastChild.textContent = label; }, 1500);
  }
}

function copyButton(text, label = 'Copy', className = 'copy') {
  const button = el('button', { type: 'button', class: className, title: label }, icon('copy'), el('span', {}, label));
  button.dataset.label = label;
  button.addEventListener('click', (event) => { event.stopPropagation(); copyText(typeof text === 'function' ? text() : text, button); });
  return button;
}

// Model output and tool inputs are untrusted. Besides scripts, markdown may not bring styles,
// forms or controls (which could restyle or stand in for the approval buttons), ids, or classes
// (which the page finds its own parts by): only a code block's `language-*` stays.
const SANITIZE = {
  FORBID_TAGS: ['style', 'form', 'input', 'button', 'textarea', 'select', 'option', 'dialog', 'label', 'details', 'summary'],
  FORBID_ATTR: ['style', 'id', 'name', 'for', 'tabindex', 'contenteditable'],
};
DOMPurify.addHook('uponSanitizeAttribute', (node, data) => {
  if (data.attrName === 'class') {
    data.keepAttr = node.nodeName === 'CODE' && /^language-[\w+#.-]{1,40}$/.test(data.attrValue);
  }
});

/// Markdown, sanitised, with tables that scroll on their own and code blocks that name their
/// language and copy.
function markdown(text, { highlightCode = true } = {}) {
  const html = DOMPurify.sanitize(marked.parse(text ?? '', { gfm: true, breaks: false }), SANITIZE);
  const box = el('div', { class: 'md' });
  box.innerHTML = html;
  for (const table of $$('table', box)) {
    const wrap = el('div', { class: 'table-wrap' });
    table.replaceWith(wrap);
    wrap.append(table);
  }
  for (const pre of $$('pre', box)) {
    const code = $('code', pre);
    const language = code?.className.match(/language-([\w+#.-]+)/)?.[1];
    if (code && highlightCode) highlight(code, language);
    const block = el('div', { class: 'code-block' }, el('div', { class: 'code-head' },
      el('span', { class: 'code-lang' }, language ?? 'text'), copyButton(() => (code ?? pre).textContent)));
    pre.replaceWith(block);
    block.append(pre);
  }
  return box;
}

function highlight(code, language) {
  try {
    if (language && hljs.getLanguage(language)) {
      code.innerHTML = hljs.highlight(code.textContent, { language }).value;
      code.classList.add('hljs');
    } else if (!language) {
      hljs.highlightElement(code);
    }
  } catch (_) { /* plain text is fine */ }
}

function codeBlock(text, language) {
  const code = el('code', {}, text ?? '');
  const pre = el('pre', { class: 'code' }, code);
  if (language) highlight(code, language);
  return pre;
}

/// Markdown as it streams: the text up to its last finished block (a blank line outside a code
/// fence, or a closing fence) is rendered once and kept; only the open block after it is drawn
/// again, at most once a frame. The whole message is rendered once more when its block ends.
class StreamingMarkdown {
  constructor(className) {
    this.node = el('div', { class: className });
    this.settledBox = el('div', { class: 'md settled' });
    this.tailBox = el('div', { class: 'md tail' });
    this.node.append(this.settledBox, this.tailBox);
    this.text = '';
    this.settled = 0; // text before this is rendered for good
    this.scanned = 0; // lines before this are scanned
    this.fence = null; // the open fence (``` or ~~~), if any
    this.blank = null; // where the text after a blank line starts, until the next line says
    this.frame = null;
    this.onDraw = () => {};
  }

  append(more) {
    this.text += more;
    let boundary = this.settled;
    for (let end = this.text.indexOf('\n', this.scanned); end >= 0; end = this.text.indexOf('\n', this.scanned)) {
      const start = this.scanned;
      const line = this.text.slice(start, end);
      this.scanned = end + 1;
      if (!this.fence && !line.trim()) {
        this.blank ??= this.scanned;
        continue;
      }
      // A blank line ends a block only if what follows starts a new one at the margin: an
      // indented line or a list item may still belong to the block before (a list, a fence
      // inside a list item).
      if (this.blank !== null && !this.fence) {
        if (/^\S/.test(line) && !/^([-*+]|\d{1,9}[.)])(\s|$)/.test(line)) boundary = start;
        this.blank = null;
      }
      const fence = line.match(/^ {0,3}(`{3,}|~{3,})(.*)$/);
      if (fence && !this.fence && !(fence[1][0] === '`' && fence[2].includes('`'))) {
        this.fence = fence[1];
      } else if (fence && this.fence && fence[1][0] === this.fence[0] && fence[1].length >= this.fence.length && !fence[2].trim()) {
        this.fence = null;
        if (/^`|^~/.test(line)) boundary = this.scanned;
      }
    }
    // The line being written may already say whether the block before the blank line ended.
    const rest = this.text.slice(this.scanned);
    if (this.blank !== null && !this.fence && rest) {
      const list = /^([-*+]|\d{1,9}[.)])(\s|$)/.test(rest) || /^\d{1,9}$/.test(rest);
      if (/^\s/.test(rest) || list) {
        if (/^\s|\s/.test(rest)) this.blank = null; // decided: it continues the block before
      } else {
        boundary = this.scanned;
        this.blank = null;
      }
    }
    if (boundary > this.settled) {
      this.settledBox.append(...markdown(this.text.slice(this.settled, boundary)).childNodes);
      this.settled = boundary;
    }
    if (this.frame === null) this.frame = requestAnimationFrame(() => this.drawTail());
  }

  drawTail() {
    this.frame = null;
    // The open block is drawn without highlighting: it changes every frame.
    this.tailBox.replaceChildren(...markdown(this.text.slice(this.settled), { highlightCode: false }).childNodes);
    this.onDraw();
  }
}

const EXTENSIONS = { rs: 'rust', js: 'javascript', mjs: 'javascript', ts: 'typescript', py: 'python',
  sh: 'bash', md: 'markdown', json: 'json', toml: 'ini', yml: 'yaml', yaml: 'yaml', html: 'xml',
  css: 'css', go: 'go', java: 'java', c: 'c', h: 'c', cpp: 'cpp', rb: 'ruby', sql: 'sql' };
const languageOf = (path) => EXTENSIONS[(path ?? '').split('.').pop()?.toLowerCase()];

const money = (usd) => `$${(usd ?? 0).toFixed(usd >= 1 ? 2 : 4)}`;
const tokens = (count) => (count ?? 0).toLocaleString('en-US');
function compact(count) {
  const n = count ?? 0;
  if (n >= 1e6) return `${+(n / 1e6).toFixed(1)}M`;
  if (n >= 1e3) return `${+(n / 1e3).toFixed(1)}k`;
  return `${+n.toFixed(2)}`;
}
/// An axis label: dollars to two significant digits ($0.0012, $0.35, $12).
const compactMoney = (usd) => (!usd ? '$0' : usd >= 10 ? `$${usd.toFixed(0)}` : `$${+usd.toPrecision(2)}`);
/// An axis wide enough for its longest label (uPlot cuts the rest).
const axisSize = (u, values) => 12 + 6.5 * Math.max(2, ...(values ?? []).map((v) => String(v).length));
const plural = (n, one, many = `${one}s`) => `${n} ${n === 1 ? one : many}`;

function ago(ms) {
  if (!ms) return '';
  const seconds = Math.max(0, (Date.now() - ms) / 1000);
  if (seconds < 60) return 'just now';
  if (seconds < 3600) return `${Math.floor(seconds / 60)} min ago`;
  if (seconds < 86400) return `${Math.floor(seconds / 3600)} h ago`;
  return new Date(ms).toLocaleDateString();
}

/// The end of a path, which is what tells projects apart.
function shortPath(path) {
  const parts = (path ?? '').split('/').filter(Boolean);
  return parts.length > 2 ? `…/${parts.slice(-2).join('/')}` : path ?? '';
}

/// A path as seen from the session's directory (`src/main.rs`, not `/home/me/project/src/main.rs`).
function relative(path, cwd) {
  if (!path || !cwd) return path ?? '';
  const base = cwd.endsWith('/') ? cwd : `${cwd}/`;
  return path.startsWith(base) ? path.slice(base.length) : path;
}

function stateLabel(session) {
  // Its node stopped answering (several daemons on one database): it runs nowhere now.
  if (session.node_lost) return ['lost', `node ${session.node ?? ''} lost`];
  const pending = session.pending_permissions?.length ?? session.pending ?? 0;
  if (pending > 0 || session.state === 'awaiting_permission') return ['waiting', 'waiting for you'];
  if (session.disconnected_since_ms && !['exited', 'crashed'].includes(session.state)) {
    return ['disconnected', `disconnected since ${new Date(session.disconnected_since_ms).toLocaleTimeString()}`];
  }
  if (session.state === 'paused') return ['paused', 'paused: budget'];
  return [session.state ?? 'starting', session.state ?? 'starting'];
}

const clip = (text, length = 120) => (text.length > length ? `${text.slice(0, length - 1)}…` : text);

/// What a tool call wants, in plain words: [verb, target] ("run", "touch x"); the target is
/// shown as code.
function wants(name, input, cwd) {
  const path = relative(input?.file_path ?? input?.notebook_path ?? input?.path, cwd);
  switch (name) {
    case 'Bash': return ['run', clip(input?.command ?? '')];
    case 'Edit': case 'MultiEdit': case 'NotebookEdit': return ['edit', path];
    case 'Write': return ['write', path];
    case 'Read': return ['read', path];
    case 'Grep': return ['search for', clip(input?.pattern ?? '')];
    case 'Glob': return ['list files matching', clip(input?.pattern ?? '')];
    case 'WebFetch': return ['fetch', clip(input?.url ?? '')];
    case 'WebSearch': return ['search the web for', clip(input?.query ?? '')];
    case 'Task': case 'Agent': return ['start a subagent to', clip(input?.description ?? input?.subagent_type ?? 'help')];
    case 'ExitPlanMode': return ['leave plan mode and carry out its plan', null];
    case 'AskUserQuestion': return ['ask you', clip(input?.questions?.[0]?.question ?? 'a question')];
    default:
      if (name?.startsWith('mcp__')) {
        const [, server, tool] = name.split('__');
        return [`use ${server}'s tool`, tool];
      }
      return ['use', name ?? 'a tool'];
  }
}

function wantsLine(name, input, cwd) {
  const [verb, target] = wants(name, input, cwd);
  return ['Claude wants to ', verb, target ? ' ' : '', target ? el('code', {}, target) : null];
}

/// Who decided a permission, in words; a reason the person wrote is said once, here.
function decisionText(decision) {
  const by = decision.by ?? {};
  const allowed = decision.behavior === 'allow';
  const verb = allowed ? 'Allowed' : 'Denied';
  let text;
  switch (by.kind) {
    case 'person': text = `${verb} by ${mine(by.who) ? 'you' : by.who}`; break;
    case 'policy': text = `${verb} by ${by.rule ? `policy rule ${by.rule}` : "the policy's default"}`; break;
    case 'cli': text = `${verb} by Claude Code's own settings`; break;
    case 'timeout': text = 'Nobody answered in time: denied'; break;
    case 'cancelled': text = 'Withdrawn by Claude Code'; break;
    case 'link_closed': text = 'Claude Code went away before an answer'; break;
    default: text = verb;
  }
  // The daemon's own words for a denial without a reason are not a reason.
  const reason = !allowed && by.kind === 'person' && decision.message && decision.message !== `${by.who} denied this tool call` ? decision.message : null;
  return reason ? `${text}: ${reason}` : text;
}

// ---------------------------------------------------------------------------------------------
// The API

class ApiError extends Error {}

async function api(method, path, body) {
  let response;
  try {
    response = await fetch(path, {
      method,
      headers: body === undefined ? {} : { 'content-type': 'application/json' },
      body: body === undefined ? undefined : JSON.stringify(body),
      credentials: 'same-origin',
    });
  } catch (error) {
    connection.down('The daemon is unreachable.');
    throw new ApiError('the daemon is unreachable');
  }
  connection.up();
  if (response.status === 401) {
    location.href = '/';
    throw new ApiError('signed out');
  }
  const text = await response.text();
  const data = text ? JSON.parse(text) : null;
  if (!response.ok) throw new ApiError(data?.error?.message ?? `${response.status}`);
  return data;
}

function socketUrl(path) {
  return `${location.protocol === 'https:' ? 'wss' : 'ws'}://${location.host}${path}`;
}

function toast(message, kind = 'error') {
  const note = el('div', { class: `toast ${kind}`, role: 'status' }, message);
  document.body.append(note);
  setTimeout(() => note.remove(), 6000);
}

// The "daemon unreachable" banner.
const connection = {
  downSince: null,
  down(message) {
    if (this.downSince === null) this.downSince = Date.now();
    const banner = $('#banner');
    banner.textContent = `${message} Reconnecting…`;
    banner.hidden = false;
  },
  up() {
    this.downSince = null;
    $('#banner').hidden = true;
  },
};

// What the signed-in token may do (GET /api/me): the page hides what it may not
// (`.needs-approve`, `.needs-operate`); the daemon refuses it all the same.
const SCOPES = ['read', 'approve', 'operate', 'admin'];
let scope = 'admin';
let myName = null;

// Whether a decision was this page's: made in the web UI with the token it is signed in with.
function mine(who) {
  if (who === 'browser') return true; // logs from before tokens had names
  if (myName === null) return false;
  // Without auth the page presents no token: its requests are `local`'s.
  return who === `browser, token ${myName} (web UI)` || (myName === 'local' && who === 'browser, local (api)');
}

function can(needed) {
  return SCOPES.indexOf(scope) >= SCOPES.indexOf(needed);
}

async function loadScope() {
  try {
    const me = await api('GET', '/api/me');
    scope = SCOPES.includes(me.scope) ? me.scope : 'read';
    myName = me.name;
    document.body.dataset.scope = scope;
    $('#whoami').textContent = scope === 'admin' ? '' : `${me.name} · ${scope}`;
    $('#whoami').title = scope === 'admin' ? '' : `Signed in with the token ${me.name}, which may ${scope === 'read' ? 'watch' : scope === 'approve' ? 'watch and answer requests' : 'start and steer sessions'}`;
  } catch (_) { /* signed out, or unreachable: the banner says so */ }
}

// ---------------------------------------------------------------------------------------------
// Web Push: this device hears of requests, questions and finished turns with no tab open. The
// service worker (/ui/sw.js) shows what the daemon pushes; the subscription is the daemon's
// to keep (POST /api/push/subscriptions), its id this browser's (to test it or turn it off).

const pushing = {
  supported: () => 'serviceWorker' in navigator && 'PushManager' in window && 'Notification' in window && window.isSecureContext,
  id: () => localStorage.getItem('sb-push-id'),
};

function base64urlBytes(text) {
  const raw = atob(text.replace(/-/g, '+').replace(/_/g, '/'));
  return Uint8Array.from(raw, (c) => c.charCodeAt(0));
}

// The worker, installed and active (push needs an active one; its scope is /ui/, so the page
// is not one of its clients and `serviceWorker.ready` would not settle).
async function pushRegistration() {
  const registration = await navigator.serviceWorker.register('/ui/sw.js');
  const worker = registration.installing || registration.waiting;
  if (worker && !registration.active) {
    await new Promise((resolve) => {
      worker.addEventListener('statechange', () => { if (worker.state === 'activated') resolve(); });
    });
  }
  return registration;
}

function deviceName() {
  const ua = navigator.userAgent;
  const os = /Android/.test(ua) ? 'Android' : /iPhone|iPad/.test(ua) ? 'iOS' : /Mac/.test(ua) ? 'Mac' : /Windows/.test(ua) ? 'Windows' : /Linux/.test(ua) ? 'Linux' : 'device';
  const browser = /Edg\//.test(ua) ? 'Edge' : /Firefox\//.test(ua) ? 'Firefox' : /Chrome\//.test(ua) ? 'Chrome' : /Safari\//.test(ua) ? 'Safari' : 'browser';
  return `${browser} on ${os}`;
}

async function pushOn() {
  if (await Notification.requestPermission() !== 'granted') {
    throw new Error('notifications are blocked for this site (the browser\'s site settings allow them)');
  }
  const registration = await pushRegistration();
  const { public_key: key } = await api('GET', '/api/push/key');
  let subscription = await registration.pushManager.getSubscription();
  // A subscription made for another key (another daemon, a new data directory) cannot be
  // pushed to: start over.
  const made = subscription?.options?.applicationServerKey;
  if (subscription && made && btoa(String.fromCharCode(...new Uint8Array(made))) !== btoa(String.fromCharCode(...base64urlBytes(key)))) {
    await subscription.unsubscribe();
    subscription = null;
  }
  subscription ??= await registration.pushManager.subscribe({ userVisibleOnly: true, applicationServerKey: base64urlBytes(key) });
  const saved = await api('POST', '/api/push/subscriptions', { ...subscription.toJSON(), name: deviceName() });
  localStorage.setItem('sb-push-id', saved.id);
}

async function pushOff() {
  const id = pushing.id();
  localStorage.removeItem('sb-push-id');
  if (id) await api('DELETE', `/api/push/subscriptions/${encodeURIComponent(id)}`).catch(() => {});
  const registration = await navigator.serviceWorker.getRegistration('/ui/');
  await (await registration?.pushManager.getSubscription())?.unsubscribe();
}

function renderPush() {
  const on = Boolean(pushing.id());
  const toggle = $('#push-toggle');
  toggle.textContent = on ? 'Notifying this device · turn off' : 'Notify this device';
  toggle.classList.toggle('on', on);
  $('#push-test').hidden = !on;
}

function setupPush() {
  if (!pushing.supported() || !can('approve')) return;
  $('#push-row').hidden = false;
  renderPush();
  // A subscription this browser no longer has (cleared, or its site data wiped) is off.
  if (pushing.id()) {
    navigator.serviceWorker.getRegistration('/ui/')
      .then((registration) => registration?.pushManager.getSubscription())
      .then((subscription) => { if (!subscription) { localStorage.removeItem('sb-push-id'); renderPush(); } })
      .catch(() => {});
  }
  $('#push-toggle').addEventListener('click', async (event) => {
    const button = event.currentTarget;
    button.disabled = true;
    try {
      if (pushing.id()) {
        await pushOff();
      } else {
        await pushOn();
        toast('This device is notified, also with no tab open.', 'ok');
      }
    } catch (error) {
      toast(`Notifications: ${error.message}`);
    } finally {
      button.disabled = false;
      renderPush();
    }
  });
  $('#push-test').addEventListener('click', async () => {
    try {
      await api('POST', `/api/push/subscriptions/${encodeURIComponent(pushing.id())}/test`);
      toast('A test is on its way.', 'ok');
    } catch (error) {
      // Gone (its push service ended it, or someone turned it off): subscribe again.
      localStorage.removeItem('sb-push-id');
      renderPush();
      toast(`Notifications: ${error.message}`);
    }
  });
}

// ---------------------------------------------------------------------------------------------
// The session list (the sidebar), kept live by /api/events: waiting sessions first, then the
// others grouped by directory; searchable; archived ones on request.

const sessions = new Map();

async function loadSessions() {
  const list = await api('GET', '/api/sessions');
  sessions.clear();
  for (const session of list) sessions.set(session.id, session);
  renderList();
}

const titleOf = (session) => session.title || session.cwd?.split('/').pop() || session.id;

function matches(session, query) {
  if (!query) return true;
  return [session.title, session.cwd, session.model, session.id].some((field) => field?.toLowerCase().includes(query));
}

function sessionItem(session, current) {
  const [state, label] = stateLabel(session);
  const pending = session.pending_permissions?.length ?? 0;
  return el('li', { class: `session-item state-${state}${session.id === current ? ' current' : ''}${session.archived ? ' archived' : ''}` },
    el('a', { href: `#/s/${session.id}`, dataset: { id: session.id }, title: session.cwd },
      stateIcon(state),
      el('span', { class: 'title' }, titleOf(session)),
      el('span', { class: `badge state-${state}` }, pending > 1 ? `${label} (${pending})` : label),
      el('span', { class: 'meta' },
        el('span', {}, session.model ?? ''),
        el('span', {}, money(session.cost_usd)),
        el('span', { class: 'ago' }, ago(session.updated_ms)),
        session.node ? el('span', { class: 'node', title: 'the node that runs it' }, `on ${session.node}`) : null,
        session.archived ? el('span', {}, 'archived') : null)));
}

function renderList() {
  const list = $('#session-list');
  const current = view?.id;
  const query = $('#session-search').value.trim().toLowerCase();
  const showArchived = $('#show-archived').checked;
  const all = [...sessions.values()].sort((a, b) => (b.updated_ms ?? 0) - (a.updated_ms ?? 0));
  const archived = all.filter((s) => s.archived).length;
  $('#archived-label').textContent = `Show archived (${archived})`;
  const shown = all.filter((s) => (showArchived || !s.archived || s.id === current) && matches(s, query));
  const waiting = shown.filter((s) => stateLabel(s)[0] === 'waiting');
  const groups = new Map();
  for (const session of shown.filter((s) => !waiting.includes(s))) {
    const key = session.cwd ?? '';
    if (!groups.has(key)) groups.set(key, []);
    groups.get(key).push(session);
  }
  const rows = [];
  if (waiting.length) {
    rows.push(el('li', { class: 'group-head waiting', role: 'presentation' }, icon('bell'), 'Waiting for you', el('span', { class: 'count' }, waiting.length)));
    rows.push(...waiting.map((s) => sessionItem(s, current)));
  }
  for (const [cwd, items] of groups) {
    rows.push(el('li', { class: 'group-head', role: 'presentation', title: cwd },
      el('span', { class: 'path' }, shortPath(cwd) || 'no directory'), el('span', { class: 'count' }, items.length)));
    rows.push(...items.map((s) => sessionItem(s, current)));
  }
  if (!rows.length) {
    rows.push(el('li', { class: 'list-empty' }, query ? `No session matches "${query}".` : 'No sessions yet.'));
  }
  list.replaceChildren(...rows);
  renderOverview();
  const count = all.filter((s) => stateLabel(s)[0] === 'waiting').length;
  document.title = count > 0 ? `(${count}) waiting — Switchboard` : 'Switchboard';
}

function notifyWaiting(session) {
  if (!document.hidden || !('Notification' in window) || Notification.permission !== 'granted') return;
  const note = new Notification('Switchboard: approval needed', {
    body: session.title || session.cwd || session.id, tag: `sb-${session.id}`,
  });
  note.onclick = () => { window.focus(); location.hash = `#/s/${session.id}`; };
}

function watchDashboard() {
  let delay = 500;
  const connect = () => {
    const socket = new WebSocket(socketUrl('/api/events'));
    socket.onopen = () => { delay = 500; connection.up(); loadSessions().catch(() => {}); };
    socket.onmessage = (message) => {
      const change = JSON.parse(message.data);
      if (change.type === 'lagged') { loadSessions().catch(() => {}); return; }
      // A node lost or back: every session's `node_lost` may have changed.
      if (change.event === 'nodes_changed') { loadSessions().then(() => view?.header()).catch(() => {}); return; }
      if (change.event === 'session_created') {
        sessions.set(change.session.id, change.session);
      } else if (change.event === 'session_deleted') {
        sessions.delete(change.session_id);
      } else if (change.event === 'session_changed') {
        const session = sessions.get(change.session_id) ?? { id: change.session_id };
        const before = stateLabel(session)[0];
        const known = session.pending_permissions ?? [];
        Object.assign(session, {
          state: change.state, cost_usd: change.cost_usd, model: change.model,
          claude_session_id: change.claude_session_id, updated_ms: Date.now(),
          permission_mode: change.permission_mode, title: change.title ?? session.title,
          archived: change.archived ?? session.archived,
          running: !['exited', 'crashed'].includes(change.state),
          pending_permissions: known.length === change.pending_permissions ? known : new Array(change.pending_permissions).fill({}),
          disconnected_since_ms: change.disconnected_since_ms ?? null,
          paused: change.paused ?? null,
          node: change.node ?? session.node ?? null,
        });
        sessions.set(session.id, session);
        if (before !== 'waiting' && stateLabel(session)[0] === 'waiting') {
          notifyWaiting(session);
          // What it waits for, for the home page.
          api('GET', `/api/sessions/${session.id}`).then((full) => { Object.assign(session, full); renderList(); }).catch(() => {});
        }
        if (view?.id === session.id) view.header();
      }
      renderList();
    };
    socket.onclose = () => {
      connection.down('The daemon is unreachable.');
      setTimeout(connect, delay);
      delay = Math.min(delay * 2, 5000);
    };
  };
  connect();
}

// ---------------------------------------------------------------------------------------------
// The composer's hint: a message to an interactive CLI is typed into its terminal.
const PLACEHOLDER = 'Message Claude (Ctrl+Enter sends; queued while a turn runs)';
const TERMINAL_PLACEHOLDER = 'Message Claude (typed into its terminal; Ctrl+Enter sends)';

// The transcript: the session's view in, DOM out.
//
// The daemon interprets the CLI's lines (`GET …/view`, `…/subscribe?view=true`); this draws the
// updates it sends and derives nothing from lines. Text streams into its block as markdown until
// the whole block arrives. Tool calls are one-line cards (tool, target, outcome) that open on a
// click; a card waiting for an approval, a failed one and the latest one stay open. A card
// collects its result, its permission and (for Task/Agent) the subagent's messages. Older pages
// are drawn into their own chunk above the others; a result or decision seen before its card
// waits for it.

class Transcript {
  constructor(session) {
    this.session = session;
    this.cwd = null;
    this.messages = new Map(); // message id -> {box, blocks: Map(index -> {node, text, stream})}
    this.tools = new Map(); // tool_use_id -> card
    this.orphans = new Map(); // tool_use_id -> [fn(card)] waiting for the card
    this.permissions = new Map(); // request_id -> {request, decided, box}
    this.latest = new Map(); // scope (the parent call, or '') -> the newest card in it
    this.inputs = new Map(); // tool_use_id -> its tool_use_started, while its input streams
    this.older = false; // drawing an older page: its cards are never the latest
    this.queued = []; // bubbles of prompts that wait for the turn before them
    this.onChange = () => {}; // pending permissions or context changed
    this.onGrow = () => {}; // streamed text was drawn
    this.context = null; // context tokens of the last main message
    this.contextWindow = null;
  }

  /// Where an update goes: the subagent's nest inside its Task card, or the chunk.
  container(parent, chunk) {
    if (parent && this.tools.has(parent)) return slot(this.tools.get(parent), 'nest') ?? chunk;
    return chunk;
  }

  apply(update, chunk) {
    switch (update.update) {
      case 'started':
        this.cwd = update.cwd ?? this.cwd;
        return this.notice(chunk, 'info', `Claude Code started in ${update.cwd ?? '?'} with ${update.model ?? 'its default model'} (${update.permission_mode ?? 'default'})`);
      case 'prompt': return this.prompt(update, chunk);
      case 'dequeued': {
        const next = this.queued.shift();
        if (next) { next.classList.remove('queued'); $('.queued-label', next)?.remove(); }
        return undefined;
      }
      case 'message_started':
        if (!update.parent_tool_use_id && update.context_tokens != null && !this.older) {
          this.context = update.context_tokens;
          this.onChange();
        }
        this.message(update.message_id, this.container(update.parent_tool_use_id, chunk));
        return undefined;
      case 'text_delta':
      case 'thinking_delta': return this.streamed(update, chunk);
      case 'tool_use_started':
        // An older page's start of a call a newer page drew whole changes nothing.
        if (this.messages.get(update.message_id)?.blocks.get(update.index)?.done) return undefined;
        this.inputs.set(update.tool_use_id, update);
        return this.place(update, chunk, el('div', { class: 'block tool pending-input' }, `Preparing ${update.name}…`), null);
      case 'tool_input_delta': return this.inputGrew(update, chunk);
      case 'state':
        // A run that ended runs none of the prompts it still held.
        if (['exited', 'crashed'].includes(update.to)) this.unqueueAll();
        return undefined;
      case 'block': return this.finished(update, chunk);
      case 'tool_result': return this.toolResult(update);
      case 'permission_asked': return this.permissionRequested(update, chunk);
      case 'permission_decided': return this.permissionDecided(update);
      case 'turn_ended': return this.turnEnded(update, chunk);
      case 'notice': return this.notice(chunk, update.level, update.text);
      case 'rotated': return chunk.append(el('div', { class: 'notice info' }, 'The CLI moved on to another Claude session: ', el('a', { href: `#/s/${update.to}` }, 'continue there'), '.'));
      case 'lost': return this.notice(chunk, 'error', `${update.count} events could not be stored and are missing here: ${update.reason}`);
      case 'unreadable': return this.notice(chunk, 'error', `An event could not be read back: ${update.reason}`);
      // model, mode, claude_session, run: the header and the list show those.
      default: return undefined;
    }
  }

  unqueueAll() {
    for (const box of this.queued.splice(0)) { box.classList.remove('queued'); $('.queued-label', box)?.remove(); }
  }

  notice(chunk, level, text) {
    chunk.append(el('div', { class: `notice ${level}` }, text));
  }

  prompt(update, chunk) {
    const box = el('div', { class: 'msg user' });
    if (update.text) box.append(el('div', { class: 'text' }, update.text));
    for (const picture of update.images ?? []) box.append(image(picture));
    const actions = [];
    if (update.text) actions.push(copyButton(update.text));
    // The files as they were before this prompt ran, from the CLI's checkpoints.
    if (update.uuid) {
      actions.push(el('button', { type: 'button', class: 'rewind-here needs-operate', title: 'Put the files back as they were before this message',
        onclick: () => view?.rewind(update.uuid) }, 'Rewind files'));
    }
    if (actions.length) {
      box.tabIndex = -1;
      box.append(el('div', { class: 'msg-actions' }, ...actions));
    }
    chunk.append(box);
    if (update.queued) {
      box.classList.add('queued');
      box.append(el('span', { class: 'queued-label' }, 'queued'));
      this.queued.push(box);
    }
  }

  message(id, into) {
    let message = this.messages.get(id);
    if (!message) {
      // Focusable, so a tap (no hover on phones) shows its actions.
      const box = el('div', { class: 'msg assistant', dataset: { id }, tabindex: '-1' });
      const actions = el('div', { class: 'msg-actions' });
      box.append(actions);
      into.append(box);
      message = { box, actions, blocks: new Map() };
      this.messages.set(id, message);
    }
    return message;
  }

  /// The message's text, for its copy button.
  messageText(message) {
    return [...message.blocks.entries()].sort(([a], [b]) => a - b)
      .map(([, block]) => block.kind === 'text' ? block.text : '').filter(Boolean).join('\n\n');
  }

  /// Puts `node` at its block's place in its message (blocks stay in index order).
  place(update, chunk, node, text, kind) {
    const message = this.message(update.message_id, this.container(update.parent_tool_use_id, chunk));
    const block = message.blocks.get(update.index);
    if (block?.node) block.node.replaceWith(node);
    else {
      const after = [...message.blocks.entries()].filter(([i, b]) => i > update.index && b.node).sort(([a], [b]) => a - b)[0];
      if (after) after[1].node.before(node); else message.actions.before(node);
    }
    message.blocks.set(update.index, { node, text: text ?? block?.text ?? '', kind: kind ?? block?.kind });
    if (kind === 'text' && !$('.copy', message.actions)) {
      message.actions.prepend(copyButton(() => this.messageText(message), 'Copy'));
    }
    return message;
  }

  streamed(update, chunk) {
    const message = this.message(update.message_id, this.container(update.parent_tool_use_id, chunk));
    const block = message.blocks.get(update.index);
    if (block?.done) return;
    const more = update.text ?? update.thinking ?? '';
    if (update.update === 'text_delta') {
      if (block?.stream) {
        block.stream.append(more);
        block.text += more;
        return;
      }
      const stream = new StreamingMarkdown('block text streaming');
      stream.onDraw = () => this.onGrow();
      stream.append((block?.text ?? '') + more);
      this.place(update, chunk, stream.node, stream.text, 'text');
      message.blocks.get(update.index).stream = stream;
      return;
    }
    const text = (block?.text ?? '') + more;
    if (block?.thinking) {
      block.thinking.textContent = text;
      block.text = text;
      return;
    }
    const body = el('div', { class: 'thinking-text' }, text);
    this.place(update, chunk, el('details', { class: 'block thinking streaming' }, el('summary', {}, 'Thinking…'), body), text, 'thinking');
    message.blocks.get(update.index).thinking = body;
  }

  /// A call's input as it streams (the daemon parses it as far as it goes): its card fills in
  /// while the model writes it, a Write's content growing line by line.
  inputGrew(update, chunk) {
    const started = this.inputs.get(update.tool_use_id);
    if (!started || !update.partial_input) return undefined;
    if (this.messages.get(started.message_id)?.blocks.get(started.index)?.done) return undefined;
    const call = { tool_use_id: update.tool_use_id, name: started.name, input: update.partial_input, rebuilt: true };
    const card = this.toolCard(call, started.parent_tool_use_id, this.tools.get(update.tool_use_id));
    card.classList.add('streaming-input');
    card.querySelector('.tool-head .outcome').textContent = 'writing…';
    this.place(started, chunk, card, null, 'tool_use');
    return undefined;
  }

  finished(update, chunk) {
    const block = update.block;
    let node;
    let text = null;
    if (block.kind === 'text') {
      node = el('div', { class: 'block text' }, markdown(block.text));
      text = block.text;
    } else if (block.kind === 'thinking') {
      node = el('details', { class: 'block thinking' }, el('summary', {}, 'Thinking'),
        el('div', { class: 'thinking-text' }, block.redacted ? '(redacted)' : block.thinking));
    } else if (block.kind === 'tool_use') {
      this.inputs.delete(block.tool_use_id);
      const known = this.tools.get(block.tool_use_id);
      // A call rebuilt from its stream never replaces the CLI's own report of it (an older
      // page can bring the rebuilt one after the newer page drew the CLI's).
      if (block.rebuilt && known?.dataset.rebuilt === 'false') return;
      node = this.toolCard(block, update.parent_tool_use_id, known);
    } else node = el('div', { class: 'block' }, codeBlock(JSON.stringify(block.value, null, 2), 'json'));
    const message = this.place(update, chunk, node, text, block.kind);
    message.blocks.get(update.index).done = true;
    if (update.uuid) message.box.dataset.uuid = update.uuid;
    if (update.uuid && !update.parent_tool_use_id && !$('.fork-here', message.actions)) {
      message.actions.append(el('button', { type: 'button', class: 'fork-here needs-operate', title: 'Start a new session from this point of the conversation',
        onclick: () => view?.fork(message.box.dataset.uuid) }, 'Fork from here'));
    }
  }

  toolCard(call, parent, known) {
    const name = call.name ?? '';
    const input = call.input ?? {};
    const cwd = this.cwd ?? sessions.get(this.session)?.cwd;
    const card = el('div', { class: `block tool tool-${name.replace(/[^A-Za-z0-9_-]/g, '')}`, dataset: { toolUseId: call.tool_use_id, tool: name, rebuilt: String(Boolean(call.rebuilt)) } });
    const label = name.startsWith('mcp__') ? name.split('__').slice(1).join(' · ') : name;
    const [, target] = wants(name, input, cwd);
    const summary = name === 'Bash' ? (input.description || input.command || '')
      : name === 'Read' && input.limit ? `${target} lines ${input.offset ?? 1}–${(input.offset ?? 1) + input.limit - 1}`
        : name === 'Read' && input.offset ? `${target} from line ${input.offset}`
        : name === 'TodoWrite' ? plural(input.todos?.length ?? 0, 'item')
          : target ?? '';
    const head = el('button', { type: 'button', class: 'tool-head', 'aria-expanded': 'true', title: 'Show or hide the details' },
      icon('chevron', 'chevron'), toolIcon(name), el('span', { class: 'tool-name' }, label),
      el('span', { class: 'tool-target', title: summary }, summary), el('span', { class: 'outcome' }));
    head.addEventListener('click', () => {
      card.dataset.user = card.classList.contains('collapsed') ? 'open' : 'closed';
      this.settle(card);
    });
    const body = el('div', { class: 'tool-body' });
    card.append(head, body);
    switch (name) {
      case 'Bash':
        body.append(codeBlock(`$ ${input.command ?? ''}`, 'bash'));
        break;
      case 'Edit':
        body.append(diffView(input.old_string, input.new_string, relative(input.file_path, cwd)));
        break;
      case 'MultiEdit':
        for (const edit of input.edits ?? []) body.append(diffView(edit.old_string, edit.new_string, relative(input.file_path, cwd)));
        break;
      case 'Write':
        body.append(codeBlock(input.content, languageOf(input.file_path)));
        break;
      case 'Read':
        break;
      case 'Task':
      case 'Agent':
        body.append(el('details', { class: 'agent-prompt' }, el('summary', {}, 'Prompt'), markdown(input.prompt ?? '')));
        body.append(el('div', { class: 'nest' }));
        break;
      case 'ExitPlanMode':
        body.append(input.plan
          ? el('div', { class: 'plan' }, markdown(input.plan))
          : el('p', { class: 'muted' }, 'No plan came with the request (Claude did not write its plan file).'));
        break;
      case 'AskUserQuestion':
        for (const question of input.questions ?? []) {
          body.append(el('div', { class: 'question' }, el('strong', {}, question.question),
            el('ul', {}, (question.options ?? []).map((option) => el('li', {}, option.label,
              option.description ? el('span', { class: 'muted' }, ` — ${option.description}`) : null)))));
        }
        break;
      default:
        body.append(codeBlock(JSON.stringify(input, null, 2), 'json'));
    }
    card.append(el('div', { class: 'tool-permission' }), el('div', { class: 'tool-result' }));
    if (known) {
      // The CLI's own input replaces a rebuilt one: its result, permission and state move along.
      for (const name of ['tool-permission', 'tool-result', 'nest']) {
        const moved = slot(known, name);
        if (moved && slot(card, name)) slot(card, name).replaceWith(moved);
      }
      for (const state of ['done', 'errored', 'denied', 'waiting']) card.classList.toggle(state, known.classList.contains(state));
      if (known.dataset.user) card.dataset.user = known.dataset.user;
      card.dataset.detail = known.dataset.detail ?? '';
    }
    this.tools.set(call.tool_use_id, card);
    // The newest card of its conversation: a replaced card keeps its place; a new one takes
    // it, unless it comes from an older page.
    const scope = parent ?? '';
    const latest = this.latest.get(scope);
    if (known) {
      if (latest === known) this.latest.set(scope, card);
    } else if (!this.older) {
      this.latest.set(scope, card);
      if (latest) this.settle(latest);
    }
    for (const waiting of this.orphans.get(call.tool_use_id) ?? []) waiting(card);
    this.orphans.delete(call.tool_use_id);
    this.settle(card);
    return card;
  }

  /// Opens or folds a card: a person's choice wins; otherwise a card waiting for an approval, a
  /// failed or unfinished one, and the newest of its conversation stay open.
  settle(card) {
    const has = (state) => card.classList.contains(state);
    const scope = [...this.latest.entries()].find(([, latest]) => latest === card);
    const open = card.dataset.user ? card.dataset.user === 'open'
      : has('waiting') || (has('errored') && !has('denied')) || !has('done') || Boolean(scope);
    card.classList.toggle('collapsed', !open);
    slot(card, 'tool-head')?.setAttribute('aria-expanded', String(open));
    const outcome = slot(card, 'tool-head')?.querySelector('.outcome');
    if (!outcome) return;
    if (has('waiting')) outcome.replaceChildren(icon('bell'), 'waiting for you');
    else if (has('denied')) outcome.replaceChildren(icon('x'), 'denied');
    else if (has('errored')) outcome.replaceChildren(icon('x'), 'failed');
    else if (has('done')) outcome.replaceChildren(icon('check'), card.dataset.detail || 'done');
    else outcome.replaceChildren('running…');
    outcome.className = `outcome ${has('waiting') ? 'waiting' : has('denied') || has('errored') ? 'bad' : has('done') ? 'ok' : ''}`;
  }

  /// Runs `fn(card)` now, or when the card for `toolUseId` is drawn.
  withCard(toolUseId, fn) {
    const card = this.tools.get(toolUseId);
    if (card) return fn(card);
    if (!this.orphans.has(toolUseId)) this.orphans.set(toolUseId, []);
    this.orphans.get(toolUseId).push(fn);
    return undefined;
  }

  /// A result goes to its card, wherever that is (or waits for it).
  toolResult(result) {
    this.withCard(result.tool_use_id, (card) => {
      slot(card, 'tool-result').replaceChildren(resultView(result));
      card.classList.toggle('errored', Boolean(result.is_error));
      card.classList.add('done');
      card.dataset.detail = resultDetail(card, result);
      this.settle(card);
    });
  }

  turnEnded(turn, chunk) {
    const into = this.container(turn.parent_tool_use_id, chunk);
    if (!turn.parent_tool_use_id && !this.older) {
      if (turn.context_tokens != null) this.context = turn.context_tokens;
      if (turn.context_window != null) this.contextWindow = turn.context_window;
      this.onChange();
    }
    // A terminal's transcript tells a turn's duration (not an interrupted one's) but no tokens
    // or cost: no zeros are made up for them.
    const transcript = turn.subtype === 'turn_duration' || turn.subtype === 'interrupted';
    const duration = `${(turn.duration_ms / 1000).toFixed(1)} s`;
    const parts = transcript ? (turn.duration_ms ? [duration] : [])
      : [duration, `${tokens(turn.input_tokens)} in`, `${tokens(turn.output_tokens)} out`, money(turn.cost_usd)];
    const label = turn.interrupted ? 'Interrupted'
      : turn.failed ? `Turn ended: ${turn.subtype}${turn.result ? ` — ${turn.result}` : ''}`
        : 'Turn done';
    into.append(el('div', { class: `turn-end${turn.failed ? ' error' : ''}${turn.interrupted ? ' interrupted' : ''}` }, [label, ...parts].join(' · ')));
  }

  permissionRequested(request, chunk) {
    if (this.permissions.has(request.request_id) && this.permissions.get(request.request_id).request) return;
    const entry = this.permissions.get(request.request_id) ?? { request, decided: null, box: null };
    entry.request = request;
    this.permissions.set(request.request_id, entry);
    const cwd = this.cwd ?? sessions.get(this.session)?.cwd;
    const draw = (slot) => {
      entry.box = permissionBox(this.session, request, cwd);
      slot.replaceChildren(entry.box);
      if (entry.decided) showDecision(entry.box, entry.decided);
    };
    if (request.tool_use_id && this.tools.has(request.tool_use_id)) {
      const card = this.tools.get(request.tool_use_id);
      draw(slot(card, 'tool-permission'));
      card.classList.toggle('waiting', !entry.decided);
      this.settle(card);
    } else {
      const slot = el('div', { class: 'block tool standalone' },
        el('div', { class: 'tool-head' }, toolIcon(request.tool_name), el('span', { class: 'tool-name' }, request.tool_name)),
        el('div', { class: 'tool-body' }, codeBlock(JSON.stringify(request.input, null, 2), 'json')));
      const inner = el('div', { class: 'tool-permission' });
      slot.append(inner);
      chunk.append(slot);
      draw(inner);
    }
    this.onChange();
  }

  permissionDecided(decision) {
    const entry = this.permissions.get(decision.request_id);
    const mark = (card) => {
      card.classList.remove('waiting');
      card.classList.toggle('denied', decision.behavior !== 'allow');
      this.settle(card);
    };
    if (!entry) {
      this.permissions.set(decision.request_id, { request: null, decided: decision, box: null });
      // Decided with no request for a person (a policy rule, the policy's hook, the CLI on its
      // own): shown on the tool's card, unless a request's box is there already.
      if (decision.tool_use_id) {
        this.withCard(decision.tool_use_id, (card) => {
          const place = slot(card, 'tool-permission');
          if (place && !place.firstChild) {
            const box = el('div', { class: 'permission' });
            place.append(box);
            showDecision(box, decision);
          }
          mark(card);
        });
      }
      return;
    }
    entry.decided = decision;
    if (entry.box) showDecision(entry.box, decision);
    const card = entry.request?.tool_use_id && this.tools.get(entry.request.tool_use_id);
    if (card) mark(card);
    this.onChange();
  }

  pending() {
    return [...this.permissions.values()].filter((entry) => entry.request && !entry.decided && entry.box?.isConnected);
  }
}

/// A card's own part (not one of a card nested in it): `tool-head`, `tool-body`,
/// `tool-permission`, `tool-result`, or the subagent's `nest`.
function slot(card, name) {
  return card.querySelector(name === 'nest' ? ':scope > .tool-body > .nest' : `:scope > .${name}`);
}

// The images the Messages API takes, and its limits (the daemon checks them again).
const IMAGE_TYPES = ['image/png', 'image/jpeg', 'image/gif', 'image/webp'];
const MAX_IMAGE_BYTES = 5 * 1024 * 1024;
const MAX_IMAGES = 20;

function bytes(count) {
  if (count < 1024) return `${count} B`;
  if (count < 1024 * 1024) return `${(count / 1024).toFixed(1)} KiB`;
  return `${(count / (1024 * 1024)).toFixed(1)} MiB`;
}

/// Why an image may not be sent, or null: its type is read from its first bytes, as the
/// daemon reads it (a file's name or the browser's guess may say otherwise).
async function imageProblem(file, count) {
  const name = file.name || 'The pasted image';
  if (count >= MAX_IMAGES) return `A message may carry at most ${MAX_IMAGES} images.`;
  if (file.size > MAX_IMAGE_BYTES) return `${name} is ${bytes(file.size)}; an image may be at most 5 MiB.`;
  if (!file.size) return `${name} is empty.`;
  const head = new Uint8Array(await file.slice(0, 12).arrayBuffer());
  const found = sniffImage(head);
  if (!found) return `${name} is not a PNG, JPEG, GIF or WebP image.`;
  if (found !== file.type) return `${name} says it is ${file.type || 'of no type'} but is ${found}.`;
  return null;
}

function sniffImage(head) {
  const starts = (bytes) => bytes.every((byte, i) => head[i] === byte);
  if (starts([0x89, 0x50, 0x4e, 0x47, 0x0d, 0x0a, 0x1a, 0x0a])) return 'image/png';
  if (starts([0xff, 0xd8, 0xff])) return 'image/jpeg';
  if (starts([0x47, 0x49, 0x46, 0x38])) return 'image/gif';
  if (starts([0x52, 0x49, 0x46, 0x46]) && String.fromCharCode(...head.slice(8, 12)) === 'WEBP') return 'image/webp';
  return null;
}

function base64Of(file) {
  return new Promise((resolve, reject) => {
    const reader = new FileReader();
    reader.onload = () => resolve(String(reader.result).split(',', 2)[1] ?? '');
    reader.onerror = () => reject(reader.error);
    reader.readAsDataURL(file);
  });
}

function image(picture) {
  if (picture.source === 'base64') return el('img', { class: 'image', src: `data:${picture.media_type};base64,${picture.data}`, alt: 'image' });
  if (picture.source === 'url') return el('img', { class: 'image', src: picture.url, alt: 'image' });
  return el('span', { class: 'muted' }, '[image]');
}

function diffView(before, after, path) {
  const table = el('div', { class: 'diff', role: 'table', 'aria-label': `Changes to ${path || 'the file'}` });
  const changes = window.Diff ? window.Diff.diffLines(before ?? '', after ?? '') : [{ value: after ?? '' }];
  let added = 0;
  let removed = 0;
  for (const change of changes) {
    const kind = change.added ? 'add' : change.removed ? 'del' : 'ctx';
    const sign = change.added ? '+' : change.removed ? '-' : ' ';
    for (const text of change.value.replace(/\n$/, '').split('\n')) {
      if (change.added) added += 1;
      if (change.removed) removed += 1;
      table.append(el('div', { class: `diff-line ${kind}` }, el('span', { class: 'sign' }, sign), el('span', { class: 'diff-text' }, text)));
    }
  }
  table.dataset.added = added;
  table.dataset.removed = removed;
  return table;
}

/// A finished call's outcome, in a few words, for its one-line summary.
function resultDetail(card, result) {
  const lines = (result.text ?? '').split('\n').filter((line) => line.trim()).length;
  switch (card.dataset.tool) {
    case 'Bash': return lines ? plural(lines, 'line') + ' of output' : 'no output';
    case 'Read': return result.images?.length ? 'an image' : plural(lines, 'line');
    case 'Edit': case 'MultiEdit': {
      const diffs = [...slot(card, 'tool-body').querySelectorAll(':scope > .diff')];
      const sum = (key) => diffs.reduce((total, diff) => total + Number(diff.dataset[key] ?? 0), 0);
      return `+${sum('added')} −${sum('removed')}`;
    }
    case 'Write': {
      const written = slot(card, 'tool-body')?.querySelector('code')?.textContent.replace(/\n$/, '').split('\n').length ?? 0;
      return `${plural(written, 'line')} written`;
    }
    case 'Grep': case 'Glob': return plural(lines, 'match', 'matches');
    default: return 'done';
  }
}

function resultView(result) {
  const box = el('div', { class: `result${result.is_error ? ' error' : ''}` });
  const text = `${result.text ?? ''}${result.interrupted ? '\n[interrupted]' : ''}`;
  const images = result.images ?? [];
  if (text) {
    const lines = text.split('\n').length;
    const pre = el('pre', { class: 'output' }, text);
    box.append(lines > 30 ? el('details', {}, el('summary', {}, `Output (${lines} lines)`), pre) : pre);
  } else if (!images.length) {
    box.append(el('div', { class: 'muted' }, result.tool_name === 'Bash' ? '(no output)' : 'Done'));
  }
  for (const picture of images) box.append(image(picture));
  return box;
}

// ---------------------------------------------------------------------------------------------
// Permissions: approve, deny, edit, always allow, answer questions

function permissionBox(session, request, cwd) {
  const box = el('div', { class: 'permission', dataset: { requestId: request.request_id } });
  const answer = async (body) => {
    for (const button of $$('button', box)) button.disabled = true;
    try {
      await api('POST', `/api/sessions/${session}/permissions/${request.request_id}`, { by: 'browser', ...body });
    } catch (error) {
      toast(`Could not answer: ${error.message}`);
      for (const button of $$('button', box)) button.disabled = false;
    }
  };
  box.append(el('div', { class: 'permission-title' }, wantsLine(request.tool_name, request.input, cwd)));
  if (request.reason) box.append(el('div', { class: 'permission-reason muted' }, request.reason));
  if (request.started_by) box.append(el('div', { class: 'permission-started muted' }, `In a turn started by ${request.started_by}`));

  if (request.tool_name === 'AskUserQuestion') {
    const answers = {};
    const questions = request.input?.questions ?? [];
    for (const question of questions) {
      const group = el('div', { class: 'choices', role: 'group', 'aria-label': question.question }, el('div', { class: 'choice-question' }, question.question));
      for (const option of question.options ?? []) {
        group.append(el('button', {
          type: 'button', class: 'choice', title: option.description ?? '',
          onclick: (event) => {
            answers[question.question] = option.label;
            for (const b of $$('.choice', group)) b.classList.toggle('chosen', b === event.currentTarget);
            if (questions.every((q) => answers[q.question])) answer({ behavior: 'allow', answers });
          },
        }, option.label));
      }
      box.append(group);
    }
    box.append(el('div', { class: 'actions' }, el('button', { type: 'button', class: 'deny', onclick: () => answer({ behavior: 'deny', message: 'The user declined to answer.' }) }, 'Decline')));
    return box;
  }

  // A plan from plan mode: approved (Claude leaves plan mode and carries it out), or sent back
  // with what to change (Claude reads it and keeps planning). The plan itself is on the card.
  if (request.tool_name === 'ExitPlanMode') {
    const comments = el('textarea', { class: 'plan-comments', rows: 3, placeholder: 'What should change in the plan? (Claude reads it and plans again)', 'aria-label': 'Comments on the plan' });
    box.append(el('div', { class: 'actions needs-approve' },
      el('button', { type: 'button', class: 'allow primary approve-plan', title: 'Approve the plan (a)', onclick: () => answer({ behavior: 'allow' }) }, icon('check'), 'Approve plan'),
      el('button', { type: 'button', class: 'deny send-back', title: 'Send the plan back with your comments (d)', onclick: () => {
        const text = comments.value.trim();
        answer({ behavior: 'deny', message: text ? `The user wants the plan changed before it is carried out: ${text}` : 'The user sent the plan back: keep planning.' });
      } }, icon('x'), 'Send back')),
    el('div', { class: 'secondary needs-approve' }, comments));
    return box;
  }

  const message = el('input', { class: 'deny-message', placeholder: 'Reason to deny (Claude reads it)', 'aria-label': 'Reason to deny' });
  const editor = el('textarea', { class: 'edit-input', rows: 4, hidden: true, 'aria-label': 'Edited input' }, JSON.stringify(request.input ?? {}, null, 2));
  // What "allow always" grants, as the daemon says (a Bash command exactly; any other tool
  // wholly): said before the click, never understated.
  const rule = request.always_allows || '';
  const grant = !rule ? 'the same call' : rule.includes('(') ? rule : `every ${rule} call`;
  const always = `Allow ${grant} for the rest of this session`;
  box.append(editor,
    el('div', { class: 'actions needs-approve' },
      el('button', { type: 'button', class: 'allow primary', title: 'Allow (a)', onclick: () => {
        if (!editor.hidden) {
          try { answer({ behavior: 'allow', updated_input: JSON.parse(editor.value) }); } catch (error) { toast(`The edited input is not JSON: ${error.message}`); }
        } else answer({ behavior: 'allow' });
      } }, icon('check'), 'Allow'),
      el('button', { type: 'button', class: 'always', title: always, onclick: () => answer({ behavior: 'allow', remember: true }) }, 'Allow always'),
      el('button', { type: 'button', class: 'deny', title: 'Deny (d)', onclick: () => answer({ behavior: 'deny', message: message.value.trim() || undefined }) }, icon('x'), 'Deny')),
    el('div', { class: 'secondary needs-approve' }, message,
      el('button', { type: 'button', class: 'edit ghost needs-operate', onclick: (event) => { editor.hidden = !editor.hidden; event.currentTarget.textContent = editor.hidden ? 'Edit input' : 'Cancel edit'; } }, 'Edit input')),
    el('div', { class: 'always-rule muted needs-approve' }, `Allow always: ${grant}, for the rest of this session.`));
  return box;
}

function showDecision(box, decision) {
  box.classList.add('decided', decision.behavior === 'allow' ? 'allowed' : 'denied');
  box.replaceChildren(el('div', { class: 'decision' }, icon(decision.behavior === 'allow' ? 'check' : 'x'), decisionText(decision)));
}

// ---------------------------------------------------------------------------------------------
// The session view

let view = null;
const MODELS = ['opus', 'sonnet', 'haiku'];

class SessionView {
  constructor(id) {
    this.id = id;
    this.firstSeq = null; // the oldest seq drawn
    this.lastSeq = 0; // the newest seq drawn
    this.seqs = []; // the seq of every live frame drawn, in arrival order (the tests read it)
    this.socket = null;
    this.closed = false;
    this.loadingOlder = false;
    this.usage = null; // GET …/usage: every turn of the session
    this.root = el('section', { class: 'session' });
    this.headerBox = el('header', { class: 'session-head' });
    this.scroller = el('div', { class: 'transcript', tabindex: '0' });
    this.older = el('div', { class: 'older' });
    this.live = el('div', { class: 'chunk' });
    this.scroller.append(this.older, this.live);
    this.stats = el('aside', { class: 'stats', 'aria-label': 'Cost and context' });
    this.waitingBar = el('div', { class: 'waiting-bar', hidden: true, role: 'status' }, icon('bell'),
      el('span', { class: 'what' }), el('button', { type: 'button', class: 'primary show', onclick: () => this.showWaiting() }, 'Show'));
    this.composer = this.makeComposer();
    // A session paused at a budget: why, and what a person may do (raise it, or stop).
    this.budgetInput = el('input', { type: 'number', min: '0', step: '0.5', class: 'budget-input', 'aria-label': 'New budget in US dollars' });
    this.pausedBar = el('div', { class: 'paused-bar', hidden: true, role: 'status' },
      el('span', { class: 'why' }),
      el('label', { class: 'raise needs-operate' }, '$', this.budgetInput),
      el('button', { type: 'button', class: 'primary raise needs-operate', onclick: () => this.raiseBudget() }, 'Raise and go on'),
      el('button', { type: 'button', class: 'stop needs-operate', onclick: () => this.stop() }, 'Stop'));
    this.root.append(this.headerBox, el('div', { class: 'session-body' }, this.scroller, this.stats), this.waitingBar, this.pausedBar, this.composer);
    this.transcript = new Transcript(id);
    this.transcript.onChange = () => { this.drawContext(); this.refreshWaiting(); };
    // Following the end: true until the person scrolls away from it, again once they are back.
    // Only scrolling changes it, so text that grows between two frames does not.
    this.follow = true;
    this.transcript.onGrow = () => { if (this.follow) this.scrollToEnd(); };
    let ticking = false;
    this.scroller.addEventListener('scroll', () => {
      this.follow = this.scroller.scrollHeight - this.scroller.scrollTop - this.scroller.clientHeight < 80;
      if (this.scroller.scrollTop < 200) this.loadOlder();
      if (!ticking) { ticking = true; requestAnimationFrame(() => { ticking = false; this.refreshWaiting(); }); }
    });
    window.__switchboard = { view: this };
  }

  async open() {
    $('#main').replaceChildren(this.root);
    this.header();
    const session = await api('GET', `/api/sessions/${this.id}`);
    sessions.set(this.id, { ...sessions.get(this.id), ...session });
    this.transcript.cwd = session.cwd;
    this.header();
    const page = await api('GET', `/api/sessions/${this.id}/view?before=9007199254740991&limit=${PAGE}`);
    this.draw(page.updates, this.live);
    this.firstSeq = page.first_seq;
    this.lastSeq = page.last_seq;
    if (!page.more) this.older.replaceChildren(el('div', { class: 'start' }, 'Start of the session'));
    // Requests asked before the loaded page are still waiting: draw them too.
    for (const request of session.pending_permissions ?? []) this.transcript.permissionRequested(request, this.live);
    this.scrollToEnd();
    this.subscribe();
    this.buildStats();
    this.loadUsage();
    this.refreshWaiting();
  }

  close() {
    this.closed = true;
    this.socket?.close();
    this.chart?.destroy();
    // A shell open here ends when the page leaves the session (the daemon ends it).
    if (this.shellPanel) this.toggleShell();
  }

  draw(updates, chunk) {
    for (const update of updates) this.transcript.apply(update, chunk);
  }

  subscribe() {
    let delay = 300;
    const connect = () => {
      if (this.closed) return;
      const socket = new WebSocket(socketUrl(`/api/sessions/${this.id}/subscribe?view=true&after=${this.lastSeq}`));
      this.socket = socket;
      socket.onopen = () => { delay = 300; connection.up(); };
      socket.onmessage = (message) => {
        const frame = JSON.parse(message.data);
        if (frame.type === 'lagged') return; // the missed events follow from the log
        if (frame.type === 'ack') return;
        if (frame.type === 'store_failing' || frame.type === 'shutdown') { toast(frame.message); return; }
        if (frame.type === 'store_recovered') { toast('The event log takes this session\'s events again.'); return; }
        if (frame.type === 'error') { toast(frame.error?.message ?? 'error'); return; }
        // One event's updates come in one frame: an event is drawn whole, once.
        if (frame.type !== 'view' || typeof frame.seq !== 'number' || frame.seq <= this.lastSeq) return;
        this.draw(frame.updates, this.live);
        this.lastSeq = frame.seq;
        this.seqs.push(frame.seq);
        if (frame.updates.some((update) => update.update === 'turn_ended' && !update.parent_tool_use_id)) this.loadUsage();
        if (this.follow) this.scrollToEnd();
        this.refreshWaiting();
      };
      socket.onclose = () => {
        if (this.closed) return;
        connection.down('The connection to the daemon dropped.');
        setTimeout(connect, delay);
        delay = Math.min(delay * 2, 5000);
      };
    };
    connect();
  }

  async loadOlder() {
    if (this.loadingOlder || this.firstSeq === null || this.firstSeq <= 1) return;
    this.loadingOlder = true;
    try {
      const page = await api('GET', `/api/sessions/${this.id}/view?before=${this.firstSeq}&limit=${PAGE}`);
      const chunk = el('div', { class: 'chunk' });
      const height = this.scroller.scrollHeight;
      this.transcript.older = true;
      try { this.draw(page.updates, chunk); } finally { this.transcript.older = false; }
      this.older.after(chunk);
      this.firstSeq = page.first_seq;
      if (!page.more) this.older.replaceChildren(el('div', { class: 'start' }, 'Start of the session'));
      this.scroller.scrollTop += this.scroller.scrollHeight - height;
    } finally {
      this.loadingOlder = false;
    }
  }

  scrollToEnd() {
    this.scroller.scrollTop = this.scroller.scrollHeight;
  }

  /// The bar above the message box: shown while an approval waits out of sight.
  refreshWaiting() {
    const pending = this.transcript.pending();
    if (!pending.length) { this.waitingBar.hidden = true; return; }
    const first = pending[0];
    const box = first.box.getBoundingClientRect();
    const area = this.scroller.getBoundingClientRect();
    const inSight = box.bottom > area.top + 8 && box.top < area.bottom - 8 && area.height > 0;
    const what = $('.what', this.waitingBar);
    const cwd = this.transcript.cwd ?? sessions.get(this.id)?.cwd;
    what.replaceChildren(...wantsLine(first.request.tool_name, first.request.input, cwd).filter(Boolean),
      pending.length > 1 ? ` (and ${plural(pending.length - 1, 'more request')})` : '');
    this.waitingBar.hidden = inSight;
  }

  showWaiting() {
    const first = this.transcript.pending()[0];
    if (!first) return;
    // A card folded by hand (a subagent's, say) opens to show it.
    for (let card = first.box.closest('.tool.collapsed'); card; card = card.parentElement?.closest('.tool.collapsed')) {
      card.dataset.user = 'open';
      this.transcript.settle(card);
    }
    first.box.scrollIntoView({ block: 'center' });
    $('.allow, .choice', first.box)?.focus({ preventScroll: true });
    this.refreshWaiting();
  }

  /// The header: built once, then updated in place (a half-typed name survives).
  header() {
    const session = sessions.get(this.id) ?? { id: this.id };
    const [state, label] = stateLabel(session);
    const running = session.running !== false && !['exited', 'crashed'].includes(session.state);
    if (!this.head) {
      const model = el('select', { class: 'model', 'aria-label': 'Model' });
      const other = el('input', { class: 'model-other', hidden: true, placeholder: 'model id, then Enter', 'aria-label': 'Model id', spellcheck: 'false' });
      model.addEventListener('change', () => {
        if (model.value === '__other') {
          other.hidden = false;
          other.focus();
          model.value = sessions.get(this.id)?.model ?? '';
          return;
        }
        this.control('model', { model: model.value });
      });
      other.addEventListener('keydown', (event) => {
        if (event.key === 'Enter' && other.value.trim()) { this.control('model', { model: other.value.trim() }); other.hidden = true; }
        if (event.key === 'Escape') { other.hidden = true; event.stopPropagation(); }
      });
      const mode = el('select', { class: 'mode', 'aria-label': 'Permission mode' },
        ['default', 'acceptEdits', 'plan', 'bypassPermissions', 'dontAsk'].map((m) => el('option', { value: m }, m)));
      mode.addEventListener('change', () => this.control('permission-mode', { mode: mode.value }));
      const menu = el('details', { class: 'menu' });
      const item = (name, text, action) => el('button', { type: 'button', class: name, onclick: () => { menu.open = false; action(); } }, text);
      this.head = {
        icon: el('span'), title: el('h1'), cwd: el('div', { class: 'muted cwd' }), badge: el('span', { class: 'badge' }),
        cost: el('span', { class: 'cost', title: 'What this session has cost' }), model, other, mode,
        interrupt: el('button', { type: 'button', class: 'interrupt', title: 'Interrupt (Esc)', 'aria-label': 'Interrupt', onclick: () => this.interrupt() }, icon('stop'), el('span', { class: 'label' }, 'Interrupt')),
        resume: el('button', { type: 'button', class: 'resume primary', onclick: () => this.resume() }, 'Resume'),
        review: el('button', { type: 'button', class: 'review-open', hidden: true, title: 'The session\'s whole change in its worktree: comment, commit, merge', onclick: () => this.toggleReview() }, 'Review'),
        shell: el('button', { type: 'button', class: 'shell-open needs-admin', title: 'A shell in the session\'s directory (ends with the session)', onclick: () => this.toggleShell() }, 'Terminal'),
        files: el('button', { type: 'button', class: 'files-open needs-operate', title: 'The session\'s directory, read-only: the files it touched are marked', onclick: () => this.toggleFiles() }, 'Files'),
        fork: item('fork', 'Fork this conversation', () => this.fork()),
        archive: item('archive', 'Archive', () => this.amend({ archived: !sessions.get(this.id)?.archived })),
        menu,
      };
      const h = this.head;
      menu.append(el('summary', { 'aria-label': 'More actions', title: 'More actions' }, icon('more')),
        el('div', { class: 'menu-items' }, item('rename', 'Rename', () => this.rename()), h.fork, h.archive));
      this.headerBox.replaceChildren(el('a', { href: '#/', class: 'back', 'aria-label': 'All sessions' }, '←'),
        h.icon, el('div', { class: 'session-title' }, h.title, h.cwd), h.badge, h.cost, h.review, h.files, h.shell,
        el('div', { class: 'controls needs-operate' }, h.model, h.other, h.mode, h.interrupt, h.resume, h.menu));
    }
    const h = this.head;
    h.icon.replaceChildren(stateIcon(state));
    if (!this.renaming) h.title.textContent = titleOf(session);
    // An interactive CLI in someone's terminal: messages are typed into it; its model, mode and
    // resume belong to that terminal.
    const terminal = session.config?.transport === 'terminal';
    h.cwd.textContent = terminal ? `${session.cwd ?? ''} · in a terminal` : (session.cwd ?? '');
    // Several daemons on one database: the node first, where the path would cut it off.
    if (session.node) h.cwd.textContent = `on ${session.node} · ${h.cwd.textContent}`;
    // Its files, terminal and worktree are on the machine that runs it.
    h.files.hidden = Boolean(session.elsewhere);
    h.shell.hidden = Boolean(session.elsewhere);
    h.cwd.title = session.cwd ?? '';
    h.badge.className = `badge state-${state}`;
    h.badge.dataset.state = session.state ?? '';
    h.badge.textContent = session.archived ? `${label} · archived` : label;
    h.cost.textContent = money(session.cost_usd);
    if (document.activeElement !== h.model) {
      const current = session.model ?? '';
      const options = [...new Set([current, ...MODELS].filter(Boolean))];
      h.model.replaceChildren(...(current ? [] : [el('option', { value: '' }, 'default model')]),
        ...options.map((m) => el('option', { value: m }, m)), el('option', { value: '__other' }, 'Other…'));
      h.model.value = current;
    }
    if (document.activeElement !== h.mode) h.mode.value = session.permission_mode ?? 'default';
    h.model.hidden = terminal;
    h.mode.hidden = terminal;
    if (this.input) this.input.placeholder = terminal ? TERMINAL_PLACEHOLDER : PLACEHOLDER;
    // Interrupt stops a turn: none runs while the session is idle.
    h.interrupt.hidden = !running;
    h.interrupt.disabled = !['working', 'awaiting_permission', 'compacting', 'starting'].includes(session.state);
    h.resume.hidden = running || terminal;
    h.fork.hidden = !session.claude_session_id;
    h.review.hidden = !session.config?.worktree || Boolean(session.elsewhere);
    h.archive.textContent = session.archived ? 'Unarchive' : 'Archive';
    this.drawPaused(session);
  }

  // The Review view: the session's whole change in its worktree, file by file; a line's
  // comment goes to Claude as a message; commit, merge into the branch it started from, or
  // discard.
  /// The terminal: a shell in the session's directory, in a PTY on the daemon, drawn by
  /// xterm.js (loaded when first opened). Keys go to it as they are typed; it follows the
  /// panel's size; it ends with the session (the daemon ends it) or when closed here.
  async toggleShell() {
    if (this.shellPanel) {
      this.shellPanel.socket?.close();
      this.shellPanel.terminal?.dispose();
      this.shellPanel.observer?.disconnect();
      this.shellPanel.box.remove();
      this.shellPanel = null;
      return;
    }
    const screen = el('div', { class: 'shell-screen' });
    const status = el('span', { class: 'muted shell-status' }, 'starting…');
    const box = el('section', { class: 'shell-panel', 'aria-label': 'Terminal' },
      el('div', { class: 'files-head' }, el('strong', {}, 'Terminal'), status,
        el('button', { type: 'button', class: 'ghost close', onclick: () => this.toggleShell() }, 'Close')),
      screen);
    const panel = { box };
    this.shellPanel = panel;
    this.root.querySelector('.session-body').before(box);
    const [{ Terminal }, { FitAddon }] = await Promise.all([import('./vendor/xterm.mjs'), import('./vendor/addon-fit.mjs')]);
    if (this.shellPanel !== panel) return;
    const dark = matchMedia('(prefers-color-scheme: dark)').matches;
    const terminal = new Terminal({ cursorBlink: true, fontSize: 13, scrollback: 5000, convertEol: false,
      theme: dark ? { background: '#0b1020' } : { background: '#ffffff', foreground: '#1f2430', cursor: '#1f2430', selectionBackground: '#c8d3f5' } });
    const fit = new FitAddon();
    terminal.loadAddon(fit);
    terminal.open(screen);
    panel.terminal = terminal;
    const socket = new WebSocket(socketUrl(`/api/sessions/${this.id}/shell`));
    socket.binaryType = 'arraybuffer';
    panel.socket = socket;
    const encoder = new TextEncoder();
    const resize = () => {
      try { fit.fit(); } catch { return; }
      if (socket.readyState === WebSocket.OPEN) socket.send(JSON.stringify({ type: 'resize', cols: terminal.cols, rows: terminal.rows }));
    };
    socket.onopen = () => { resize(); terminal.focus(); };
    socket.onmessage = (event) => {
      if (typeof event.data !== 'string') { terminal.write(new Uint8Array(event.data)); return; }
      const frame = JSON.parse(event.data);
      if (frame.type === 'started') status.textContent = `${frame.shell} in ${frame.cwd}`;
      else if (frame.type === 'exit') { status.textContent = `ended: ${frame.reason}`; box.classList.add('ended'); }
      else if (frame.type === 'error') toast(frame.error);
    };
    socket.onclose = (event) => {
      if (!box.classList.contains('ended')) status.textContent = event.code === 1006 ? 'could not connect (the session must be running, and this needs an admin token)' : 'closed';
      box.classList.add('ended');
    };
    terminal.onData((data) => { if (socket.readyState === WebSocket.OPEN) socket.send(encoder.encode(data)); });
    panel.observer = new ResizeObserver(() => resize());
    panel.observer.observe(screen);
  }

  /// The Files view: the session's directory as a tree (folders open on a click), and the
  /// file picked, highlighted; what the session's tools changed is marked. Read-only.
  async toggleFiles() {
    if (this.filesPanel) {
      this.filesPanel.remove();
      this.filesPanel = null;
      return;
    }
    const tree = el('ul', { class: 'file-tree', role: 'tree', 'aria-label': 'Files' });
    const shown = el('div', { class: 'file-view', 'aria-live': 'polite' }, el('p', { class: 'muted' }, 'Pick a file. Files the session changed are marked ●.'));
    this.filesPanel = el('section', { class: 'files-panel', 'aria-label': 'Files' },
      el('div', { class: 'files-head' }, el('strong', {}, 'Files'), el('span', { class: 'muted' }, sessions.get(this.id)?.cwd ?? ''),
        el('button', { type: 'button', class: 'ghost close', onclick: () => this.toggleFiles() }, 'Close')),
      el('div', { class: 'files-body' }, tree, shown));
    this.root.querySelector('.session-body').before(this.filesPanel);
    const open = async (path, into) => {
      try {
        const listing = await api('GET', `/api/sessions/${this.id}/files?path=${encodeURIComponent(path)}`);
        into.replaceChildren(...listing.entries.map((entry) => {
          const mark = entry.touched ? el('span', { class: 'touched', title: 'Changed by the session' }, '●') : '';
          if (entry.kind === 'dir') {
            const children = el('ul', { role: 'group', hidden: true });
            const row = el('button', { type: 'button', class: 'tree-dir', 'aria-expanded': 'false', onclick: async () => {
              const opening = children.hidden;
              children.hidden = !opening;
              row.setAttribute('aria-expanded', String(opening));
              if (opening && !children.childElementCount) await open(entry.path, children);
            } }, `${entry.name}/`, mark);
            return el('li', { role: 'treeitem' }, row, children);
          }
          return el('li', { role: 'treeitem' }, el('button', { type: 'button', class: `tree-file${entry.touched ? ' is-touched' : ''}`, onclick: () => show(entry.path) },
            entry.name, mark, entry.size != null ? el('span', { class: 'muted size' }, bytes(entry.size)) : ''));
        }));
        if (listing.truncated) into.append(el('li', { class: 'muted' }, 'and more (not listed)'));
      } catch (error) { into.replaceChildren(el('li', { class: 'muted' }, error.message)); }
    };
    const show = async (path) => {
      try {
        const file = await api('GET', `/api/sessions/${this.id}/file?path=${encodeURIComponent(path)}`);
        const head = el('div', { class: 'file-view-head' }, el('code', {}, file.path), file.touched ? el('span', { class: 'touched' }, '● changed by the session') : '',
          el('span', { class: 'muted' }, bytes(file.size)));
        const body = file.binary ? el('p', { class: 'muted' }, 'A binary file: not shown.')
          : codeBlock(file.text ?? '', languageOf(file.path));
        shown.replaceChildren(head, body, file.truncated ? el('p', { class: 'muted' }, `Only the first ${bytes(file.text?.length ?? 0)} are shown.`) : '');
      } catch (error) { shown.replaceChildren(el('p', { class: 'muted' }, error.message)); }
    };
    await open('', tree);
  }

  async toggleReview() {
    if (this.review) {
      this.review.remove();
      this.review = null;
      return;
    }
    this.review = el('section', { class: 'review', 'aria-label': 'Review' });
    this.root.querySelector('.session-body').before(this.review);
    await this.drawReview();
  }

  async drawReview() {
    const box = this.review;
    if (!box) return;
    let diff;
    try {
      diff = await api('GET', `/api/sessions/${this.id}/diff`);
    } catch (error) {
      box.replaceChildren(el('p', { class: 'muted' }, `No review: ${error.message}`));
      return;
    }
    const session = sessions.get(this.id) ?? {};
    const message = el('input', { class: 'commit-message', value: session.title ?? '', 'aria-label': 'Commit message' });
    const act = (label, run, cls = '') => el('button', { type: 'button', class: `needs-operate ${cls}`, onclick: async (event) => {
      event.currentTarget.disabled = true;
      try { await run(); } catch (error) { toast(error.message); } finally { await this.drawReview(); }
    } }, label);
    const into = diff.base_branch ?? 'its base';
    const head = el('div', { class: 'review-head' },
      el('strong', {}, `${diff.files.length} file${diff.files.length === 1 ? '' : 's'} changed`),
      el('span', { class: 'muted' }, ` on ${diff.branch}, from ${diff.base.slice(0, 8)} (${into})`),
      el('div', { class: 'review-actions needs-operate' },
        message,
        act('Commit', async () => { const made = await api('POST', `/api/sessions/${this.id}/commit`, { message: message.value }); toast(`Committed ${made.commit.slice(0, 8)}.`, 'ok'); }, 'primary commit'),
        act(`Merge into ${into}`, async () => { const merged = await api('POST', `/api/sessions/${this.id}/merge`, { mode: 'merge' }); toast(`Merged into ${merged.into} (${merged.commit.slice(0, 8)}).`, 'ok'); }, 'merge'),
        act('Push', async () => {
          const pushed = await api('POST', `/api/sessions/${this.id}/push`, {});
          toast(`Pushed ${pushed.branch} to ${pushed.remote}.`, 'ok');
          // On a known forge: the page that opens the pull request (nothing is sent there).
          this.pullRequestUrl = /^https:\/\//.test(pushed.pull_request_url ?? '') ? pushed.pull_request_url : null;
        }, 'push'),
        this.pullRequestUrl ? el('a', { class: 'button pull-request', href: this.pullRequestUrl, target: '_blank', rel: 'noopener noreferrer' }, 'Open a pull request') : '',
        act('Fast-forward', async () => { const merged = await api('POST', `/api/sessions/${this.id}/merge`, { mode: 'fast_forward' }); toast(`${merged.into} is at ${merged.commit.slice(0, 8)}.`, 'ok'); }, 'fast-forward'),
        act('Discard', async () => {
          if (!confirm('Discard every change of this session (back to the commit it started from)?')) return;
          await api('POST', `/api/sessions/${this.id}/discard`);
        }, 'discard'),
        el('button', { type: 'button', class: 'ghost close', onclick: () => this.toggleReview() }, 'Close')));
    const files = diff.files.map((file) => this.reviewFile(file));
    box.replaceChildren(head, ...(files.length ? files : [el('p', { class: 'muted' }, 'No change yet.')]));
  }

  reviewFile(file) {
    const summary = el('summary', {},
      el('span', { class: `badge file-${file.status}` }, file.status),
      el('code', { class: 'path' }, file.old_path ? `${file.old_path} → ${file.path}` : file.path),
      el('span', { class: 'counts' }, el('span', { class: 'plus' }, `+${file.added}`), ' ', el('span', { class: 'minus' }, `−${file.removed}`)));
    const body = el('div', { class: 'review-lines' });
    if (file.binary) body.append(el('p', { class: 'muted' }, 'A binary file.'));
    else if (file.too_large || !file.patch) body.append(el('p', { class: 'muted' }, 'Too large to show.'));
    else {
      // The new file's line numbers, from each hunk's header.
      let line = 0;
      let inHunk = false;
      for (const text of file.patch.split('\n')) {
        const hunk = text.match(/^@@ -\d+(?:,\d+)? \+(\d+)/);
        if (hunk) { line = Number(hunk[1]); inHunk = true; body.append(el('div', { class: 'hunk' }, text)); continue; }
        if (!inHunk || text === '' || text.startsWith('\\')) continue;
        const kind = text[0] === '+' ? 'add' : text[0] === '-' ? 'del' : 'ctx';
        const number = kind === 'del' ? null : line;
        if (kind !== 'del') line += 1;
        const row = el('div', { class: `line ${kind}` }, el('span', { class: 'no' }, number ?? ''), el('code', {}, text));
        if (number !== null) {
          row.classList.add('commentable');
          row.title = 'Comment on this line: it goes to Claude';
          row.addEventListener('click', () => this.commentOn(row, file.path, number));
        }
        body.append(row);
      }
    }
    return el('details', { class: 'review-file', open: true }, summary, body);
  }

  commentOn(row, path, line) {
    if (row.nextElementSibling?.classList.contains('line-comment') || !can('operate')) return;
    const input = el('textarea', { rows: 2, placeholder: `A note on ${path}:${line} for Claude`, 'aria-label': 'Comment' });
    const form = el('div', { class: 'line-comment' }, input,
      el('button', { type: 'button', class: 'primary', onclick: async () => {
        const text = input.value.trim();
        if (!text) return;
        try {
          await api('POST', `/api/sessions/${this.id}/messages`, { content: `${path}:${line}: ${text}` });
          form.replaceWith(el('div', { class: 'line-comment sent' }, `Sent to Claude: ${path}:${line}: ${text}`));
        } catch (error) { toast(error.message); }
      } }, 'Send to Claude'),
      el('button', { type: 'button', class: 'ghost', onclick: () => form.remove() }, 'Cancel'));
    row.after(form);
    input.focus();
  }

  drawPaused(session) {
    const paused = session.state === 'paused';
    const own = paused && !/daily budget/.test(session.paused ?? '');
    this.pausedBar.hidden = !paused;
    if (!paused) return;
    $('.why', this.pausedBar).textContent = `Paused: ${session.paused ?? 'a budget is spent'}.`;
    for (const control of this.pausedBar.querySelectorAll('.raise')) control.hidden = !own;
    if (own && document.activeElement !== this.budgetInput) {
      // A suggestion: twice what it has cost, at least a dollar more.
      const cost = session.spent_usd ?? session.cost_usd ?? 0;
      this.budgetInput.value = String(Math.ceil(Math.max(cost * 2, cost + 1)));
    }
  }

  async raiseBudget() {
    const usd = Number(this.budgetInput.value);
    if (!Number.isFinite(usd) || usd <= 0) { toast('A budget is a number of dollars.'); return; }
    try {
      const session = await api('PATCH', `/api/sessions/${this.id}`, { max_budget_usd: usd });
      sessions.set(this.id, { ...sessions.get(this.id), ...session });
      this.header();
      renderList();
      if (session.state === 'paused') toast(`Still paused: ${session.paused}`);
    } catch (error) { toast(error.message); }
  }

  async stop() {
    try { await api('DELETE', `/api/sessions/${this.id}`); } catch (error) { toast(error.message); }
  }

  rename() {
    const h = this.head;
    const session = sessions.get(this.id) ?? {};
    const input = el('input', { class: 'rename-input', value: titleOf(session), 'aria-label': 'Session name', maxlength: '200' });
    this.renaming = true;
    const done = async (save) => {
      if (!this.renaming) return;
      this.renaming = false;
      input.replaceWith(h.title);
      if (save && input.value.trim() && input.value.trim() !== titleOf(session)) await this.amend({ title: input.value.trim() });
      this.header();
    };
    input.addEventListener('keydown', (event) => {
      if (event.key === 'Enter') { event.preventDefault(); done(true); }
      if (event.key === 'Escape') { event.preventDefault(); event.stopPropagation(); done(false); }
    });
    input.addEventListener('blur', () => done(true));
    h.title.replaceWith(input);
    input.focus();
    input.select();
  }

  async amend(change) {
    try {
      const session = await api('PATCH', `/api/sessions/${this.id}`, change);
      sessions.set(this.id, { ...sessions.get(this.id), ...session });
      this.header();
      renderList();
      if ('archived' in change) toast(change.archived ? 'Archived: the list shows it under "Show archived".' : 'Back in the list.', 'info');
    } catch (error) { toast(error.message); }
  }

  async control(what, body) {
    try {
      await api('POST', `/api/sessions/${this.id}/${what}`, body);
      const session = sessions.get(this.id);
      if (session && what === 'model') session.model = body.model;
      if (session && what === 'permission-mode') session.permission_mode = body.mode;
      this.header();
      toast(`${what === 'model' ? 'Model' : 'Permission mode'} set to ${body.model ?? body.mode}`, 'info');
    } catch (error) { toast(error.message); }
  }

  async interrupt() {
    try { await api('POST', `/api/sessions/${this.id}/interrupt`); } catch (error) { toast(error.message); }
  }

  async resume() {
    try { const session = await api('POST', `/api/sessions/${this.id}/resume`, {}); sessions.set(this.id, session); this.header(); } catch (error) { toast(error.message); }
  }

  async rewind(uuid) {
    const path = `/api/sessions/${this.id}/rewind`;
    if (sessions.get(this.id)?.config?.transport === 'terminal') { toast('A CLI in a terminal rewinds there: Esc twice.'); return; }
    try {
      const preview = await api('POST', path, { message: uuid, dry_run: true });
      if (!preview.can_rewind) { toast(`The files cannot be put back: ${preview.reason ?? 'no checkpoint for this message'}`); return; }
      if (!preview.files_changed) { toast('No file has changed since this message.', 'ok'); return; }
      const files = (preview.files ?? []).slice(0, 12).map((file) => `  ${file}`).join('\n');
      const more = (preview.files?.length ?? 0) > 12 ? `\n  and ${preview.files.length - 12} more` : '';
      const question = `Put ${plural(preview.files_changed, 'file')} back as they were before this message (+${preview.insertions ?? 0} −${preview.deletions ?? 0})?\n${files}${more}\n\nThe conversation stays as it is; "Fork from here" starts a new one at this point.`;
      if (!confirm(question)) return;
      await api('POST', path, { message: uuid });
      toast(`${plural(preview.files_changed, 'file')} put back`, 'ok');
    } catch (error) { toast(error.message); }
  }

  async fork(uuid) {
    const session = sessions.get(this.id);
    try {
      const created = await api('POST', '/api/sessions', { cwd: session.cwd, resume: session.claude_session_id, fork: true, resume_at: uuid });
      location.hash = `#/s/${created.id}`;
    } catch (error) { toast(error.message); }
  }

  makeComposer() {
    const input = el('textarea', { class: 'composer-input', rows: 2, placeholder: PLACEHOLDER, 'aria-label': 'Message' });
    // Images to send with the next message: pasted, dropped or picked; checked here as the
    // daemon checks them again (type from the bytes, size, count), so a mistake shows at once.
    let pictures = [];
    const strip = el('div', { class: 'attachments', hidden: true, 'aria-label': 'Images to send' });
    const drawStrip = () => {
      strip.replaceChildren(...pictures.map((picture, index) => el('figure', { class: 'attachment' },
        el('img', { src: `data:${picture.media_type};base64,${picture.data}`, alt: picture.name }),
        el('button', { type: 'button', class: 'remove', title: `Remove ${picture.name}`, 'aria-label': `Remove ${picture.name}`, onclick: () => { pictures.splice(index, 1); drawStrip(); } }, '×'))));
      strip.hidden = !pictures.length;
    };
    const add = async (files) => {
      for (const file of files) {
        const problem = await imageProblem(file, pictures.length);
        if (problem) { toast(problem); continue; }
        pictures.push({ name: file.name || 'pasted image', media_type: file.type, data: await base64Of(file) });
      }
      drawStrip();
    };
    const picker = el('input', { type: 'file', accept: IMAGE_TYPES.join(','), multiple: true, hidden: true, 'aria-label': 'Attach images', onchange: () => { add([...picker.files]); picker.value = ''; } });
    const send = async () => {
      const text = input.value.trim();
      if (!text && !pictures.length) return;
      const sending = pictures;
      const content = sending.length
        ? [...(text ? [{ type: 'text', text }] : []), ...sending.map((picture) => ({ type: 'image', source: { type: 'base64', media_type: picture.media_type, data: picture.data } }))]
        : text;
      input.value = '';
      pictures = [];
      drawStrip();
      try { await api('POST', `/api/sessions/${this.id}/messages`, { content }); } catch (error) {
        input.value = text;
        pictures = sending;
        drawStrip();
        toast(error.message);
      }
    };
    const picker_ = this.commandPicker(input);
    input.addEventListener('keydown', (event) => {
      if (picker_.key(event)) return;
      if (event.key === 'Enter' && (event.ctrlKey || event.metaKey)) { event.preventDefault(); send(); }
    });
    input.addEventListener('paste', (event) => {
      const files = [...(event.clipboardData?.files ?? [])];
      if (files.length) { event.preventDefault(); add(files); }
    });
    this.input = input;
    const form = el('form', { class: 'composer needs-operate', onsubmit: (event) => { event.preventDefault(); send(); } },
      el('div', { class: 'composer-main' }, picker_.list, strip, input),
      picker,
      el('button', { type: 'button', class: 'attach', title: 'Attach images (or paste, or drop them here)', 'aria-label': 'Attach images', onclick: () => picker.click() }, el('span', { class: 'label' }, 'Image'), el('span', { class: 'icon', 'aria-hidden': 'true' }, '+')),
      el('button', { type: 'submit', class: 'primary send' }, 'Send'));
    form.addEventListener('dragover', (event) => {
      if ([...(event.dataTransfer?.types ?? [])].includes('Files')) { event.preventDefault(); form.classList.add('dropping'); }
    });
    form.addEventListener('dragleave', () => form.classList.remove('dropping'));
    form.addEventListener('drop', (event) => {
      form.classList.remove('dropping');
      const files = [...(event.dataTransfer?.files ?? [])];
      if (files.length) { event.preventDefault(); add(files); }
    });
    return form;
  }

  /// The slash-command picker: typing `/` at the start of the message box lists the commands
  /// and skills the session's CLI offers (`slash_commands` of the session), narrowed as one
  /// types; arrows move, Enter or Tab picks, Esc closes. A picked command is sent as the CLI
  /// takes it, as the message's text (`/compact`, `/review …`).
  commandPicker(input) {
    const list = el('div', { class: 'command-picker', role: 'listbox', id: `commands-${this.id}`, 'aria-label': 'Slash commands', hidden: true });
    input.setAttribute('aria-controls', list.id);
    input.setAttribute('aria-autocomplete', 'list');
    let commands = null; // fetched when first asked for
    let shown = [];
    let active = 0;
    const close = () => { list.hidden = true; shown = []; input.removeAttribute('aria-activedescendant'); };
    const pick = (command) => {
      input.value = `/${command.name} `;
      close();
      input.focus();
    };
    const draw = () => {
      list.replaceChildren(...shown.map((command, index) => el('div', {
        class: `command${index === active ? ' active' : ''}`, role: 'option', id: `${list.id}-${index}`, 'aria-selected': String(index === active),
        onmousedown: (event) => { event.preventDefault(); pick(command); },
      },
      el('span', { class: 'command-name' }, `/${command.name}`),
      command.argument_hint ? el('span', { class: 'command-hint muted' }, ` ${command.argument_hint}`) : '',
      command.skill ? el('span', { class: 'command-skill' }, 'skill') : '',
      command.description ? el('span', { class: 'command-description muted' }, command.description) : '')));
      list.hidden = !shown.length;
      if (shown.length) {
        input.setAttribute('aria-activedescendant', `${list.id}-${active}`);
        list.children[active]?.scrollIntoView({ block: 'nearest' });
      }
    };
    const update = async () => {
      const typed = /^\/(\S*)$/.exec(input.value);
      if (!typed) { close(); return; }
      if (!commands) {
        // Not kept while empty: the CLI says its commands once it has started.
        let fetched = [];
        try { fetched = (await api('GET', `/api/sessions/${this.id}`)).slash_commands ?? []; } catch { return; }
        if (!fetched.length) { close(); return; }
        commands = fetched;
      }
      const query = typed[1].toLowerCase();
      const starts = commands.filter((command) => command.name.toLowerCase().startsWith(query));
      const contains = commands.filter((command) => !command.name.toLowerCase().startsWith(query) && command.name.toLowerCase().includes(query));
      shown = [...starts, ...contains].slice(0, 50);
      active = 0;
      draw();
    };
    input.addEventListener('input', update);
    input.addEventListener('blur', close);
    const key = (event) => {
      if (list.hidden || !shown.length) return false;
      if (event.key === 'ArrowDown' || event.key === 'ArrowUp') {
        active = (active + (event.key === 'ArrowDown' ? 1 : shown.length - 1)) % shown.length;
        draw();
      } else if ((event.key === 'Enter' && !event.ctrlKey && !event.metaKey) || event.key === 'Tab') {
        pick(shown[active]);
      } else if (event.key === 'Escape') {
        close();
      } else return false;
      event.preventDefault();
      event.stopPropagation();
      return true;
    };
    return { list, key };
  }

  // --- The stats panel: every turn's cost (from the server, not the page), context, models.

  buildStats() {
    this.statsParts = {
      totals: el('div', { class: 'totals' }),
      chart: el('div', { class: 'cost-chart' }),
      legend: el('div', { class: 'chart-legend' },
        el('span', {}, el('span', { class: 'swatch', style: 'background:#3366cc' }), 'cost per turn'),
        el('span', {}, el('span', { class: 'swatch', style: 'background:#cc7a00' }), 'tokens per turn')),
      readout: el('div', { class: 'chart-readout muted' }),
      gauge: el('div', { class: 'gauge', role: 'meter', 'aria-label': 'Context window used' }, el('div', { class: 'gauge-fill' })),
      gaugeLabel: el('div', { class: 'gauge-label muted' }),
      models: el('tbody'),
    };
    const p = this.statsParts;
    this.stats.replaceChildren(el('h2', {}, 'Cost'), p.totals, p.chart, p.legend, p.readout,
      el('h2', {}, 'Context'), p.gauge, p.gaugeLabel,
      el('h2', {}, 'By model'), el('table', { class: 'models' }, p.models));
    this.drawContext();
  }

  async loadUsage() {
    // A hidden panel (a phone, a narrow window) asks when it shows again.
    if (this.stats.offsetParent === null) { this.usageStale = true; return; }
    this.usageStale = false;
    if (this.usageLoading) { this.usageAgain = true; return; }
    this.usageLoading = true;
    try {
      this.usage = await api('GET', `/api/sessions/${this.id}/usage`);
      if (!this.closed) this.drawUsage();
    } catch (error) {
      /* the header says whether the daemon is there */
    } finally {
      this.usageLoading = false;
      if (this.usageAgain) { this.usageAgain = false; this.loadUsage(); }
    }
  }

  drawContext() {
    const p = this.statsParts;
    if (!p) return;
    const t = this.transcript;
    const context = t.context ?? this.usage?.context_tokens ?? 0;
    const window_ = t.contextWindow ?? this.usage?.context_window ?? null;
    const fill = $('.gauge-fill', p.gauge);
    p.gauge.setAttribute('aria-valuenow', context);
    if (window_) {
      p.gauge.setAttribute('aria-valuemax', window_);
      fill.style.width = `${(Math.min(1, context / window_) * 100).toFixed(1)}%`;
      p.gaugeLabel.textContent = `${tokens(context)} of ${tokens(window_)} tokens (${Math.round((context / window_) * 100)}%)`;
    } else {
      p.gauge.removeAttribute('aria-valuemax');
      fill.style.width = '0%';
      p.gaugeLabel.textContent = `${tokens(context)} tokens; the window is known once a turn ends`;
    }
  }

  drawUsage() {
    const p = this.statsParts;
    const usage = this.usage;
    const turns = usage.turns ?? [];
    const spent = turns.reduce((sum, t) => sum + (t.input_tokens ?? 0) + (t.output_tokens ?? 0), 0);
    p.totals.textContent = usage.turn_count
      ? `${plural(usage.turn_count, 'turn')} · ${money(usage.total_cost_usd)} · ${tokens(spent)} tokens`
      : 'No finished turn yet.';
    p.models.replaceChildren(...(usage.models ?? []).map((m) => el('tr', {},
      el('td', {}, m.model), el('td', {}, `${compact(m.input_tokens)} in`), el('td', {}, `${compact(m.output_tokens)} out`), el('td', {}, money(m.cost_usd)))));
    this.drawContext();
    this.chartTurns = turns.length;
    this.chart?.destroy();
    this.chart = null;
    p.chart.replaceChildren();
    p.legend.hidden = !turns.length;
    p.readout.textContent = turns.length ? 'Point at a bar for its turn.' : '';
    if (!turns.length) return;
    const xs = turns.map((t) => t.turn);
    const data = [xs, turns.map((t) => t.cost_usd), turns.map((t) => (t.input_tokens ?? 0) + (t.output_tokens ?? 0))];
    const style = getComputedStyle(document.documentElement);
    const ink = style.getPropertyValue('--muted').trim() || '#667085';
    const grid = style.getPropertyValue('--line').trim() || '#e3e6ec';
    const width = Math.max(220, this.stats.clientWidth - 32);
    // Whole turns only: a step of 1, 2, 5, 10, … that leaves at most six labels.
    const integerSplits = (u, axis, min, max) => {
      const first = Math.max(1, Math.ceil(min));
      const last = Math.floor(max);
      const span = Math.max(1, last - first);
      const step = [1, 2, 5].flatMap((m) => [1, 10, 100, 1000, 10000].map((p10) => m * p10)).sort((a, b) => a - b).find((s) => span / s <= 5) ?? 100000;
      const ticks = [];
      for (let t = Math.ceil(first / step) * step; t <= last; t += step) ticks.push(t);
      if (!ticks.length) ticks.push(first);
      this.chartTicks = ticks;
      return ticks;
    };
    const axis = { stroke: ink, grid: { stroke: grid, width: 1 }, ticks: { stroke: grid, width: 1 }, font: '11px system-ui, sans-serif' };
    this.chart = new uPlot({
      width, height: 170, legend: { show: false }, padding: [10, 4, 0, 0],
      cursor: { y: false, points: { show: false } },
      scales: { x: { time: false, range: () => [xs[0] - 0.5, xs[xs.length - 1] + 0.5] }, $: { range: (u, min, max) => [0, max > 0 ? max * 1.1 : 1] }, tokens: { range: (u, min, max) => [0, max > 0 ? max * 1.1 : 1] } },
      axes: [
        { ...axis, splits: integerSplits, values: (u, ticks) => ticks.map(String), grid: { show: false } },
        { ...axis, scale: '$', values: (u, ticks) => ticks.map(compactMoney), size: axisSize },
        { ...axis, scale: 'tokens', side: 1, grid: { show: false }, values: (u, ticks) => ticks.map(compact), size: axisSize },
      ],
      series: [{},
        { label: 'cost', scale: '$', stroke: '#3366cc', fill: 'rgba(51,102,204,.35)', paths: uPlot.paths.bars({ size: [0.6, 48], align: 0 }), points: { show: false } },
        { label: 'tokens', scale: 'tokens', stroke: '#cc7a00', width: 2, points: { show: turns.length < 40, size: 5 } }],
      hooks: {
        setCursor: [(u) => {
          const i = u.cursor.idx;
          if (i == null) { p.readout.textContent = 'Point at a bar for its turn.'; return; }
          const t = turns[i];
          p.readout.textContent = `Turn ${t.turn}: ${money(t.cost_usd)} · ${tokens(t.input_tokens)} in · ${tokens(t.output_tokens)} out · ${(t.duration_ms / 1000).toFixed(1)} s`;
        }],
      },
    }, data, p.chart);
  }
}

// ---------------------------------------------------------------------------------------------
// The new-session form and the routes

/// The directories sessions ran in, most recent first (the last one used leads).
function recentDirectories() {
  const seen = [localStorage.getItem('switchboard.cwd'), ...[...sessions.values()]
    .sort((a, b) => (b.updated_ms ?? 0) - (a.updated_ms ?? 0)).map((s) => s.cwd)];
  return [...new Set(seen.filter(Boolean))].slice(0, 8);
}

function newSessionForm() {
  const form = $('#new-session-form').content.firstElementChild.cloneNode(true);
  const cwd = form.elements.cwd;
  const recent = recentDirectories();
  if (recent[0] && !cwd.value) cwd.value = recent[0];
  $('.recent', form).replaceChildren(...(recent.length ? [el('span', { class: 'muted' }, 'Recent:')] : []),
    ...recent.map((path) => el('button', { type: 'button', title: path, onclick: () => { cwd.value = path; cwd.focus(); } }, shortPath(path))));
  // Completion: recent directories, then what the daemon finds under what is typed.
  const options = $('#cwd-options');
  let timer = null;
  let asked = '';
  const complete = async () => {
    const typed = cwd.value;
    const mine = recent.filter((path) => path.startsWith(typed));
    let found = [];
    if (typed.startsWith('/') && typed !== asked) {
      asked = typed;
      try { found = await api('GET', `/api/directories?prefix=${encodeURIComponent(typed)}`); } catch (_) { found = []; }
      if (cwd.value !== typed) return;
    }
    options.replaceChildren(...[...new Set([...mine, ...found])].map((path) => el('option', { value: path })));
  };
  cwd.addEventListener('input', () => { clearTimeout(timer); timer = setTimeout(complete, 120); });
  complete();
  // Several daemons on one bus: which node runs it (each with its Claude Code and load).
  api('GET', '/api/nodes').then((nodes) => {
    if (nodes.length < 2) return;
    const label = (node) => [node.node, node.cli_version && `Claude Code ${node.cli_version}`,
      `${node.running}/${node.capacity} running`, node.lost && 'lost', node.this && 'this node'].filter(Boolean).join(' · ');
    form.elements.node.append(...nodes.map((node) => el('option', { value: node.node, disabled: node.lost }, label(node))));
    $('.node-choice', form).hidden = false;
  }).catch(() => {});
  const model = form.elements.model;
  model.addEventListener('change', () => {
    $('.model-other', form).hidden = model.value !== '__other';
    if (model.value === '__other') form.elements.model_other.focus();
  });
  form.addEventListener('submit', async (event) => {
    event.preventDefault();
    const data = new FormData(form);
    const body = { cwd: data.get('cwd').trim() };
    for (const key of ['prompt', 'model', 'permission_mode', 'policy', 'resume', 'resume_at', 'node']) {
      const value = (data.get(key) ?? '').trim();
      if (value) body[key] = value;
    }
    if (body.model === '__other') body.model = (data.get('model_other') ?? '').trim() || undefined;
    if (data.get('fork')) body.fork = true;
    if (data.get('worktree')) body.worktree = true;
    const mcp = (data.get('mcp_config') ?? '').trim();
    if (mcp) body.mcp_config = [mcp];
    const error = $('.form-error', form);
    error.hidden = true;
    try {
      const session = await api('POST', '/api/sessions', body);
      localStorage.setItem('switchboard.cwd', body.cwd);
      sessions.set(session.id, session);
      location.hash = `#/s/${session.id}`;
    } catch (failure) {
      error.textContent = failure.message;
      error.hidden = false;
    }
  });
  return form;
}

function route() {
  view?.close();
  view = null;
  const hash = location.hash;
  const match = hash.match(/^#\/s\/([^/]+)$/);
  document.body.classList.toggle('in-session', Boolean(match));
  document.body.classList.toggle('in-form', hash === '#/new');
  if (match) {
    view = new SessionView(match[1]);
    view.open().catch((error) => toast(error.message));
  } else if (hash === '#/new') {
    $('#main').replaceChildren(newSessionForm());
    $('#main [name=cwd]').focus();
  } else {
    renderOverview();
  }
  renderList();
}

/// The home page: what needs a person now (the list of every session is the sidebar).
function renderOverview() {
  if (view || !['', '#', '#/'].includes(location.hash)) return;
  const items = [...sessions.values()].sort((a, b) => (b.updated_ms ?? 0) - (a.updated_ms ?? 0));
  const waiting = items.filter((s) => stateLabel(s)[0] === 'waiting');
  const working = items.filter((s) => ['working', 'starting', 'compacting'].includes(stateLabel(s)[0]));
  const total = items.reduce((sum, s) => sum + (s.cost_usd ?? 0), 0);
  const tile = (value, label, extra = '') => el('div', { class: `tile ${extra}` }, el('div', { class: 'value' }, value), el('div', { class: 'label' }, label));
  const card = (session, what) => {
    const [state, label] = stateLabel(session);
    return el('a', { class: `triage state-${state}${state === 'waiting' ? ' waiting' : ''}`, href: `#/s/${session.id}` },
      stateIcon(state), el('span', { class: 'title' }, titleOf(session)), el('span', { class: `badge state-${state}` }, label),
      el('span', { class: 'what' }, what));
  };
  const waitingFor = (session) => {
    const request = session.pending_permissions?.find((p) => p.tool_name);
    if (!request) return `${shortPath(session.cwd)} · ${plural(session.pending_permissions?.length ?? 1, 'request')} waiting`;
    const [verb, target] = wants(request.tool_name, request.input, session.cwd);
    return `Claude wants to ${verb}${target ? ` ${target}` : ''}`;
  };
  $('#main').replaceChildren(el('div', { class: 'overview' },
    el('div', { class: 'overview-head' }, el('h1', {}, 'Sessions'), el('a', { href: '#/new', class: 'button primary' }, 'New session')),
    el('div', { class: 'tiles' },
      tile(waiting.length, 'waiting for you', waiting.length ? 'waiting' : ''), tile(working.length, 'working'),
      tile(items.filter((s) => s.running !== false && !['exited', 'crashed'].includes(s.state)).length, 'running'),
      tile(money(total), 'spent in all')),
    el('h2', {}, 'Waiting for you'),
    waiting.length ? el('div', { class: 'cards' }, waiting.map((s) => card(s, waitingFor(s))))
      : el('p', { class: 'muted' }, 'Nothing waits for you.'),
    el('h2', {}, 'Working now'),
    working.length ? el('div', { class: 'cards' }, working.map((s) => card(s, `${shortPath(s.cwd)} · ${s.model ?? ''} · ${money(s.cost_usd)}`)))
      : el('p', { class: 'muted' }, items.length ? 'No session is working. Pick one on the left, or start a new one.' : 'No sessions yet. Start one to run Claude Code here.')));
}

// Keyboard: Ctrl+Enter sends (in the composer), Esc interrupts, a / d approve / deny the oldest
// pending request, n opens the new-session form, / searches the sessions.
document.addEventListener('keydown', (event) => {
  const typing = ['INPUT', 'TEXTAREA', 'SELECT'].includes(document.activeElement?.tagName);
  if (event.key === 'Escape' && view && !typing) {
    event.preventDefault();
    if (view.head && can('operate') && !view.head.interrupt.disabled && !view.head.interrupt.hidden) view.interrupt();
    return;
  }
  if (typing || event.ctrlKey || event.metaKey || event.altKey) return;
  if (event.key === 'n' && can('operate')) { location.hash = '#/new'; event.preventDefault(); }
  if (event.key === '/') { $('#session-search').focus(); event.preventDefault(); }
  const box = view?.transcript.pending()[0]?.box;
  if (!box || !can('approve')) return;
  if (event.key === 'a') $('.allow', box)?.click();
  if (event.key === 'd') $('.deny', box)?.click();
});

document.addEventListener('click', () => {
  if ('Notification' in window && Notification.permission === 'default') Notification.requestPermission().catch(() => {});
}, { once: true });

// For the browser tests: the streaming renderer, to compare with a whole rendering.
window.__markdown = { StreamingMarkdown, markdown };

$('#session-search').addEventListener('input', renderList);
window.addEventListener('resize', () => { if (view?.usageStale) view.loadUsage(); });
// The chart's colours follow the system's scheme.
matchMedia('(prefers-color-scheme: dark)').addEventListener('change', () => { if (view?.usage) view.drawUsage(); });
$('#show-archived').addEventListener('change', renderList);
window.addEventListener('hashchange', route);
setInterval(renderList, 30000); // "3 min ago" moves on
// What the token may do first: the page draws only what it allows, and knows its decisions.
loadScope().finally(() => { setupPush(); loadSessions().catch(() => {}).finally(route); });
watchDashboard();
