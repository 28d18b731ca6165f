//! The HTML report of a scoring pass (`loopguard score --html REPORT.html`): one self-contained
//! page (inline style, no script, nothing fetched) that shows each run's events next to the
//! verdicts they got, loops highlighted, so a person can read why a run was flagged.
//!
//! Runs are written as they are scored, to a `.part` file beside the report, so memory does not
//! grow with the input; [`HtmlReport::finish`] then writes the page (the summary table first)
//! and moves the runs in. Texts are shown as the agent sent them (not normalised), long ones cut
//! in the middle.

use super::{Run, RunScore};
use crate::event::{Envelope, Event};
use crate::verdict::{ActionType, LoopKind, Verdict};
use std::collections::HashMap;
use std::fmt::Write as _;
use std::fs::File;
use std::io::{self, BufWriter, Write};
use std::path::{Path, PathBuf};

/// Characters of one text shown before it is cut in the middle.
const MAX_SHOWN: usize = 1500;

/// `&`, `<`, `>`, `"` and `'` as entities: safe in text and in quoted attributes.
pub fn escape(s: &str) -> String {
    let mut out = String::with_capacity(s.len());
    for c in s.chars() {
        match c {
            '&' => out.push_str("&amp;"),
            '<' => out.push_str("&lt;"),
            '>' => out.push_str("&gt;"),
            '"' => out.push_str("&quot;"),
            '\'' => out.push_str("&#39;"),
            c => out.push(c),
        }
    }
    out
}

/// A long text as its head and tail, saying how much was left out.
fn cut(s: &str) -> String {
    let n = s.chars().count();
    if n <= MAX_SHOWN {
        return s.to_string();
    }
    let head: String = s.chars().take(MAX_SHOWN * 2 / 3).collect();
    let tail: String = s.chars().skip(n - MAX_SHOWN / 3).collect();
    format!(
        "{head}\n… {} characters left out …\n{tail}",
        n - MAX_SHOWN * 2 / 3 - MAX_SHOWN / 3
    )
}

fn pre(s: &str) -> String {
    format!("<pre>{}</pre>", escape(&cut(s)))
}

fn words(s: &str) -> String {
    s.replace('_', " ")
}

/// One line of the summary table.
struct Row {
    index: usize,
    id: String,
    is_loop: bool,
    first_loop: Option<(usize, LoopKind, Option<String>)>,
    max_loop_count: u32,
    kinds: Vec<LoopKind>,
    events: usize,
    label: Option<bool>,
}

/// A report being written. Dropped without [`finish`](Self::finish), it leaves no file behind.
pub struct HtmlReport {
    path: PathBuf,
    part: PathBuf,
    sections: Option<BufWriter<File>>,
    source: String,
    rows: Vec<Row>,
}

impl HtmlReport {
    /// Start a report at `path` about the runs read from `source` (a file name, or "stdin").
    pub fn create(path: &Path, source: &str) -> io::Result<HtmlReport> {
        let mut name = path.file_name().unwrap_or_default().to_os_string();
        name.push(".part");
        let part = path.with_file_name(name);
        let sections = BufWriter::new(File::create(&part)?);
        Ok(HtmlReport {
            path: path.to_path_buf(),
            part,
            sections: Some(sections),
            source: source.to_string(),
            rows: Vec::new(),
        })
    }

    /// Add a scored run; `run` must still hold its events (`ScoreOptions::keep_events`).
    pub fn add(&mut self, run: &Run, score: &RunScore) -> io::Result<()> {
        let index = self.rows.len() + 1;
        let first_loop = score
            .first_loop_index
            .map(|i| (i, score.verdicts[i].kind, score.verdicts[i].rule.clone()));
        let row = Row {
            index,
            id: score.id.clone(),
            is_loop: score.is_loop,
            first_loop,
            max_loop_count: score.max_loop_count,
            kinds: score.kinds.clone(),
            events: score.verdicts.len(),
            label: run.label,
        };
        let html = run_section(&row, &run.events, &score.verdicts);
        self.rows.push(row);
        self.sections
            .as_mut()
            .expect("sections are open until finish")
            .write_all(html.as_bytes())
    }

