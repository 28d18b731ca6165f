//! What every [`Store`] must do, as checks any implementation's tests run: the embedded stores'
//! unit tests, and a shared store's integration tests against a real database.
//!
//! `open` opens the store on the same durable location each time it is called, so the checks
//! can drop a store and reopen it; an in-memory store passes `durable = false`. A store shared
//! by replicas passes [`check_shared`] too, with two instances on one database.

use super::{Store, StoreError};
use crate::audit::{AuditEvent, AuditRecord};
use crate::state::TaskState;
use std::sync::Arc;

fn record(root: &str, seq: u64) -> AuditRecord {
    AuditRecord {
        ts: 0,
        client_ts: None,
        seq,
        task_id: root.to_string(),
        agent_id: None,
        event: AuditEvent::BudgetExhausted { events: seq },
    }
}

/// One event's commit of `state`, through a transaction as the engine makes it.
pub async fn commit(
    store: &dyn Store,
    state: &TaskState,
    audit: &[AuditRecord],
    link: Option<(&str, &str)>,
) -> Result<(), StoreError> {
    let opened = store.begin(&state.root, None).await?;
    let durable = opened.txn.commit(state, audit, link).await?;
    durable.await
}

/// Run every check. `root` prefixes the task ids used, so checks can share a database.
pub async fn check(open: impl Fn() -> Arc<dyn Store>, durable: bool, root: &str) {
    round_trip(&open, durable, root).await;
    commits_of_a_task_apply_in_order(&*open(), &format!("{root}-order")).await;
    a_dropped_transaction_applies_nothing(&*open(), &format!("{root}-drop")).await;
}

async fn round_trip(open: &impl Fn() -> Arc<dyn Store>, durable: bool, prefix: &str) {
    let root = format!("{prefix}-root");
    let sub = format!("{prefix}-sub");
    let s = open();
    {
        let opened = s.begin(&root, None).await.unwrap();
        assert!(opened.state.is_none(), "a new task has no state");
        let mut st = TaskState::new(&root, 100);
        st.loop_count = 2;
        st.version = 1;
        let audit = [record(&root, 1), record(&root, 2)];
        let durable_commit = opened
            .txn
            .commit(&st, &audit, Some((&sub, &root)))
            .await
            .unwrap();
        durable_commit.await.unwrap();
    }
    let s = if durable {
        drop(s);
        open()
    } else {
        s
    };
    let got = s.load(&root).await.unwrap().expect("committed state");
    assert_eq!((got.loop_count, got.version), (2, 1));
    let opened = s.begin(&root, None).await.unwrap();
    assert_eq!(opened.state.map(|s| s.loop_count), Some(2));
    drop(opened.txn);
    assert_eq!(
        s.root_of(&sub).await.unwrap().as_deref(),
        Some(root.as_str())
    );
    let h = s.history(&root, 10).await.unwrap();
    assert_eq!(h.iter().map(|r| r.seq).collect::<Vec<_>>(), [1, 2]);
    assert_eq!(
        s.history(&root, 1).await.unwrap()[0].seq,
        2,
        "the newest ones"
    );
    assert!(s.idle_roots(101).await.unwrap().contains(&root));
    assert!(!s.idle_roots(100).await.unwrap().contains(&root));
    assert!(s.task_count().await.unwrap() >= 1);
    let (total, newest) = s.recent_roots(10_000).await.unwrap();
    assert!(
        total >= 1 && newest.contains(&(root.clone(), 100)),
        "{newest:?}"
    );
    let opened = s.begin(&root, None).await.unwrap();
    assert!(opened.txn.delete().await.unwrap());
    assert!(s.load(&root).await.unwrap().is_none());
    assert!(s.root_of(&sub).await.unwrap().is_none());
    assert!(s.history(&root, 10).await.unwrap().is_empty());
    let opened = s.begin(&root, None).await.unwrap();
    assert!(
        !opened.txn.delete().await.unwrap(),
        "nothing left to delete"
    );
    s.flush().await.unwrap();
}

async fn commits_of_a_task_apply_in_order(s: &dyn Store, root: &str) {
    let mut st = TaskState::new(root, 0);
    for i in 1..=20u64 {
        st.version = i;
        st.next_seq = i + 1;
        st.updated_ts = i as i64;
        commit(s, &st, &[record(root, i)], None).await.unwrap();
    }
    let got = s.load(root).await.unwrap().unwrap();
    assert_eq!((got.version, got.next_seq), (20, 21));
    let seqs: Vec<u64> = s
        .history(root, 100)
        .await
        .unwrap()
        .iter()
        .map(|r| r.seq)
        .collect();
    assert_eq!(seqs, (1..=20).collect::<Vec<_>>());
}

