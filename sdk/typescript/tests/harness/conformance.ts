// The conformance check: a fetch for the SDK that validates every answer it hands the SDK against the
// schema of its operation and status in its document, api/openapi.yaml (the contract) or
// api/extensions.yaml (what sandboxd offers beyond it), with JSON Schema 2020-12 (ajv), and every event
// of an event stream against its schema (SandboxEvent; NetworkDenial and NetworkDenialsEnd on the
// stream of a sandbox's denials), as the SDK reads them. An operation of a later group of
// extensions.yaml is checked as soon as it is in the document.

import { readFileSync } from "node:fs";
import path from "node:path";
import { fileURLToPath } from "node:url";
import { Ajv2020, type ValidateFunction } from "ajv/dist/2020.js";
import addFormatsModule from "ajv-formats";
import { createParser, type EventSourceMessage } from "eventsource-parser";
import YAML from "yaml";

const addFormats = addFormatsModule as unknown as (ajv: Ajv2020) => void;

const apiDir = path.resolve(path.dirname(fileURLToPath(import.meta.url)), "../../../../../api");
/** The documents, each with the id its schemas are registered under. */
const documents = [
  { file: "openapi.yaml", id: "sandboxd-openapi" },
  { file: "extensions.yaml", id: "sandboxd-extensions" },
];

interface Operation {
  id: string;
  /** The document it is described in. */
  document: string;
  method: string;
  pattern: RegExp;
  literals: number; // segments of its path that are no template: the most of them wins a tie
  responses: Map<string, Answer>;
}

/** What an answer of one status is: JSON of a schema, an event stream, either (by Content-Type), text of a schema, or no body. */
type Answer =
  | ValidateFunction
  | "stream"
  | { text: ValidateFunction }
  | { json: ValidateFunction; stream: true }
  | "empty"
  | "bytes";

type Json = null | boolean | number | string | Json[] | { [k: string]: Json };

const defsId = documents[0]!.id;

interface Document {
  paths: Record<string, Record<string, { operationId?: string; responses?: Record<string, Json> }>>;
  components: { schemas: Record<string, Json>; responses: Record<string, Json> };
}

/** Rewrites the contract's component references to the schema document the validators share. */
function rewrite(node: Json, prefix: string): Json {
  if (Array.isArray(node)) return node.map((n) => rewrite(n, prefix));
  if (node === null || typeof node !== "object") return node;
  const out: { [k: string]: Json } = {};
  for (const [k, v] of Object.entries(node)) {
    out[k] =
      k === "$ref" && typeof v === "string"
        ? v.replace("#/components/schemas/", `${prefix}#/$defs/`)
        : rewrite(v, prefix);
  }
  return out;
}

/** Validates answers against the contract and remembers which operation and status each one was. */
export class Conformance {
  /** Each answer that broke its schema, or that the contract does not list. */
  readonly violations: string[] = [];
  /**
   * "operationId status" of every answer checked; events count as "streamEvents event", the events of
   * the extensions' streams as "operationId event" ("streamNetworkDenials denial",
   * "streamProcessOutput output", ...).
   */
  readonly covered = new Map<string, number>();
  readonly #ops: Operation[] = [];
  readonly #ajv: Ajv2020;
  readonly #event: ValidateFunction;
  /** The schemas of the events of the extensions' streams, by operation and event. */
  readonly #streams: Record<string, Record<string, ValidateFunction>>;
  readonly #error: ValidateFunction;

