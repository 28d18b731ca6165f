/**
 * Errors as loopguard reports them: a stable `code`, a `message`, the JSON `path` at fault.
 *
 * Every 4xx/5xx body of the service is `{code, message, path}`, but a proxy in between, an older
 * server or a crash can answer with anything (HTML, plain text, an empty body, another JSON
 * shape). {@link errorFromResponse} never fails on such a body: it keeps what it can read and
 * fills the rest from the HTTP status.
 */

export interface ErrorInit {
  status?: number | null;
  path?: string | null;
  retryAfter?: number | null;
  body?: unknown;
  cause?: unknown;
}

/**
 * An error answered by loopguard (or met on the way to it). `status` is the HTTP status (`null`
 * when no answer came back, or inferred from `code` for an error inside a batch answer); `code`
 * is loopguard's stable code (`invalid_event`, `overloaded`, ...); `path` names the field at
 * fault; `retryAfter` is the server's `Retry-After` in seconds; `body` the body as received.
 */
export class LoopguardError extends Error {
  readonly code: string;
  readonly status: number | null;
  readonly path: string | null;
  readonly retryAfter: number | null;
  readonly body: unknown;
  /** The message as the server wrote it (`message` adds the code, status and path). */
  readonly detail: string;

  constructor(code: string, message: string, init: ErrorInit = {}) {
    const status = init.status ?? null;
    const path = init.path ?? null;
    super(
      `${code}${status !== null ? ` (${status})` : ""}: ${message}${path ? ` at ${path}` : ""}`,
      init.cause !== undefined ? { cause: init.cause } : undefined,
    );
    this.name = new.target.name;
    this.code = code;
    this.status = status;
    this.path = path;
    this.retryAfter = init.retryAfter ?? null;
    this.body = init.body;
    this.detail = message;
  }

}

/** 400: not JSON, not UTF-8, an invalid event, too deep (`path` names the field). */
export class BadRequestError extends LoopguardError {}
/** 401: missing or wrong bearer token. */
export class AuthenticationError extends LoopguardError {}
/** 404: no such task, route or recent verdict, or the loop memory is disabled. */
export class NotFoundError extends LoopguardError {}
/** 409: feedback that contradicts the verdict. */
export class ConflictError extends LoopguardError {}
/** 413: the body, a batch or one text field is over the server's limit. */
export class PayloadTooLargeError extends LoopguardError {}
/** 415: the body was not sent as JSON. */
export class UnsupportedMediaTypeError extends LoopguardError {}
/** 429: the embedding queue is full; the event was not applied. Retried by default. */
export class OverloadedError extends LoopguardError {}
/** 503: the model is unavailable, the store failed, or the request timed out on the server. */
export class ServiceUnavailableError extends LoopguardError {}
/** Any other 5xx (500 `internal` is a bug in loopguard). */
export class ServerError extends LoopguardError {}
/** No answer: the connection failed or broke (`status` is null). */
export class TransportError extends LoopguardError {}
/** No answer within the client's timeout. A POST may or may not have been applied. */
export class RequestTimeoutError extends TransportError {}
/** A 2xx answer whose body is not what the API documents. */
export class InvalidResponseError extends LoopguardError {}

type ErrorClass = new (code: string, message: string, init?: ErrorInit) => LoopguardError;

const BY_STATUS: Record<number, ErrorClass> = {
  400: BadRequestError,
  401: AuthenticationError,
  404: NotFoundError,
  409: ConflictError,
  413: PayloadTooLargeError,
  415: UnsupportedMediaTypeError,
  429: OverloadedError,
  503: ServiceUnavailableError,
};

/** The status each documented code is answered with, for errors that arrive without one. */
const STATUS_OF_CODE: Record<string, number> = {
  invalid_json: 400,
  invalid_utf8: 400,
  invalid_event: 400,
  invalid_otlp: 400,
  too_deep: 400,
  unauthorized: 401,
  not_found: 404,
  conflict: 409,
  body_too_large: 413,
  too_many_events: 413,
  field_too_large: 413,
  unsupported_media_type: 415,
  overloaded: 429,
  model_unavailable: 503,
  storage_error: 503,
  timeout: 503,
  internal: 500,
};

function classFor(status: number | null | undefined): ErrorClass {
  if (status === null || status === undefined) return LoopguardError;
  const c = BY_STATUS[status];
  if (c) return c;
  return status >= 500 ? ServerError : LoopguardError;
}

/** The error of the right class for a status, or for a code when the status is unknown. */
export function errorFor(code: string, message: string, init: ErrorInit = {}): LoopguardError {
  const Cls = classFor(init.status ?? STATUS_OF_CODE[code]);
  return new Cls(code, message, init);
}

/** `Retry-After` in seconds: a number of seconds or an HTTP date; null when unreadable. */
export function parseRetryAfter(value: string | null | undefined, now: number = Date.now()): number | null {
  if (value === null || value === undefined) return null;
  const v = value.trim();
  if (!v) return null;
  if (/^[0-9]+(\.[0-9]+)?$/.test(v)) return Math.max(0, Number(v));
  const when = Date.parse(v);
  if (Number.isNaN(when)) return null;
  return Math.max(0, (when - now) / 1000);
}

function asText(value: unknown): string | null {
  if (value === null || value === undefined) return null;
  if (typeof value === "string") return value;
  return JSON.stringify(value);
}

function isRecord(v: unknown): v is Record<string, unknown> {
  return typeof v === "object" && v !== null && !Array.isArray(v);
}

/** Read `{code, message, path}` (or `{"error": {...}}`, or anything) into an error. */
export function errorFromBody(
  status: number | null,
  body: unknown,
  opts: { reason?: string; retryAfter?: number | null } = {},
): LoopguardError {
  let fields: Record<string, unknown> = {};
  if (isRecord(body)) {
    fields = isRecord(body.error) ? body.error : body;
  }
  let code = typeof fields.code === "string" && fields.code ? fields.code : null;
  if (!code) code = status !== null ? `http_${status}` : "unknown";
  let message: unknown = fields.message;
  if ((message === undefined || message === null) && typeof fields.error === "string") {
    message = fields.error;
  }
  if (message === undefined || message === null) {
    if (typeof body === "string" && body.trim()) message = body.trim().slice(0, 500);
    else if (body !== null && body !== undefined && body !== "" && !(isRecord(body) && Object.keys(body).length === 0)) {
      message = (asText(body) ?? "").slice(0, 500);
    } else message = opts.reason || "no message in the answer";
  }
  const path = fields.path;
  return errorFor(code, typeof message === "string" ? message : asText(message) ?? "", {
    status,
    path: typeof path === "string" ? path : asText(path),
    retryAfter: opts.retryAfter ?? null,
    body,
  });
}

/** The error for a fetch `Response` with a 4xx/5xx status, whatever its body. */
export async function errorFromResponse(resp: globalThis.Response): Promise<LoopguardError> {
  let text = "";
  try {
    text = await resp.text();
  } catch {
    text = "";
  }
  let body: unknown = null;
  if (text.trim()) {
    try {
      body = JSON.parse(text);
    } catch {
      body = text;
    }
  }
  return errorFromBody(resp.status, body, {
    reason: resp.statusText,
    retryAfter: parseRetryAfter(resp.headers.get("retry-after")),
  });
}
