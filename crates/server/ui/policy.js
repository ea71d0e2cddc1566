// The dry-run page (`#/policy`): a candidate policy tried on the stored sessions through
// `POST /api/policy/test`, its NDJSON read as it streams (a progress bar while the logs are
// read), then the report: the change at a glance, and per rule what it would have decided
// beside what really happened, with the calls to look at, each a link to its session.
import { $, el, icon } from './dom.js';
import { connection, toast } from './api.js';

const OUTCOMES = {
  ran_unasked: 'ran unasked',
  person_allowed: 'a person allowed',
  person_refused: 'a person denied, or nobody answered',
  policy_denied: 'a policy rule denied',
  undecided: 'no decision in the log',
};

const EXAMPLE = `[permissions]
allow = ["Read", "Bash(cargo test:*)", "Bash(git status:*)"]
deny = ["Read(.env)", "Bash(rm:*)"]
default = "ask"

[[permissions.when]]
origin = ["agent", "trigger"]
ask = ["Bash"]
`;

/// Who decided a call, in words.
function actualWords(actual) {
  switch (actual.kind) {
    case 'policy': return `${actual.behavior === 'allow' ? 'allowed' : 'denied'} by ${actual.rule ? `rule ${actual.rule}` : 'the default'}`;
    case 'person': return `${actual.behavior === 'allow' ? 'allowed' : 'denied'} by ${actual.who}`;
    case 'terminal': return `${actual.behavior === 'allow' ? 'allowed' : 'denied'} at its terminal`;
    case 'timeout': return 'nobody answered in time';
    case 'withdrawn': return 'the request was withdrawn';
    case 'cli': return 'Claude Code ran it on its own';
    default: return 'no decision in the log';
  }
}

function headline(h) {
  const count = (n, what, kind) => el('strong', { class: `trial-count ${kind}` }, `${n} ${what}`);
  return el('p', { class: 'trial-headline' },
    `Over ${h.calls} calls in ${h.sessions} sessions, this policy would have `,
    count(h.would_allow, 'allowed unasked', 'allow'), ' that were not, ',
    count(h.would_deny_ran, 'denied', 'deny'), ' that ran, and ',
    count(h.would_ask_ran_unasked, 'asked', 'ask'), ' that ran unasked; ',
    `${h.same} as they were.`);
}

function ruleCard(rule) {
  const total = Object.values(rule.outcomes).reduce((sum, cell) => sum + cell.count, 0);
  const behavior = rule.behavior ?? 'mixed';
  return el('div', { class: 'trial-rule' },
    el('div', { class: 'trial-rule-head' },
      el('span', { class: `badge behavior ${behavior}` }, behavior),
      el('code', { class: 'trial-rule-name' }, rule.rule),
      el('span', { class: 'muted' }, `${total} call${total === 1 ? '' : 's'}`)),
    ...Object.entries(rule.outcomes).map(([outcome, cell]) => el('details', { class: `trial-outcome ${outcome}` },
      el('summary', {}, el('span', { class: 'trial-n' }, String(cell.count)), ' ', OUTCOMES[outcome] ?? outcome),
      el('ul', { class: 'trial-calls' }, cell.calls.map((call) => el('li', {},
        el('a', { href: `#/s/${call.session}`, title: `Session ${call.session}, event ${call.seq}` },
          el('span', { class: 'tool' }, call.tool), ' ', el('code', {}, call.summary)),
        el('span', { class: 'muted' }, ` · ${actualWords(call.actual)}`)))),
      cell.count > cell.calls.length ? el('p', { class: 'muted' }, `and ${cell.count - cell.calls.length} more`) : null)));
}

/// Posts the dry run and reads its lines as they come; `onProgress` for each progress line.
async function run(body, onProgress) {
  const response = await fetch('/api/policy/test', {
    method: 'POST', headers: { 'content-type': 'application/json' }, body: JSON.stringify(body), credentials: 'same-origin',
  }).catch(() => { connection.down('The daemon is unreachable.'); throw new Error('the daemon is unreachable'); });
  if (response.status === 401) { location.href = '/'; throw new Error('signed out'); }
  if (!response.ok) {
    const answer = await response.json().catch(() => null);
    throw new Error(answer?.error?.message ?? `${response.status}`);
  }
  const reader = response.body.getReader();
  const decoder = new TextDecoder();
  let pending = '';
  for (;;) {
    const { value, done } = await reader.read();
    if (done) break;
    pending += decoder.decode(value, { stream: true });
    let end;
    while ((end = pending.indexOf('\n')) >= 0) {
      const line = JSON.parse(pending.slice(0, end));
      pending = pending.slice(end + 1);
      if (line.progress) onProgress(line.progress);
      if (line.error) throw new Error(line.error.message);
      if (line.report) return line.report;
    }
  }
  throw new Error('the daemon ended the answer without a report');
}

/// Draws the page into `#main`.
export function renderPolicy() {
  const page = el('section', { class: 'overview policy-trial', 'aria-label': 'Try a policy' });
  const result = el('div', { class: 'trial-result', 'aria-live': 'polite' });
  const bar = el('progress', { class: 'trial-progress', max: '1', value: '0', hidden: true });
  const said = el('p', { class: 'muted trial-status' });
  const form = el('form', { class: 'trial-form' },
    el('label', {}, 'Policy (TOML) ', el('textarea', { name: 'policy', rows: '9', spellcheck: 'false', required: true }, EXAMPLE)),
    el('div', { class: 'trial-filters' },
      el('label', {}, 'Sessions ', el('input', { name: 'sessions', placeholder: 'all (or cwd=…, token=…, schedule=…, ids)' })),
      el('label', {}, 'Since ', el('input', { name: 'since', placeholder: 'ever (or 7d, 2026-11-01T00:00:00Z)' }))),
    el('p', { class: 'form-error', hidden: true }),
    el('button', { type: 'submit', class: 'primary' }, icon('check'), ' Try it'));
  form.addEventListener('submit', async (event) => {
    event.preventDefault();
    const data = new FormData(form);
    const body = { policy: data.get('policy') };
    if (data.get('sessions').trim()) body.sessions = data.get('sessions').trim();
    if (data.get('since').trim()) body.since = data.get('since').trim();
    const error = $('.form-error', form);
    const button = $('button[type=submit]', form);
    error.hidden = true;
    button.disabled = true;
    bar.hidden = false;
    bar.value = 0;
    said.textContent = 'Reading the sessions…';
    result.replaceChildren();
    try {
      const report = await run(body, (progress) => {
        bar.max = Math.max(progress.sessions, 1);
        bar.value = progress.sessions_read;
        said.textContent = `Read ${progress.sessions_read} of ${progress.sessions} sessions, ${progress.headline.calls} calls`;
      });
      said.textContent = '';
      result.replaceChildren(headline(report.headline),
        report.rules.length ? el('div', { class: 'cards trial-rules' }, report.rules.map(ruleCard))
          : el('p', { class: 'muted' }, 'No tool calls in the sessions picked.'));
    } catch (failure) {
      error.textContent = failure.message;
      error.hidden = false;
      said.textContent = '';
      toast(failure.message);
    } finally {
      button.disabled = false;
      bar.hidden = true;
    }
  });
  page.append(
    el('div', { class: 'overview-head' }, el('h1', {}, el('a', { href: '#/', class: 'back', 'aria-label': 'All sessions' }, '←'), ' Try a policy')),
    el('p', { class: 'muted' }, 'Replays every tool call of the stored sessions through this policy and shows what it would have done beside what really happened. Nothing runs, nothing is written.'),
    form, bar, said, result);
  $('#main').replaceChildren(page);
}
