-- Task states, their audit trails and subtask links: what store::postgres::PostgresStore keeps.
-- Applied once, in a transaction, by loopguard itself (sqlx's migrator records it in
-- _sqlx_migrations). Never edit an applied migration: add the next one.

-- One row per root task. `state` is the TaskState as JSON (it carries its own `format`);
-- `version` counts committed events and is what a replica compares with its in-memory copy.
CREATE TABLE loopguard_tasks (
    root       text   PRIMARY KEY,
    version    bigint NOT NULL,
    updated_ts bigint NOT NULL,
    state      text   NOT NULL
);
-- Expiry and the task listing scan by last update.
CREATE INDEX loopguard_tasks_updated ON loopguard_tasks (updated_ts);

-- Audit records (JSON), `id` in commit order.
CREATE TABLE loopguard_audit (
    id     bigserial PRIMARY KEY,
    root   text      NOT NULL,
    record text      NOT NULL
);
CREATE INDEX loopguard_audit_root ON loopguard_audit (root, id);

-- A subtask and the root task it counts toward.
CREATE TABLE loopguard_links (
    task text PRIMARY KEY,
    root text NOT NULL
);
CREATE INDEX loopguard_links_root ON loopguard_links (root);
