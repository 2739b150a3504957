// The official Tasks client (`@modelcontextprotocol/ext-tasks`) on the official v2 client
// (`@modelcontextprotocol/client`, 2026-07-28) books a flight through the Tasks extension: the
// call becomes a task, the client polls tasks/get and answers each question with tasks/update
// until the task completes; a second booking is cancelled with tasks/cancel. Prints one JSON
// summary on stdout.
//
//   node tasks.mjs URL [PATH ...]        paths: book, cancel

import { Client, StreamableHTTPClientTransport } from "@modelcontextprotocol/client";
import {
  createTaskSessionFromClient,
  resultFromTaskOutcome,
  TaskCancelledError,
} from "@modelcontextprotocol/ext-tasks/client";
import { answering, runPaths } from "./answers.mjs";

const [url, ...selected] = process.argv.slice(2);
const ROUTE = { origin: "JFK", destination: "LAX" };
const CLIENT_INFO = { name: "chatbridge-test-tasks", version: "1.0.0" };
const CAPABILITIES = { elicitation: { form: {}, url: {} } }; // URL questions: completed on their page
// A task that stops moving is reported (with what was seen) rather than polled for ever.
const PATIENCE_MS = 30_000;

/**
 * The host's request coordinator that ext-tasks asks for on 2026-07-28 (`rawDispatch`): it
 * sends the task requests ext-tasks frames (tools/call, tasks/*) on the client's own transport,
 * under request ids of its own, and takes their responses off the transport before the SDK
 * client sees them. Every exchange is recorded in `wire` (method, and the task's status).
 */
function coordinator(transport, wire) {
  const pending = new Map();
  let next = 0;
  const forward = transport.onmessage;
  transport.onmessage = (message, extra) => {
    const waiting = "id" in message && !("method" in message) && pending.get(message.id);
    if (!waiting) return forward?.(message, extra);
    pending.delete(message.id);
    waiting(message);
  };
  return async (request, options = {}) => {
    const id = `ext-tasks-${++next}`;
    const answered = new Promise((resolve) => pending.set(id, resolve));
    await transport.send(
      { jsonrpc: "2.0", id, ...request },
      { headers: options.context?.headers, requestSignal: options.signal },
    );
    const response = await answered;
    const seen = { method: request.method };
    if (response.error) {
      seen.error = response.error.code;
      wire.push(seen);
      return { kind: "error", error: response.error };
    }
    const { resultType, status, inputRequests } = response.result;
    Object.assign(seen, { resultType, status });
    if (inputRequests) seen.inputKeys = Object.keys(inputRequests);
    if (request.method === "tasks/update") seen.answered = Object.keys(request.params.inputResponses);
    wire.push(seen);
    process.stderr.write(`${JSON.stringify(seen)}\n`); // the exchange so far, if a test hangs
    return { kind: "result", result: response.result };
  };
}

/** A connected v2 client with a Tasks session over it; questions are answered by `onInput`. */
async function connect(onInput) {
  const client = new Client(CLIENT_INFO, {
    capabilities: CAPABILITIES,
    versionNegotiation: { mode: { pin: "2026-07-28" } },
  });
  const transport = new StreamableHTTPClientTransport(new URL(url));
  await client.connect(transport);
  const wire = [];
  const errors = [];
  const session = createTaskSessionFromClient(client, {
    endpointId: `chatbridge:${url}`,
    rawDispatch: coordinator(transport, wire),
    v2RequestFraming: {
      protocolVersion: client.getNegotiatedProtocolVersion(),
      clientInfo: CLIENT_INFO,
      clientCapabilities: CAPABILITIES,
    },
    onInputRequest: onInput,
    onError: (error) => errors.push(String(error?.message ?? error)),
  });
  const close = async () => {
    await session.close();
    await client.close();
  };
  return { client, transport, session, wire, errors, close };
}

/** What one observed task shows: its status and the keys of the questions it asks. */
function observed(task) {
  const seen = { status: task.status };
  if (task.raw?.inputRequests) seen.inputKeys = Object.keys(task.raw.inputRequests);
  if (task.statusMessage) seen.statusMessage = task.statusMessage;
  return seen;
}

async function book() {
  const questions = [];
  const answer = answering(questions);
  const { client, session, wire, errors, close } = await connect(async (request, context) => {
    if (request.kind !== "elicitation") throw new Error(`asked for ${request.kind}`);
    const result = await answer({ params: request.params });
    questions.at(-1).inputKey = context.inputId;
    return result;
  });
  const events = [];
  try {
    const execution = await session.callTool("book_flight", ROUTE);
    const { outcome } = await execution.settle({
      signal: AbortSignal.timeout(PATIENCE_MS),
      onEvent: (event) => {
        if (event.type === "task") events.push(observed(event.task));
      },
    });
    const result = resultFromTaskOutcome(outcome);
    return {
      protocolVersion: client.getNegotiatedProtocolVersion(),
      capabilities: session.capabilities,
      kind: execution.kind,
      taskId: execution.handle?.taskId,
      status: outcome.status,
      isError: Boolean(result.isError),
      result: result.structuredContent ?? null,
      text: (result.content ?? []).filter((c) => c.type === "text").map((c) => c.text),
      questions,
      events,
      wire,
      errors,
    };
  } catch (error) {
    return { error: String(error?.message ?? error), questions, events, wire, errors };
  } finally {
    await close();
  }
}

async function cancel() {
  // The first question arrives; the user walks away from it and cancels the booking instead.
  let asked;
  const first = new Promise((resolve) => {
    asked = resolve;
  });
  const questions = [];
  const { session, wire, errors, close } = await connect(async (request, context) => {
    questions.push({ inputKey: context.inputId, message: request.params.message.split("\n")[0] });
    asked();
    await new Promise((resolve) => context.signal.addEventListener("abort", resolve));
    throw new Error("not answered: the task was cancelled");
  });
  try {
    const execution = await session.callTool("book_flight", ROUTE);
    const taskId = execution.handle?.taskId;
    const patience = AbortSignal.timeout(PATIENCE_MS);
    await Promise.race([
      first,
      new Promise((_, reject) => patience.addEventListener("abort", () => reject(patience.reason))),
    ]);
    await execution.cancel();
    const { outcome } = await execution.settle({ signal: patience });
    let thrown;
    try {
      resultFromTaskOutcome(outcome);
    } catch (error) {
      thrown = error instanceof TaskCancelledError ? "TaskCancelledError" : String(error);
    }
    // Asked afterwards, the server still reports the task cancelled.
    const after = await session.task(taskId).snapshot();
    return {
      kind: execution.kind,
      taskId,
      status: outcome.status,
      thrown,
      after: observed(after),
      questions,
      wire,
      errors,
    };
  } catch (error) {
    return { error: String(error?.message ?? error), questions, wire, errors };
  } finally {
    await close();
  }
}

await runPaths({ book, cancel }, selected, { concurrently: true }); // two independent tasks
