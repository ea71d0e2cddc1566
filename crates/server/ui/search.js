// The Search page (`#/search?q=…`): every session's tool calls, decisions, prompts, answers
// and turns found by a query of the search language (docs/search.md), newest first, a page at
// a time; a hit opens its session at its event (`#/s/{id}?at={seq}`). A query with `group:`
// shows its groups and their cost instead. Read from `GET /api/search`; the query is the
// page's address, so a search can be kept, shared and gone back to.
import { $, el, icon, toolIcon } from './dom.js';
import { money, shortPath } from './words.js';
import { api } from './api.js';

const EXAMPLES = [
  ['file:deploy.sh since:7d', 'which session touched deploy.sh last week'],
  ['decision:deny schedule:nightly', "the nightly schedule's denied calls"],
  ['command:rm worktree:yes', 'what ran rm in a worktree'],
  ['kind:turn since:30d group:project', 'what the agents cost per project'],
];

const KINDS = { tool_call: 'call', decision: 'decision', prompt: 'prompt', answer: 'answer', turn: 'turn' };

/// The query in the page's address.
export const queryOf = (hash) => new URLSearchParams(hash.split('?')[1] ?? '').get('q') ?? '';

function when(ms) {
  const date = new Date(ms);
  const today = new Date().toDateString() === date.toDateString();
  return today ? date.toLocaleTimeString() : date.toLocaleString();
}

/// What a hit did, in a line.
function what(hit) {
  switch (hit.kind) {
    case 'tool_call':
      return [toolIcon(hit.tool), el('strong', {}, hit.tool ?? '?'), ' ',
        el('code', {}, hit.command ?? hit.paths?.[0]?.path ?? hit.text)];
    case 'decision':
      return [el('span', { class: `badge decision-${hit.decision}` }, { deny: 'denied', allow: 'allowed', ask: 'asked' }[hit.decision] ?? hit.decision), ' ',
        el('strong', {}, hit.tool ?? '?'), hit.decided_by ? ` by ${hit.decided_by}` : '', hit.who ? ` (${hit.who})` : '',
        hit.command ? [' · ', el('code', {}, hit.command)] : '',
        hit.text ? el('span', { class: 'muted' }, ` · ${hit.text}`) : ''];
    case 'turn':
      return [el('strong', {}, 'turn ended'), ' ', money(hit.cost_usd), hit.text ? el('span', { class: 'muted' }, ` · ${hit.text}`) : ''];
    default:
      return [el('span', { class: 'text' }, hit.text)];
  }
}

function hitRow(hit) {
  const origin = hit.run ?? hit.origin;
  return el('li', { class: `hit kind-${hit.kind}`, dataset: { session: hit.session_id, seq: String(hit.seq) } },
    el('a', { href: `#/s/${hit.session_id}?at=${hit.seq}`, title: `Open the session at event ${hit.seq}` },
      el('span', { class: 'hit-head' },
        el('span', { class: 'badge kind' }, KINDS[hit.kind] ?? hit.kind),
        el('span', { class: 'title' }, hit.title ?? hit.session_id.slice(0, 8)),
        el('time', { datetime: new Date(hit.ts_ms).toISOString(), class: 'muted' }, when(hit.ts_ms))),
      el('span', { class: 'hit-what' }, what(hit)),
      el('span', { class: 'hit-where muted' },
        shortPath(hit.project), hit.worktree ? ' · worktree' : '', origin ? ` · ${origin}` : '',
        hit.model ? ` · ${hit.model}` : '', hit.node ? ` · node ${hit.node}` : '',
        hit.paths?.length ? ` · ${hit.paths.filter((p) => p.wrote).length ? 'wrote' : 'touched'} ${hit.paths.map((p) => shortPath(p.path)).slice(0, 2).join(', ')}` : '')));
}

function groupTable(groups) {
  return el('table', { class: 'groups' },
    el('thead', {}, el('tr', {}, el('th', {}, 'Key'), el('th', { class: 'num' }, 'Entries'), el('th', { class: 'num' }, 'Cost'))),
    el('tbody', {}, groups.map((group) => el('tr', {},
      el('td', {}, group.key ?? el('span', { class: 'muted' }, '(none)')),
      el('td', { class: 'num' }, String(group.entries)),
      el('td', { class: 'num' }, money(group.cost_usd))))));
}

export function renderSearch() {
  const query = queryOf(location.hash);
  const page = el('section', { class: 'overview search-page', 'aria-label': 'Search' });
  const input = el('input', { type: 'search', name: 'q', value: query, class: 'search-query', placeholder: 'file:deploy.sh since:7d, decision:deny, "a phrase"…', 'aria-label': 'Search every session', autocomplete: 'off', spellcheck: 'false' });
  const form = el('form', { class: 'search-form', onsubmit: (event) => {
    event.preventDefault();
    location.hash = `#/search?q=${encodeURIComponent(input.value.trim())}`;
  } }, input, el('button', { type: 'submit', class: 'primary' }, icon('search'), 'Search'));
  const results = el('div', { class: 'results', 'aria-live': 'polite' });
  page.append(
    el('div', { class: 'overview-head' }, el('h1', {}, el('a', { href: '#/', class: 'back', 'aria-label': 'All sessions' }, '←'), ' Search')),
    form, results);
  $('#main').replaceChildren(page);
  input.focus();
  if (!query) {
    results.append(el('p', { class: 'muted' }, 'Every session, by what it did. For example:'),
      el('ul', { class: 'examples' }, EXAMPLES.map(([example, meaning]) => el('li', {},
        el('a', { href: `#/search?q=${encodeURIComponent(example)}` }, el('code', {}, example)), el('span', { class: 'muted' }, ` ${meaning}`)))),
      el('p', { class: 'muted' }, 'Filters: tool, file, wrote, command, decision, by, who, origin, token, schedule, trigger, model, project, node, session, kind, worktree, since, until, cost, group. Words and "phrases" search prompts and answers.'));
    return;
  }
  const list = el('ol', { class: 'hits' });
  const more = el('button', { type: 'button', class: 'more', hidden: true }, 'More');
  const summary = el('p', { class: 'summary muted' });
  results.append(summary, list, more);
  let shown = 0;
  const load = async (before) => {
    let answer;
    try {
      answer = await api('GET', `/api/search?q=${encodeURIComponent(query)}${before ? `&before=${encodeURIComponent(before)}` : ''}`);
    } catch (failure) {
      results.replaceChildren(el('p', { class: 'form-error' }, failure.message));
      return;
    }
    if (!page.isConnected) return;
    const behind = answer.behind ? ` The index is still reading ${answer.behind} session(s) from the log.` : '';
    if (answer.groups) {
      const total = answer.groups.reduce((sum, group) => sum + group.cost_usd, 0);
      summary.textContent = `${answer.groups.length} groups, ${money(total)} in all.${behind}`;
      list.replaceWith(groupTable(answer.groups));
      return;
    }
    list.append(...answer.hits.map(hitRow));
    shown += answer.hits.length;
    summary.textContent = shown ? `${shown}${answer.next ? '+' : ''} found, newest first.${behind}` : `Nothing found.${behind}`;
    more.hidden = !answer.next;
    more.onclick = () => { more.hidden = true; load(answer.next); };
  };
  load(null);
}
