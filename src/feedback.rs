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

/// How much feedback is kept (`[feedback]`): at most `max_per_task` records per root task and
/// `max_records` in all. Past either, the oldest records (of that task, or of all) are dropped
/// to make room for the new one: feedback keeps being taken, the newest kept — a service that
/// refused it once full would need someone to empty it, and there is no endpoint for that;
/// export feedback for calibration before it ages out.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct FeedbackLimits {
    pub max_records: usize,
    pub max_per_task: usize,
}

impl Default for FeedbackLimits {
    fn default() -> Self {
        FeedbackLimits {
            max_records: 10_000,
            max_per_task: 100,
        }
    }
}

impl FeedbackLimits {
    pub fn of(cfg: &crate::config::FeedbackConfig) -> Self {
        FeedbackLimits {
            max_records: cfg.max_records.max(1),
            max_per_task: cfg.max_per_task.max(1),
        }
    }
}

/// Where feedback records persist: memory, a sled tree, or a database shared by replicas.
pub trait FeedbackLog: Send + Sync {
    /// Store a record, giving it the next id; then drop the oldest records past `limits`.
    fn add(
        &self,
        record: FeedbackRecord,
        limits: FeedbackLimits,
    ) -> FeedbackFuture<'_, FeedbackRecord>;
    /// The records after id `after`, oldest first, at most `limit`: exports read the feedback
    /// page by page rather than all at once.
    fn page(&self, after: u64, limit: usize) -> FeedbackFuture<'_, Vec<FeedbackRecord>>;
    /// Make every record added so far durable.
    fn flush(&self) -> FeedbackFuture<'_, ()>;
}

/// Where feedback is kept, and how much.
pub struct FeedbackStore {
    log: Box<dyn FeedbackLog>,
    limits: FeedbackLimits,
}

fn ready<'a, T: Send + 'a>(v: Result<T, FeedbackError>) -> FeedbackFuture<'a, T> {
    Box::pin(std::future::ready(v))
}

fn err(e: impl std::fmt::Display) -> FeedbackError {
    FeedbackError(e.to_string())
}

#[derive(Default)]
struct InMemory(Mutex<(u64, std::collections::VecDeque<FeedbackRecord>)>);

impl FeedbackLog for InMemory {
    fn add(
        &self,
        mut record: FeedbackRecord,
        limits: FeedbackLimits,
    ) -> FeedbackFuture<'_, FeedbackRecord> {
        let mut guard = self.0.lock().expect("feedback lock");
        let (last, records) = &mut *guard;
        *last += 1;
        record.id = *last;
        let root = record.root_task_id.clone();
        records.push_back(record.clone());
        if records.iter().filter(|r| r.root_task_id == root).count() > limits.max_per_task {
            if let Some(i) = records.iter().position(|r| r.root_task_id == root) {
                records.remove(i);
            }
        }
        while records.len() > limits.max_records {
            records.pop_front();
        }
        ready(Ok(record))
    }

    fn page(&self, after: u64, limit: usize) -> FeedbackFuture<'_, Vec<FeedbackRecord>> {
        let guard = self.0.lock().expect("feedback lock");
        ready(Ok(guard
            .1
            .iter()
            .filter(|r| r.id > after)
            .take(limit)
            .cloned()
            .collect()))
    }

    fn flush(&self) -> FeedbackFuture<'_, ()> {
        ready(Ok(()))
    }
}

/// One key per record, its id big-endian; a second tree indexes them by root task (the root
/// task's id, a 0 byte, the record's id), so that a task's oldest record is found without a
/// scan. Adds are one at a time (ids come from the last key; the count is kept in memory).
struct SledFeedback {
    records: sled::Tree,
    by_task: sled::Tree,
    /// Records stored, counted once at open.
    count: Mutex<usize>,
}

fn task_key(root: &str, id: u64) -> Vec<u8> {
    let mut k = Vec::with_capacity(root.len() + 9);
    k.extend_from_slice(root.as_bytes());
    // Task ids hold no control characters: 0 ends the id.
    k.push(0);
    k.extend_from_slice(&id.to_be_bytes());
    k
}

fn id_of(key: &[u8]) -> u64 {
    u64::from_be_bytes(
        key[key.len().saturating_sub(8)..]
            .try_into()
            .unwrap_or([0; 8]),
    )
}

