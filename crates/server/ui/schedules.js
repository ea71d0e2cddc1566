// The Schedules page (`#/schedules`): every schedule with its next runs and its last runs'
// outcomes (each started run a link to its session), the queue of runs that wait for a usage
// window or a budget with the time each will start, and the triggers with their last
// deliveries. Read from `GET /api/schedules` and `GET /api/triggers`, drawn again when the
// dashboard socket says `schedules_changed`; a schedule is added, run now, paused and removed,
// a trigger paused and removed, through the same API (a trigger is made with the CLI or the
// API, which show its secret once).
import { $, el, icon, stateIcon } from './dom.js';
import { money, shortPath } from './words.js';
import { api, can, toast } from './api.js';

/// A moment as the page says it: the local time (with the day when not today), and how far.
function moment(ms) {
  const date = new Date(ms);
  const today = new Date().toDateString() === date.toDateString();
  const time = date.toLocaleTimeString([], { hour: '2-digit', minute: '2-digit', second: '2-digit' });
  const thisYear = date.getFullYear() === new Date().getFullYear();
  const day = today ? '' : `${date.toLocaleDateString([], { weekday: 'short', month: 'short', day: 'numeric', year: thisYear ? undefined : 'numeric' })} `;
  const seconds = Math.round((ms - Date.now()) / 1000);
  const far = Math.abs(seconds);
  const span = far < 60 ? `${far} s` : far < 3600 ? `${Math.round(far / 60)} min` : far < 86400 ? `${Math.round(far / 3600)} h` : `${Math.round(far / 86400)} d`;
  return { text: `${day}${time}`, far: seconds >= 0 ? `in ${span}` : `${span} ago`, iso: date.toISOString() };
}

const when = (schedule) => (schedule.cron
  ? `${schedule.cron}${schedule.time_zone ? ` · ${schedule.time_zone}` : ''}`
  : `once at ${schedule.at}`);

const SKIPPED = { overlap: 'its last run still went', missed: 'missed while the daemon was down' };

/// One run of a schedule: a link to its session (its state, what it spent), or why it did not run.
function runChip(run, sessions) {
  const at = moment(run.due_ms);
  if (run.outcome === 'started') {
    const session = sessions.find((known) => known.id === run.session);
    const state = session?.state ?? 'deleted';
    return el('a', { class: `run-chip started state-${state}`, href: `#/s/${run.session}`, title: `Due ${at.text}; session ${run.session}` },
      stateIcon(state), el('span', {}, at.text), el('span', { class: 'badge' }, state),
      session ? el('span', { class: 'muted' }, money(session.spent_usd)) : null);
  }
  const why = run.outcome === 'skipped' ? SKIPPED[run.why] ?? run.why : run.error;
  const times = run.times > 1 ? ` ×${run.times}` : '';
  return el('span', { class: `run-chip ${run.outcome}`, title: `Due ${at.text}: ${run.outcome}${times}, ${why}` },
    icon(run.outcome === 'failed' ? 'x' : 'chevron'), el('span', {}, at.text), el('span', { class: 'badge' }, `${run.outcome}${times}`));
}

/// A button that calls the API (`DELETE` asks first, with `confirmText`), then draws the page
/// again; an answer that is a session opens it.
function act(reload, label, method, path, body, { className = '', confirmText = '' } = {}) {
  return el('button', {
    type: 'button', class: `needs-operate ${className}`.trim(), hidden: !can('operate'),
    onclick: async (event) => {
      if (confirmText && !confirm(confirmText)) return;
      event.currentTarget.disabled = true;
      try {
        const answer = await api(method, path, body);
        if (answer?.id) location.hash = `#/s/${answer.id}`;
      } catch (failure) { toast(failure.message); }
      reload();
    },
  }, label);
}