    /// Write the page: head, summary, the runs, legend.
    pub fn finish(mut self) -> io::Result<()> {
        let mut sections = self.sections.take().expect("finish runs once");
        sections.flush()?;
        drop(sections);
        let mut out = BufWriter::new(File::create(&self.path)?);
        out.write_all(self.head().as_bytes())?;
        io::copy(&mut File::open(&self.part)?, &mut out)?;
        out.write_all(FOOT.as_bytes())?;
        out.flush()?;
        std::fs::remove_file(&self.part)?;
        Ok(())
    }

    fn head(&self) -> String {
        let runs = self.rows.len();
        let flagged = self.rows.iter().filter(|r| r.is_loop).count();
        let events: usize = self.rows.iter().map(|r| r.events).sum();
        let labelled: Vec<&Row> = self.rows.iter().filter(|r| r.label.is_some()).collect();
        let now = time::OffsetDateTime::now_utc();
        let now = now
            .replace_nanosecond(0)
            .unwrap_or(now)
            .format(&time::format_description::well_known::Rfc3339)
            .unwrap_or_default();
        let mut h = String::new();
        let _ = write!(
            h,
            "<!doctype html>\n<html lang=\"en\">\n<head>\n<meta charset=\"utf-8\">\n\
             <meta name=\"viewport\" content=\"width=device-width, initial-scale=1\">\n\
             <title>loopguard score: {src}</title>\n<style>{STYLE}</style>\n</head>\n<body>\n\
             <input type=\"checkbox\" id=\"only-flagged\" class=\"toggle\">\n\
             <header><h1>loopguard score</h1><p><b>{src}</b> · {runs} run{rs} · \
             <span class=\"flag\">{flagged} flagged as loops</span> · {events} events · \
             written {now} by loopguard {version}</p></header>\n<main>\n",
            src = escape(&self.source),
            rs = if runs == 1 { "" } else { "s" },
            version = env!("CARGO_PKG_VERSION"),
        );
        if !labelled.is_empty() {
            let false_alarms = labelled
                .iter()
                .filter(|r| r.is_loop && r.label == Some(false))
                .count();
            let missed = labelled
                .iter()
                .filter(|r| !r.is_loop && r.label == Some(true))
                .count();
            let _ = writeln!(
                h,
                "<p class=\"labels\">{} labelled run{}: {} agree with their label, \
                 <span class=\"bad\">{false_alarms} false alarm{}</span>, \
                 <span class=\"bad\">{missed} missed loop{}</span>.</p>",
                labelled.len(),
                if labelled.len() == 1 { "" } else { "s" },
                labelled.len() - false_alarms - missed,
                if false_alarms == 1 { "" } else { "s" },
                if missed == 1 { "" } else { "s" },
            );
        }
        h.push_str(
            "<section class=\"summary\"><h2>Runs</h2>\
             <label for=\"only-flagged\" class=\"filter\">show flagged runs only</label>\n\
             <table><thead><tr><th>#</th><th>run</th><th>verdict</th><th>first loop</th>\
             <th class=\"num\">max loop count</th><th>kinds</th><th class=\"num\">events</th>\
             <th>label</th></tr></thead><tbody>\n",
        );
        for r in &self.rows {
            let verdict = if r.is_loop {
                "<span class=\"badge loop\">loop</span>"
            } else {
                "<span class=\"badge ok\">no loop</span>"
            };
            let first = match &r.first_loop {
                Some((i, kind, rule)) => format!(
                    "<a href=\"#r{}-e{i}\">event {i}</a> · {}{}",
                    r.index,
                    escape(&words(kind.as_str())),
                    rule.as_ref()
                        .map(|r| format!(" <span class=\"rule\">{}</span>", escape(r)))
                        .unwrap_or_default()
                ),
                None => "—".into(),
            };
            let kinds = r
                .kinds
                .iter()
                .map(|k| words(k.as_str()))
                .collect::<Vec<_>>()
                .join(", ");
            let _ = writeln!(
                h,
                "<tr class=\"{cls}\"><td class=\"num\">{i}</td><td><a href=\"#r{i}\">{id}</a></td>\
                 <td>{verdict}</td><td>{first}</td><td class=\"num\">{max}</td><td>{kinds}</td>\
                 <td class=\"num\">{n}</td><td>{label}</td></tr>",
                cls = if r.is_loop { "flagged" } else { "clean" },
                i = r.index,
                id = escape(&r.id),
                max = r.max_loop_count,
                kinds = escape(&kinds),
                n = r.events,
                label = label_html(r),
            );
        }
        h.push_str("</tbody></table></section>\n");
        h
    }
}

