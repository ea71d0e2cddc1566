// The Node `ws` relay of the relay benchmark (crates/server/benches/relay.rs): CLIs connect at
// `/`, frontends at `/ws`; every line a CLI sends goes to every frontend, nothing is stored or
// parsed. It asks each CLI to `initialize` (as Switchboard and the minimal forwarder do), prints
// `listening HOST:PORT` once it listens on an ephemeral loopback port, answers each `cpu` line
// on its standard input with `cpu MICROS` (its own CPU time so far), and ends when its
// standard input closes.
import { createInterface } from 'node:readline';
import { WebSocketServer } from 'ws';

const frontends = new Set();
const server = new WebSocketServer({ host: '127.0.0.1', port: 0, perMessageDeflate: false });

server.on('connection', (socket, request) => {
  if (request.url === '/ws') {
    frontends.add(socket);
    socket.on('close', () => frontends.delete(socket));
    return;
  }
  socket.send(JSON.stringify({ type: 'control_request', request_id: 'i', request: { subtype: 'initialize' } }) + '\n');
  socket.on('message', (data) => {
    for (const line of data.toString().split('\n')) {
      if (line.length === 0) continue;
      for (const frontend of frontends) frontend.send(line);
    }
  });
});

server.on('listening', () => {
  const { address, port } = server.address();
  process.stdout.write(`listening ${address}:${port}\n`);
});

const input = createInterface({ input: process.stdin });
input.on('line', (line) => {
  if (line.trim() === 'cpu') {
    const { user, system } = process.cpuUsage();
    process.stdout.write(`cpu ${user + system}\n`);
  }
});
input.on('close', () => process.exit(0));
