// What Claude Code has in force in a session, asked of its CLI when a person looks (the ⋯
// menu's "What is in force"): the context window by what fills it, the permission rules of
// its own settings, and the hooks configured. An older CLI answers none of these: the daemon
// says which version does.
import { el } from './dom.js';
import { api } from './api.js';

const count = (n) => Number(n ?? 0).toLocaleString('en');

export const inForceMethods = {
  showInForce() {
    const sheet = el('dialog', { class: 'sheet in-force', 'aria-label': 'What is in force' });
    const done = () => sheet.close();
    const part = (title, question, draw) => {
      const body = el('div', { class: 'in-force-body muted' }, 'Asking Claude Code…');
      api('GET', `/api/sessions/${this.id}/cli/${question}`)
        .then((answer) => body.replaceChildren(...draw(answer ?? {})))
        .catch((error) => body.replaceChildren(error.message));
      return el('section', { class: `in-force-${question}` }, el('h3', {}, title), body);
    };
    sheet.append(el('h2', {}, 'What is in force'),
      part('Context window', 'context', drawContext),
      part('Claude Code\'s permission rules', 'permission-rules', drawRules),
      part('Hooks', 'hooks', drawHooks),
      el('p', { class: 'muted' }, 'From the session\'s Claude Code, now; Switchboard\'s own policy is applied as well.'),
      el('div', { class: 'sheet-actions' }, el('button', { type: 'button', class: 'primary', onclick: done }, 'Done')));
    sheet.addEventListener('close', () => sheet.remove());
    sheet.addEventListener('click', (event) => { if (event.target === sheet) done(); });
    document.body.append(sheet);
    sheet.showModal();
  },
};

function drawContext(answer) {
  const rows = (answer.categories ?? []).filter((row) => row.kind !== 'free');
  const percent = answer.percentage ?? (answer.maxTokens ? Math.round((100 * answer.totalTokens) / answer.maxTokens) : 0);
  return [
    el('div', { class: 'in-force-total' }, `${count(answer.totalTokens)} of ${count(answer.maxTokens)} tokens used (${percent}%)`),
    el('table', { class: 'in-force-table' }, ...rows.map((row) => el('tr', {},
      el('td', {}, row.name ?? row.id ?? '?', row.kind === 'deferred' ? ' (loaded when used)' : row.kind === 'buffer' ? ' (kept free)' : ''),
      el('td', { class: 'number' }, count(row.tokens))))),
  ];
}

function drawRules(answer) {
  const rules = answer.state?.rules ?? [];
  if (!rules.length) return ['None: Claude Code asks for everything its mode does not allow.'];
  return [el('table', { class: 'in-force-table' }, ...rules.map((rule) => el('tr', {},
    el('td', { class: `behavior ${rule.behavior ?? ''}` }, rule.behavior ?? '?'),
    el('td', {}, el('code', {}, rule.rule ?? '')),
    el('td', { class: 'muted' }, rule.source ?? ''))))];
}

function drawHooks(answer) {
  const hooks = answer.hooks ?? [];
  if (!hooks.length) return ['None configured.'];
  return [el('table', { class: 'in-force-table' }, ...hooks.map((hook) => el('tr', {},
    el('td', {}, hook.event ?? '?', hook.matcher ? ` (${hook.matcher})` : ''),
    el('td', {}, el('code', {}, hook.displayText ?? hook.commandText ?? hook.type ?? '')),
    el('td', { class: 'muted' }, hook.sourceLabel ?? hook.source ?? ''))))];
}
