use super::*;
use crate::config::Config;
use crate::embed::StubBackend;
use crate::verdict::LoopKind;

fn rec(task: &str, text: &str) -> (LoopRecord, Vector) {
    (
        LoopRecord {
            id: 0,
            task_id: task.into(),
            agent_id: None,
            kind: LoopKind::SemanticRepeat,
            tool: None,
            text: text.into(),
            ts: 0,
            gated: false,
            resolution: None,
        },
        Vector::from(StubBackend::vector(text)),
    )
}

fn cfg(max: usize) -> MemoryConfig {
    let mut c = Config::default().memory;
    c.max_records = max;
    c
}

#[tokio::test]
async fn finds_other_tasks_loops_with_their_resolution() {
    let m = LoopMemory::in_memory(cfg(100));
    let (r, v) = rec("a", "database connection pool exhausted");
    m.remember(r, v).await.unwrap();
    let (r, v) = rec("b", "the weather today is sunny and warm");
    m.remember(r, v).await.unwrap();
    m.resolve(
        "a",
        Resolution {
            result: "human_intervention".into(),
            note: Some("raised the pool size".into()),
            ts: 1,
        },
    )
    .await
    .unwrap();
    let q = StubBackend::vector("database connection pool is exhausted");
    let found = m.similar(&q, 3, 0.5, Some("c"));
    assert_eq!(found.len(), 1);
    assert_eq!(found[0].task_id, "a");
    assert_eq!(
        found[0].resolution.as_ref().unwrap().note.as_deref(),
        Some("raised the pool size")
    );
    // Never the asking task's own loops.
    assert!(m.similar(&q, 3, 0.5, Some("a")).is_empty());
}

#[tokio::test]
async fn recent_lists_the_newest_live_loops_first() {
    let m = LoopMemory::in_memory(cfg(3));
    for (task, text) in [
        ("a", "disk full on /var"),
        ("b", "permission denied writing config"),
        ("c", "timeout connecting to the registry"),
        ("d", "segmentation fault in the parser"),
    ] {
        let (r, v) = rec(task, text);
        m.remember(r, v).await.unwrap();
    }
    m.forget_task("c").await.unwrap();
    let tasks: Vec<String> = m.recent(10).into_iter().map(|r| r.task_id).collect();
    // "a" was evicted past the bound, "c" forgotten.
    assert_eq!(tasks, ["d", "b"]);
    assert_eq!(m.recent(1)[0].task_id, "d");
}

#[tokio::test]
async fn stays_within_its_bound_and_rebuilds_the_index() {
    let m = LoopMemory::in_memory(cfg(50));
    for i in 0..500 {
        let (r, v) = rec(
            &format!("t{i}"),
            &format!("distinct failure number {i} alpha{i}"),
        );
        m.remember(r, v).await.unwrap();
    }
    assert_eq!(m.len(), 50);
    // Loops remembered while a rebuild ran land in the new index as well; one more
    // remember after it settles starts the rebuild they may call for.
    m.wait_for_index();
    let (r, v) = rec("t500", "distinct failure number 500 alpha500");
    m.remember(r, v).await.unwrap();
    m.wait_for_index();
    assert!(
        m.indexed_points() <= 51 * 4 / 3 + 1,
        "{}",
        m.indexed_points()
    );
    // The newest are kept.
    let records = m.records();
    assert_eq!(records.first().unwrap().task_id, "t451");
}

#[tokio::test]
async fn loops_remembered_during_a_rebuild_are_in_the_new_index() {
    let mut c = cfg(100);
    c.exact_search_max_records = 0;
    let m = LoopMemory::in_memory(c);
    for i in 0..10 {
        let (r, v) = rec(&format!("old{i}"), &format!("old failure {i} beta{i}"));
        m.remember(r, v).await.unwrap();
    }
    let (generation, snapshot) = m.inner.write().unwrap().begin_build();
    let index = build_index(&m.cfg, &snapshot);
    let (r, v) = rec("new", "database connection pool exhausted");
    m.remember(r, v).await.unwrap();
    assert!(m
        .inner
        .write()
        .unwrap()
        .install(index, snapshot.len(), generation));
    assert_eq!(m.indexed_points(), 11);
    let q = StubBackend::vector("database connection pool exhausted");
    let found = m.similar(&q, 1, 0.9, None);
    assert_eq!(found[0].task_id, "new");
}