  constructor() {
    // strictRequired would refuse the contract's own `not: {required: [image, template]}`; x-capability
    // is extensions.yaml's annotation of a spec.extensions key.
    this.#ajv = new Ajv2020({ allErrors: true, strict: true, strictRequired: false });
    this.#ajv.addKeyword("x-capability");
    addFormats(this.#ajv);
    for (const { file, id } of documents) {
      const doc = YAML.parse(readFileSync(path.join(apiDir, file), "utf8")) as Document;
      this.#ajv.addSchema({ $id: id, $defs: rewrite(doc.components.schemas as Json, "") } as object);
      this.#addOperations(doc, file, id);
    }
    this.#event = this.#ajv.compile({ $ref: `${defsId}#/$defs/SandboxEvent` });
    this.#error = this.#ajv.compile({ $ref: `${defsId}#/$defs/ErrorResponse` });
    const ext = (name: string) => this.#ajv.compile({ $ref: `sandboxd-extensions#/$defs/${name}` });
    this.#streams = {
      streamNetworkDenials: { denial: ext("NetworkDenial"), end: ext("NetworkDenialsEnd") },
      pullImage: { progress: ext("ImageProgress"), done: ext("ImageInfo"), error: this.#error },
      importImage: { progress: ext("ImageProgress"), done: ext("ImageInfo"), error: this.#error },
      watchFiles: {
        change: ext("FileChangeEvent"),
        overflow: ext("FileChangeEvent"),
        heartbeat: ext("StreamHeartbeatEvent"),
        end: ext("ProcessEndEvent"),
      },
      streamProcessOutput: {
        output: ext("ProcessOutputEvent"),
        dropped: ext("ProcessDroppedEvent"),
        heartbeat: ext("StreamHeartbeatEvent"),
        end: ext("ProcessEndEvent"),
      },
    };
  }

  /** Every operationId of both documents. */
  get operations(): { id: string; document: string }[] {
    return this.#ops.map(({ id, document }) => ({ id, document }));
  }

  #addOperations(doc: Document, file: string, defs: string): void {
    for (const [p, item] of Object.entries(doc.paths)) {
      const pattern = new RegExp("^" + p.replace(/\{[^}]+\}/g, "[^/]+") + "$");
      for (const [method, op] of Object.entries(item)) {
        if (method === "parameters" || !op.operationId) continue;
        const responses = new Map<string, Answer>();
        for (const [status, r] of Object.entries(op.responses ?? {})) {
          let resp = r as { $ref?: string; content?: Record<string, { schema: Json }> };
          if (resp.$ref) resp = doc.components.responses[resp.$ref.split("/").pop()!] as typeof resp;
          const content = resp.content ?? {};
          if (content["text/event-stream"] && content["application/json"]) {
            // Either, by the request's Accept: told apart by the answer's Content-Type.
            const json = this.#ajv.compile(rewrite(content["application/json"].schema, defs) as object);
            responses.set(status, { json, stream: true });
          } else if (content["text/event-stream"]) responses.set(status, "stream");
          else if (content["application/json"]) {
            responses.set(status, this.#ajv.compile(rewrite(content["application/json"].schema, defs) as object));
          } else if (content["text/plain"]) {
            responses.set(status, { text: this.#ajv.compile(rewrite(content["text/plain"].schema, defs) as object) });
          } else if (content["application/octet-stream"] || content["application/x-tar"]) {
            responses.set(status, "bytes");
          } else if (Object.keys(content).length === 0) {
            responses.set(status, "empty");
          }
        }
        const literals = p.split("/").filter((seg) => seg !== "" && !seg.startsWith("{")).length;
        this.#ops.push({
          id: op.operationId,
          document: file,
          method: method.toUpperCase(),
          pattern,
          literals,
          responses,
        });
      }
    }
  }

  /** A fetch that checks what it answers with. */
  readonly fetch: typeof globalThis.fetch = async (input, init) => {
    const resp = await globalThis.fetch(input, init);
    const url = new URL(typeof input === "string" ? input : input instanceof URL ? input.href : input.url);
    const method = (init?.method ?? "GET").toUpperCase();
    // A path of the proxy's ({port}/{path}) also matches .../{port}/preview-tokens: the most literal wins.
    const op = this.#ops
      .filter((o) => o.method === method && o.pattern.test(url.pathname))
      .reduce<Operation | undefined>((best, o) => (!best || o.literals > best.literals ? o : best), undefined);
    const what = `${method} ${url.pathname} ${resp.status}`;
    if (!op) {
      // A route the contract lacks (a probe of 405, say): its error body must still be an ErrorResponse.
      return this.#checkJSON(resp, this.#error, `(no operation) ${resp.status}`, what);
    }
    let schema = op.responses.get(String(resp.status));
    if (schema && typeof schema === "object" && "stream" in schema) {
      const streamed = (resp.headers.get("Content-Type") ?? "").startsWith("text/event-stream");
      schema = streamed ? "stream" : schema.json;
    }
    if (schema === "stream") {
      const events = this.#streams[op.id];
      return events
        ? this.#checkEvents(resp, op.id, events, `${op.id} ${resp.status}`)
        : this.#checkStream(resp, `${op.id} ${resp.status}`);
    }
    if (schema === "empty") return this.#checkEmpty(resp, `${op.id} ${resp.status}`, what);
    if (schema === "bytes") {
      // A body of bytes: its media type is all there is to check.
      this.#note(`${op.id} ${resp.status}`);
      const type = resp.headers.get("Content-Type") ?? "";
      if (!type.startsWith("application/")) this.violations.push(`${what}: Content-Type ${type}`);
      return resp;
    }
    if (schema && "text" in schema) return this.#checkText(resp, schema.text, `${op.id} ${resp.status}`, what);
    if (schema) return this.#checkJSON(resp, schema, `${op.id} ${resp.status}`, what);
    if (resp.status < 400) this.violations.push(`${what}: status not in ${op.document} for ${op.id}`);
    // Statuses the contract leaves to the error table (401, 405, 413): an ErrorResponse still.
    return this.#checkJSON(resp, this.#error, `${op.id} ${resp.status} (unlisted)`, what);
  };

  #note(key: string): void {
    this.covered.set(key, (this.covered.get(key) ?? 0) + 1);
  }

