// What the page says in words: money, counts, times, paths, states, what a tool call wants,
// who decided.
import { el } from './dom.js';
import { home, mine } from './api.js';

export const money = (usd) => `$${(usd ?? 0).toFixed(usd >= 1 ? 2 : 4)}`;
export const tokens = (count) => (count ?? 0).toLocaleString('en-US');
export function compact(count) {
  const n = count ?? 0;
  if (n >= 1e6) return `${+(n / 1e6).toFixed(1)}M`;
  if (n >= 1e3) return `${+(n / 1e3).toFixed(1)}k`;
  return `${+n.toFixed(2)}`;
}
/// An axis label: dollars to two significant digits ($0.0012, $0.35, $12).
export const compactMoney = (usd) => (!usd ? '$0' : usd >= 10 ? `$${usd.toFixed(0)}` : `$${+usd.toPrecision(2)}`);
export const plural = (n, one, many = `${one}s`) => `${n} ${n === 1 ? one : many}`;

export function ago(ms) {
  if (!ms) return '';
  const seconds = Math.max(0, (Date.now() - ms) / 1000);
  if (seconds < 60) return 'just now';
  if (seconds < 3600) return `${Math.floor(seconds / 60)} min ago`;
  if (seconds < 86400) return `${Math.floor(seconds / 3600)} h ago`;
  return new Date(ms).toLocaleDateString();
}

/// The end of a path, which is what tells projects apart.
export function shortPath(path) {
  const parts = (path ?? '').split('/').filter(Boolean);
  return parts.length > 2 ? `…/${parts.slice(-2).join('/')}` : path ?? '';
}

/// A path as seen from the session's directory (`src/main.rs`, not `/home/me/project/src/main.rs`).
export function relative(path, cwd) {
  if (!path || !cwd) return path ?? '';
  const base = cwd.endsWith('/') ? cwd : `${cwd}/`;
  return path.startsWith(base) ? path.slice(base.length) : path;
}

/// A path as a person reads it: under the daemon's home as `~/…`.
export function homeRelative(path) {
  if (!path || !home) return path ?? '';
  if (path === home) return '~';
  return path.startsWith(`${home}/`) ? `~${path.slice(home.length)}` : path;
}

/// Who started a session, when it was an agent (MCP), an editor (ACP), a schedule or a trigger, or under a token's
/// ceiling: a short label and a sentence; `null` for one a person started through the API.
export function originOf(session) {
  const origin = session.config?.origin;
  if (!origin) return null;
  const run = session.config?.run;
  const who = { mcp: 'agent', acp: 'editor', schedule: run && `schedule ${run.name}`, trigger: run && `trigger ${run.name}` }[origin.face];
  if (!who && !origin.ceiling) return null;
  const via = { mcp: 'an agent, through MCP', acp: 'an editor, through ACP', grpc: 'gRPC', api: 'the API',
    schedule: `the schedule ${run?.name}`, trigger: `the trigger ${run?.name}` }[origin.face] ?? origin.face;
  const bounded = origin.ceiling ? ', under its ceiling' : '';
  return {
    label: [who, origin.ceiling ? 'ceiling' : null].filter(Boolean).join(' · '),
    title: `Started by ${via}, with token ${origin.token}${bounded}`,
  };
}

export function stateLabel(session) {
  // Its node stopped answering (several daemons on one database): it runs nowhere now.
  if (session.node_lost) return ['lost', `node ${session.node ?? ''} lost`];
  // Its request waits with no process: an answer resumes it.
  if (session.state === 'parked') return ['waiting', 'parked: waiting for you'];
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
export function wants(name, input, cwd) {
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
    case 'McpElicitation': return [`let the MCP server ${input?.server ?? ''} ask you`, clip(input?.message ?? '')];
    default:
      if (name?.startsWith('mcp__')) {
        const [, server, tool] = name.split('__');
        return [`use ${server}'s tool`, tool];
      }
      return ['use', name ?? 'a tool'];
  }
}

export function wantsLine(name, input, cwd) {
  const [verb, target] = wants(name, input, cwd);
  return ['Claude wants to ', verb, target ? ' ' : '', target ? el('code', {}, target) : null];
}

/// Who decided a permission, in words; a reason the person wrote is said once, here.
export function decisionText(decision) {
  const by = decision.by ?? {};
  const allowed = decision.behavior === 'allow';
  const verb = allowed ? 'Allowed' : 'Denied';
  let text;
  switch (by.kind) {
    case 'person': text = `${verb} by ${mine(by.who) ? 'you' : by.who}`; break;
    case 'policy': text = `${verb} by ${by.rule ? `policy rule ${by.rule}` : "the policy's default"}`; break;
    case 'cli': text = `${verb} by Claude Code's own settings`; break;
    case 'terminal': text = `${verb} in the terminal`; break;
    case 'timeout': text = 'Nobody answered in time: denied'; break;
    case 'cancelled': text = 'Withdrawn by Claude Code'; break;
    case 'link_closed': text = 'Claude Code went away before an answer'; break;
    default: text = verb;
  }
  // The daemon's own words for a denial without a reason are not a reason.
  const reason = !allowed && by.kind === 'person' && decision.message && decision.message !== `${by.who} denied this tool call` ? decision.message : null;
  return reason ? `${text}: ${reason}` : text;
}