impl Drop for HtmlReport {
    fn drop(&mut self) {
        if self.sections.take().is_some() {
            let _ = std::fs::remove_file(&self.part);
        }
    }
}

fn label_html(r: &Row) -> String {
    match (r.label, r.is_loop) {
        (None, _) => "—".into(),
        (Some(true), true) => "loop <span class=\"good\">✓ caught</span>".into(),
        (Some(false), false) => "no loop <span class=\"good\">✓ quiet</span>".into(),
        (Some(true), false) => "loop <span class=\"bad\">✗ missed</span>".into(),
        (Some(false), true) => "no loop <span class=\"bad\">✗ false alarm</span>".into(),
    }
}

/// The root task of each event, as the engine links them: a task keeps the root it first got;
/// a new task with a parent joins the parent's root.
fn roots(events: &[Envelope]) -> Vec<String> {
    let mut known: HashMap<&str, String> = HashMap::new();
    events
        .iter()
        .map(|e| {
            if let Some(r) = known.get(e.task_id.as_str()) {
                return r.clone();
            }
            let root = match &e.parent_task_id {
                Some(p) => known.get(p.as_str()).cloned().unwrap_or_else(|| p.clone()),
                None => e.task_id.clone(),
            };
            let root = if root == e.task_id {
                e.task_id.clone()
            } else {
                root
            };
            known.insert(&e.task_id, root.clone());
            root
        })
        .collect()
}

fn run_section(row: &Row, events: &[Envelope], verdicts: &[Verdict]) -> String {
    let i = row.index;
    let roots = roots(events);
    // Verdicts name the matched event by its seq in the root task; the page links by index.
    let by_seq: HashMap<(&str, u64), usize> = verdicts
        .iter()
        .enumerate()
        .map(|(k, v)| ((roots[k].as_str(), v.seq), k))
        .collect();
    let mut s = String::new();
    let flag = if row.is_loop {
        format!(
            "<span class=\"badge loop\">loop</span> first at event {} ({}) · max loop count {}",
            row.first_loop.as_ref().map(|f| f.0).unwrap_or(0),
            escape(&words(
                row.first_loop
                    .as_ref()
                    .map(|f| f.1.as_str())
                    .unwrap_or("none")
            )),
            row.max_loop_count
        )
    } else {
        "<span class=\"badge ok\">no loop</span>".to_string()
    };
    let _ = write!(
        s,
        "<section class=\"run {cls}\" id=\"r{i}\"><details{open}><summary><span class=\"rid\">{id}</span> \
         {flag} · {n} events{label}</summary>\n<table class=\"events\"><thead><tr><th>event</th>\
         <th>what the agent did</th><th>verdict</th></tr></thead><tbody>\n",
        cls = if row.is_loop { "flagged" } else { "clean" },
        open = if row.is_loop { " open" } else { "" },
        id = escape(&row.id),
        n = events.len(),
        label = match row.label {
            None => String::new(),
            Some(_) => format!(" · label: {}", label_html(row)),
        },
    );
    for (k, (env, v)) in events.iter().zip(verdicts).enumerate() {
        let mut cls = vec!["ev"];
        if v.is_loop {
            cls.push(if v.counted { "loop" } else { "uncounted" });
        }
        if row.first_loop.as_ref().map(|f| f.0) == Some(k) {
            cls.push("first");
        }
        let who = {
            let mut w = format!(
                "<div class=\"idx\">{k}</div><div class=\"meta\">seq {}",
                v.seq
            );
            if env.task_id != row.id {
                let _ = write!(w, "<br>{}", escape(&env.task_id));
            }
            if let Some(a) = &env.agent_id {
                let _ = write!(w, "<br>{}", escape(a));
            }
            if let Some(st) = &env.step {
                let _ = write!(w, "<br>step {}", escape(st));
            }
            w.push_str("</div>");
            w
        };
        let matched_index = v
            .matched
            .as_ref()
            .and_then(|m| by_seq.get(&(roots[k].as_str(), m.seq)).copied());
        let _ = writeln!(
            s,
            "<tr class=\"{}\" id=\"r{i}-e{k}\"><td class=\"who\">{who}</td><td class=\"what\">{}</td>\
             <td class=\"verdict\">{}</td></tr>",
            cls.join(" "),
            event_html(&env.event),
            verdict_html(v, i, matched_index),
        );
    }
    s.push_str("</tbody></table></details></section>\n");
    s
}

