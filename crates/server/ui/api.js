// The daemon's API: requests and sockets with the sign-in cookie (a 401 goes back to sign-in),
// errors as toasts, the "daemon unreachable" banner, and what the signed-in token may do.
import { $, el } from './dom.js';

class ApiError extends Error {}

export async function api(method, path, body) {
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

export function socketUrl(path) {
  return `${location.protocol === 'https:' ? 'wss' : 'ws'}://${location.host}${path}`;
}

export function toast(message, kind = 'error') {
  const note = el('div', { class: `toast ${kind}`, role: 'status' }, message);
  document.body.append(note);
  setTimeout(() => note.remove(), 6000);
}

// The "daemon unreachable" banner.
export const connection = {
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
export let scope = 'admin';
let myName = null;
/// The daemon's home folder (paths under it are shown as `~/…`).
export let home = null;

// Whether a decision was this page's: made in the web UI with the token it is signed in with.
export function mine(who) {
  if (who === 'browser') return true; // logs from before tokens had names
  if (myName === null) return false;
  // Without auth the page presents no token: its requests are `local`'s.
  return who === `browser, token ${myName} (web UI)` || (myName === 'local' && who === 'browser, local (api)');
}

/// Whether `name` is the token this page is signed in with.
export const isMe = (name) => myName !== null && name === myName;

export function can(needed) {
  return SCOPES.indexOf(scope) >= SCOPES.indexOf(needed);
}

export async function loadScope() {
  try {
    const me = await api('GET', '/api/me');
    scope = SCOPES.includes(me.scope) ? me.scope : 'read';
    myName = me.name;
    home = typeof me.home === 'string' && me.home.startsWith('/') ? me.home.replace(/\/+$/, '') : null;
    document.body.dataset.scope = scope;
    $('#whoami').textContent = scope === 'admin' ? '' : `${me.name} · ${scope}`;
    $('#whoami').title = scope === 'admin' ? '' : `Signed in with the token ${me.name}, which may ${scope === 'read' ? 'watch' : scope === 'approve' ? 'watch and answer requests' : 'start and steer sessions'}`;
  } catch (_) { /* signed out, or unreachable: the banner says so */ }
}
