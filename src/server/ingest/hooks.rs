//! Coding-agent hooks: `POST /v1/hooks/claude-code` and `POST /v1/hooks/gemini-cli` take the hook
//! payload as the agent sends it (Claude Code's HTTP hook posts it as is; `loopguard hook` posts
//! what a command hook reads on stdin) and answer in that hook's own output format.
//!
//! The session is the task. A finished tool call (`PostToolUse`, `AfterTool`) is a `tool_call`
//! with its result; a failed one (`PostToolUseFailure`, an `AfterTool` with an `error`) a
//! `tool_call` with a failed result, so a reworded retry of a failing command is recognised by
//! its call and its error; the agent's reply at the end of a turn (`Stop`, `SubagentStop`,
//! `AfterAgent`) a `response`; an API error that ended a turn (`StopFailure`) a `failure`.
//!
//! The hook before a tool runs (`PreToolUse`, `BeforeTool`) adds no event (the call comes back
//! with its result; twice would make every call a repeat of itself): it enforces the gate,
//! denying every tool call while the task is paused. A new prompt from the person (`UserPromptSubmit`,
//! `BeforeAgent`) is a `collaboration` from `user` to the agent — the person's turn, which the
//! agent's work answers; a person asking again after answers that changed nothing is a loop, and
//! the agent reads so next to the prompt (a prompt is never refused). To a paused session, the
//! prompt is first the human intervention: it resets the counter.
//!
//! Answers follow the verdict's action ([`answer`]; docs/INTEGRATIONS.md has the table): nothing
//! on `continue`, context on a warning, a block with the pivot directive, a stop at the gate.

use super::integrations;
use crate::server::http::body::{read_json, typed, Limit};
use crate::server::http::error::{ApiError, ErrorBody};
use crate::server::metrics::HookLabels;
use crate::server::AppState;
use axum::body::Body;
use axum::extract::State;
use axum::http::HeaderMap;
use axum::Json;
use loopguard::engine::ResetReason;
use loopguard::event::{Collaboration, Envelope, Event, Failure, Response, ToolCall, ToolResult};
use loopguard::verdict::{ActionType, TaskStatus, Verdict};
use serde::{Deserialize, Serialize};
use serde_json::{Map, Value};
use std::sync::Arc;

/// Who a prompt is from: the person at the agent's keyboard.
const PERSON: &str = "user";

/// Which agent sent the hook.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Agent {
    ClaudeCode,
    GeminiCli,
}

impl Agent {
    fn label(self) -> &'static str {
        match self {
            Agent::ClaudeCode => "claude_code",
            Agent::GeminiCli => "gemini_cli",
        }
    }

    /// The agent id events carry when the payload names no subagent.
    fn name(self) -> &'static str {
        match self {
            Agent::ClaudeCode => "claude-code",
            Agent::GeminiCli => "gemini-cli",
        }
    }
}

/// Where in the agent's loop the hook fired.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Point {
    BeforeTool,
    AfterTool,
    ToolFailed,
    Reply,
    Prompt,
    ApiError,
    Other,
}

impl Point {
    fn label(self) -> &'static str {
        match self {
            Point::BeforeTool => "before_tool",
            Point::AfterTool => "after_tool",
            Point::ToolFailed => "tool_failed",
            Point::Reply => "reply",
            Point::Prompt => "prompt",
            Point::ApiError => "api_error",
            Point::Other => "other",
        }
    }
}