async fn a_dropped_transaction_applies_nothing(s: &dyn Store, root: &str) {
    let st = TaskState::new(root, 0);
    commit(s, &st, &[], None).await.unwrap();
    let opened = s.begin(root, None).await.unwrap();
    drop(opened);
    // The lock (if any) is released: the task can be opened again at once.
    let opened = s.begin(root, None).await.unwrap();
    assert!(opened.state.is_some());
}

/// What a store shared by replicas must do besides [`check`], with `a` and `b` two instances
/// on one database (two replicas): a task opened through one is opened through the other only
/// once the first committed or dropped it, and then with that commit; a stale in-memory copy is
/// replaced by the stored state; increments made through both at once lose nothing.
pub async fn check_shared(a: Arc<dyn Store>, b: Arc<dyn Store>, root: &str) {
    use std::time::Duration;
    let wait = Duration::from_secs(10);

    // Exclusion, then the holder's commit seen.
    let held = a.begin(root, None).await.unwrap();
    assert!(held.state.is_none());
    let other = {
        let (b, root) = (Arc::clone(&b), root.to_string());
        tokio::spawn(async move {
            let opened = b.begin(&root, None).await.unwrap();
            opened.state.map(|s| s.version)
        })
    };
    tokio::time::sleep(Duration::from_millis(300)).await;
    assert!(
        !other.is_finished(),
        "the other replica waits while the task is held"
    );
    let mut st = TaskState::new(root, 1);
    st.version = 1;
    let durable = held.txn.commit(&st, &[], None).await.unwrap();
    durable.await.unwrap();
    let seen = tokio::time::timeout(wait, other).await;
    assert_eq!(
        seen.expect("the task is released at commit").unwrap(),
        Some(1),
        "the other replica sees the commit"
    );

    // A dropped transaction releases the task at once.
    drop(a.begin(root, None).await.unwrap());
    let reopened = tokio::time::timeout(wait, b.begin(root, None)).await;
    drop(
        reopened
            .expect("a dropped transaction releases the task")
            .unwrap(),
    );

    // A stale copy: b holds version 1, a commits version 2.
    let stale = b.load(root).await.unwrap().unwrap();
    let mut next = stale.clone();
    next.version = 2;
    commit(&*a, &next, &[record(root, 2)], None).await.unwrap();
    let opened = b.begin(root, Some(stale)).await.unwrap();
    let version = opened.state.as_ref().map(|s| s.version);
    drop(opened);
    assert_eq!(
        version,
        Some(2),
        "a stale in-memory copy is replaced by the stored state"
    );

    // Both replicas increment at once, each keeping its copy between events as the engine does.
    let per_replica = 25u64;
    let mut workers = Vec::new();
    for store in [Arc::clone(&a), Arc::clone(&b)] {
        let root = root.to_string();
        workers.push(tokio::spawn(async move {
            let mut cached: Option<TaskState> = None;
            for _ in 0..per_replica {
                let opened = store.begin(&root, cached.take()).await.unwrap();
                let prev = opened.state.expect("the task exists");
                let mut next = prev.clone();
                next.version += 1;
                next.loop_count += 1;
                let audit = [record(&root, next.version)];
                let durable = opened.txn.commit(&next, &audit, None).await.unwrap();
                durable.await.unwrap();
                cached = Some(next);
            }
        }));
    }
    for w in workers {
        tokio::time::timeout(Duration::from_secs(60), w)
            .await
            .expect("increments through two replicas finish")
            .unwrap();
    }
    let got = a.load(root).await.unwrap().unwrap();
    assert_eq!(
        (got.version, got.loop_count),
        (2 + 2 * per_replica, 2 * per_replica as u32),
        "no increment lost"
    );
    let versions: Vec<u64> = b
        .history(root, 1000)
        .await
        .unwrap()
        .iter()
        .map(|r| r.seq)
        .collect();
    assert_eq!(
        versions,
        (2..=2 + 2 * per_replica).collect::<Vec<_>>(),
        "every commit's audit record once, in commit order"
    );
}
