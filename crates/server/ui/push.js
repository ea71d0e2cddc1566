// Web Push: this device hears of requests, questions and finished turns with no tab open. The
// service worker (/ui/sw.js) shows what the daemon pushes; the subscription is the daemon's
// to keep (POST /api/push/subscriptions), its id this browser's (to test it or turn it off).
import { $, el, icon } from './dom.js';
import { api, can, toast } from './api.js';

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

/// Said when the browser will not let this site notify: what to do about it, in its words.
const BLOCKED = 'This browser blocks notifications from this site. To allow them, open the site\'s settings (the icon left of the address), set Notifications to Allow, then press the bell again.';

async function pushOn() {
  if (await Notification.requestPermission() !== 'granted') throw new Error(BLOCKED);
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

/// The bell: on (this device is notified), off, or blocked by the browser; it says which.
function renderPush() {
  const on = Boolean(pushing.id());
  const blocked = !on && Notification.permission === 'denied';
  const toggle = $('#push-toggle');
  toggle.classList.toggle('on', on);
  toggle.classList.toggle('blocked', blocked);
  toggle.setAttribute('aria-pressed', String(on));
  const words = on ? 'Notifications on for this device: press to turn them off'
    : blocked ? 'Notifications are blocked by this browser for this site: press to see how to allow them'
      : 'Notify this device of requests, questions and finished sessions, also with no tab open';
  toggle.title = words;
  toggle.setAttribute('aria-label', words);
  toggle.replaceChildren(icon(on ? 'bell' : 'bellOff'), el('span', { class: 'label' }, on ? 'On' : blocked ? 'Blocked' : 'Off'));
  $('#push-state').textContent = on ? 'This device is notified.' : blocked ? 'This browser blocks notifications here.' : '';
  $('#push-test').hidden = !on;
}

export function setupPush() {
  if (!pushing.supported() || !can('approve')) return;
  $('#push-row').hidden = false;
  $('#push-toggle').hidden = false;
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
    if (!pushing.id() && Notification.permission === 'denied') { toast(BLOCKED); return; }
    button.disabled = true;
    try {
      if (pushing.id()) {
        await pushOff();
      } else {
        await pushOn();
        toast('This device is notified, also with no tab open.', 'ok');
      }
    } catch (error) {
      // The browser's own words ("Registration failed - permission denied") say nothing a
      // person can act on.
      const denied = error.message === BLOCKED || Notification.permission === 'denied' || /permission denied|not allowed/i.test(error.message);
      toast(denied ? BLOCKED : `Notifications could not be turned on: ${error.message}`);
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
