/**
 * The client for the loopguard service. No dependency: it uses the platform's `fetch` (Node 18+,
 * Deno, Bun, browsers, edge runtimes), or the one you pass.
 */

import {
  InvalidResponseError,
  LoopguardError,
  RequestTimeoutError,
  ServiceUnavailableError,
  TransportError,
  errorFromBody,
  errorFromResponse,
} from "./errors.js";
import { envelope, type EventLike, type Routing } from "./events.js";
import { RetryPolicy, type OnRetry } from "./retry.js";
import type {
  FeedbackLabel,
  FeedbackRecord,
  HistoryView,
  Readiness,
  ResetReasonBody,
  SimilarLoop,
  TaskView,
  Verdict,
} from "./types.js";

/** Where `loopguard serve` listens by default; `LOOPGUARD_URL` overrides it. */
export const DEFAULT_URL = "http://127.0.0.1:8080";

export const VERSION = "0.1.0";

export interface ClientOptions {
  /** Default `$LOOPGUARD_URL`, then {@link DEFAULT_URL}. */
  baseUrl?: string;
  /** Sent as `Authorization: Bearer`; default `$LOOPGUARD_TOKEN`. */
  token?: string | null;
  /** Per attempt, in milliseconds (default 10 000). */
  timeoutMs?: number;
  /** When to retry ({@link RetryPolicy}; `NO_RETRY` turns it off). */
  retry?: RetryPolicy;
  /** Called before each wait (for logs or metrics). */
  onRetry?: OnRetry;
  /** More headers on every request. */
  headers?: Record<string, string>;
  /** Your own `fetch` (proxies, instrumentation, tests). */
  fetch?: typeof globalThis.fetch;
}

/** One batch item: a verdict, or the error for that event (its `path` starts with `[i]`). */
export type BatchResult = Array<Verdict | LoopguardError>;

interface Call<T> {
  method: "GET" | "POST" | "DELETE";
  path: string;
  parse: (resp: globalThis.Response) => Promise<T>;
  query?: Record<string, string | number | undefined>;
  body?: unknown;
  /** Safe to send twice: reads. Writes are retried only when the server applied nothing. */
  idempotent?: boolean;
  /** Statuses whose body is an answer, not an error (`/readyz` answers 503 while loading). */
  answerStatuses?: number[];
}

function env(name: string): string | undefined {
  const proc = (globalThis as { process?: { env?: Record<string, string | undefined> } }).process;
  return proc?.env?.[name] || undefined;
}

async function json(resp: globalThis.Response): Promise<unknown> {
  const text = await resp.text();
  try {
    return JSON.parse(text);
  } catch {
    throw new InvalidResponseError(
      "invalid_response",
      `${resp.url} answered ${resp.status} with a body that is not JSON: ${JSON.stringify(text.slice(0, 200))}`,
      { status: resp.status, body: text },
    );
  }
}

function isRecord(v: unknown): v is Record<string, unknown> {
  return typeof v === "object" && v !== null && !Array.isArray(v);
}

/** The answer as `T` when it is a JSON object holding `keys`. */
function object<T>(what: string, ...keys: string[]) {
  return async (resp: globalThis.Response): Promise<T> => {
    const body = await json(resp);
    if (!isRecord(body) || keys.some((k) => !(k in body))) {
      throw new InvalidResponseError("invalid_response", `expected ${what} with ${keys.join(", ")}`, {
        status: resp.status,
        body,
      });
    }
    return body as T;
  };
}

const parseVerdict = object<Verdict>("a verdict", "task_id", "seq", "loop", "kind", "action");
const parseTask = object<TaskView>("a task", "task_id", "status", "loop_count");

function taskPath(taskId: string, suffix = ""): string {
  if (typeof taskId !== "string" || !taskId) throw new TypeError("taskId must be a non-empty string");
  // Subtask ids often hold slashes (`epic-9/sub-2`): they are one path segment.
  return `/v1/tasks/${encodeURIComponent(taskId)}${suffix}`;
}