function scheduleCard(view, reload) {
  const { schedule, state, next_ms: next, waiting, sessions } = view;
  const path = `/api/schedules/${encodeURIComponent(schedule.name)}`;
  const runs = [...state.runs].reverse().slice(0, 8);
  return el('article', { class: `schedule-card${schedule.paused ? ' paused' : ''}`, dataset: { name: schedule.name } },
    el('header', {},
      el('h3', {}, schedule.name),
      el('code', { class: 'when' }, when(schedule)),
      schedule.paused ? el('span', { class: 'badge state-paused' }, 'paused') : null,
      el('span', { class: 'actions' },
        act(reload, 'Run now', 'POST', `${path}/run`),
        act(reload, schedule.paused ? 'Resume' : 'Pause', 'PATCH', path, { paused: !schedule.paused }),
        act(reload, 'Remove', 'DELETE', path, undefined, { className: 'danger', confirmText: `Remove the schedule ${schedule.name}? Its runs' sessions stay.` }))),
    el('p', { class: 'task', title: schedule.task.cwd },
      el('span', { class: 'muted' }, shortPath(schedule.task.cwd), ' · '), schedule.task.prompt,
      schedule.max_window_utilization ? el('span', { class: 'chip', title: 'New runs wait while a usage window is at or past this share, and a run that reaches it pauses' }, `≤ ${Math.round(schedule.max_window_utilization * 100)}% of a window`) : null,
      schedule.daily_usd != null ? el('span', { class: 'chip' }, `${money(schedule.daily_usd)} a day`) : null,
      el('span', { class: 'chip' }, schedule.overlap === 'queue' ? 'queues an overlap' : 'skips an overlap')),
    waiting ? el('p', { class: 'waiting-run' }, icon('spinner'), ` Waiting since ${moment(waiting.due_ms).text}: ${waiting.why}`,
      waiting.starts_ms ? ` · starts ${moment(waiting.starts_ms).text} (${moment(waiting.starts_ms).far})` : ' · starts when its last run ends') : null,
    el('div', { class: 'next' }, el('span', { class: 'muted' }, 'Next'),
      next.length ? next.slice(0, 3).map((ms) => el('time', { datetime: moment(ms).iso, title: moment(ms).far }, moment(ms).text)) : el('span', { class: 'muted' }, schedule.paused ? 'paused' : 'none')),
    el('div', { class: 'runs' }, el('span', { class: 'muted' }, 'Runs'),
      runs.length ? runs.map((run) => runChip(run, sessions)) : el('span', { class: 'muted' }, 'none yet')));
}

function triggerCard(view, reload) {
  const { trigger, path, runs, queued, hold } = view;
  const apiPath = `/api/triggers/${encodeURIComponent(trigger.name)}`;
  const what = [trigger.task ? `starts “${trigger.task.prompt}”` : null, trigger.feedback ? 'routes GitHub feedback to the session that made the branch' : null].filter(Boolean).join('; ');
  return el('article', { class: 'schedule-card trigger', dataset: { name: trigger.name } },
    el('header', {}, el('h3', {}, trigger.name), el('code', { class: 'when' }, `POST ${path}`),
      trigger.paused ? el('span', { class: 'badge state-paused' }, 'paused') : null,
      el('span', { class: 'actions' },
        act(reload, trigger.paused ? 'Resume' : 'Pause', 'PATCH', apiPath, { paused: !trigger.paused }),
        act(reload, 'Remove', 'DELETE', apiPath, undefined, { className: 'danger', confirmText: `Remove the trigger ${trigger.name}? Its webhook stops answering.` }))),
    el('p', { class: 'task' }, what, trigger.events.length ? el('span', { class: 'chip' }, trigger.events.join(', ')) : null),
    queued.length ? el('p', { class: 'waiting-run' }, icon('spinner'), ` ${queued.length} waiting: ${hold?.why ?? ''}`) : null,
    el('div', { class: 'runs' }, el('span', { class: 'muted' }, 'Deliveries'),
      runs.length ? runs.slice(0, 8).map((run) => {
        const label = el('span', { class: 'badge' }, run.outcome);
        const text = el('span', {}, moment(run.at_ms).text);
        return run.session
          ? el('a', { class: `run-chip ${run.outcome}`, href: `#/s/${run.session}`, title: run.detail ?? '' }, text, label)
          : el('span', { class: `run-chip ${run.outcome}`, title: run.detail ?? '' }, text, label);
      }) : el('span', { class: 'muted' }, 'none yet')));
}

