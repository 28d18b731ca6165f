/** When and how long to wait before trying a request again (the Python client's rules). */

import { LoopguardError, RequestTimeoutError, TransportError } from "./errors.js";

/** Passed to `onRetry` before each wait: the attempt about to be made (2 = the first retry),
 * how long the client waits first (seconds), and the error that made it retry. */
export interface RetryEvent {
  attempt: number;
  delay: number;
  error: LoopguardError;
  method: string;
  path: string;
}

export type OnRetry = (event: RetryEvent) => void;

export interface RetryOptions {
  /** Retries after the first attempt (default 3). */
  maxRetries?: number;
  /** First backoff in seconds, doubled per attempt (default 0.25). */
  backoff?: number;
  maxBackoff?: number;
  /** The longest `Retry-After` honoured, in seconds (default 30). */
  maxRetryAfter?: number;
  statuses?: number[];
  jitter?: boolean;
  /** The randomness behind the jitter, in [0, 1) (tests make it fixed). */
  random?: () => number;
}

/**
 * Retries on 429 and 503, and on connections that never reached the server.
 *
 * The wait is the server's `Retry-After` when it sends one (at most `maxRetryAfter`), else an
 * exponential backoff from `backoff` doubling up to `maxBackoff`, with jitter so that clients
 * refused together do not come back together.
 *
 * A request that may have been applied is never sent twice: a `503 timeout` (the server says it
 * "may or may not have been applied") or a client-side timeout is retried only for reads (GET),
 * never for `evaluate`, `reset` or `feedback`. `429 overloaded`, `503 model_unavailable` and
 * `503 storage_error` are answered before anything is applied, so they are retried for every
 * request.
 */
export class RetryPolicy {
  readonly maxRetries: number;
  readonly backoff: number;
  readonly maxBackoff: number;
  readonly maxRetryAfter: number;
  readonly statuses: ReadonlySet<number>;
  readonly jitter: boolean;
  private readonly random: () => number;

  constructor(options: RetryOptions = {}) {
    this.maxRetries = options.maxRetries ?? 3;
    this.backoff = options.backoff ?? 0.25;
    this.maxBackoff = options.maxBackoff ?? 8;
    this.maxRetryAfter = options.maxRetryAfter ?? 30;
    this.statuses = new Set(options.statuses ?? [429, 503]);
    this.jitter = options.jitter ?? true;
    this.random = options.random ?? Math.random;
  }

  /** Whether to try again after `attempt` tries (1 = the first) failed with `error`. */
  shouldRetry(error: LoopguardError, opts: { idempotent: boolean; attempt: number }): boolean {
    if (opts.attempt > this.maxRetries) return false;
    if (error instanceof RequestTimeoutError) return opts.idempotent;
    if (error instanceof TransportError) {
      // Refused or reset before an answer: a POST may still have arrived if the connection broke
      // after sending, so only connecting failures are safe for every request.
      return opts.idempotent || error.code === "connect_error";
    }
    if (error.status === null || !this.statuses.has(error.status)) return false;
    if (error.code === "timeout" && !opts.idempotent) return false;
    return true;
  }

  /** Seconds to wait before attempt `attempt + 1`. */
  delay(attempt: number, error: LoopguardError): number {
    if (error.retryAfter !== null) return Math.min(error.retryAfter, this.maxRetryAfter);
    const base = Math.min(this.maxBackoff, this.backoff * 2 ** (attempt - 1));
    if (this.jitter) return base / 2 + this.random() * (base / 2);
    return base;
  }
}

/** A policy that never retries. */
export const NO_RETRY = new RetryPolicy({ maxRetries: 0 });