/** Connection failures that happened before anything was sent. */
const CONNECT_CODES = new Set([
  "ECONNREFUSED",
  "ENOTFOUND",
  "EAI_AGAIN",
  "EHOSTUNREACH",
  "ENETUNREACH",
  "UND_ERR_CONNECT_TIMEOUT",
]);

function transportError(e: unknown, method: string, path: string, timedOut: boolean): TransportError {
  if (timedOut) {
    return new RequestTimeoutError("client_timeout", `no answer to ${method} ${path} within the client's timeout`, {
      cause: e,
    });
  }
  const cause = (e as { cause?: { code?: string } })?.cause;
  const code = cause?.code ?? (e as { code?: string })?.code;
  if (code && CONNECT_CODES.has(code)) {
    return new TransportError("connect_error", `could not connect for ${method} ${path}: ${code}`, { cause: e });
  }
  return new TransportError("connection_error", `${method} ${path} failed: ${String(e)}`, { cause: e });
}

const sleep = (secs: number) => new Promise((resolve) => setTimeout(resolve, secs * 1000));

/**
 * A loopguard client.
 *
 * ```ts
 * const lg = new Client("http://127.0.0.1:8080");
 * const v = await lg.evaluate(toolCall("bash", { command: "pytest -q" }, toolResult("1 failed", { isError: true })),
 *                             { taskId: "t-42", agentId: "backend-dev" });
 * if (v.action.type === "pivot") agent.addUserMessage(v.action.message!);
 * else if (stopsAgent(v)) handOver(v.reason);
 * ```
 */
export class Client {
  readonly baseUrl: string;
  readonly retry: RetryPolicy;
  readonly timeoutMs: number;
  private readonly onRetry: OnRetry | undefined;
  private readonly headers: Record<string, string>;
  private readonly fetchImpl: typeof globalThis.fetch;

  constructor(baseUrl?: string | ClientOptions, options: ClientOptions = {}) {
    const opts: ClientOptions = typeof baseUrl === "object" ? baseUrl : { ...options, baseUrl: baseUrl ?? options.baseUrl };
    this.baseUrl = (opts.baseUrl || env("LOOPGUARD_URL") || DEFAULT_URL).replace(/\/+$/, "");
    const token = opts.token !== undefined ? opts.token : env("LOOPGUARD_TOKEN");
    this.retry = opts.retry ?? new RetryPolicy();
    this.timeoutMs = opts.timeoutMs ?? 10_000;
    this.onRetry = opts.onRetry;
    this.headers = { accept: "application/json" };
    // Browsers refuse to set User-Agent; elsewhere it says who calls.
    if (!("document" in globalThis)) this.headers["user-agent"] = `loopguard-typescript/${VERSION}`;
    if (token) this.headers.authorization = `Bearer ${token}`;
    Object.assign(this.headers, opts.headers ?? {});
    const f = opts.fetch ?? globalThis.fetch;
    if (typeof f !== "function") throw new TypeError("no fetch: pass options.fetch");
    this.fetchImpl = f;
  }

  private async send<T>(call: Call<T>): Promise<T> {
    let url = this.baseUrl + call.path;
    const query = Object.entries(call.query ?? {}).filter(([, v]) => v !== undefined);
    if (query.length) url += "?" + new URLSearchParams(query.map(([k, v]) => [k, String(v)])).toString();
    const headers: Record<string, string> = { ...this.headers };
    let body: string | undefined;
    if (call.body !== undefined) {
      // NaN and Infinity are not JSON: JSON.stringify would quietly send null.
      body = JSON.stringify(call.body, (key, value) => {
        if (typeof value === "number" && !Number.isFinite(value)) {
          throw new TypeError(`${key || "the body"}: ${value} is not JSON`);
        }
        return value;
      });
      headers["content-type"] = "application/json";
    }
    for (let attempt = 1; ; attempt++) {
      let err: LoopguardError;
      const controller = new AbortController();
      let timedOut = false;
      const timer = setTimeout(() => {
        timedOut = true;
        controller.abort();
      }, this.timeoutMs);
      try {
        const resp = await this.fetchImpl(url, { method: call.method, headers, body, signal: controller.signal });
        if (resp.status < 400 || call.answerStatuses?.includes(resp.status)) {
          return await call.parse(resp);
        }
        err = await errorFromResponse(resp);
      } catch (e) {
        if (e instanceof LoopguardError) throw e;
        err = transportError(e, call.method, call.path, timedOut);
      } finally {
        clearTimeout(timer);
      }
      if (!this.retry.shouldRetry(err, { idempotent: call.idempotent ?? false, attempt })) throw err;
      const delay = this.retry.delay(attempt, err);
      this.onRetry?.({ attempt: attempt + 1, delay, error: err, method: call.method, path: call.path });
      await sleep(delay);
    }
  }

