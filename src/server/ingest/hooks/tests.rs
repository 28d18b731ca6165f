//! Tests of the coding-agent hooks' mapping and answers (`super` is `server::hooks`).

use super::*;
use serde_json::json;

#[test]
fn bash_output_and_exit_codes_become_the_result() {
    let out = claude_output(
        json!({"stdout": "1 failed", "stderr": "warning", "interrupted": false, "isImage": false}),
    );
    assert_eq!(out, json!("1 failed\nwarning"));
    let out = claude_output(
        json!({"content": [{"type": "text", "text": "a"}, {"type": "image"}, {"type": "text", "text": "b"}]}),
    );
    assert_eq!(out, json!("a\nb"));
    let write = json!({"filePath": "/p/a.txt", "success": true});
    assert_eq!(claude_output(write.clone()), write);

    assert_eq!(
        exit_code_line("Exit code 1\nError: Cannot find module 'express'"),
        (Some(1), "Error: Cannot find module 'express'")
    );
    assert_eq!(exit_code_line("spawn failed"), (None, "spawn failed"));
}

#[test]
fn a_gemini_shell_report_gives_what_the_command_printed_and_its_exit_code() {
    let report = "Command: rm -rf x && python3 t.py\nDirectory: (root)\nOutput: Traceback (most recent call last):\n  File \"t.py\", line 4\nAssertionError: 3\nError: (none)\nExit Code: 1\nSignal: (none)\nBackground PIDs: (none)\nProcess Group PGID: 4101";
    let (printed, exit) = shell_report(report).unwrap();
    assert_eq!(
        printed,
        "Traceback (most recent call last):\n  File \"t.py\", line 4\nAssertionError: 3"
    );
    assert_eq!(exit, Some(1));
    let split = "Command: ls\nDirectory: (root)\nStdout: a.py\nStderr: (empty)\nError: (none)\nExit Code: 0\nSignal: (none)\nBackground PIDs: (none)\nProcess Group PGID: 7";
    assert_eq!(shell_report(split), Some(("a.py".into(), Some(0))));
    assert_eq!(shell_report("a file's text"), None);
}

#[test]
fn a_gemini_tool_response_given_as_text_is_the_output() {
    let hook: GeminiCliHook = serde_json::from_value(json!({
        "session_id": "s", "hook_event_name": "AfterTool", "tool_name": "read_file",
        "tool_input": {"absolute_path": "/a.py"}, "tool_response": "print('hi')"
    }))
    .unwrap();
    let e = hook.into_event();
    assert_eq!(
        (e.point, e.output),
        (Point::AfterTool, json!("print('hi')"))
    );
}

#[test]
fn gemini_output_reads_llm_content_then_the_error() {
    let r = json!({"llmContent": [{"text": "line 1"}, "line 2"], "returnDisplay": "x"});
    assert_eq!(gemini_output(r.as_object().unwrap()), "line 1\nline 2");
    let r = json!({"llmContent": "", "error": {"message": "File not found: a.py"}});
    assert_eq!(
        gemini_output(r.as_object().unwrap()),
        "File not found: a.py"
    );
}

fn verdict(kind: ActionType, message: Option<&str>) -> Verdict {
    let mut v: Verdict = serde_json::from_value(json!({
        "task_id": "s-1", "seq": 3, "loop": true, "kind": "semantic_repeat", "loop_count": 2,
        "counted": true, "similarity": 0.9, "matched": null, "signature": null,
        "action": {"type": "continue", "target": null, "message": null},
        "reason": "same failure as seq 1, reworded", "judge": null, "pivot_count": 1,
        "status": "active"
    }))
    .unwrap();
    v.action.kind = kind;
    v.action.message = message.map(str::to_string);
    v
}

fn event(agent: Agent, point: Point, name: &str) -> HookEvent {
    HookEvent::new(agent, "s-1".into(), name.into(), point)
}

#[test]
fn each_action_is_answered_in_each_agents_format() {
    let after = event(Agent::ClaudeCode, Point::AfterTool, "PostToolUse");
    let a = serde_json::to_value(answer(
        Agent::ClaudeCode,
        &after,
        &verdict(ActionType::Continue, None),
    ))
    .unwrap();
    assert_eq!(a, json!({}));
    let a = serde_json::to_value(answer(
        Agent::ClaudeCode,
        &after,
        &verdict(ActionType::Warn, Some("careful")),
    ))
    .unwrap();
    assert_eq!(
        a,
        json!({"hookSpecificOutput": {"hookEventName": "PostToolUse", "additionalContext": "careful"}})
    );
    let a = serde_json::to_value(answer(
        Agent::ClaudeCode,
        &after,
        &verdict(ActionType::Pivot, Some("PIVOT")),
    ))
    .unwrap();
    assert_eq!(a, json!({"decision": "block", "reason": "PIVOT"}));
    let a = answer(
        Agent::ClaudeCode,
        &after,
        &verdict(ActionType::Pause, Some("gate")),
    );
    assert_eq!(
        (a.proceed, a.decision.as_deref()),
        (Some(false), Some("block"))
    );
    assert!(a.stop_reason.unwrap().contains("paused this session"));

    let failed = event(Agent::ClaudeCode, Point::ToolFailed, "PostToolUseFailure");
    let a = serde_json::to_value(answer(
        Agent::ClaudeCode,
        &failed,
        &verdict(ActionType::Pivot, Some("PIVOT")),
    ))
    .unwrap();
    assert_eq!(a, json!({"decision": "block", "reason": "PIVOT"}));

    let stop = event(Agent::ClaudeCode, Point::Reply, "Stop");
    let a = answer(Agent::ClaudeCode, &stop, &verdict(ActionType::Pause, None));
    assert_eq!(
        (a.proceed, a.decision),
        (Some(false), None),
        "a block would keep it going"
    );

    let reply = event(Agent::GeminiCli, Point::Reply, "AfterAgent");
    let a = serde_json::to_value(answer(
        Agent::GeminiCli,
        &reply,
        &verdict(ActionType::Pivot, Some("PIVOT")),
    ))
    .unwrap();
    assert_eq!(a, json!({"decision": "deny", "reason": "PIVOT"}));
    let tool = event(Agent::GeminiCli, Point::AfterTool, "AfterTool");
    let a = serde_json::to_value(answer(
        Agent::GeminiCli,
        &tool,
        &verdict(ActionType::Pivot, Some("PIVOT")),
    ))
    .unwrap();
    assert_eq!(
        a,
        json!({"hookSpecificOutput": {"hookEventName": "AfterTool", "additionalContext": "PIVOT"}})
    );

    let before = event(Agent::ClaudeCode, Point::BeforeTool, "PreToolUse");
    let a = serde_json::to_value(stop_answer(Agent::ClaudeCode, &before, "stop".into())).unwrap();
    assert_eq!(a["hookSpecificOutput"]["permissionDecision"], "deny");
    assert_eq!(a["continue"], false);
}

#[test]
fn only_shell_commands_get_an_exit_code() {
    let mut e = event(Agent::ClaudeCode, Point::AfterTool, "PostToolUse");
    e.tool = Some("Bash".into());
    e.output = json!("ok");
    let Some(Event::ToolCall(c)) = event_of(&e) else {
        panic!()
    };
    assert_eq!(c.result.unwrap().exit_code, Some(0));
    e.tool = Some("Read".into());
    let Some(Event::ToolCall(c)) = event_of(&e) else {
        panic!()
    };
    assert_eq!(c.result.unwrap().exit_code, None);
    e.tool = None;
    assert!(
        event_of(&e).is_none(),
        "a tool event without a tool is ignored"
    );
}
