//! What every [`Store`] must do, as checks any implementation's tests run: the embedded stores'
//! unit tests, and a shared store's integration tests against a real database.
//!
//! `open` opens the store on the same durable location each time it is called, so the checks
//! can drop a store and reopen it; an in-memory store passes `durable = false`.

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
    let durable = opened
        .txn
        .commit(opened.state.as_ref(), state, audit, link)
        .await?;
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
            .commit(None, &st, &audit, Some((&sub, &root)))
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
