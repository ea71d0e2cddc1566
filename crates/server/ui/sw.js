// Switchboard's service worker: shows the daemon's Web Push notices while no tab is open.
// Each push is one notice (JSON: event, title, text, session, link, one_tap), already cut to
// fit by the daemon. A request whose whole call the notice shows (one_tap) gets Approve and
// Deny buttons, which post its one-tap link's form; anything else opens the link's page.

const REQUESTS = ['permission_requested', 'question', 'request_expiring'];

self.addEventListener('install', () => self.skipWaiting());
self.addEventListener('activate', (event) => event.waitUntil(self.clients.claim()));

self.addEventListener('push', (event) => {
  let notice;
  try {
    notice = event.data ? event.data.json() : {};
  } catch {
    notice = { title: 'Switchboard', text: event.data ? event.data.text() : '' };
  }
  event.waitUntil(show(notice));
});

function show(notice) {
  const request = REQUESTS.includes(notice.event) && typeof notice.link === 'string';
  // A request's warning before it expires replaces the request's own notification.
  const tag = String(notice.id || notice.event || 'switchboard').replace(/:expiring$/, '');
  return self.registration.showNotification(String(notice.title || 'Switchboard'), {
    body: String(notice.text || ''),
    tag,
    renotify: notice.event === 'request_expiring',
    requireInteraction: request,
    actions: request && notice.one_tap
      ? [{ action: 'approve', title: 'Approve' }, { action: 'deny', title: 'Deny' }]
      : [],
    data: { link: request ? notice.link : null, session: notice.session || null },
  });
}

// The browser replaced its subscription (its push service renewed it): the daemon gets the new
// one, with the page's cookie, as the page would hand it over. The old one ends when its push
// service says it is gone.
self.addEventListener('pushsubscriptionchange', (event) => {
  event.waitUntil((async () => {
    const subscription = event.newSubscription
      ?? await self.registration.pushManager.subscribe(event.oldSubscription?.options ?? { userVisibleOnly: true });
    await fetch('/api/push/subscriptions', {
      method: 'POST',
      credentials: 'same-origin',
      headers: { 'content-type': 'application/json' },
      body: JSON.stringify({ ...subscription.toJSON(), name: 'renewed by the browser' }),
    });
  })());
});

self.addEventListener('notificationclick', (event) => {
  const { link, session } = event.notification.data || {};
  event.notification.close();
  if (link && (event.action === 'approve' || event.action === 'deny')) {
    event.waitUntil(answer(link, event.action === 'approve' ? 'allow' : 'deny'));
    return;
  }
  event.waitUntil(open(link || (session ? `/#/s/${encodeURIComponent(session)}` : '/')));
});

// Answers through the link (the link is the credential; no cookie goes with it), then says
// what came of it.
async function answer(link, decision) {
  const body = new URLSearchParams({ decision });
  if (decision === 'deny') body.set('message', 'Denied from a notification.');
  let response;
  try {
    response = await fetch(link, { method: 'POST', body, credentials: 'omit', redirect: 'error' });
  } catch {
    return open(link);
  }
  if (response.ok) {
    return self.registration.showNotification(decision === 'allow' ? 'Approved' : 'Denied', {
      body: decision === 'allow' ? 'Claude goes on.' : 'Claude is told.', tag: 'switchboard-answer',
    });
  }
  // Answered already, expired, or not approvable from a notification: its page says which.
  return open(link);
}

async function open(url) {
  const target = new URL(url, self.location.origin).href;
  const windows = await self.clients.matchAll({ type: 'window', includeUncontrolled: true });
  const same = windows.find((client) => client.url === target);
  if (same) return same.focus();
  return self.clients.openWindow(target);
}