  async #checkText(resp: Response, validate: ValidateFunction, key: string, what: string): Promise<Response> {
    const text = await resp
      .clone()
      .text()
      .catch(() => undefined);
    if (text === undefined) return resp;
    this.#note(key);
    const type = resp.headers.get("Content-Type") ?? "";
    if (!type.startsWith("text/plain")) this.violations.push(`${what}: Content-Type ${type}, want text/plain`);
    if (!validate(text)) this.violations.push(`${what}: ${this.#ajv.errorsText(validate.errors)}`);
    return resp;
  }

  async #checkJSON(resp: Response, validate: ValidateFunction, key: string, what: string): Promise<Response> {
    const text = await resp
      .clone()
      .text()
      .catch(() => undefined);
    if (text === undefined) return resp; // the connection broke: nothing was decoded
    this.#note(key);
    let body: unknown;
    try {
      body = JSON.parse(text);
    } catch {
      this.violations.push(`${what}: not JSON: ${text.slice(0, 200)}`);
      return resp;
    }
    if (!validate(body)) {
      this.violations.push(`${what}: ${this.#ajv.errorsText(validate.errors)}: ${text.slice(0, 300)}`);
    }
    return resp;
  }

  async #checkEmpty(resp: Response, key: string, what: string): Promise<Response> {
    const text = await resp
      .clone()
      .text()
      .catch(() => undefined);
    if (text === undefined) return resp;
    this.#note(key);
    if (text !== "") this.violations.push(`${what}: the document says no body, got ${text.slice(0, 200)}`);
    return resp;
  }

  #checkEvents(resp: Response, id: string, schemas: Record<string, ValidateFunction>, key: string): Response {
    this.#note(key);
    return this.#tap(resp, (msg) => {
      const validate = schemas[msg.event ?? ""];
      if (!validate) {
        this.violations.push(`${id}: event ${msg.event} is none of ${Object.keys(schemas).join(", ")}: ${msg.data}`);
        return;
      }
      this.#note(`${id} ${msg.event}`);
      let v: unknown;
      try {
        v = JSON.parse(msg.data);
      } catch {
        this.violations.push(`${id}: data is not JSON: ${msg.data.slice(0, 200)}`);
        return;
      }
      if (!validate(v)) this.violations.push(`${id}: ${this.#ajv.errorsText(validate.errors)}: ${msg.data}`);
    });
  }

  /** resp, its body passed on as it is, each event of it given to onEvent on the way. */
  #tap(resp: Response, onEvent: (msg: EventSourceMessage) => void): Response {
    if (!resp.body) return resp;
    const parser = createParser({ onEvent });
    const decoder = new TextDecoder();
    const tap = new TransformStream<Uint8Array, Uint8Array>({
      transform(chunk, ctl) {
        parser.feed(decoder.decode(chunk, { stream: true }));
        ctl.enqueue(chunk);
      },
    });
    return new Response(resp.body.pipeThrough(tap), {
      status: resp.status,
      statusText: resp.statusText,
      headers: resp.headers,
    });
  }

  #checkStream(resp: Response, key: string): Response {
    this.#note(key);
    return this.#tap(resp, (msg) => {
      this.#note("streamEvents event");
      let ev: unknown;
      try {
        ev = JSON.parse(msg.data);
      } catch {
        this.violations.push(`event stream: data is not JSON: ${msg.data.slice(0, 200)}`);
        return;
      }
      if (!this.#event(ev))
        this.violations.push(`event stream: ${this.#ajv.errorsText(this.#event.errors)}: ${msg.data}`);
      const e = ev as { cursor?: number; type?: string };
      if (msg.id !== String(e.cursor) || msg.event !== e.type) {
        this.violations.push(
          `event stream: id ${msg.id} and event ${msg.event} do not repeat the data's cursor and type: ${msg.data}`,
        );
      }
    });
  }
}
