// How the client scripts answer a question, like a person reading it: from the question's
// context (x-model-context, in the schema or, for clients that strip unknown schema keys, in
// the message) and its schema, never from the tool's name. New questions (a review form, a
// URL-mode payment) are answered by the same rules without changing the scripts.

const BOUNDARY = "--x-model-context: application/json\n";
export const TEST_CARD = "4242 4242 4242 4242";

/** The context a question carries and where it was found (DESIGN §4): the schema's
 * `x-model-context`, else the message's boundary section (for clients that strip unknown
 * schema keys), else the request's `_meta["x-model-context"]`. */
export function contextWithSource(params) {
  const fromSchema = params.requestedSchema?.["x-model-context"];
  if (fromSchema && typeof fromSchema === "object") return [fromSchema, "schema"];
  const fromMessage = messageContext(params.message ?? "");
  if (fromMessage) return [fromMessage, "message"];
  const fromMeta = params._meta?.["x-model-context"];
  if (fromMeta && typeof fromMeta === "object") return [fromMeta, "meta"];
  return [{}, "none"];
}

export function contextOf(params) {
  return contextWithSource(params)[0];
}

/** The object after the message's last boundary line, or null. */
function messageContext(message) {
  const at = message.lastIndexOf(BOUNDARY);
  if (at < 0) return null;
  try {
    const found = JSON.parse(message.slice(at + BOUNDARY.length));
    return found && typeof found === "object" && !Array.isArray(found) ? found : null;
  } catch {
    return null;
  }
}

/** The human part of a question's message (without the context section). */
export function humanMessage(message = "") {
  const at = message.lastIndexOf(`\n\n${BOUNDARY}`);
  return at < 0 ? message : message.slice(0, at);
}

function firstFreeSeat(seatMap) {
  const taken = new Set(seatMap.taken ?? []);
  for (let row = 1; row <= seatMap.rows; row++) {
    for (const letter of seatMap.seats) {
      if (!taken.has(`${row}${letter}`)) return { row, seat: letter };
    }
  }
  throw new Error("no free seat on the seat map");
}

const TEXT_BY_FORMAT = {
  email: "traveller@example.com",
  date: "2026-12-01",
  "date-time": "2026-12-01T09:30:00Z",
  uri: "https://example.com/",
};

/** A value for one schema property a person would give: its default, "yes", the first choice,
 * some text for a required field. */
function valueFor(property, required) {
  if (property.default !== undefined) return property.default;
  if (property.const !== undefined) return property.const;
  if (property.type === "boolean") return true;
  const choices = property.enum ?? property.oneOf?.map((c) => c.const);
  if (choices?.length) return choices[0];
  if (property.type === "array") {
    const items = property.items?.enum ?? property.items?.anyOf?.map((c) => c.const) ?? [];
    return items.slice(0, 1);
  }
  if (property.type === "integer" || property.type === "number") return property.minimum ?? 1;
  if (property.type === "string" && required) {
    return TEXT_BY_FORMAT[property.format] ?? "Test Traveller";
  }
  return undefined;
}

/** The content of an accepted form question, by what the question shows. */
export function formAnswer(params) {
  const context = contextOf(params);
  if (Array.isArray(context.flights) && context.flights.length) {
    return { flight_id: context.flights[0].id }; // pick_flight: the first flight offered
  }
  if (context.seat_map) return firstFreeSeat(context.seat_map); // pick_seat: the first free seat
  // Anything else (e.g. a review of flight, seat and price): confirm with the form's defaults.
  const content = {};
  const properties = params.requestedSchema?.properties ?? {};
  const required = new Set(params.requestedSchema?.required ?? []);
  for (const [name, property] of Object.entries(properties)) {
    const value = valueFor(property, required.has(name));
    if (value !== undefined) content[name] = value;
  }
  return content;
}

function attributes(tag) {
  const found = {};
  for (const m of tag.matchAll(/([\w:-]+)\s*=\s*("([^"]*)"|'([^']*)')/g)) {
    found[m[1].toLowerCase()] = (m[3] ?? m[4]).replaceAll("&amp;", "&");
  }
  return found;
}

