//! The embedded store's task log as the service uses it: tasks an earlier version kept in sled
//! are moved into the log at the first start and served from it, and the log's counters are
//! on `/metrics`.

mod common;

use common::Server;
use loopguard::audit::{AuditEvent, AuditRecord};
use loopguard::state::TaskState;
use loopguard::store::sled::SledStore;
use loopguard::store::Store;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn tasks_kept_in_sled_move_to_the_task_log_at_the_first_start() {
    let dir = tempfile::tempdir().unwrap();
    {
        // What a version before the task log left in its data directory.
        let sled = SledStore::open(dir.path()).unwrap();
        let mut st = TaskState::new("old-task", 1_700_000_000);
        st.version = 7;
        st.loop_count = 4;
        st.events_total = 9;
        let audit = [AuditRecord {
            ts: 1_700_000_000,
            client_ts: None,
            seq: 9,
            task_id: "old-task".into(),
            agent_id: None,
            event: AuditEvent::BudgetExhausted { events: 9 },
        }];
        loopguard::store::conformance::commit(&sled, &st, &audit, Some(("old-sub", "old-task")))
            .await
            .unwrap();
        sled.flush().await.unwrap();
    }

    let client = common::http_client();
    for start in 0..2 {
        let s = Server::start(dir.path(), &[]);
        let task = s.get_json(&client, "/v1/tasks/old-sub").await;
        assert_eq!(
            (task["loop_count"].as_u64(), task["events_total"].as_u64()),
            (Some(4), Some(9)),
            "start {start}: the subtask resolves to its root, moved with its state: {task}"
        );
        let history = s.get_json(&client, "/v1/tasks/old-task/history").await;
        assert_eq!(
            history["records"].as_array().map(Vec::len),
            Some(1),
            "start {start}: the audit trail moved too: {history}"
        );
        let metrics = s.get_text(&client, "/metrics").await;
        assert!(
            metrics.contains("loopguard_task_log_disk_bytes "),
            "the task log's size is on /metrics"
        );
    }
    // Moved, not copied: sled keeps no task any more.
    let sled = SledStore::open(dir.path()).unwrap();
    assert!(sled.stored_tasks().unwrap().is_empty());
    assert!(dir.path().join("tasks").is_dir());
}
