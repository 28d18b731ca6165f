//! Feedback on verdicts (false positives and missed loops reported by users): a verdict marked as a
//! false positive, or an event marked as a missed loop, is kept with the texts it was about, and
//! exported in `loopguard calibrate`'s input formats so it feeds the next calibration.

use crate::verdict::LoopKind;
use serde::{Deserialize, Serialize};
use std::sync::Mutex;

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, utoipa::ToSchema)]
#[serde(rename_all = "snake_case")]
pub enum FeedbackLabel {
    /// The verdict said loop; it was not one.
    FalsePositive,
    /// The verdict said no loop; it was one.
    MissedLoop,
}

impl FeedbackLabel {
    pub fn as_str(self) -> &'static str {
        match self {
            FeedbackLabel::FalsePositive => "false_positive",
            FeedbackLabel::MissedLoop => "missed_loop",
        }
    }
}

/// One piece of feedback, with what it is about.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, utoipa::ToSchema)]
pub struct FeedbackRecord {
    pub id: u64,
    /// Unix seconds.
    pub ts: i64,
    pub task_id: String,
    pub root_task_id: String,
    pub seq: u64,
    pub label: FeedbackLabel,
    pub note: Option<String>,
    /// The verdict's kind (`none` for a missed loop).
    pub kind: LoopKind,
    /// `failure`, `tool_call`, `response`, `collaboration`, ...
    pub event_type: String,
    /// The event's text as compared.
    pub text: String,
    /// The earlier event it was (or should have been) matched with.
    pub matched_seq: Option<u64>,
    pub matched_text: Option<String>,
    /// The task's events up to this one, as bare events (for a labelled run).
    #[schema(value_type = Vec<Object>)]
    pub events: Vec<serde_json::Value>,
}

impl FeedbackRecord {
    /// As a labelled pair for `loopguard calibrate pairs`: the two texts, 0 for a false
    /// positive (they are not the same), 1 for a missed loop. `None` without a matched text.
    pub fn as_pair(&self) -> Option<serde_json::Value> {
        let matched = self.matched_text.as_ref()?;
        Some(serde_json::json!({
            "a": matched,
            "b": self.text,
            "label": match self.label { FeedbackLabel::FalsePositive => 0, FeedbackLabel::MissedLoop => 1 },
            "kind": pair_kind(&self.event_type),
            "source": "feedback",
            "id": format!("feedback-{}", self.id),
            "note": self.note,
        }))
    }

    /// As a labelled run for `loopguard calibrate runs`.
    pub fn as_run(&self) -> serde_json::Value {
        serde_json::json!({
            "id": format!("feedback-{}-{}-{}", self.id, self.root_task_id, self.seq),
            "label": match self.label { FeedbackLabel::FalsePositive => "no_loop", FeedbackLabel::MissedLoop => "loop" },
            "source": "feedback",
            "note": self.note,
            "events": self.events,
        })
    }
}

/// The calibration kind of an event type (the `[detect.similarity]` key it calibrates).
fn pair_kind(event_type: &str) -> &'static str {
    match event_type {
        "failure" => "failure",
        "collaboration" => "collaboration",
        "response" => "response",
        _ => "tool_call",
    }
}

#[derive(Debug, thiserror::Error)]
#[error("feedback storage: {0}")]
pub struct FeedbackError(pub String);

pub type FeedbackFuture<'a, T> =
    std::pin::Pin<Box<dyn std::future::Future<Output = Result<T, FeedbackError>> + Send + 'a>>;

/// Where feedback records persist: memory, a sled tree, or a database shared by replicas.
pub trait FeedbackLog: Send + Sync {
    /// Store a record, giving it the next id.
    fn add(&self, record: FeedbackRecord) -> FeedbackFuture<'_, FeedbackRecord>;
    /// Every record, oldest first.
    fn list(&self) -> FeedbackFuture<'_, Vec<FeedbackRecord>>;
    /// Make every record added so far durable.
    fn flush(&self) -> FeedbackFuture<'_, ()>;
}