fn event_html(e: &Event) -> String {
    let kind = format!("<span class=\"type\">{}</span>", words(e.type_name()));
    match e {
        Event::Failure(f) => {
            let mut s = format!("{kind}{}", pre(&f.message));
            let mut extra = Vec::new();
            if let Some(t) = &f.error_type {
                extra.push(format!("type {}", escape(t)));
            }
            if let Some(l) = &f.location {
                extra.push(format!("at {}", escape(l)));
            }
            if !extra.is_empty() {
                let _ = write!(s, "<div class=\"small\">{}</div>", extra.join(" · "));
            }
            if let Some(st) = &f.stack_trace {
                let _ = write!(
                    s,
                    "<details class=\"more\"><summary>stack trace</summary>{}</details>",
                    pre(st)
                );
            }
            s
        }
        Event::ToolCall(c) => {
            let args = match &c.args {
                serde_json::Value::Null => String::new(),
                v => serde_json::to_string_pretty(v).unwrap_or_default(),
            };
            let mut s = format!("{kind} <b class=\"tool\">{}</b>", escape(&c.tool));
            if !args.is_empty() {
                s.push_str(&pre(&args));
            }
            if let Some(r) = &c.result {
                let out = match &r.output {
                    serde_json::Value::String(t) => t.clone(),
                    serde_json::Value::Null => String::new(),
                    v => serde_json::to_string_pretty(v).unwrap_or_default(),
                };
                let status = match (r.failed(), r.exit_code) {
                    (true, Some(c)) => format!("<span class=\"bad\">failed, exit {c}</span>"),
                    (true, None) => "<span class=\"bad\">failed</span>".into(),
                    (false, Some(c)) => format!("exit {c}"),
                    (false, None) => String::new(),
                };
                let _ = write!(
                    s,
                    "<div class=\"result\"><span class=\"small\">→ result {status}</span>{}</div>",
                    pre(&out)
                );
            }
            s
        }
        Event::Response(r) => format!("{kind}{}", pre(&r.text)),
        Event::Collaboration(c) => format!(
            "{kind} {} → {}{}",
            escape(&c.from_agent),
            escape(&c.to_agent),
            pre(&c.request)
        ),
        Event::Transition(t) => format!(
            "{kind} {} → {}{}",
            escape(&t.from),
            escape(&t.to),
            t.reason
                .as_ref()
                .map(|r| format!("<div class=\"small\">{}</div>", escape(r)))
                .unwrap_or_default()
        ),
        Event::Progress(p) => {
            let mut parts = Vec::new();
            for (name, v) in [
                ("tests passed", p.tests_passed),
                ("tests failed", p.tests_failed),
                ("files created", p.files_created),
                ("dependencies added", p.dependencies_added),
                ("lines changed", p.lines_changed),
            ] {
                if let Some(v) = v {
                    parts.push(format!("{name} {v}"));
                }
            }
            if let Some(c) = p.coverage {
                parts.push(format!("coverage {c}%"));
            }
            let note = p
                .note
                .as_ref()
                .map(|n| format!("<div class=\"small\">{}</div>", escape(n)))
                .unwrap_or_default();
            format!("{kind} {}{note}", escape(&parts.join(" · ")))
        }
        Event::Outcome(o) => format!(
            "{kind} <b>{}</b>{}",
            words(o.result.as_str()),
            o.note
                .as_ref()
                .map(|n| format!(" — {}", escape(n)))
                .unwrap_or_default()
        ),
    }
}

