// Switchboard's web UI. Plain ES modules, no build step; it uses only the daemon's public API
// (docs/api.md) with the cookie the sign-in URL set, and draws the daemon's projection of each
// session (`…/view`, `…/usage`): it reads no protocol line itself.
// This module holds the routes (`#/`, `#/new`, `#/s/{id}` (`?at=SEQ`: at that event), `#/schedules`,
// `#/policy`, `#/search?q=…`), the new-session form
// and the overview, and starts the page;
// every other part is a module of its own beside it.
import { $, el } from './dom.js';
import { markdown, StreamingMarkdown } from './markdown.js';
import { shortPath } from './words.js';
import { api, can, loadScope, mine, toast } from './api.js';
import { showing } from './showing.js';
import { setupPush } from './push.js';
import { setupPair } from './pair.js';
import { loadSessions, renderList, renderOverview, sessions, watchDashboard } from './list.js';
import { SessionView } from './session.js';
import { renderSchedules } from './schedules.js';
import { renderPolicy } from './policy.js';
import { renderSearch } from './search.js';

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
  showing.view?.close();
  showing.view = null;
  const hash = location.hash;
  const match = hash.match(/^#\/s\/([^/?]+)(?:\?at=(\d+))?$/);
  const searching = hash === '#/search' || hash.startsWith('#/search?');
  document.body.classList.toggle('in-session', Boolean(match));
  document.body.classList.toggle('in-form', hash === '#/new' || hash === '#/schedules' || hash === '#/policy' || searching);
  if (match) {
    showing.view = new SessionView(match[1], match[2] ? Number(match[2]) : null);
    showing.view.open().catch((error) => toast(error.message));
  } else if (hash === '#/new') {
    $('#main').replaceChildren(newSessionForm());
    $('#main [name=cwd]').focus();
  } else if (hash === '#/schedules') {
    renderSchedules();
  } else if (hash === '#/policy') {
    renderPolicy();
  } else if (searching) {
    renderSearch();
  } else {
    renderOverview();
  }
  renderList();
}


// Keyboard: Ctrl+Enter sends (in the composer), Esc interrupts, a / d approve / deny the oldest
// pending request, n opens the new-session form, / searches the sessions.
document.addEventListener('keydown', (event) => {
  const typing = ['INPUT', 'TEXTAREA', 'SELECT'].includes(document.activeElement?.tagName);
  if (event.key === 'Escape' && showing.view && !typing) {
    event.preventDefault();
    if (showing.view.head && can('operate') && !showing.view.head.interrupt.disabled && !showing.view.head.interrupt.hidden) showing.view.interrupt();
    return;
  }
  if (typing || event.ctrlKey || event.metaKey || event.altKey) return;
  if (event.key === 'n' && can('operate')) { location.hash = '#/new'; event.preventDefault(); }
  if (event.key === '/') { $('#session-search').focus(); event.preventDefault(); }
  const box = showing.view?.transcript.pending()[0]?.box;
  if (!box || !can('approve')) return;
  // Claude Code's default_to_no: approve is never one stray key away.
  if (event.key === 'a' && !box.querySelector('[data-default-to-no]') && !box.closest('[data-default-to-no]')) $('.allow', box)?.click();
  if (event.key === 'd') $('.deny', box)?.click();
});

document.addEventListener('click', () => {
  if ('Notification' in window && Notification.permission === 'default') Notification.requestPermission().catch(() => {});
}, { once: true });

// For the browser tests: the streaming renderer, to compare with a whole rendering.
window.__markdown = { StreamingMarkdown, markdown };

$('#session-search').addEventListener('input', renderList);
window.addEventListener('resize', () => { if (showing.view?.usageStale) showing.view.loadUsage(); });
// The chart's colours follow the system's scheme.
matchMedia('(prefers-color-scheme: dark)').addEventListener('change', () => { if (showing.view?.usage) showing.view.drawUsage(); });
$('#show-archived').addEventListener('change', renderList);
window.addEventListener('hashchange', route);
setInterval(renderList, 30000); // "3 min ago" moves on
// What the token may do first: the page draws only what it allows, and knows its decisions.
loadScope().finally(() => { setupPush(); setupPair(); loadSessions().catch(() => {}).finally(route); });
watchDashboard();