/// Where feedback is kept.
pub struct FeedbackStore {
    log: Box<dyn FeedbackLog>,
}

fn ready<'a, T: Send + 'a>(v: Result<T, FeedbackError>) -> FeedbackFuture<'a, T> {
    Box::pin(std::future::ready(v))
}

fn err(e: impl std::fmt::Display) -> FeedbackError {
    FeedbackError(e.to_string())
}

#[derive(Default)]
struct InMemory(Mutex<Vec<FeedbackRecord>>);

impl FeedbackLog for InMemory {
    fn add(&self, mut record: FeedbackRecord) -> FeedbackFuture<'_, FeedbackRecord> {
        let mut m = self.0.lock().expect("feedback lock");
        record.id = m.len() as u64 + 1;
        m.push(record.clone());
        ready(Ok(record))
    }

    fn list(&self) -> FeedbackFuture<'_, Vec<FeedbackRecord>> {
        ready(Ok(self.0.lock().expect("feedback lock").clone()))
    }

    fn flush(&self) -> FeedbackFuture<'_, ()> {
        ready(Ok(()))
    }
}

/// One key per record, its id big-endian.
struct SledFeedback(sled::Tree);

impl FeedbackLog for SledFeedback {
    fn add(&self, mut record: FeedbackRecord) -> FeedbackFuture<'_, FeedbackRecord> {
        let tree = &self.0;
        let add = || {
            record.id = tree
                .last()
                .map_err(err)?
                .map(|(k, _)| u64::from_be_bytes(k.as_ref().try_into().unwrap_or([0; 8])) + 1)
                .unwrap_or(1);
            let v = serde_json::to_vec(&record).map_err(err)?;
            tree.insert(record.id.to_be_bytes(), v).map_err(err)?;
            Ok(record)
        };
        ready(add())
    }

    fn list(&self) -> FeedbackFuture<'_, Vec<FeedbackRecord>> {
        ready(
            self.0
                .iter()
                .map(|item| {
                    let (_, v) = item.map_err(err)?;
                    serde_json::from_slice(&v).map_err(err)
                })
                .collect(),
        )
    }

    fn flush(&self) -> FeedbackFuture<'_, ()> {
        // Not flush_async: concurrent calls deadlock in sled 0.34 (see store::sled).
        let tree = self.0.clone();
        Box::pin(async move {
            tokio::task::spawn_blocking(move || tree.flush())
                .await
                .map_err(err)?
                .map_err(err)?;
            Ok(())
        })
    }
}

impl FeedbackStore {
    pub fn in_memory() -> Self {
        FeedbackStore::with_log(Box::new(InMemory::default()))
    }

    /// In a sled tree (the embedded store's database).
    pub fn open(tree: sled::Tree) -> Self {
        FeedbackStore::with_log(Box::new(SledFeedback(tree)))
    }

    pub fn with_log(log: Box<dyn FeedbackLog>) -> Self {
        FeedbackStore { log }
    }

    /// Store a record, giving it an id.
    pub async fn add(&self, record: FeedbackRecord) -> Result<FeedbackRecord, FeedbackError> {
        self.log.add(record).await
    }

    /// Every record, oldest first.
    pub async fn list(&self) -> Result<Vec<FeedbackRecord>, FeedbackError> {
        self.log.list().await
    }

    pub async fn flush(&self) -> Result<(), FeedbackError> {
        self.log.flush().await
    }
}

/// Write feedback as calibration input: labelled pairs and labelled runs, one JSON per line.
pub fn export(
    records: &[FeedbackRecord],
    pairs: &mut impl std::io::Write,
    runs: &mut impl std::io::Write,
) -> std::io::Result<(usize, usize)> {
    let (mut np, mut nr) = (0, 0);
    for r in records {
        if let Some(p) = r.as_pair() {
            writeln!(pairs, "{p}")?;
            np += 1;
        }
        if !r.events.is_empty() {
            writeln!(runs, "{}", r.as_run())?;
            nr += 1;
        }
    }
    Ok((np, nr))
}
