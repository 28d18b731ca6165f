-- Feedback is bounded per root task (and in all): its root task in a column of its own, indexed,
-- so that a task's oldest record is found without reading every record's JSON.
ALTER TABLE loopguard_feedback ADD COLUMN root_task_id text;
UPDATE loopguard_feedback SET root_task_id = (record::json)->>'root_task_id';
CREATE INDEX loopguard_feedback_by_task ON loopguard_feedback (root_task_id, id);