/// A Claude Code hook's input, as Claude Code sends it (code.claude.com/docs/en/hooks, "Hook
/// input and output"): the fields loopguard knows; every other field is accepted and ignored.
#[derive(Deserialize, utoipa::ToSchema)]
#[expect(
    dead_code,
    reason = "the fields loopguard does not read are declared for the OpenAPI document"
)]
pub struct ClaudeCodeHook {
    /// The session: loopguard's task id (1..256 characters, no control characters).
    pub session_id: String,
    /// `PostToolUse`, `PostToolUseFailure`, `Stop`, `SubagentStop` and `StopFailure` are
    /// evaluated; `PreToolUse` enforces the gate; `UserPromptSubmit` resumes a paused session;
    /// any other event is answered `{}`.
    pub hook_event_name: String,
    #[serde(default)]
    pub transcript_path: Option<String>,
    #[serde(default)]
    pub cwd: Option<String>,
    #[serde(default)]
    pub permission_mode: Option<String>,
    /// Inside a subagent: its id.
    #[serde(default)]
    pub agent_id: Option<String>,
    /// The subagent's (or `--agent`'s) name: the event's agent id.
    #[serde(default)]
    pub agent_type: Option<String>,
    #[serde(default)]
    pub tool_name: Option<String>,
    /// The tool's arguments.
    #[serde(default)]
    #[schema(value_type = Option<Object>)]
    pub tool_input: Option<Map<String, Value>>,
    /// What the tool returned (`PostToolUse`): its own shape, e.g. Bash's `stdout` and `stderr`.
    #[serde(default)]
    #[schema(value_type = Option<Object>)]
    pub tool_response: Option<Value>,
    #[serde(default)]
    pub tool_use_id: Option<String>,
    /// Why the tool failed (`PostToolUseFailure`); for Bash, `Exit code N` then the output.
    #[serde(default)]
    pub error: Option<String>,
    /// A failure that was an abort (`PostToolUseFailure`): not evaluated.
    #[serde(default)]
    pub is_interrupt: Option<bool>,
    /// The text of the agent's final reply (`Stop`, `SubagentStop`).
    #[serde(default)]
    pub last_assistant_message: Option<String>,
    #[serde(default)]
    pub stop_hook_active: Option<bool>,
    /// The person's prompt (`UserPromptSubmit`).
    #[serde(default)]
    pub prompt: Option<String>,
    /// `StopFailure`: the API error's category (`rate_limit`, `server_error`, ...).
    #[serde(default)]
    pub error_type: Option<String>,
    /// `StopFailure`: the API error's message.
    #[serde(default)]
    pub error_message: Option<String>,
}

/// A Gemini CLI hook's input, as Gemini CLI writes it to a command hook's stdin
/// (geminicli.com/docs/hooks/reference): the fields loopguard knows; others are ignored.
#[derive(Deserialize, utoipa::ToSchema)]
#[expect(
    dead_code,
    reason = "the fields loopguard does not read are declared for the OpenAPI document"
)]
pub struct GeminiCliHook {
    /// The session: loopguard's task id (1..256 characters, no control characters).
    pub session_id: String,
    /// `AfterTool` and `AfterAgent` are evaluated; `BeforeTool` enforces the gate; `BeforeAgent`
    /// resumes a paused session; any other event is answered `{}`.
    pub hook_event_name: String,
    #[serde(default)]
    pub transcript_path: Option<String>,
    #[serde(default)]
    pub cwd: Option<String>,
    #[serde(default)]
    pub timestamp: Option<String>,
    #[serde(default)]
    pub tool_name: Option<String>,
    /// The tool's arguments.
    #[serde(default)]
    #[schema(value_type = Option<Object>)]
    pub tool_input: Option<Map<String, Value>>,
    /// `AfterTool`: `llmContent` (what the model reads), `returnDisplay`, and `error` when the
    /// tool failed (older versions sent the tool's text as a string).
    #[serde(default)]
    #[schema(value_type = Option<Object>)]
    pub tool_response: Option<Value>,
    /// The user's prompt (`BeforeAgent`, `AfterAgent`).
    #[serde(default)]
    pub prompt: Option<String>,
    /// The agent's final reply of the turn (`AfterAgent`).
    #[serde(default)]
    pub prompt_response: Option<String>,
    #[serde(default)]
    pub stop_hook_active: Option<bool>,
}

/// The hook's answer, in the agent's own output format. `{}` lets the agent go on.
#[derive(Serialize, Default, Debug, PartialEq, utoipa::ToSchema)]
pub struct HookAnswer {
    /// `false` stops the agent (the gate, an escalation, the budget).
    #[serde(rename = "continue", skip_serializing_if = "Option::is_none")]
    pub proceed: Option<bool>,
    /// Shown to the person when `continue` is `false`.
    #[serde(rename = "stopReason", skip_serializing_if = "Option::is_none")]
    pub stop_reason: Option<String>,
    /// Shown to the person.
    #[serde(rename = "systemMessage", skip_serializing_if = "Option::is_none")]
    pub system_message: Option<String>,
    /// `block` (Claude Code) or `deny` (Gemini CLI): the pivot directive or the stop message in
    /// `reason` goes to the model.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub decision: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub reason: Option<String>,
    #[serde(rename = "hookSpecificOutput", skip_serializing_if = "Option::is_none")]
    pub hook_specific_output: Option<HookSpecificOutput>,
}

