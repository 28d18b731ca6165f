//! `loopguard hook claude-code|gemini-cli`: a command hook. It reads the hook's input on stdin,
//! posts it to the service (`POST /v1/hooks/...`) and prints the service's answer on stdout for
//! the agent to act on.
//!
//! It fails open: when the service cannot answer (down, too slow, an error), it says so on
//! stderr and exits 1, which both agents treat as a non-blocking error: the agent goes on and
//! shows the first line of the warning. It never exits 2, the code both agents read as "block".

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

    /// Give up after this long (retries included) and let the agent go on.
    #[arg(long, value_name = "MS", default_value_t = 5000)]
    pub timeout_ms: u64,
}

/// Run the hook: the exit code is the agent's instruction (0: act on stdout; 1: go on).
pub fn run(args: &HookArgs) -> ExitCode {
    let mut input = Vec::new();
    if let Err(e) = std::io::stdin().read_to_end(&mut input) {
        return fail_open(&format!("cannot read the hook input: {e}"));
    }
    let rt = match tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
    {
        Ok(rt) => rt,
        Err(e) => return fail_open(&e.to_string()),
    };
    match rt.block_on(post(args, input)) {
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

fn fail_open(why: &str) -> ExitCode {
    eprintln!("loopguard hook: not checked for loops ({why}); the agent goes on");
    ExitCode::from(FAIL_OPEN)
}

/// Post the input; the answer's body, or why there is none. Refusals that applied nothing
/// (429, and 503 other than a timeout) are retried after `Retry-After` while time is left.
async fn post(args: &HookArgs, input: Vec<u8>) -> Result<Vec<u8>, String> {
    loopguard::judge::http::install_tls_provider();
    let deadline = Instant::now() + Duration::from_millis(args.timeout_ms.max(1));
    let client = reqwest::Client::builder()
        .timeout(Duration::from_millis(args.timeout_ms.max(1)))
        .build()
        .map_err(|e| e.to_string())?;
    let url = format!("{}{}", args.url.trim_end_matches('/'), args.agent.route());
    loop {
        let mut req = client
            .post(&url)
            .header("content-type", "application/json")
            .body(input.clone());
        if let Some(t) = args.token.as_deref().filter(|t| !t.is_empty()) {
            req = req.bearer_auth(t);
        }
        let resp = req
            .send()
            .await
            .map_err(|e| format!("{url}: {}", plain(&e)))?;
        let status = resp.status().as_u16();
        let retry_after = resp
            .headers()
            .get("retry-after")
            .and_then(|v| v.to_str().ok())
            .and_then(|v| v.trim().parse::<u64>().ok());
        let body = resp.bytes().await.map_err(|e| plain(&e))?.to_vec();
        if status == 200 {
            return Ok(body);
        }
        let error: serde_json::Value = serde_json::from_slice(&body).unwrap_or_default();
        let code = error["code"].as_str().unwrap_or("");
        let wait = Duration::from_secs(retry_after.unwrap_or(1));
        let retryable = status == 429 || (status == 503 && code != "timeout");
        if !retryable || Instant::now() + wait >= deadline {
            let message = error["message"].as_str().unwrap_or("no message");
            return Err(format!("{url} answered {status} {code}: {message}"));
        }
        tokio::time::sleep(wait).await;
    }
}

/// A transport error in one line: what failed, without reqwest's nesting.
fn plain(e: &reqwest::Error) -> String {
    if e.is_connect() {
        "cannot connect: is `loopguard serve` running?".into()
    } else if e.is_timeout() {
        "no answer in time (--timeout-ms)".into()
    } else {
        e.to_string()
    }
}