function cardField(name, type) {
  const n = name.toLowerCase();
  if (/cvc|cvv|csc|security/.test(n)) return "123";
  if (/month/.test(n)) return "12";
  if (/year/.test(n)) return "2034";
  if (/exp/.test(n)) return "12/34";
  if (/card|number|pan/.test(n)) return TEST_CARD;
  if (/name|holder/.test(n)) return "Test Traveller";
  if (/zip|postal/.test(n)) return "10001";
  if (type === "email" || /mail/.test(n)) return "traveller@example.com";
  return undefined;
}

/**
 * Complete a URL-mode question's page like a person in a browser: open the link, fill in its
 * first form with the test card, submit it. Returns what a user would see: the final status and
 * address. (Written against a plain HTML form; untested until the payment page exists.)
 */
export async function completePage(url) {
  const cookies = new Map();
  const remember = (response) => {
    for (const line of response.headers.getSetCookie?.() ?? []) {
      const [pair] = line.split(";");
      const eq = pair.indexOf("=");
      cookies.set(pair.slice(0, eq).trim(), pair.slice(eq + 1).trim());
    }
  };
  const cookieHeader = () => [...cookies].map(([k, v]) => `${k}=${v}`).join("; ");
  const page = await fetch(url, { redirect: "follow" });
  remember(page);
  const html = await page.text();
  const form = html.match(/<form\b[^>]*>([\s\S]*?)<\/form>/i);
  if (!form) throw new Error(`the page at ${url} has no form (status ${page.status})`);
  const formAttrs = attributes(form[0].slice(0, form[0].indexOf(">") + 1));
  const body = new URLSearchParams();
  for (const m of form[1].matchAll(/<(input|select|textarea)\b[^>]*>/gi)) {
    const attrs = attributes(m[0]);
    if (!attrs.name || attrs.type === "submit" || attrs.type === "button") continue;
    const value = attrs.type === "hidden" ? attrs.value : cardField(attrs.name, attrs.type);
    body.set(attrs.name, value ?? attrs.value ?? "");
  }
  const action = new URL(formAttrs.action ?? "", page.url);
  const response = await fetch(action, {
    method: (formAttrs.method ?? "post").toUpperCase(),
    body,
    redirect: "follow",
    headers: { cookie: cookieHeader(), referer: page.url, origin: action.origin },
  });
  return { status: response.status, url: response.url, text: (await response.text()).slice(0, 2000) };
}

/**
 * An `elicitation/create` handler that records every question it is asked in `questions` and
 * answers it: form questions from their context and schema, URL questions by completing the
 * page (then accepting, which for URL mode only says the link was opened).
 */
export function answering(questions) {
  return async (request) => {
    const params = request.params;
    const mode = params.mode ?? "form";
    const question = {
      mode,
      message: humanMessage(params.message),
      context: Object.keys(contextOf(params)),
      contextFrom: contextWithSource(params)[1],
      messageHasContext: messageContext(params.message ?? "") !== null,
      properties: Object.keys(params.requestedSchema?.properties ?? {}),
      schemaHasContext: Boolean(params.requestedSchema?.["x-model-context"]),
    };
    questions.push(question);
    if (mode === "url") {
      question.url = params.url;
      question.page = await completePage(params.url);
      return { action: "accept" };
    }
    question.answer = formAnswer(params);
    return { action: "accept", content: question.answer };
  };
}

/** Run each named path (one after the other, or all at once when they are independent),
 * recording its summary or its error, and print everything as JSON. */
export async function runPaths(paths, selected, { concurrently = false } = {}) {
  const summary = {};
  const attempt = async (name, run) => {
    try {
      summary[name] = await run();
    } catch (error) {
      summary[name] = { error: String(error?.message ?? error), code: error?.code };
    }
  };
  const chosen = Object.entries(paths).filter(([name]) => !selected.length || selected.includes(name));
  if (concurrently) await Promise.all(chosen.map(([name, run]) => attempt(name, run)));
  else for (const [name, run] of chosen) await attempt(name, run);
  process.stdout.write(`${JSON.stringify(summary)}\n`);
}