impl SledFeedback {
    fn open(records: sled::Tree, by_task: sled::Tree) -> Result<SledFeedback, FeedbackError> {
        let mut count = 0;
        let indexed = !by_task.is_empty();
        for item in records.iter() {
            let (k, v) = item.map_err(err)?;
            count += 1;
            if !indexed {
                // Records of a version before the index: indexed once.
                let r: FeedbackRecord = serde_json::from_slice(&v).map_err(err)?;
                by_task
                    .insert(task_key(&r.root_task_id, id_of(&k)), &[])
                    .map_err(err)?;
            }
        }
        Ok(SledFeedback {
            records,
            by_task,
            count: Mutex::new(count),
        })
    }

    /// Remove record `id` of `root` from both trees.
    fn remove(&self, id: u64, root: &str) -> Result<(), FeedbackError> {
        self.records.remove(id.to_be_bytes()).map_err(err)?;
        self.by_task.remove(task_key(root, id)).map_err(err)?;
        Ok(())
    }
}

impl FeedbackLog for SledFeedback {
    fn add(
        &self,
        mut record: FeedbackRecord,
        limits: FeedbackLimits,
    ) -> FeedbackFuture<'_, FeedbackRecord> {
        let add = || {
            let mut count = self.count.lock().expect("feedback lock");
            record.id = self
                .records
                .last()
                .map_err(err)?
                .map(|(k, _)| id_of(&k) + 1)
                .unwrap_or(1);
            let v = serde_json::to_vec(&record).map_err(err)?;
            self.records
                .insert(record.id.to_be_bytes(), v)
                .map_err(err)?;
            self.by_task
                .insert(task_key(&record.root_task_id, record.id), &[])
                .map_err(err)?;
            *count += 1;
            let mut prefix = record.root_task_id.as_bytes().to_vec();
            prefix.push(0);
            let of_task: Vec<u64> = self
                .by_task
                .scan_prefix(&prefix)
                .keys()
                .take(limits.max_per_task + 1)
                .map(|k| k.map(|k| id_of(&k)))
                .collect::<Result<_, _>>()
                .map_err(err)?;
            if of_task.len() > limits.max_per_task {
                self.remove(of_task[0], &record.root_task_id)?;
                *count -= 1;
            }
            while *count > limits.max_records {
                let Some((k, v)) = self.records.first().map_err(err)? else {
                    break;
                };
                let oldest: FeedbackRecord = serde_json::from_slice(&v).map_err(err)?;
                self.remove(id_of(&k), &oldest.root_task_id)?;
                *count -= 1;
            }
            Ok(record)
        };
        ready(add())
    }

    fn page(&self, after: u64, limit: usize) -> FeedbackFuture<'_, Vec<FeedbackRecord>> {
        let start = after.saturating_add(1).to_be_bytes();
        ready(
            self.records
                .range(start..)
                .take(limit)
                .map(|item| {
                    let (_, v) = item.map_err(err)?;
                    serde_json::from_slice(&v).map_err(err)
                })
                .collect(),
        )
    }

    fn flush(&self) -> FeedbackFuture<'_, ()> {
        // Not flush_async: concurrent calls deadlock in sled 0.34 (see store::sled).
        let (records, by_task) = (self.records.clone(), self.by_task.clone());
        Box::pin(async move {
            tokio::task::spawn_blocking(move || records.flush().and(by_task.flush()))
                .await
                .map_err(err)?
                .map_err(err)?;
            Ok(())
        })
    }
}

/// Records read per page by [`FeedbackStore::list`] and the export.
pub const PAGE: usize = 64;

impl FeedbackStore {
    pub fn in_memory() -> Self {
        FeedbackStore::with_log(Box::new(InMemory::default()))
    }

    /// In sled trees of the embedded store's database: the records, and their index by task
    /// (built at the first open of records kept before it).
    pub fn open(records: sled::Tree, by_task: sled::Tree) -> Result<Self, FeedbackError> {
        Ok(FeedbackStore::with_log(Box::new(SledFeedback::open(
            records, by_task,
        )?)))
    }

    pub fn with_log(log: Box<dyn FeedbackLog>) -> Self {
        FeedbackStore {
            log,
            limits: FeedbackLimits::default(),
        }
    }

    /// Keep at most this much feedback.
    pub fn with_limits(mut self, limits: FeedbackLimits) -> Self {
        self.limits = limits;
        self
    }

    /// Store a record, giving it an id (dropping the oldest past the limits).
    pub async fn add(&self, record: FeedbackRecord) -> Result<FeedbackRecord, FeedbackError> {
        self.log.add(record, self.limits).await
    }

    /// The records after id `after`, oldest first, at most `limit`.
    pub async fn page(
        &self,
        after: u64,
        limit: usize,
    ) -> Result<Vec<FeedbackRecord>, FeedbackError> {
        self.log.page(after, limit).await
    }

