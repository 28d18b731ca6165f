/**
 * The service's request and answer bodies, as its OpenAPI document (`docs/openapi.json`,
 * `GET /openapi.json`) states them: one interface per schema, the same name, the same fields,
 * snake_case as on the wire. `test/openapi.test.ts` checks every interface here against the
 * document (fields, which are required, which may be null, the values of each enum).
 */

/** Stable codes of loop kinds (docs/DETECTION.md). */
export type LoopKind =
  | "none"
  | "exact_repeat"
  | "semantic_repeat"
  | "cycle"
  | "same_error"
  | "result_repeat"
  | "similar_response"
  | "content_loop"
  | "collaboration_loop"
  | "step_limit"
  | "transition_cycle"
  | "regression"
  | "budget";

/** What the orchestrator should do next. */
export type ActionType =
  | "continue"
  | "warn"
  | "retry_with_hint"
  | "pivot"
  | "escalate"
  | "pause"
  | "terminate";

export type EscalationTarget = "user" | "planner" | "leader";

/** `paused`: the gate fired, waiting for a human; `terminated`: the budget is spent. */
export type TaskStatus = "active" | "paused" | "terminated";

export type ErrorType =
  | "syntax"
  | "runtime"
  | "logic"
  | "test"
  | "dependency"
  | "network"
  | "auth"
  | "timeout"
  | "rate_limit"
  | "outage"
  | "resource"
  | "unknown";

export type JudgeStatus = "ok" | "none" | "timeout" | "unavailable" | "invalid" | "budget_exhausted";
export type JudgeVerdict = "progress" | "no_progress" | "regressive" | "external";
export type OutcomeKind = "success" | "human_intervention" | "agent_changed" | "abandoned";
export type FeedbackLabel = "false_positive" | "missed_loop";
export type ResetReasonBody = "success" | "human_intervention";

// --- events (the input contract) -----------------------------------------------------------

/** An error the agent hit; loopguard extracts its failure signature. */
export interface Failure {
  message: string;
  error_type?: string | null;
  /** `file:line` or a component name. */
  location?: string | null;
  stack_trace?: string | null;
}

/** What a tool returned: `output` is a string or any JSON. */
export interface ToolResult {
  output?: unknown;
  is_error?: boolean | null;
  exit_code?: number | null;
}

/** A tool invocation (`args` is any JSON), optionally with its result. */
export interface ToolCall {
  tool: string;
  args?: unknown;
  result?: ToolResult | null;
}

/** The text of one LLM turn; `chunk: true` for a piece of one still streaming. */
export interface Response {
  text: string;
  chunk?: boolean;
}

export interface Collaboration {
  from_agent: string;
  to_agent: string;
  request: string;
  /**
   * `to_agent` is a group (a chat manager, a channel): every member sees the message and another
   * member's message answers it. Also inferred from who writes to whom when absent.
   */
  to_group?: boolean;
}

export interface Transition {
  from: string;
  to: string;
  reason?: string | null;
}

/** Objective progress: improving tests or coverage is progress, not a loop. */
export interface Progress {
  tests_passed?: number | null;
  tests_failed?: number | null;
  coverage?: number | null;
  files_created?: number | null;
  dependencies_added?: number | null;
  lines_changed?: number | null;
  note?: string | null;
}

/** How a task or attempt ended: `success` and `human_intervention` reset the counter. */
export interface Outcome {
  result: OutcomeKind;
  note?: string | null;
}

/** One event, tagged by `type`. */
export type Event =
  | ({ type: "failure" } & Failure)
  | ({ type: "tool_call" } & ToolCall)
  | ({ type: "response" } & Response)
  | ({ type: "collaboration" } & Collaboration)
  | ({ type: "transition" } & Transition)
  | ({ type: "progress" } & Progress)
  | ({ type: "outcome" } & Outcome);

/** One event with its routing. */
export interface Envelope {
  /** The unit of state; 1..256 characters. */
  task_id: string;
  /** A subtask shares the loop counter and window of its root task. */
  parent_task_id?: string | null;
  /** Changing agents does not reset the loop counter. */
  agent_id?: string | null;
  /** Workflow step name, for per-step iteration limits. */
  step?: string | null;
  /** The task's goal, shown to the LLM judge. */
  goal?: string | null;
  /** RFC 3339; server time when absent. */
  ts?: string | null;
  event: Event;
}

// --- verdicts (the output contract) ---------------------------------------------------------

export interface Action {
  type: ActionType;
  target?: EscalationTarget | null;
  /** Text to hand the agent or the human: a warning, a hint, the pivot directive. */
  message?: string | null;
}

/** The earlier event an event was matched with. */
export interface Matched {
  seq: number;
  text: string;
  similarity?: number | null;
}

export interface SignatureView {
  error_type?: ErrorType | null;
  location?: string | null;
  normalized: string;
  hash: string;
}