#[derive(Serialize, Debug, PartialEq, utoipa::ToSchema)]
pub struct HookSpecificOutput {
    #[serde(rename = "hookEventName")]
    pub hook_event_name: String,
    /// Added to the model's context next to the tool result: a warning, a hint, the directive.
    #[serde(rename = "additionalContext", skip_serializing_if = "Option::is_none")]
    pub additional_context: Option<String>,
    /// `PreToolUse`: `deny` while the session is paused.
    #[serde(rename = "permissionDecision", skip_serializing_if = "Option::is_none")]
    pub permission_decision: Option<String>,
    #[serde(
        rename = "permissionDecisionReason",
        skip_serializing_if = "Option::is_none"
    )]
    pub permission_decision_reason: Option<String>,
}

/// One hook event, whichever agent sent it.
struct HookEvent {
    session: String,
    name: String,
    point: Point,
    agent_id: String,
    tool: Option<String>,
    input: Value,
    output: Value,
    exit_code: Option<i64>,
    /// The reply's text, or the API error's message.
    text: Option<String>,
    error_type: Option<String>,
    prompt: Option<String>,
}

impl HookEvent {
    fn new(agent: Agent, session: String, name: String, point: Point) -> Self {
        HookEvent {
            session,
            name,
            point,
            agent_id: agent.name().to_string(),
            tool: None,
            input: Value::Null,
            output: Value::Null,
            exit_code: None,
            text: None,
            error_type: None,
            prompt: None,
        }
    }
}

impl ClaudeCodeHook {
    fn into_event(self) -> HookEvent {
        let point = match self.hook_event_name.as_str() {
            "PreToolUse" => Point::BeforeTool,
            "PostToolUse" => Point::AfterTool,
            // An abort is the person (or a timeout) stopping the tool, not the agent failing.
            "PostToolUseFailure" if self.is_interrupt == Some(true) => Point::Other,
            "PostToolUseFailure" => Point::ToolFailed,
            "Stop" | "SubagentStop" => Point::Reply,
            "UserPromptSubmit" => Point::Prompt,
            "StopFailure" => Point::ApiError,
            _ => Point::Other,
        };
        let mut e = HookEvent::new(
            Agent::ClaudeCode,
            self.session_id,
            self.hook_event_name,
            point,
        );
        if let Some(a) = self.agent_type.filter(|a| !a.is_empty()) {
            e.agent_id = a;
        }
        e.tool = self.tool_name;
        e.input = self.tool_input.map(Value::Object).unwrap_or(Value::Null);
        match point {
            Point::AfterTool => e.output = claude_output(self.tool_response.unwrap_or_default()),
            Point::ToolFailed => {
                let (code, rest) = exit_code_line(self.error.as_deref().unwrap_or(""));
                e.exit_code = code;
                e.output = Value::String(rest.to_string());
            }
            Point::Reply => e.text = self.last_assistant_message,
            Point::ApiError => {
                e.text = self.error_message.or_else(|| self.error_type.clone());
                e.error_type = self.error_type.as_deref().and_then(api_error_class);
            }
            Point::Prompt => e.prompt = self.prompt,
            Point::BeforeTool | Point::Other => {}
        }
        e
    }
}

impl GeminiCliHook {
    fn into_event(self) -> HookEvent {
        let response = match self.tool_response {
            Some(Value::Object(m)) => m,
            Some(Value::Null) | None => Map::new(),
            Some(Value::String(text)) => {
                Map::from_iter([("llmContent".into(), Value::String(text))])
            }
            Some(other) => {
                Map::from_iter([("llmContent".into(), Value::String(other.to_string()))])
            }
        };
        let mut output = gemini_output(&response);
        // A shell command's exit code is in its text, with the command and process ids around
        // the output: keep what it printed, so two wordings of one failing command compare.
        let shell = shell_report(&output);
        let exit_code = shell.as_ref().and_then(|r| r.1);
        if let Some((printed, _)) = shell {
            output = printed;
        }
        let failed = response.get("error").is_some_and(|e| !e.is_null())
            || exit_code.is_some_and(|c| c != 0);
        let point = match self.hook_event_name.as_str() {
            "BeforeTool" => Point::BeforeTool,
            "AfterTool" if failed => Point::ToolFailed,
            "AfterTool" => Point::AfterTool,
            "AfterAgent" => Point::Reply,
            "BeforeAgent" => Point::Prompt,
            _ => Point::Other,
        };
        let mut e = HookEvent::new(
            Agent::GeminiCli,
            self.session_id,
            self.hook_event_name,
            point,
        );
        e.tool = self.tool_name;
        e.input = self.tool_input.map(Value::Object).unwrap_or(Value::Null);
        match point {
            Point::AfterTool | Point::ToolFailed => {
                e.output = Value::String(output);
                e.exit_code = exit_code;
            }
            Point::Reply => e.text = self.prompt_response,
            Point::Prompt => e.prompt = self.prompt,
            _ => {}
        }
        e
    }
}

