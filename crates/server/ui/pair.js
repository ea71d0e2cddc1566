// Pairing a phone (POST /api/pair): a one-time code's link as a QR code, which the phone's
// camera opens to sign in as a new approve token. Only an admin token may make one.
import { $, el } from './dom.js';
import { api, can, toast } from './api.js';

function showCode(made) {
  const dialog = el('dialog', { class: 'pair-dialog', 'aria-label': 'Pair a phone' });
  // The daemon's own drawing of the link (an SVG of squares, nothing else).
  const picture = el('div', { class: 'pair-qr', role: 'img', 'aria-label': `QR code of ${made.url}` });
  picture.innerHTML = made.qr_svg;
  const minutes = Math.max(1, Math.round((made.expires_ms - Date.now()) / 60000));
  dialog.append(
    el('h2', {}, 'Pair a phone'),
    picture,
    el('p', {}, `Scan this with the phone's camera and tap "Sign in as ${made.name}". It then answers requests (an approve token), and can turn on notifications.`),
    el('p', { class: 'muted pair-link' }, made.url),
    el('p', { class: 'muted' }, `The code works once, for ${minutes} minute${minutes === 1 ? '' : 's'}.`),
    el('form', { method: 'dialog' }, el('button', { type: 'submit' }, 'Done')),
  );
  dialog.addEventListener('close', () => dialog.remove());
  document.body.append(dialog);
  dialog.showModal();
}

export function setupPair() {
  const button = $('#pair-open');
  if (!button || !can('admin')) return;
  button.addEventListener('click', async () => {
    button.disabled = true;
    try {
      const suffix = Array.from(crypto.getRandomValues(new Uint8Array(3)), (b) => b.toString(16).padStart(2, '0')).join('');
      showCode(await api('POST', '/api/pair', { name: `phone-${suffix}` }));
    } catch (error) {
      toast(`No code: ${error.message}`);
    } finally {
      button.disabled = false;
    }
  });
}