export interface JudgeReport {
  status: JudgeStatus;
  verdict?: JudgeVerdict | null;
  confidence?: number | null;
  reason?: string | null;
  fallback: boolean;
}

export interface Resolution {
  result: string;
  note?: string | null;
  ts: number;
}

/** A loop of another task that looks like this one, and how it was resolved. */
export interface SimilarLoop {
  task_id: string;
  kind: LoopKind;
  tool?: string | null;
  text: string;
  similarity: number;
  seen_at: string;
  resolution?: Resolution | null;
}

/** What a collaboration message did to an artifact: first seen, the same content as its latest
 * version, back to an earlier version, or another content. */
export type ChangeKind = "new" | "unchanged" | "earlier" | "changed";

/** An artifact a collaboration message carried (a program, a file, a document in a fenced
 * block) and what the message did to it since its latest version. */
export interface ArtifactChange {
  /** Its file name, or for an unnamed block the name of the artifact it is a version of. */
  name?: string | null;
  /** The message named it. */
  named?: boolean;
  /** Hash of its whole content (16 hex digits). */
  hash: string;
  /** Its non-blank lines. */
  lines: number;
  change: ChangeKind;
  /** Lines added and removed since its latest version. */
  added?: number;
  removed?: number;
  /** Where lines were added: the enclosing definitions or headings (at most three). */
  parts?: string[];
}

/** One event's verdict. */
export interface Verdict {
  task_id: string;
  /** Position of the event in its root task, from 1. */
  seq: number;
  loop: boolean;
  kind: LoopKind;
  loop_count: number;
  /** Whether the event moved the loop counter. */
  counted: boolean;
  similarity?: number | null;
  matched?: Matched | null;
  signature?: SignatureView | null;
  action: Action;
  reason: string;
  /** Id of the detection rule that found the loop (`loopguard rules` lists them); null when no loop. */
  rule?: string | null;
  judge?: JudgeReport | null;
  pivot_count: number;
  status: TaskStatus;
  similar_loops?: SimilarLoop[];
  /** A collaboration message: the artifacts it carried and how each changed. */
  artifacts?: ArtifactChange[];
}

/** The body of every 4xx and 5xx answer. */
export interface ErrorBody {
  code: string;
  message: string;
  /** The JSON path or parameter at fault; null for the request as a whole. */
  path: string | null;
}

/** One batch item: a verdict, or that event's error. */
export type BatchItem = Verdict | { error: ErrorBody };

// --- tasks ----------------------------------------------------------------------------------

export interface WindowItem {
  seq: number;
  type: string;
  agent_id?: string | null;
  ts: string;
  text: string;
  new_work: boolean;
}

export interface VerdictItem {
  seq: number;
  task_id: string;
  ts: string;
  agent_id?: string | null;
  event_type: string;
  text: string;
  loop: boolean;
  kind: LoopKind;
  counted: boolean;
  similarity?: number | null;
  matched_seq?: number | null;
  matched_text?: string | null;
  action: string;
  loop_count: number;
  reason: string;
  /** The detection rule behind the verdict, when one was. */
  rule?: string | null;
  /** A collaboration message: the artifacts it carried and how each changed. */
  artifacts?: ArtifactChange[];
}

/** A task's state: status, loop counter, pivots, window, last verdicts. */
export interface TaskView {
  task_id: string;
  root_task_id: string;
  status: TaskStatus;
  loop_count: number;
  entropy_count: number;
  pivot_count: number;
  events_total: number;
  kind_counts: Record<string, number>;
  current_step?: string | null;
  step_entries: Record<string, number>;
  window: WindowItem[];
  last_verdicts: VerdictItem[];
  created_at: string;
  updated_at: string;
}

/** A task's audit trail, oldest first. */
export interface HistoryView {
  task_id: string;
  root_task_id: string;
  /** `event` (`loop_detected`, `pivot_issued`, `gate_triggered`, `loop_counter_reset`, ...),
   * `ts`, `seq`, `task_id`, `agent_id` and that event's own fields. */
  records: Record<string, unknown>[];
}

export interface ResetRequest {
  reason: ResetReasonBody;
  by?: string | null;
  note?: string | null;
}

export interface SimilarLoops {
  loops: SimilarLoop[];
}

export interface FeedbackRequest {
  task_id: string;
  seq: number;
  label: FeedbackLabel;
  note?: string | null;
  matched_seq?: number | null;
}

export interface FeedbackRecord {
  id: number;
  ts: number;
  task_id: string;
  root_task_id: string;
  seq: number;
  label: FeedbackLabel;
  kind: LoopKind;
  event_type: string;
  text: string;
  note?: string | null;
  matched_seq?: number | null;
  matched_text?: string | null;
  events: Record<string, unknown>[];
}

/** `GET /readyz`. */
export interface Readiness {
  /** `ready`, `loading`, `failed` or `unavailable`. */
  status: string;
  model: string;
  store: string;
  error?: string | null;
}
