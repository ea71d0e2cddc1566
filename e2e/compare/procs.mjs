// Processes the side-by-side's drivers start (the fake API, each UI's server): a free port on
// loopback, a start that waits for the process to say it is ready, and a stop that ends it with
// everything it started.
import { spawn } from 'node:child_process';
import fs from 'node:fs';
import net from 'node:net';
import path from 'node:path';

const WAIT = 60_000; // the deadline of a start

/// A free port on loopback.
export function freePort() {
  return new Promise((resolve, reject) => {
    const server = net.createServer();
    server.once('error', reject);
    server.listen(0, '127.0.0.1', () => { const { port } = server.address(); server.close(() => resolve(port)); });
  });
}

/// Starts `command` in a process group of its own, adds it to `started` (to be stopped, whatever
/// happens) and resolves with what it printed once `ready(output)` holds for it (within WAIT).
export function start(started, command, args, options, ready) {
  const child = spawn(command, args, { ...options, detached: true, stdio: ['ignore', 'pipe', 'pipe'] });
  started.push(child);
  let output = '';
  return new Promise((resolve, reject) => {
    const timer = setTimeout(() => reject(new Error(`${path.basename(command)} did not start in time:\n${output}`)), WAIT);
    const seen = (chunk) => {
      output += chunk;
      if (ready(output)) { clearTimeout(timer); resolve(output); }
    };
    child.stdout.on('data', seen);
    child.stderr.on('data', seen);
    child.once('error', (error) => { clearTimeout(timer); reject(error); });
    child.once('exit', (code) => { clearTimeout(timer); reject(new Error(`${path.basename(command)} exited (${code}):\n${output}`)); });
  });
}

/// A process's parent and start time (fields 4 and 22 of /proc/<pid>/stat), or null once gone.
function procStat(pid) {
  try {
    const stat = fs.readFileSync(`/proc/${pid}/stat`, 'utf8');
    const fields = stat.slice(stat.lastIndexOf(')') + 2).split(' ');
    return { ppid: Number(fields[1]), started: fields[19] };
  } catch { return null; }
}

/// `pid`'s descendants (from /proc), so that the CLIs CloudCLI started, and the shell its Shell
/// tab opened in a terminal of its own, stop with it; each with its start time, so that a
/// finished process's id, taken again by another, is left alone.
function descendants(pid) {
  const children = new Map();
  for (const entry of fs.readdirSync('/proc')) {
    const stat = /^\d+$/.test(entry) && procStat(entry);
    if (!stat) continue;
    if (!children.has(stat.ppid)) children.set(stat.ppid, []);
    children.get(stat.ppid).push({ pid: Number(entry), started: stat.started });
  }
  const found = [];
  const walk = (parent) => { for (const child of children.get(parent) ?? []) { found.push(child); walk(child.pid); } };
  walk(pid);
  return found;
}

/// Stops a process started by `start`: first its descendants (SIGTERM, while it is there to reap
/// them), then its group; SIGKILL to whatever is left after 10 s.
export async function stop(child) {
  if (child.exitCode !== null || child.signalCode !== null) return;
  const others = descendants(child.pid);
  const alive = () => others.filter(({ pid, started }) => procStat(pid)?.started === started);
  const signal = (name) => {
    for (const { pid } of alive()) try { process.kill(pid, name); } catch { /* gone */ }
  };
  signal('SIGTERM');
  for (let waited = 0; alive().length && waited < 5_000; waited += 100) await new Promise((resolve) => setTimeout(resolve, 100));
  try { process.kill(-child.pid, 'SIGTERM'); } catch { /* the group is gone */ }
  const exited = await new Promise((resolve) => {
    if (child.exitCode !== null || child.signalCode !== null) return resolve(true);
    const timer = setTimeout(() => resolve(false), 10_000);
    child.once('exit', () => { clearTimeout(timer); resolve(true); });
  });
  if (!exited) try { process.kill(-child.pid, 'SIGKILL'); } catch { /* gone */ }
  signal('SIGKILL');
}
