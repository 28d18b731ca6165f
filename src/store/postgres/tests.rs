use super::*;

#[test]
fn lock_keys_are_stable() {
    // Replicas of different builds must agree on a task's lock.
    assert_eq!(lock_key(""), 0x811c_9dc5_u32 as i32);
    assert_eq!(lock_key("a"), 0xe40c_292c_u32 as i32);
    assert_ne!(lock_key("task-1"), lock_key("task-2"));
}

#[test]
fn migrations_are_numbered_in_order() {
    for (i, (v, _, _)) in MIGRATIONS.iter().enumerate() {
        assert_eq!(*v, i as i64 + 1);
    }
    assert_eq!(schema_version(), MIGRATIONS.len() as i64);
}