/// Claude Code's `tool_response` as a result's output: the text a shell command printed
/// (Bash's `stdout` and `stderr`), the text blocks of an MCP tool's content, else as sent.
fn claude_output(response: Value) -> Value {
    let blocks = |v: &Value| -> Option<String> {
        let parts: Vec<&str> = v
            .as_array()?
            .iter()
            .filter(|b| b.get("type").and_then(Value::as_str) == Some("text"))
            .filter_map(|b| b.get("text").and_then(Value::as_str))
            .collect();
        (!parts.is_empty()).then(|| parts.join("\n"))
    };
    match &response {
        Value::Object(m) if m.contains_key("stdout") || m.contains_key("stderr") => {
            let text: Vec<&str> = ["stdout", "stderr"]
                .iter()
                .filter_map(|k| m.get(*k).and_then(Value::as_str))
                .filter(|s| !s.is_empty())
                .collect();
            Value::String(text.join("\n"))
        }
        Value::Object(m) => match m.get("content").and_then(blocks) {
            Some(text) => Value::String(text),
            None => response,
        },
        Value::Array(_) => blocks(&response).map(Value::String).unwrap_or(response),
        _ => response,
    }
}

/// Gemini CLI's `tool_response` as text: `llmContent` (a string, a part or parts), else the
/// error's message, else `returnDisplay`.
fn gemini_output(response: &Map<String, Value>) -> String {
    fn text_of(v: &Value) -> String {
        match v {
            Value::String(s) => s.clone(),
            Value::Array(parts) => parts
                .iter()
                .map(text_of)
                .filter(|s| !s.is_empty())
                .collect::<Vec<_>>()
                .join("\n"),
            Value::Object(part) => part
                .get("text")
                .and_then(Value::as_str)
                .map(str::to_string)
                .unwrap_or_default(),
            _ => String::new(),
        }
    }
    let content = response.get("llmContent").map(text_of).unwrap_or_default();
    if !content.trim().is_empty() {
        return content;
    }
    if let Some(e) = response.get("error") {
        let message = e.get("message").map(text_of).unwrap_or_else(|| text_of(e));
        if !message.is_empty() {
            return message;
        }
    }
    response
        .get("returnDisplay")
        .map(text_of)
        .unwrap_or_default()
}

/// Gemini CLI's shell tool reports `Command: …`, `Directory: …`, `Output: …` (or `Stdout: …`
/// and `Stderr: …`), `Error: …`, `Exit Code: N`, `Signal: …`, `Background PIDs: …`,
/// `Process Group PGID: …`, one per line (the output on as many as it needs): what the command
/// printed (and an error other than `(none)`), and the exit code.
fn shell_report(text: &str) -> Option<(String, Option<i64>)> {
    const LABELS: [&str; 10] = [
        "Command",
        "Directory",
        "Output",
        "Stdout",
        "Stderr",
        "Error",
        "Exit Code",
        "Signal",
        "Background PIDs",
        "Process Group PGID",
    ];
    if !text.starts_with("Command: ") {
        return None;
    }
    let mut fields: Vec<(&str, String)> = Vec::new();
    for line in text.lines() {
        let labelled = LABELS.iter().find_map(|l| {
            line.strip_prefix(l)
                .and_then(|rest| rest.strip_prefix(':'))
                .map(|rest| (*l, rest.trim_start()))
        });
        match (labelled, fields.last_mut()) {
            (Some((label, rest)), _) => fields.push((label, rest.to_string())),
            (None, Some((_, value))) => {
                value.push('\n');
                value.push_str(line);
            }
            (None, None) => return None,
        }
    }
    let get = |label: &str| {
        fields
            .iter()
            .find(|(l, _)| *l == label)
            .map(|(_, v)| v.trim())
    };
    let exit = get("Exit Code")?.parse::<i64>().ok();
    let printed: Vec<&str> = ["Output", "Stdout", "Stderr", "Error"]
        .into_iter()
        .filter_map(get)
        .filter(|v| !v.is_empty() && *v != "(empty)" && *v != "(none)")
        .collect();
    Some((printed.join("\n"), exit))
}

