-- The cross-task loop memory and the feedback, shared by every replica.

-- One row per remembered loop. A removed loop (evicted, or its task deleted) stays a while as a
-- tombstone (deleted, no record or vector) so replicas following the changes learn it is gone.
-- `rev` is the change that last touched the row: replicas read the rows with a rev above the
-- last one they saw.
CREATE TABLE loopguard_loops (
    id         bigserial   PRIMARY KEY,
    rev        bigint      NOT NULL,
    task_id    text        NOT NULL,
    deleted    boolean     NOT NULL DEFAULT false,
    -- The LoopRecord as JSON, without its resolution.
    record     text,
    -- The resolution as JSON, once the task was resolved.
    resolution text,
    -- The embedding: f32 little-endian.
    vector     bytea,
    changed_at timestamptz NOT NULL DEFAULT now()
);
CREATE INDEX loopguard_loops_rev ON loopguard_loops (rev);
CREATE INDEX loopguard_loops_live ON loopguard_loops (id) WHERE NOT deleted;
CREATE INDEX loopguard_loops_task ON loopguard_loops (task_id) WHERE NOT deleted;
CREATE INDEX loopguard_loops_tombstones ON loopguard_loops (changed_at) WHERE deleted;

-- The change counter, one row. Every write to the loops takes this row's lock and the next rev,
-- so revs are committed in order: a reader that saw rev N has seen every change up to N.
-- `live` counts the loops not deleted (the bound), `purged_rev` is the newest tombstone removed
-- for good (a replica behind it reloads everything).
CREATE TABLE loopguard_loop_log (
    one        boolean PRIMARY KEY DEFAULT true CHECK (one),
    rev        bigint  NOT NULL DEFAULT 0,
    live       bigint  NOT NULL DEFAULT 0,
    purged_rev bigint  NOT NULL DEFAULT 0
);
INSERT INTO loopguard_loop_log DEFAULT VALUES;

-- Feedback on verdicts (FeedbackRecord as JSON), `id` in the order it was given.
CREATE TABLE loopguard_feedback (
    id     bigserial PRIMARY KEY,
    record text      NOT NULL
);
