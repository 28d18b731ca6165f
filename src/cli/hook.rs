//! `loopguard hook claude-code|gemini-cli`: a command hook. It reads the hook's input on stdin,
//! posts it to the service (`POST /v1/hooks/...`) and prints the service's answer on stdout for
//! the agent to act on.
//!
//! It fails open: when the service cannot answer (down, too slow, an error, an answer that is
//! not the hook's JSON), or the hook itself is misconfigured (its arguments, its input), it
//! says why on stderr and exits 1, which both agents treat as a non-blocking error: the agent
//! goes on and shows the first line of the warning. It never exits 2, the code both agents read
//! as "block" (a mistyped command line included: see `cli::main`).

use std::io::{Read, Write};
use std::process::ExitCode;
use std::time::{Duration, Instant};

/// Exit code for "loopguard could not answer; go on": a non-blocking error in both agents.
pub const FAIL_OPEN: u8 = 1;

#[derive(clap::ValueEnum, Clone, Copy, Debug, PartialEq, Eq)]
pub enum HookAgent {
    /// Claude Code's hook input and output (code.claude.com/docs/en/hooks).
    ClaudeCode,
    /// Gemini CLI's hook input and output (geminicli.com/docs/hooks/reference).
    GeminiCli,
}

impl HookAgent {
    fn route(self) -> &'static str {
        match self {
            HookAgent::ClaudeCode => "/v1/hooks/claude-code",
            HookAgent::GeminiCli => "/v1/hooks/gemini-cli",
        }
    }
}

#[derive(clap::Args, Debug)]
pub struct HookArgs {
    /// The agent that runs this hook: how its input is read and its answer written.
    #[arg(value_enum)]
    pub agent: HookAgent,

    /// Where `loopguard serve` listens.
    #[arg(long, env = "LOOPGUARD_URL", default_value = "http://127.0.0.1:8080")]
    pub url: String,

    /// Bearer token, when the service has one (server.auth_token).
    #[arg(long, env = "LOOPGUARD_TOKEN", hide_env_values = true)]
    pub token: Option<String>,

    /// Give up after this long and let the agent go on: the whole run, reading the hook's input
    /// and every retry included.
    #[arg(long, value_name = "MS", default_value_t = 5000)]
    pub timeout_ms: u64,
}

/// The largest hook input read: past any `server.max_body_bytes` a service would take.
const MAX_INPUT: u64 = 64 << 20;
/// The largest answer relayed: a hook's answer is a few fields of text (a warning, a
/// directive); anything larger is not one.
const MAX_ANSWER: usize = 1 << 20;
/// How much of an error answer is read for its message.
const MAX_ERROR_BODY: usize = 64 << 10;

/// Run the hook: the exit code is the agent's instruction (0: act on stdout; 1: go on).
/// `--timeout-ms` bounds all of it, from reading the input to the last retry.
pub fn run(args: &HookArgs) -> ExitCode {
    let deadline = Instant::now() + Duration::from_millis(args.timeout_ms.max(1));
    let input = match read_input(deadline) {
        Ok(input) => input,
        Err(why) => return fail_open(&why),
    };
    let rt = match tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
    {
        Ok(rt) => rt,
        Err(e) => return fail_open(&e.to_string()),
    };
    match rt.block_on(post(args, input, deadline)) {
        Ok(answer) => {
            let mut out = std::io::stdout().lock();
            if out.write_all(&answer).and_then(|()| out.flush()).is_err() {
                return fail_open("cannot write the answer to stdout");
            }
            ExitCode::SUCCESS
        }
        Err(why) => fail_open(&why),
    }
}

/// The hook input, read on a thread of its own so that the deadline holds over a stdin that
/// is never closed (the process exits with the thread still blocked in its read).
fn read_input(deadline: Instant) -> Result<Vec<u8>, String> {
    let (tx, rx) = std::sync::mpsc::channel();
    std::thread::Builder::new()
        .name("hook-input".into())
        .spawn(move || {
            let mut input = Vec::new();
            let read = std::io::stdin()
                .lock()
                .take(MAX_INPUT + 1)
                .read_to_end(&mut input)
                .map(|_| input);
            let _ = tx.send(read);
        })
        .map_err(|e| format!("cannot read the hook input: {e}"))?;
    match rx.recv_timeout(deadline.saturating_duration_since(Instant::now())) {
        Ok(Ok(input)) if input.len() as u64 > MAX_INPUT => {
            Err(format!("the hook input is over {MAX_INPUT} bytes"))
        }
        Ok(Ok(input)) => Ok(input),
        Ok(Err(e)) => Err(format!("cannot read the hook input: {e}")),
        Err(_) => {
            Err("the hook input did not end within --timeout-ms (stdin was not closed)".into())
        }
    }
}

/// Exit 1 with why on stderr: "not checked; go on" for both agents.
pub fn fail_open(why: &str) -> ExitCode {
    eprintln!("loopguard hook: not checked for loops ({why}); the agent goes on");
    ExitCode::from(FAIL_OPEN)
}

/// `url` as it may be printed: without a user name or password.
fn shown(url: &reqwest::Url) -> String {
    let mut url = url.clone();
    let _ = url.set_username("");
    let _ = url.set_password(None);
    url.to_string()
}