/// Claude Code's Bash failures start with `Exit code N`: the exit code and the rest.
fn exit_code_line(error: &str) -> (Option<i64>, &str) {
    let (first, rest) = error.split_once('\n').unwrap_or((error, ""));
    match first
        .trim()
        .strip_prefix("Exit code ")
        .and_then(|n| n.trim().parse::<i64>().ok())
    {
        Some(code) => (Some(code), rest),
        None => (None, error),
    }
}

/// Claude Code's `StopFailure` categories as loopguard's error types; the external ones do not
/// move the loop counter. Others are left for loopguard to classify from the message.
fn api_error_class(kind: &str) -> Option<String> {
    Some(
        match kind {
            "rate_limit" => "rate_limit",
            "authentication_failed" | "billing_error" => "auth",
            "server_error" => "outage",
            _ => return None,
        }
        .to_string(),
    )
}

/// The event a hook event becomes, if any.
fn event_of(e: &HookEvent) -> Option<Event> {
    match e.point {
        Point::AfterTool | Point::ToolFailed => {
            let tool = e.tool.clone().filter(|t| !t.is_empty())?;
            let failed = e.point == Point::ToolFailed;
            Some(Event::ToolCall(ToolCall {
                tool,
                args: e.input.clone(),
                result: Some(ToolResult {
                    output: e.output.clone(),
                    is_error: Some(failed),
                    // Only a shell command has an exit code; another tool's success is not 0.
                    exit_code: match e.exit_code {
                        Some(code) => Some(code),
                        None if !failed && is_shell(e.tool.as_deref()) => Some(0),
                        None => None,
                    },
                }),
            }))
        }
        Point::Reply => {
            let text = e.text.clone().filter(|t| !t.trim().is_empty())?;
            Some(Event::Response(Response { text, chunk: false }))
        }
        Point::ApiError => {
            let message = e.text.clone().filter(|t| !t.trim().is_empty())?;
            Some(Event::Failure(Failure {
                message,
                error_type: e.error_type.clone(),
                location: None,
                stack_trace: None,
            }))
        }
        Point::BeforeTool | Point::Prompt | Point::Other => None,
    }
}

fn is_shell(tool: Option<&str>) -> bool {
    matches!(
        tool,
        Some("Bash" | "PowerShell" | "run_shell_command" | "shell")
    )
}

/// Which kind of answer, for the metrics.
fn answer_label(a: &HookAnswer) -> &'static str {
    if a.proceed == Some(false) {
        "stop"
    } else if a.decision.is_some() {
        "block"
    } else if a.hook_specific_output.is_some() || a.system_message.is_some() {
        "context"
    } else {
        "continue"
    }
}

/// The stop message: what loopguard did, why, and how the session goes on.
fn stop_message(kind: ActionType, task: &str, why: &str) -> String {
    let (what, next) = match kind {
        ActionType::Terminate => (
            "stopped this session: its event budget is spent (detect.budget.max_events)",
            "It cannot go on; start a new session.".to_string(),
        ),
        ActionType::Escalate => (
            "stopped the agent and asks a person to look at it",
            "Send a new prompt to go on.".to_string(),
        ),
        _ => (
            "paused this session for a person to look at",
            format!("Send a new prompt to resume it (or POST /v1/tasks/{task}/reset)."),
        ),
    };
    format!("loopguard {what}: {why}. {next}")
}

fn context(name: &str, text: String) -> HookSpecificOutput {
    HookSpecificOutput {
        hook_event_name: name.to_string(),
        additional_context: Some(text),
        permission_decision: None,
        permission_decision_reason: None,
    }
}