#[tokio::test]
async fn a_reopened_memory_answers_before_and_after_its_index_is_built() {
    let dir = tempfile::tempdir().unwrap();
    let db = sled::open(dir.path()).unwrap();
    {
        let m = LoopMemory::open_sled(cfg(1000), db.open_tree("mem").unwrap())
            .await
            .unwrap();
        for i in 0..300 {
            let (r, v) = rec(&format!("t{i}"), &format!("failure {i} gamma{i} delta"));
            m.remember(r, v).await.unwrap();
        }
    }
    let m = LoopMemory::open_sled(cfg(1000), db.open_tree("mem").unwrap())
        .await
        .unwrap();
    let q = StubBackend::vector("failure 123 gamma123 delta");
    // Whether or not the build has finished, the answer is the same.
    let before = m.similar(&q, 3, 0.0, None);
    m.wait_for_index();
    assert!(m.inner.read().unwrap().index_ready);
    assert!(!m.index_building());
    let after = m.similar(&q, 3, 0.0, None);
    assert_eq!(before[0].task_id, "t123");
    assert_eq!(before, after);
    assert_eq!(m.indexed_points(), 300);
    // The asking task is still left out when every record is compared.
    m.inner.write().unwrap().index_ready = false;
    let without = m.similar(&q, 3, 0.0, Some("t123"));
    assert!(without.iter().all(|s| s.task_id != "t123"));
    assert_eq!(without.len(), 3);
}

#[tokio::test]
async fn a_tasks_repeated_loop_is_stored_once() {
    let m = LoopMemory::in_memory(cfg(10));
    let (r, v) = rec("a", "same thing again");
    assert!(m.remember(r.clone(), v.clone()).await.unwrap().is_some());
    assert!(m.remember(r, v).await.unwrap().is_none());
    assert_eq!(m.len(), 1);
}

#[tokio::test]
async fn survives_a_reopen() {
    let dir = tempfile::tempdir().unwrap();
    let db = sled::open(dir.path()).unwrap();
    {
        let m = LoopMemory::open_sled(cfg(10), db.open_tree("mem").unwrap())
            .await
            .unwrap();
        let (r, v) = rec("a", "database connection pool exhausted");
        m.remember(r, v).await.unwrap();
        m.resolve(
            "a",
            Resolution {
                result: "success".into(),
                note: None,
                ts: 5,
            },
        )
        .await
        .unwrap();
    }
    let m = LoopMemory::open_sled(cfg(10), db.open_tree("mem").unwrap())
        .await
        .unwrap();
    assert_eq!(m.len(), 1);
    let q = StubBackend::vector("database connection pool exhausted");
    let found = m.similar(&q, 1, 0.9, None);
    assert_eq!(found[0].resolution.as_ref().unwrap().ts, 5);
    // Ids continue after the stored ones.
    let (r, v) = rec("b", "something else entirely");
    assert_eq!(m.remember(r, v).await.unwrap(), Some(2));
}

#[tokio::test]
async fn a_kept_listing_holds_until_the_memory_changes() {
    let m = LoopMemory::in_memory(cfg(100));
    let (r, v) = rec("a", "database connection pool exhausted");
    m.remember(r, v).await.unwrap();
    let kind = LoopKind::ExactRepeat;
    let at = m.changes();
    let listing = m.similar(&StubBackend::vector("pool exhausted"), 3, 0.0, Some("b"));
    m.keep_listing("b", kind, 7, at, &listing);
    assert_eq!(m.listing("b", kind, 7), Some(listing.clone()));
    assert_eq!(m.listing("b", kind, 8), None, "another text");
    assert_eq!(m.listing("c", kind, 7), None, "another task");
    // A near-duplicate of a task's own loop is not added: nothing changed.
    let (r, v) = rec("a", "database connection pool exhausted");
    assert_eq!(m.remember(r, v).await.unwrap(), None);
    assert!(m.listing("b", kind, 7).is_some());
    // Any change (a new loop, a resolution) makes the listing stale.
    let (r, v) = rec("c", "the weather today is sunny and warm");
    m.remember(r, v).await.unwrap();
    assert_eq!(m.listing("b", kind, 7), None);
    m.keep_listing("b", kind, 7, m.changes(), &listing);
    m.resolve(
        "a",
        Resolution {
            result: "success".into(),
            note: None,
            ts: 1,
        },
    )
    .await
    .unwrap();
    assert_eq!(m.listing("b", kind, 7), None);
}
