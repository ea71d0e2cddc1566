// A minimal MCP server over stdio (newline-delimited JSON-RPC 2.0) for the tests' MCP cards,
// started by Claude Code from the session's --mcp-config. Two tools: `echo` (its text back) and
// `ask`, which asks the person through the client (`elicitation/create`: a colour to choose and
// a note) and answers with what came back.
import readline from 'node:readline';

const send = (message) => process.stdout.write(`${JSON.stringify({ jsonrpc: '2.0', ...message })}\n`);
const reply = (id, result) => send({ id, result });
const fail = (id, code, message) => send({ id, error: { code, message } });
// Our elicitation requests' ids → the tool call each answers.
const asking = new Map();

const TOOLS = [
  { name: 'echo', description: 'Echoes its text back.', inputSchema: { type: 'object', properties: { text: { type: 'string' } }, required: ['text'] } },
  { name: 'ask', description: 'Asks the user for a colour.', inputSchema: { type: 'object', properties: {} } },
];

readline.createInterface({ input: process.stdin }).on('line', (text) => {
  let message;
  try { message = JSON.parse(text); } catch { return; }
  const { id, method, params } = message;
  if (method === undefined && asking.has(id)) {
    // The client's answer to our question: the tool call's result.
    const call = asking.get(id);
    asking.delete(id);
    return reply(call, { content: [{ type: 'text', text: `asked: ${JSON.stringify(message.result ?? message.error)}` }] });
  }
  if (id === undefined) return; // notifications (initialized, cancelled) need no answer
  switch (method) {
    case 'initialize':
      return reply(id, { protocolVersion: params?.protocolVersion ?? '2025-06-18', capabilities: { tools: {} }, serverInfo: { name: 'probe', version: '1.0.0' } });
    case 'ping':
      return reply(id, {});
    case 'tools/list':
      return reply(id, { tools: TOOLS });
    case 'tools/call':
      if (params?.name === 'ask') {
        const question = `ask-${id}`;
        asking.set(question, id);
        return send({ id: question, method: 'elicitation/create', params: {
          message: 'Which colour should the button be?',
          requestedSchema: { type: 'object', properties: {
            colour: { type: 'string', title: 'Colour', enum: ['red', 'blue'] },
            note: { type: 'string', title: 'Note', description: 'Anything to add' },
          }, required: ['colour'] },
        } });
      }
      return reply(id, { content: [{ type: 'text', text: `echo: ${params?.arguments?.text ?? ''}` }] });
    default:
      return fail(id, -32601, `no method ${method}`);
  }
});
