// A minimal MCP server over stdio (newline-delimited JSON-RPC 2.0) with one tool, `echo`, for
// the browser tests' MCP tool card. Started by Claude Code from the session's --mcp-config.
import readline from 'node:readline';

const reply = (id, result) => process.stdout.write(`${JSON.stringify({ jsonrpc: '2.0', id, result })}\n`);
const fail = (id, code, message) => process.stdout.write(`${JSON.stringify({ jsonrpc: '2.0', id, error: { code, message } })}\n`);

readline.createInterface({ input: process.stdin }).on('line', (text) => {
  let message;
  try { message = JSON.parse(text); } catch { return; }
  const { id, method, params } = message;
  if (id === undefined) return; // notifications (initialized, cancelled) need no answer
  switch (method) {
    case 'initialize':
      return reply(id, { protocolVersion: params?.protocolVersion ?? '2025-06-18', capabilities: { tools: {} }, serverInfo: { name: 'probe', version: '1.0.0' } });
    case 'ping':
      return reply(id, {});
    case 'tools/list':
      return reply(id, { tools: [{ name: 'echo', description: 'Echoes its text back.', inputSchema: { type: 'object', properties: { text: { type: 'string' } }, required: ['text'] } }] });
    case 'tools/call':
      return reply(id, { content: [{ type: 'text', text: `echo: ${params?.arguments?.text ?? ''}` }] });
    default:
      return fail(id, -32601, `no method ${method}`);
  }
});
