/**
 * Builders for the events an orchestrator sends (the input contract), and the envelope around
 * them. Plain objects work everywhere the client takes an event; these fill in `type` and leave
 * out what is not given.
 */

import type {
  Collaboration,
  Envelope,
  Event,
  Failure,
  OutcomeKind,
  Progress,
  ToolResult,
} from "./types.js";

/** The routing of a bare event: its task (required somewhere), subtask parent, agent, step,
 * goal and time (server time when absent). */
export interface Routing {
  taskId?: string;
  parentTaskId?: string;
  agentId?: string;
  step?: string;
  goal?: string;
  ts?: string | Date;
}

/** What `evaluate` takes: a whole envelope, or a bare event with `taskId` in the routing. */
export type EventLike = Envelope | Event | (Omit<Envelope, "task_id"> & { task_id?: string });

function compact<T extends Record<string, unknown>>(o: T): T {
  return Object.fromEntries(Object.entries(o).filter(([, v]) => v !== undefined && v !== null)) as T;
}

export function failure(message: string, more: Omit<Failure, "message"> = {}): Event {
  return compact({ type: "failure" as const, message, ...more });
}

export function toolResult(
  output: unknown,
  more: { isError?: boolean; exitCode?: number } = {},
): ToolResult {
  return compact({ output, is_error: more.isError, exit_code: more.exitCode });
}

export function toolCall(tool: string, args?: unknown, result?: ToolResult): Event {
  return compact({ type: "tool_call" as const, tool, args, result });
}

/** One LLM turn; `chunk: true` for a piece of one still streaming. */
export function response(text: string, chunk = false): Event {
  return chunk ? { type: "response", text, chunk: true } : { type: "response", text };
}

export function collaboration(c: Collaboration): Event {
  return { type: "collaboration", ...c };
}

export function transition(from: string, to: string, reason?: string): Event {
  return compact({ type: "transition" as const, from, to, reason });
}

export function progress(p: Progress): Event {
  return compact({ type: "progress" as const, ...p });
}

/** `success` and `human_intervention` reset the loop counter. */
export function outcome(result: OutcomeKind, note?: string): Event {
  return compact({ type: "outcome" as const, result, note });
}

function ts(value: string | Date | null | undefined): string | undefined {
  if (value === null || value === undefined) return undefined;
  if (typeof value === "string") return value;
  if (Number.isNaN(value.getTime())) throw new TypeError("ts: an invalid Date");
  return value.toISOString();
}

/**
 * The JSON envelope for a whole envelope, or for a bare event and the routing given here. An
 * object with an `event` key is a whole envelope; the routing then fills in only what it leaves
 * out.
 */
export function envelope(event: EventLike, routing: Routing = {}): Envelope {
  const given: Record<string, unknown> =
    "event" in event ? { ...event, ts: ts((event as Envelope).ts) } : { event };
  const fill: Record<string, unknown> = {
    task_id: routing.taskId,
    parent_task_id: routing.parentTaskId,
    agent_id: routing.agentId,
    step: routing.step,
    goal: routing.goal,
    ts: ts(routing.ts),
  };
  for (const [k, v] of Object.entries(fill)) {
    if (v !== undefined && (given[k] === undefined || given[k] === null)) given[k] = v;
  }
  const out = compact(given);
  if (typeof out.task_id !== "string" || !out.task_id) {
    throw new TypeError("an event needs a task: give an envelope with task_id, or routing.taskId");
  }
  return out as unknown as Envelope;
}
