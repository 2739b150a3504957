// The official TypeScript SDK v1 (`@modelcontextprotocol/sdk`, or the 1.17.5 alias `sdk-1.17`)
// books a flight through every path it supports, and prints one JSON summary on stdout.
//
//   node sdk-v1.mjs PACKAGE URL [PATH ...]     PACKAGE: @modelcontextprotocol/sdk | sdk-1.17
//
// Paths: form (pushed form elicitation), formAndUrl (a client that takes URL mode too), urlOnly
// (a client that declares URL mode only), respond (a client that cannot elicit answers the
// request notifications with `_respond`), feedback (send_feedback: an approval, then a form with
// every kind of field), errors (what a user reads when something is wrong).

import { answering, completePage, formAnswer, runPaths } from "./answers.mjs";

const [pkg, url, ...selected] = process.argv.slice(2);
const { Client } = await import(`${pkg}/client/index.js`);
const { StreamableHTTPClientTransport } = await import(`${pkg}/client/streamableHttp.js`);
const types = await import(`${pkg}/types.js`);
const ROUTE = { origin: "JFK", destination: "LAX" };
// 2025-11-25 clients name the form mode (and may take URL mode); 2025-06-18 clients only know
// `elicitation: {}`.
const MODES = types.LATEST_PROTOCOL_VERSION >= "2025-11-25";
const FORM = MODES ? { form: {} } : {};

async function connect(capabilities) {
  const client = new Client({ name: `chatbridge-test-${pkg}`, version: "1.0.0" }, { capabilities });
  const transport = new StreamableHTTPClientTransport(new URL(url));
  await client.connect(transport);
  const logs = [];
  client.setNotificationHandler(types.LoggingMessageNotificationSchema, (n) => {
    logs.push(n.params);
  });
  return { client, transport, logs };
}

async function setLevel(client) {
  try {
    await client.setLoggingLevel("debug");
    return "ok";
  } catch (error) {
    return `refused: ${error.message}`;
  }
}

function outcome(result) {
  return {
    isError: Boolean(result.isError),
    result: result.structuredContent ?? null,
    text: (result.content ?? []).filter((c) => c.type === "text").map((c) => c.text),
  };
}

async function book(elicitation) {
  const { client, transport, logs } = await connect({ elicitation });
  const questions = [];
  client.setRequestHandler(types.ElicitRequestSchema, answering(questions));
  const completed = [];
  if (MODES) {
    client.setNotificationHandler(types.ElicitationCompleteNotificationSchema, (n) => {
      completed.push(n.params.elicitationId);
    });
  }
  const logLevel = await setLevel(client);
  const progress = [];
  const result = await client.callTool({ name: "book_flight", arguments: ROUTE }, undefined, {
    onprogress: (p) => progress.push(p),
  });
  await client.close();
  return {
    protocolVersion: transport.protocolVersion,
    logLevel,
    ...outcome(result),
    questions,
    logs,
    progress,
    completed,
  };
}

const form = () => book(FORM);
// URL mode only: `elicitation: {url: {}}`, which even a 2025-06-18 client may send.
const urlOnly = () => book({ url: {} });
// Form and URL mode: a URL question (payment) is completed on its page by answers.mjs.
const formAndUrl = () => (MODES ? book({ form: {}, url: {} }) : { skipped: "no URL mode" });

// send_feedback asks for approval, then a form with every kind of field (multi-select too).
async function feedback() {
  const { client, transport } = await connect({ elicitation: FORM });
  const questions = [];
  client.setRequestHandler(types.ElicitRequestSchema, answering(questions));
  const result = await client.callTool({ name: "send_feedback", arguments: {} });
  await client.close();
  return { protocolVersion: transport.protocolVersion, ...outcome(result), questions };
}

async function respond() {
  const { client, transport, logs } = await connect({});
  const questions = [];
  const answers = [];
  client.setNotificationHandler(types.LoggingMessageNotificationSchema, async (n) => {
    logs.push(n.params);
    const data = n.params.data;
    if (data?.type !== "request") return;
    if (data.mode === "url") {
      // Answered on its page (the payment); `_respond` could only decline it.
      const page = await completePage(data.url);
      questions.push({ type: data.request_type, mode: "url", page: page.status });
      return;
    }
    const params = {
      message: data.message,
      requestedSchema: { ...data.schema, "x-model-context": data.context },
    };
    const payload = formAnswer(params);
    questions.push({ type: data.request_type, context: Object.keys(data.context ?? {}), payload });
    const answer = await client.callTool({
      name: "_respond",
      arguments: { request_id: data.request_id, payload },
    });
    answers.push(outcome(answer));
  });
  const result = await client.callTool({ name: "book_flight", arguments: ROUTE });
  await client.close();
  return { protocolVersion: transport.protocolVersion, ...outcome(result), questions, answers };
}

async function errors() {
  const { client } = await connect({});
  const seen = {};
  try {
    await client.callTool({ name: "_respond", arguments: { request_id: "req_nope", payload: {} } });
    seen.unknownRequest = "no error";
  } catch (error) {
    seen.unknownRequest = { code: error.code, message: error.message };
  }
  try {
    seen.badArguments = outcome(
      await client.callTool({ name: "book_flight", arguments: { origin: "J", destination: "LAX" } }),
    );
  } catch (error) {
    seen.badArguments = { code: error.code, message: error.message };
  }
  try {
    await client.readResource({ uri: "ui://no-such-page" });
    seen.unknownResource = "no error";
  } catch (error) {
    seen.unknownResource = { code: error.code, message: error.message, data: error.data };
  }
  await client.close();
  return seen;
}

await runPaths({ form, formAndUrl, urlOnly, respond, feedback, errors }, selected);