  /** One event → its verdict. `event` is a whole envelope, or a bare event with
   * `routing.taskId`. */
  evaluate(event: EventLike, routing: Routing = {}): Promise<Verdict> {
    return this.send({ method: "POST", path: "/v1/evaluate", parse: parseVerdict, body: envelope(event, routing) });
  }

  /** Many events in one request → one item per event, in order: a verdict, or the error for
   * that event. Events of one task are applied in order. Items refused with `overloaded` are not
   * retried here: a later event of the same task may already have been applied. */
  evaluateBatch(events: Iterable<EventLike>, routing: Pick<Routing, "taskId" | "agentId"> = {}): Promise<BatchResult> {
    const body = [...events].map((e) => envelope(e, routing));
    return this.send({
      method: "POST",
      path: "/v1/evaluate",
      body,
      parse: async (resp) => {
        const items = await json(resp);
        if (!Array.isArray(items)) {
          throw new InvalidResponseError("invalid_response", "a batch is answered with an array", { body: items });
        }
        return items.map((item): Verdict | LoopguardError =>
          isRecord(item) && "error" in item && !("seq" in item) ? errorFromBody(null, item) : (item as unknown as Verdict),
        );
      },
    });
  }

  /** A task's status, loop counter, pivots, window and last verdicts (a subtask shows its
   * root's). */
  getTask(taskId: string): Promise<TaskView> {
    return this.send({ method: "GET", path: taskPath(taskId), parse: parseTask, idempotent: true });
  }

  /** The audit trail, oldest first: the newest `limit` records (server default 100). */
  history(taskId: string, options: { limit?: number } = {}): Promise<HistoryView> {
    return this.send({
      method: "GET",
      path: taskPath(taskId, "/history"),
      query: { limit: options.limit },
      parse: object<HistoryView>("a history", "task_id", "records"),
      idempotent: true,
    });
  }

  /** Reset the loop counter (`success` or `human_intervention`); `note` says how the loop was
   * resolved and is offered to other tasks that hit a similar loop. */
  reset(
    taskId: string,
    reason: ResetReasonBody = "human_intervention",
    options: { by?: string; note?: string } = {},
  ): Promise<TaskView> {
    const body: Record<string, string> = { reason };
    if (options.by !== undefined) body.by = options.by;
    if (options.note !== undefined) body.note = options.note;
    return this.send({ method: "POST", path: taskPath(taskId, "/reset"), body, parse: parseTask });
  }

  /** Forget a task (its root) and its loops in the loop memory. */
  async deleteTask(taskId: string): Promise<void> {
    // Deleting twice ends in the same state (the second answers 404), so it may be retried.
    await this.send({ method: "DELETE", path: taskPath(taskId), parse: async () => undefined, idempotent: true });
  }

  /** The closest loops seen in any task, with how they were resolved. */
  similarLoops(text: string, options: { k?: number; minSimilarity?: number } = {}): Promise<SimilarLoop[]> {
    return this.send({
      method: "GET",
      path: "/v1/loops/similar",
      query: { text, k: options.k, min_similarity: options.minSimilarity },
      idempotent: true,
      parse: async (resp) => {
        const body = await json(resp);
        if (!isRecord(body) || !Array.isArray(body.loops)) {
          throw new InvalidResponseError("invalid_response", "expected {loops: [...]}", { body });
        }
        return body.loops as SimilarLoop[];
      },
    });
  }