/// A URL given on the command line as it may be printed, parsed or not.
fn shown_arg(url: &str) -> String {
    match reqwest::Url::parse(url) {
        Ok(u) => shown(&u),
        // Unparsable: cut anything before an `@` of its authority.
        Err(_) => match (url.find("://"), url.rfind('@')) {
            (Some(s), Some(at)) if at > s => format!("{}://…@{}", &url[..s], &url[at + 1..]),
            _ => url.to_string(),
        },
    }
}

/// Read at most `limit` bytes of an answer's body, within the deadline; `Err` past either.
async fn body_of(
    mut resp: reqwest::Response,
    limit: usize,
    deadline: Instant,
) -> Result<Vec<u8>, String> {
    if resp.content_length().is_some_and(|n| n > limit as u64) {
        return Err(format!(
            "an answer of {} bytes, over the {limit} a hook's answer may be",
            resp.content_length().unwrap_or(0)
        ));
    }
    let mut body = Vec::new();
    loop {
        let chunk = tokio::time::timeout_at(deadline.into(), resp.chunk())
            .await
            .map_err(|_| "no answer in time (--timeout-ms)".to_string())?
            .map_err(|e| plain(&e))?;
        let Some(chunk) = chunk else {
            return Ok(body);
        };
        if body.len() + chunk.len() > limit {
            return Err(format!(
                "an answer of over {limit} bytes, more than a hook's answer may be"
            ));
        }
        body.extend_from_slice(&chunk);
    }
}

/// Post the input; the answer's body, or why there is none. Refusals that applied nothing
/// (429, and 503 other than a timeout) are retried with backoff ([`loopguard::retry`]: from
/// 100 ms, doubling, at most 2 s apart, `Retry-After` taken when longer) while time is left.
/// Only an answer that is the hook's JSON (an object) is relayed; redirects are not followed.
async fn post(args: &HookArgs, input: Vec<u8>, deadline: Instant) -> Result<Vec<u8>, String> {
    loopguard::judge::http::install_tls_provider();
    let base = args.url.trim_end_matches('/');
    let url = reqwest::Url::parse(&format!("{base}{}", args.agent.route()))
        .map_err(|e| format!("--url {}: {e}", shown_arg(&args.url)))?;
    let name = shown(&url);
    let client = reqwest::Client::builder()
        // A hook's answer comes from loopguard itself: a redirect is a misconfigured URL (or
        // someone else answering), and following it would send the input elsewhere.
        .redirect(reqwest::redirect::Policy::none())
        .build()
        .map_err(|e| plain(&e))?;
    let mut backoff = loopguard::retry::RetryPolicy::default().backoff();
    loop {
        let left = deadline.saturating_duration_since(Instant::now());
        if left.is_zero() {
            return Err("no answer in time (--timeout-ms)".into());
        }
        let mut req = client
            .post(url.clone())
            .timeout(left)
            .header("content-type", "application/json")
            .body(input.clone());
        if let Some(t) = args.token.as_deref().filter(|t| !t.is_empty()) {
            req = req.bearer_auth(t);
        }
        let resp = req
            .send()
            .await
            .map_err(|e| format!("{name}: {}", plain(&e)))?;
        let status = resp.status();
        if status.is_redirection() {
            return Err(format!(
                "{name} answered {} (a redirect; not followed: point --url at loopguard itself)",
                status.as_u16()
            ));
        }
        let retry_after = resp
            .headers()
            .get("retry-after")
            .and_then(|v| v.to_str().ok())
            .and_then(loopguard::retry::retry_after);
        if status == reqwest::StatusCode::OK {
            let body = body_of(resp, MAX_ANSWER, deadline)
                .await
                .map_err(|why| format!("{name}: {why}"))?;
            // Relayed only when it is what a hook answers: one JSON object.
            return match serde_json::from_slice::<serde_json::Map<String, serde_json::Value>>(&body)
            {
                Ok(_) => Ok(body),
                Err(e) => Err(format!(
                    "{name} answered 200 with what is not the hook's JSON ({e})"
                )),
            };
        }
        let status = status.as_u16();
        let body = body_of(resp, MAX_ERROR_BODY, deadline)
            .await
            .unwrap_or_default();
        let error: serde_json::Value = serde_json::from_slice(&body).unwrap_or_default();
        let code = error["code"].as_str().unwrap_or("");
        let retryable = status == 429 || (status == 503 && code != "timeout");
        let wait = backoff.next(retry_after);
        if !retryable || Instant::now() + wait >= deadline {
            let message = error["message"].as_str().unwrap_or("no message");
            return Err(format!("{name} answered {status} {code}: {message}"));
        }
        tokio::time::sleep(wait).await;
    }
}

/// A transport error in one line: what failed, without reqwest's nesting or the URL (which
/// may hold credentials; the caller names the URL without them).
fn plain(e: &reqwest::Error) -> String {
    if e.is_connect() {
        "cannot connect: is `loopguard serve` running?".into()
    } else if e.is_timeout() {
        "no answer in time (--timeout-ms)".into()
    } else {
        let mut out = e.to_string();
        if let Some(i) = out.find(" for url (") {
            out.truncate(i);
        }
        if let Some(source) = std::error::Error::source(e) {
            out.push_str(&format!(": {source}"));
        }
        out
    }
}