/// The answer that stops the agent, in the agent's format.
fn stop_answer(agent: Agent, e: &HookEvent, message: String) -> HookAnswer {
    let mut a = HookAnswer {
        proceed: Some(false),
        stop_reason: Some(message.clone()),
        system_message: Some(message.clone()),
        ..HookAnswer::default()
    };
    match (agent, e.point) {
        (Agent::ClaudeCode, Point::BeforeTool) => {
            a.hook_specific_output = Some(HookSpecificOutput {
                hook_event_name: e.name.clone(),
                additional_context: None,
                permission_decision: Some("deny".into()),
                permission_decision_reason: Some(message),
            })
        }
        // The model reads why, should the agent not stop at once.
        (Agent::ClaudeCode, Point::AfterTool | Point::ToolFailed) => {
            a.decision = Some("block".into());
            a.reason = Some(message);
        }
        (Agent::GeminiCli, Point::BeforeTool) => {
            a.decision = Some("deny".into());
            a.reason = Some(message);
        }
        // On a reply, a block would make the agent go on: `continue: false` alone stops it.
        _ => {}
    }
    a
}

/// The answer to a verdict, in the agent's format.
fn answer(agent: Agent, e: &HookEvent, v: &Verdict) -> HookAnswer {
    let message = v.action.message.clone().unwrap_or_else(|| v.reason.clone());
    let tool_point = matches!(e.point, Point::AfterTool | Point::ToolFailed);
    match v.action.kind {
        ActionType::Continue => HookAnswer::default(),
        ActionType::Warn | ActionType::RetryWithHint if tool_point => HookAnswer {
            hook_specific_output: Some(context(&e.name, message)),
            ..HookAnswer::default()
        },
        ActionType::Warn | ActionType::RetryWithHint => HookAnswer {
            system_message: Some(message),
            ..HookAnswer::default()
        },
        ActionType::Pivot => match (agent, e.point) {
            // Claude Code adds the reason next to the tool result (or error); the model still
            // sees that.
            (Agent::ClaudeCode, Point::AfterTool | Point::ToolFailed) => HookAnswer {
                decision: Some("block".into()),
                reason: Some(message),
                ..HookAnswer::default()
            },
            // A block at the end of a turn keeps the agent working, with the directive as its
            // next instruction.
            (Agent::ClaudeCode, Point::Reply) => HookAnswer {
                decision: Some("block".into()),
                reason: Some(message),
                ..HookAnswer::default()
            },
            // Gemini CLI retries the turn with the reason as the new prompt.
            (Agent::GeminiCli, Point::Reply) => HookAnswer {
                decision: Some("deny".into()),
                reason: Some(message),
                ..HookAnswer::default()
            },
            // Gemini CLI's AfterTool block would hide the tool's output from the model and put
            // the reason in its place: the directive goes next to the result as context.
            _ => HookAnswer {
                hook_specific_output: Some(context(&e.name, message)),
                ..HookAnswer::default()
            },
        },
        ActionType::Escalate | ActionType::Pause | ActionType::Terminate => {
            stop_answer(agent, e, stop_message(v.action.kind, &v.task_id, &v.reason))
        }
    }
}

/// Evaluate (or check) one hook event and answer it.
async fn respond(
    state: &AppState,
    agent: Agent,
    e: &HookEvent,
) -> Result<(HookAnswer, &'static str), ApiError> {
    match e.point {
        Point::BeforeTool => {
            let status = state
                .engine
                .snapshot(&e.session)
                .await?
                .map(|s| s.status)
                .unwrap_or_default();
            let kind = match status {
                TaskStatus::Active => return Ok((HookAnswer::default(), "continue")),
                TaskStatus::Paused => ActionType::Pause,
                TaskStatus::Terminated => ActionType::Terminate,
            };
            let why = match status {
                TaskStatus::Terminated => "the task was terminated",
                _ => "it was paused after a loop",
            };
            let a = stop_answer(agent, e, stop_message(kind, &e.session, why));
            Ok((a, "stop"))
        }
        Point::Prompt => {
            let paused = state
                .engine
                .snapshot(&e.session)
                .await?
                .is_some_and(|s| s.status == TaskStatus::Paused);
            if paused {
                let note = e
                    .prompt
                    .as_deref()
                    .map(|p| format!("new prompt: {}", integrations::fit_text(p, 200)));
                let by = format!("{} user", agent.name());
                state
                    .engine
                    .reset(&e.session, ResetReason::HumanIntervention, &by, note)
                    .await?;
            }
            // The person's turn: a request from the person to the agent, which the agent's
            // responses and tool calls then answer. Asked again after answers that changed
            // nothing, it is a loop (`collaboration.asked_again`): the agent reads so next to the
            // prompt. A person's prompt is never refused.
            let verdict = match e.prompt.as_deref().filter(|p| !p.trim().is_empty()) {
                Some(prompt) => {
                    let event = Event::Collaboration(Collaboration {
                        from_agent: PERSON.to_string(),
                        to_agent: e.agent_id.clone(),
                        request: prompt.to_string(),
                        to_group: false,
                    });
                    Some(
                        integrations::evaluate(state, Envelope::bare(e.session.clone(), event))
                            .await?,
                    )
                }
                None => None,
            };
            let mut a = HookAnswer::default();
            if paused {
                a.system_message = Some(
                    "loopguard: this session was paused after a loop; your prompt resumed it \
                     (loop counter reset)."
                        .into(),
                );
            }
            if let Some(v) = verdict.filter(|v| v.is_loop && v.action.kind != ActionType::Continue)
            {
                let message = v.action.message.clone().unwrap_or_else(|| v.reason.clone());
                a.hook_specific_output = Some(context(&e.name, message));
            }
            let label = if paused { "resumed" } else { answer_label(&a) };
            Ok((a, label))
        }
        _ => {
            let Some(event) = event_of(e) else {
                return Ok((HookAnswer::default(), "ignored"));
            };
            let env = Envelope {
                agent_id: Some(e.agent_id.clone()),
                ..Envelope::bare(e.session.clone(), event)
            };
            let verdict = integrations::evaluate(state, env).await?;
            let a = answer(agent, e, &verdict);
            let label = answer_label(&a);
            Ok((a, label))
        }
    }
}

