// The official TypeScript v2 client (`@modelcontextprotocol/client`) books a flight through every
// path it supports, and prints one JSON summary on stdout.
//
//   node client-v2.mjs URL [PATH ...]
//
// Paths: mrtr (2026-07-28: `input_required` rounds fulfilled by the client's elicitation
// handler), form (the legacy era: pushed form elicitation), errors.

import { Client, StreamableHTTPClientTransport } from "@modelcontextprotocol/client";
import { answering, runPaths } from "./answers.mjs";

const [url, ...selected] = process.argv.slice(2);
const ROUTE = { origin: "JFK", destination: "LAX" };
const MODERN = { mode: { pin: "2026-07-28" } };
// On 2026-07-28 a request opts in to log notifications with this _meta key.
const LOG_LEVEL = { "io.modelcontextprotocol/logLevel": "debug" };

async function connect(versionNegotiation, capabilities) {
  const client = new Client(
    { name: "chatbridge-test-client-v2", version: "1.0.0" },
    { capabilities, versionNegotiation },
  );
  const transport = new StreamableHTTPClientTransport(new URL(url));
  await client.connect(transport);
  const logs = [];
  client.setNotificationHandler("notifications/message", (n) => {
    logs.push(n.params);
  });
  return { client, transport, logs };
}

function outcome(result) {
  return {
    isError: Boolean(result.isError),
    result: result.structuredContent ?? null,
    text: (result.content ?? []).filter((c) => c.type === "text").map((c) => c.text),
  };
}

async function book(versionNegotiation, meta) {
  const { client, transport, logs } = await connect(versionNegotiation, {
    elicitation: { form: {}, url: {} }, // URL questions (payment) are completed on their page
  });
  const questions = [];
  client.setRequestHandler("elicitation/create", answering(questions));
  const progress = [];
  const result = await client.callTool(
    { name: "book_flight", arguments: ROUTE, _meta: meta },
    { onprogress: (p) => progress.push(p) },
  );
  const protocolVersion = transport.protocolVersion;
  await client.close();
  return { protocolVersion, ...outcome(result), questions, logs, progress };
}

const mrtr = () => book(MODERN, LOG_LEVEL);
const form = () => book({ mode: "legacy" }, undefined);

async function errors() {
  const { client } = await connect(MODERN, {});
  const seen = {};
  try {
    await client.callTool({ name: "_respond", arguments: { request_id: "req_nope", payload: {} } });
    seen.unknownRequest = "no error";
  } catch (error) {
    seen.unknownRequest = { code: error.code, message: error.message };
  }
  try {
    const read = await client.readResource({ uri: "ui://no-such-page" });
    seen.unknownResource = { contents: read.contents.length };
  } catch (error) {
    seen.unknownResource = { code: error.code, message: error.message, data: error.data };
  }
  await client.close();
  return seen;
}

await runPaths({ mrtr, form, errors }, selected);
