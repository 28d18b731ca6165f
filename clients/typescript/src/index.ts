/**
 * TypeScript client for loopguard: tells an agent orchestrator, event by event, whether its LLM
 * agent is stuck in a loop (also when it rewords what it repeats) and what to do next.
 *
 * ```ts
 * import { Client, toolCall, toolResult } from "loopguard";
 * const lg = new Client("http://127.0.0.1:8080");
 * const v = await lg.evaluate(failure("TypeError: x is undefined"), { taskId: "t-42" });
 * v.loop; v.kind; v.action.type;
 * ```
 */

export { Client, DEFAULT_URL, VERSION, guidesAgent, stopsAgent } from "./client.js";
export type { BatchResult, ClientOptions } from "./client.js";
export {
  AuthenticationError,
  BadRequestError,
  ConflictError,
  InvalidResponseError,
  LoopguardError,
  NotFoundError,
  OverloadedError,
  PayloadTooLargeError,
  RequestTimeoutError,
  ServerError,
  ServiceUnavailableError,
  TransportError,
  UnsupportedMediaTypeError,
  errorFor,
  errorFromBody,
  errorFromResponse,
  parseRetryAfter,
} from "./errors.js";
export {
  collaboration,
  envelope,
  failure,
  outcome,
  progress,
  response,
  toolCall,
  toolResult,
  transition,
} from "./events.js";
export type { EventLike, Routing } from "./events.js";
export { NO_RETRY, RetryPolicy } from "./retry.js";
export type { OnRetry, RetryEvent, RetryOptions } from "./retry.js";
export type * from "./types.js";