function addForm(reload) {
  const form = el('form', { class: 'add-schedule', autocomplete: 'off' },
    el('label', {}, 'Name ', el('input', { name: 'name', required: true, placeholder: 'nightly', pattern: '[a-z0-9][a-z0-9._\\-]{0,63}' })),
    el('label', {}, 'Cron ', el('input', { name: 'cron', required: true, placeholder: '0 3 * * *', spellcheck: 'false' })),
    el('label', {}, 'Time zone ', el('input', { name: 'time_zone', value: Intl.DateTimeFormat().resolvedOptions().timeZone ?? 'UTC' })),
    el('label', {}, 'Directory ', el('input', { name: 'cwd', required: true, placeholder: '/home/me/project', value: localStorage.getItem('switchboard.cwd') ?? '' })),
    el('label', { class: 'wide' }, 'Prompt ', el('textarea', { name: 'prompt', required: true, rows: 2, placeholder: 'What each run asks' })),
    el('label', {}, 'Overlap ', el('select', { name: 'overlap' }, el('option', { value: 'skip' }, 'skip the next'), el('option', { value: 'queue' }, 'queue the next'))),
    el('label', {}, 'Missed while down ', el('select', { name: 'missed' }, el('option', { value: 'run_once' }, 'run the last once'), el('option', { value: 'skip' }, 'skip them'))),
    el('label', {}, 'Most of a usage window ', el('input', { name: 'cap', type: 'number', min: '0.05', max: '1', step: '0.05', placeholder: '0.5' })),
    el('label', {}, 'A day, at most (USD) ', el('input', { name: 'daily', type: 'number', min: '0', step: '0.5', placeholder: 'no limit' })),
    el('p', { class: 'form-error', hidden: true }),
    el('button', { type: 'submit', class: 'primary' }, 'Add'));
  form.addEventListener('submit', async (event) => {
    event.preventDefault();
    const data = new FormData(form);
    const body = {
      name: data.get('name').trim(), cron: data.get('cron').trim(), overlap: data.get('overlap'), missed: data.get('missed'),
      task: { cwd: data.get('cwd').trim(), prompt: data.get('prompt').trim() },
    };
    const zone = data.get('time_zone').trim();
    if (zone) body.time_zone = zone;
    if (data.get('cap')) body.max_window_utilization = Number(data.get('cap'));
    if (data.get('daily')) body.daily_usd = Number(data.get('daily'));
    const error = $('.form-error', form);
    error.hidden = true;
    try {
      await api('POST', '/api/schedules', body);
      form.reset();
      form.closest('details').open = false;
      reload();
    } catch (failure) {
      error.textContent = failure.message;
      error.hidden = false;
    }
  });
  return el('details', { class: 'add needs-operate', hidden: !can('operate') }, el('summary', { class: 'button' }, 'Add a schedule'), form);
}

/// Draws the page into `#main`, and again on each change, while it is the page shown.
export function renderSchedules() {
  const main = $('#main');
  const page = el('section', { class: 'overview schedules', 'aria-label': 'Schedules' });
  main.replaceChildren(page);
  let drawn = false;
  const load = async () => {
    if (location.hash !== '#/schedules' || !page.isConnected) return;
    let list, triggers;
    try {
      [list, triggers] = await Promise.all([api('GET', '/api/schedules'), api('GET', '/api/triggers')]);
    } catch (failure) { toast(failure.message); return; }
    if (!page.isConnected) return;
    const form = drawn ? $('details.add', page) : addForm(load);
    drawn = true;
    page.replaceChildren(
      el('div', { class: 'overview-head' }, el('h1', {}, el('a', { href: '#/', class: 'back', 'aria-label': 'All sessions' }, '←'), ' Schedules'), form),
      list.queue.length ? el('h2', {}, `Waiting (${list.queue.length})`) : null,
      list.queue.length ? el('div', { class: 'cards queue' }, list.queue.map((entry) => el('div', { class: 'triage waiting' },
        icon('spinner'), el('span', { class: 'title' }, `${entry.kind} ${entry.name}`),
        el('span', { class: 'badge state-waiting' }, entry.starts_ms ? `starts ${moment(entry.starts_ms).far}` : 'after the run before it'),
        el('span', { class: 'what' }, entry.why, entry.starts_ms ? ` · starts ${moment(entry.starts_ms).text}` : '')))) : null,
      el('h2', {}, `Schedules (${list.schedules.length})`),
      list.schedules.length ? el('div', { class: 'cards' }, list.schedules.map((view) => scheduleCard(view, load)))
        : el('p', { class: 'muted' }, 'No schedules yet. A schedule runs a task on a cron expression: each run a fresh session, never two at once.'),
      el('h2', {}, `Triggers (${triggers.length})`),
      triggers.length ? el('div', { class: 'cards' }, triggers.map((view) => triggerCard(view, load)))
        : el('p', { class: 'muted' }, 'No triggers. switchboard trigger add NAME makes a signed webhook that starts a task or routes CI feedback.'));
  };
  const changed = () => load();
  window.addEventListener('switchboard:schedules', changed);
  const timer = setInterval(load, 30000);
  const stop = () => {
    if (location.hash === '#/schedules') return;
    window.removeEventListener('switchboard:schedules', changed);
    window.removeEventListener('hashchange', stop);
    clearInterval(timer);
  };
  window.addEventListener('hashchange', stop);
  return load();
}