fn verdict_html(v: &Verdict, run: usize, matched_index: Option<usize>) -> String {
    let mut s = String::new();
    if v.is_loop {
        let cls = if v.counted {
            "badge loop"
        } else {
            "badge soft"
        };
        let _ = write!(
            s,
            "<span class=\"{cls}\">{}</span>",
            escape(&words(v.kind.as_str()))
        );
        if let Some(rule) = &v.rule {
            let _ = write!(s, " <span class=\"rule\">{}</span>", escape(rule));
        }
        match v.similarity {
            Some(sim) => {
                let _ = write!(s, " <span class=\"sim\">cosine {sim:.2}</span>");
            }
            None if v.matched.is_some() => s.push_str(" <span class=\"sim\">exact</span>"),
            None => {}
        }
        if !v.counted {
            s.push_str(" <span class=\"small\">not counted</span>");
        }
        let _ = write!(
            s,
            " <span class=\"small\">loop count {}</span>",
            v.loop_count
        );
    } else {
        let _ = write!(
            s,
            "<span class=\"badge none\">no loop</span> <span class=\"small\">loop count {}</span>",
            v.loop_count
        );
    }
    if v.action.kind != ActionType::Continue {
        let target = v
            .action
            .target
            .map(|t| format!(" → {}", t.as_str()))
            .unwrap_or_default();
        let _ = write!(
            s,
            " <span class=\"act act-{}\">{}{}</span>",
            v.action.kind.as_str(),
            words(v.action.kind.as_str()),
            escape(&target)
        );
    }
    if let Some(m) = &v.matched {
        let link = match matched_index {
            Some(k) => format!("<a href=\"#r{run}-e{k}\">event {k}</a>"),
            None => format!("seq {}", m.seq),
        };
        let _ = write!(
            s,
            "<div class=\"matched\"><b>repeats {link}</b><pre>{}</pre></div>",
            escape(&cut(&m.text))
        );
    }
    if !v.artifacts.is_empty() {
        // What each artifact the message carries did since its latest version: the progress (or
        // its absence) a collaboration verdict rests on.
        let changes: Vec<String> = v.artifacts.iter().map(|a| escape(&a.describe())).collect();
        let _ = write!(s, "<div class=\"artifacts\">{}</div>", changes.join(" · "));
    }
    let _ = write!(s, "<div class=\"reason\">{}</div>", escape(&v.reason));
    if let Some(msg) = &v.action.message {
        let _ = write!(
            s,
            "<details class=\"more\"><summary>message to the agent</summary>{}</details>",
            pre(msg)
        );
    }
    if let Some(j) = &v.judge {
        let _ = write!(
            s,
            "<div class=\"small\">judge: {}{}{}</div>",
            escape(j.status.as_str()),
            j.verdict
                .as_ref()
                .map(|x| format!(", {}", escape(x.as_str())))
                .unwrap_or_default(),
            j.reason
                .as_ref()
                .map(|x| format!(" — {}", escape(x)))
                .unwrap_or_default()
        );
    }
    if !v.similar_loops.is_empty() {
        let _ = write!(
            s,
            "<div class=\"small\">{} similar loop(s) in other runs</div>",
            v.similar_loops.len()
        );
    }
    s
}