    /// Every record, oldest first (at most `[feedback] max_records` of them).
    pub async fn list(&self) -> Result<Vec<FeedbackRecord>, FeedbackError> {
        let mut all = Vec::new();
        loop {
            let page = self
                .page(all.last().map_or(0, |r: &FeedbackRecord| r.id), PAGE)
                .await?;
            let done = page.len() < PAGE;
            all.extend(page);
            if done {
                return Ok(all);
            }
        }
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

#[cfg(test)]
mod tests {
    use super::*;

    fn record(task: &str) -> FeedbackRecord {
        FeedbackRecord {
            id: 0,
            ts: 1,
            task_id: task.into(),
            root_task_id: task.into(),
            seq: 2,
            label: FeedbackLabel::FalsePositive,
            note: Some("n".repeat(4000)),
            kind: LoopKind::ExactRepeat,
            event_type: "failure".into(),
            text: "b".into(),
            matched_seq: Some(1),
            matched_text: Some("a".into()),
            events: vec![serde_json::json!({"type": "failure", "message": "a"})],
        }
    }

    fn ids_and_tasks(records: &[FeedbackRecord]) -> Vec<(u64, String)> {
        records
            .iter()
            .map(|r| (r.id, r.root_task_id.clone()))
            .collect()
    }

    /// Issue 43: the same feedback re-posted for ever keeps at most `max_per_task` records of
    /// its task and `max_records` in all, the oldest dropped first; reads come in pages.
    async fn bounded(store: FeedbackStore) {
        let store = store.with_limits(FeedbackLimits {
            max_records: 5,
            max_per_task: 3,
        });
        for _ in 0..4 {
            store.add(record("a")).await.unwrap();
        }
        let a = |i: u64| (i, "a".to_string());
        let b = |i: u64| (i, "b".to_string());
        assert_eq!(
            ids_and_tasks(&store.list().await.unwrap()),
            [a(2), a(3), a(4)]
        );
        for _ in 0..3 {
            store.add(record("b")).await.unwrap();
        }
        assert_eq!(
            ids_and_tasks(&store.list().await.unwrap()),
            [a(3), a(4), b(5), b(6), b(7)]
        );
        for _ in 0..1000 {
            store.add(record("c")).await.unwrap();
        }
        let all = store.list().await.unwrap();
        assert_eq!(all.len(), 5);
        assert!(all.iter().all(|r| r.root_task_id != "a"));
        assert_eq!(all.iter().filter(|r| r.root_task_id == "c").count(), 3);
        assert_eq!(all.last().unwrap().id, 1007, "ids keep growing");
        let page = store.page(all[1].id, 2).await.unwrap();
        assert_eq!(ids_and_tasks(&page), ids_and_tasks(&all[2..4]));
    }

    #[tokio::test]
    async fn feedback_is_bounded_per_task_and_in_all_in_memory_and_in_sled() {
        bounded(FeedbackStore::in_memory()).await;
        let dir = tempfile::tempdir().unwrap();
        let db = sled::open(dir.path()).unwrap();
        let open = || {
            FeedbackStore::open(
                db.open_tree("f").unwrap(),
                db.open_tree("f-by-task").unwrap(),
            )
            .unwrap()
        };
        bounded(open()).await;
        // Reopened, the count and the index are where they were.
        let store = open().with_limits(FeedbackLimits {
            max_records: 5,
            max_per_task: 3,
        });
        store.add(record("c")).await.unwrap();
        let all = store.list().await.unwrap();
        assert_eq!(all.len(), 5);
        assert_eq!(all.iter().filter(|r| r.root_task_id == "c").count(), 3);
        // Records kept before the index existed are indexed at the first open.
        let old = db.open_tree("old").unwrap();
        for (i, t) in ["x", "x", "y"].iter().enumerate() {
            let mut r = record(t);
            r.id = i as u64 + 1;
            old.insert(r.id.to_be_bytes(), serde_json::to_vec(&r).unwrap())
                .unwrap();
        }
        let store = FeedbackStore::open(old, db.open_tree("old-by-task").unwrap())
            .unwrap()
            .with_limits(FeedbackLimits {
                max_records: 10,
                max_per_task: 2,
            });
        store.add(record("x")).await.unwrap();
        assert_eq!(
            ids_and_tasks(&store.list().await.unwrap()),
            [(2, "x".into()), (3, "y".into()), (4, "x".into())]
        );
    }
}