  /** Mark one of the task's recent verdicts `false_positive` or `missed_loop`. */
  feedback(
    taskId: string,
    seq: number,
    label: FeedbackLabel,
    options: { note?: string; matchedSeq?: number } = {},
  ): Promise<FeedbackRecord> {
    const body: Record<string, unknown> = { task_id: taskId, seq, label };
    if (options.note !== undefined) body.note = options.note;
    if (options.matchedSeq !== undefined) body.matched_seq = options.matchedSeq;
    return this.send({
      method: "POST",
      path: "/v1/feedback",
      body,
      parse: object<FeedbackRecord>("a feedback record", "id", "task_id", "label"),
    });
  }

  /** All feedback as labelled `pairs` or `runs`, for `loopguard calibrate`. */
  exportFeedback(format: "pairs" | "runs" = "pairs"): Promise<Record<string, unknown>[]> {
    return this.send({
      method: "GET",
      path: "/v1/feedback/export",
      query: { format },
      idempotent: true,
      parse: async (resp) => {
        const text = await resp.text();
        return text
          .split("\n")
          .map((line, i) => [line, i + 1] as const)
          .filter(([line]) => line.trim())
          .map(([line, n]) => {
            try {
              return JSON.parse(line) as Record<string, unknown>;
            } catch (e) {
              throw new InvalidResponseError("invalid_response", `line ${n} of the export is not JSON: ${e}`, {
                body: text,
              });
            }
          });
      },
    });
  }

  livez(): Promise<boolean> {
    return this.send({ method: "GET", path: "/livez", parse: async (r) => r.status === 200, idempotent: true });
  }

  /** `/readyz`; a 503 here is the answer (`loading`, `failed`), not a refusal: not retried. */
  readyz(): Promise<Readiness> {
    return this.send({
      method: "GET",
      path: "/readyz",
      idempotent: true,
      answerStatuses: [503],
      parse: async (resp) => {
        let body: unknown = null;
        try {
          body = JSON.parse(await resp.text());
        } catch {
          body = null;
        }
        if (!isRecord(body) || !("status" in body)) {
          throw resp.status >= 400
            ? errorFromBody(resp.status, body)
            : new InvalidResponseError("invalid_response", "/readyz answered without a status", { body });
        }
        return body as unknown as Readiness;
      },
    });
  }

  /** Wait until the model is warm and the store open; throw if it failed or took too long. */
  async waitReady(options: { timeoutMs?: number; intervalMs?: number } = {}): Promise<Readiness> {
    const timeoutMs = options.timeoutMs ?? 60_000;
    const deadline = Date.now() + timeoutMs;
    let last: Readiness | null = null;
    let lastError: LoopguardError | null = null;
    for (;;) {
      try {
        last = await this.readyz();
        if (last.status === "ready") return last;
        if (last.status === "failed") break;
      } catch (e) {
        if (!(e instanceof TransportError)) throw e;
        lastError = e;
      }
      if (Date.now() >= deadline) break;
      await sleep((options.intervalMs ?? 200) / 1000);
    }
    if (last?.status === "failed") {
      throw new ServiceUnavailableError("model_unavailable", `loopguard failed to start: ${last.error}`, { status: 503 });
    }
    const why = last ? `last status ${JSON.stringify(last.status)}` : `last error: ${lastError?.message}`;
    throw new LoopguardError("not_ready", `loopguard was not ready within ${timeoutMs} ms (${why})`);
  }

  /** Prometheus text. */
  metrics(): Promise<string> {
    return this.send({ method: "GET", path: "/metrics", parse: (r) => r.text(), idempotent: true });
  }

  openapi(): Promise<Record<string, unknown>> {
    return this.send({
      method: "GET",
      path: "/openapi.json",
      parse: object<Record<string, unknown>>("an OpenAPI document", "openapi", "paths"),
      idempotent: true,
    });
  }
}

/** The actions that stop the agent: escalate, pause, terminate. */
export function stopsAgent(v: Verdict): boolean {
  return v.action.type === "escalate" || v.action.type === "pause" || v.action.type === "terminate";
}

/** The actions whose message goes to the agent: warn, retry_with_hint, pivot. */
export function guidesAgent(v: Verdict): boolean {
  return v.action.type === "warn" || v.action.type === "retry_with_hint" || v.action.type === "pivot";
}