const FOOT: &str = "</main>\n<footer><h2>How to read this</h2><ul>\
<li>Each run's events are listed in order, numbered from 0 as <code>first_loop_index</code> counts \
them, with the verdict each one got. Red rows are loops that moved the loop counter; amber rows \
are loops that did not (external failures); the first loop of a run is outlined.</li>\
<li><b>repeats event N</b> links to the earlier event the loop matched; <b>cosine</b> is how similar \
the two texts were (shown as loopguard compared them: normalised, volatile parts masked), \
<b>exact</b> means the same text or call without the model.</li>\
<li>The action is what the orchestrator was told: warn, retry with a hint, pivot (the \
“reason from first principles” directive), escalate, pause for a human, terminate. \
Kinds are explained in docs/DETECTION.md.</li>\
<li>Texts longer than 1500 characters are cut in the middle.</li></ul></footer>\n</body>\n</html>\n";

const STYLE: &str = r#"
:root{--ink:#1b2330;--muted:#667085;--line:#e3e8ef;--bad:#c62828;--bad-soft:#fdecea;--warn:#9a6700;--warn-soft:#fff4d6;--ok:#1a7f37;--ok-soft:#e6f4ea;--accent:#1f6feb;--mono:ui-monospace,"DejaVu Sans Mono",Menlo,Consolas,monospace}
*{box-sizing:border-box}
body{margin:0;background:#f4f6f9;color:var(--ink);font:14px/1.45 system-ui,-apple-system,"Segoe UI","Noto Sans","DejaVu Sans",sans-serif}
header{background:#111827;color:#f9fafb;padding:14px 24px}
header h1{margin:0;font-size:19px}
header p{margin:4px 0 0;color:#cbd5e1;font-size:13px}
header .flag{color:#fecaca;font-weight:600}
main{padding:16px 24px 8px;max-width:1500px;margin:0 auto}
h2{font-size:16px;margin:0 0 10px}
a{color:var(--accent);text-decoration:none}
a:hover{text-decoration:underline}
pre{font:12px/1.4 var(--mono);white-space:pre-wrap;word-break:break-word;margin:4px 0 0}
code{font-family:var(--mono);font-size:12.5px}
.small{font-size:12px;color:var(--muted)}
.num{text-align:right;font-variant-numeric:tabular-nums}
.bad{color:var(--bad);font-weight:600}
.good{color:var(--ok);font-weight:600}
.labels{margin:0 0 12px}
.toggle{position:absolute;opacity:0;pointer-events:none}
.filter{display:inline-block;margin:0 0 10px;padding:3px 10px;border:1px solid #cbd5e1;border-radius:6px;cursor:pointer;background:#fff;font-size:13px}
.filter::before{content:"☐ "}
#only-flagged:checked~main .filter::before{content:"☑ "}
#only-flagged:checked~main .clean{display:none}
#only-flagged:focus-visible~main .filter{outline:2px solid var(--accent)}
.summary,.run{background:#fff;border:1px solid var(--line);border-radius:10px;padding:14px 16px;margin-bottom:14px}
.summary table{width:100%;border-collapse:collapse}
.summary th,.summary td{padding:6px 8px;border-bottom:1px solid var(--line);text-align:left;font-size:13px}
.summary th{font-size:11.5px;text-transform:uppercase;letter-spacing:.04em;color:var(--muted)}
.summary tr.flagged td:nth-child(2) a{font-weight:650}
.badge{display:inline-block;padding:1px 7px;border-radius:5px;font-size:11.5px;font-weight:600;white-space:nowrap}
.badge.loop{background:var(--bad-soft);color:var(--bad)}
.badge.soft{background:var(--warn-soft);color:var(--warn)}
.badge.ok{background:var(--ok-soft);color:var(--ok)}
.badge.none{background:#eef1f5;color:var(--muted)}
.run summary{cursor:pointer;font-size:14px}
.run .rid{font-family:var(--mono);font-weight:700;margin-right:6px}
table.events{width:100%;border-collapse:collapse;margin-top:10px;table-layout:fixed}
table.events th{font-size:11.5px;text-transform:uppercase;letter-spacing:.04em;color:var(--muted);text-align:left;padding:6px 8px;border-bottom:1px solid var(--line)}
table.events th:nth-child(1){width:110px}
table.events th:nth-child(3){width:38%}
table.events td{vertical-align:top;padding:8px;border-bottom:1px solid var(--line)}
tr.ev.loop td{background:#fff5f4}
tr.ev.uncounted td{background:#fffbf0}
tr.ev.first td{box-shadow:inset 0 2px 0 var(--bad),inset 0 -2px 0 var(--bad)}
tr.ev.first td:first-child{box-shadow:inset 2px 2px 0 var(--bad),inset 0 -2px 0 var(--bad)}
tr.ev.first td:last-child{box-shadow:inset -2px 2px 0 var(--bad),inset 0 -2px 0 var(--bad)}
tr.ev:target td{background:#e8f0fe}
.who .idx{font-weight:700;font-size:15px}
.who .meta{font-size:11.5px;color:var(--muted);word-break:break-all}
.what .type{display:inline-block;font-size:11.5px;font-weight:600;background:#eef1f5;color:#344054;border-radius:5px;padding:0 6px}
.what .tool{font-family:var(--mono);font-size:12.5px}
.what pre{max-height:22em;overflow:auto}
.result{margin-top:4px;padding-left:10px;border-left:2px solid var(--line)}
.sim{font-size:12px;font-weight:600;color:var(--bad)}
.act{display:inline-block;font-size:11.5px;font-weight:600;border-radius:5px;padding:1px 7px;background:#eef1f5;color:#344054}
.act-warn,.act-retry_with_hint{background:var(--warn-soft);color:var(--warn)}
.act-pivot{background:#efeafd;color:#5b3cc4}
.act-escalate{background:#e8f0fe;color:var(--accent)}
.act-pause,.act-terminate{background:var(--bad);color:#fff}
.matched{margin-top:6px;padding:5px 8px;border-left:3px solid var(--bad);background:#fff;font-size:12px}
.matched pre{color:#475467;max-height:6em;overflow:auto}
.reason{margin-top:5px;font-size:12px;color:var(--muted)}
.rule{font-family:ui-monospace,monospace;font-size:11px;color:var(--muted)}
.artifacts{font-family:ui-monospace,monospace;font-size:11px;color:var(--muted);margin-top:2px}
details.more summary{font-size:12px;color:var(--accent);cursor:pointer}
footer{max-width:1500px;margin:0 auto;padding:0 24px 24px;color:var(--muted);font-size:13px}
footer h2{color:var(--ink);font-size:14px}
"#;

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn escapes_markup_and_quotes() {
        assert_eq!(
            escape("<img src=x onerror='a(\"b\")'> & co"),
            "&lt;img src=x onerror=&#39;a(&quot;b&quot;)&#39;&gt; &amp; co"
        );
    }

    #[test]
    fn long_texts_are_cut_in_the_middle() {
        let long = format!("{}{}", "a".repeat(2000), "z".repeat(2000));
        let c = cut(&long);
        assert!(c.starts_with("aaa") && c.ends_with("zzz"));
        assert!(c.contains("… 2500 characters left out …"), "{c}");
        assert_eq!(cut("short"), "short");
    }

    #[test]
    fn subtasks_share_their_roots_seqs() {
        let env = |task: &str, parent: Option<&str>| {
            let mut v =
                serde_json::json!({"task_id": task, "event": {"type": "response", "text": "x"}});
            if let Some(p) = parent {
                v["parent_task_id"] = p.into();
            }
            crate::event::parse_envelope_value(v).unwrap()
        };
        let events = [
            env("a", None),
            env("a/1", Some("a")),
            env("a/1/x", Some("a/1")),
            env("b", None),
            env("a/1", None),
        ];
        assert_eq!(roots(&events), ["a", "a", "a", "b", "a"]);
    }
}