async fn handle(
    state: &AppState,
    agent: Agent,
    headers: &HeaderMap,
    body: Body,
) -> Result<Json<HookAnswer>, ApiError> {
    let value = read_json(headers, body, Limit::server(&state.cfg.server)).await?;
    let mut e = match agent {
        Agent::ClaudeCode => typed::<ClaudeCodeHook>(value)?.into_event(),
        Agent::GeminiCli => typed::<GeminiCliHook>(value)?.into_event(),
    };
    loopguard::event::validate_task_id("session_id", &e.session).map_err(ApiError::from_input)?;
    e.session = loopguard::event::task_id_nfc(&e.session);
    let (a, label) = respond(state, agent, &e).await?;
    state
        .metrics
        .integrations
        .hook_events
        .get_or_create(&HookLabels {
            agent: agent.label(),
            point: e.point.label(),
            answer: label,
        })
        .inc();
    Ok(Json(a))
}

/// `POST /v1/hooks/claude-code`: a Claude Code hook event in, its answer out.
#[utoipa::path(
    post,
    path = "/v1/hooks/claude-code",
    tag = "integrations",
    request_body(content = ClaudeCodeHook, description = "The hook input as Claude Code sends it (HTTP hook) or as `loopguard hook claude-code` forwards it (command hook)"),
    responses(
        (status = 200, description = "The hook's output: `{}` to go on, else context, a block with the pivot directive, or `continue: false` at the gate", body = HookAnswer),
        (status = 400, description = "Not JSON, not an object, a field of the wrong type, a bad `session_id`", body = ErrorBody),
    ),
    security((), ("bearer" = []))
)]
pub async fn claude_code(
    State(state): State<Arc<AppState>>,
    headers: HeaderMap,
    body: Body,
) -> Result<Json<HookAnswer>, ApiError> {
    handle(&state, Agent::ClaudeCode, &headers, body).await
}

/// `POST /v1/hooks/gemini-cli`: a Gemini CLI hook event in, its answer out.
#[utoipa::path(
    post,
    path = "/v1/hooks/gemini-cli",
    tag = "integrations",
    request_body(content = GeminiCliHook, description = "The hook input as Gemini CLI writes it to a command hook (`loopguard hook gemini-cli` forwards it)"),
    responses(
        (status = 200, description = "The hook's output: `{}` to go on, else context, a retry with the pivot directive, or `continue: false` at the gate", body = HookAnswer),
        (status = 400, description = "Not JSON, not an object, a field of the wrong type, a bad `session_id`", body = ErrorBody),
    ),
    security((), ("bearer" = []))
)]
pub async fn gemini_cli(
    State(state): State<Arc<AppState>>,
    headers: HeaderMap,
    body: Body,
) -> Result<Json<HookAnswer>, ApiError> {
    handle(&state, Agent::GeminiCli, &headers, body).await
}

#[cfg(test)]
mod tests;
